#pragma once
// `workbook check`: the student's loop. Builds their chapters in their own build directory,
// runs each chapter's correctness tests, then (when those pass) its timing tests, and
// prints a scorecard with the first actionable failure and its hint.
#include <filesystem>
#include <iosfwd>
#include <optional>
#include <string>
#include <vector>

#include "grader/chapters.hpp"
#include "grader/verdict.hpp"

namespace wb::grader {

struct CheckOptions {
  std::filesystem::path source_dir;   // WB_SOURCE_DIR
  std::filesystem::path build_dir;    // WB_BINARY_DIR unless --build-dir
  std::vector<std::string> chapters;  // selection; empty = all
  bool build = true;
  bool correctness_only = false;
  bool verbose = false;
  bool sanitize = false;              // also run the correctness tests under compute-sanitizer
  int sanitize_jobs = 0;              // racecheck test cases at a time; 0: default_sanitizer_jobs()
  std::optional<std::uint64_t> seed;
  bool color = false;
};

struct CheckedChapter {
  Chapter chapter;
  ChapterRuns runs;
  Verdict verdict;
  std::string not_configured;  // why this chapter is not in the build (else empty)
};

// Runs the check; returns the exit code: 0 every chapter complete; 1 something failing,
// to do or not compiling; 77 nothing failed but GPU tests could not run here.
int run_check(const CheckOptions& options, std::ostream& out, std::ostream& progress);

std::string render_scorecard(const std::vector<CheckedChapter>& chapters, const CheckOptions& options);
int check_exit_code(const std::vector<CheckedChapter>& chapters);
// The command that reruns one test case with the same inputs.
std::string reproduce_command(const std::filesystem::path& binary, std::uint64_t seed, const std::string& test);

}  // namespace wb::grader
