#pragma once
// Grading one submission end to end: take the editable files, build them against the
// pristine tree, run each chapter's tests in isolated processes with a hidden seed, score
// them with the rubric, and describe it all as report.json (docs/report-schema.md).
#include <nlohmann/json.hpp>

#include <cstdint>
#include <filesystem>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "grader/chapters.hpp"
#include "grader/rubric.hpp"
#include "grader/verdict.hpp"

namespace wb::grader {

inline constexpr const char* kReportSchema = "workbook-grade-report/1";

struct GradeOptions {
  std::filesystem::path source_dir;        // the instructor's pristine tree (WB_SOURCE_DIR)
  Rubric rubric;
  std::vector<std::string> only_chapters;  // ids; empty = every chapter
  std::uint64_t seed = 0;                  // hidden base seed for this submission
  bool gpu_tests = true;                   // false: GPU tests are "not gradable here"
  std::string no_gpu_reason;               // why not (no device / --cpu-only)
  std::optional<std::string> gpu;          // CUDA_VISIBLE_DEVICES for the test processes
  int build_jobs = 0;
  double timeout_override_s = 0;           // > 0: every test's time limit
  std::string cuda_architectures;          // "" = the project's own detection
  std::vector<std::string> dependency_args;  // cached_dependency_args of the instructor's build
  bool sanitize = false;                   // compute-sanitizer pass over correctness tests
  std::function<void(const std::string&)> progress;  // "04: building" ...
};

// Where one grading works. `tree` (the pristine copy) and `build` may be shared by the
// submissions one worker grades in turn; `scratch` is this submission's own.
struct Workspace {
  std::filesystem::path tree;
  std::filesystem::path build;
  std::filesystem::path scratch;
};

// Grades `submission` and returns report.json. Logs (build output, test output) go to
// `logs_dir`. Throws InputError for a submission that cannot be graded at all (missing,
// empty, bad archive); std::runtime_error when the grader itself fails (e.g. the pristine
// tree does not configure).
nlohmann::json grade_submission(const std::filesystem::path& submission, const std::string& student,
                                const std::vector<Chapter>& chapters, const GradeOptions& options,
                                const Workspace& workspace, const std::filesystem::path& logs_dir);

// report.json for a submission that could not be graded (status "invalid" or "error"):
// every chapter 0 points, with the reason.
nlohmann::json ungradable_report(const std::filesystem::path& submission, const std::string& student,
                                 const std::vector<Chapter>& chapters, const GradeOptions& options,
                                 const std::string& status, const std::string& error);

// The points of one chapter from what happened (pure; tested on its own).
nlohmann::json score_chapter(const Chapter& chapter, const ChapterRuns& runs, const Verdict& verdict,
                             const Rubric& rubric, const nlohmann::json& sanitizer);

// Visible GPUs as CUDA_VISIBLE_DEVICES values (honouring the grader's own setting).
std::vector<std::string> visible_gpus();

// A per-student seed from the run's base seed: stable across reruns, different per student.
std::uint64_t student_seed(std::uint64_t base, const std::string& student);

// Fixture expectations (grader/acceptance/*/expected.json) against a report. Returns the
// mismatches (empty: as expected); `skipped` gets what could not be checked here (needs a GPU).
std::vector<std::string> check_expectations(const nlohmann::json& report, const nlohmann::json& expected,
                                            std::vector<std::string>& skipped);

}  // namespace wb::grader
