#pragma once
// Taking a submission apart: find the student's editable files (and only those), check
// them, copy them into a fresh student root laid out as <slug>/<file> for the build, and
// note what was ignored (edited tests, harness or headers) and what looks like gaming the
// grader (docs/grading.md, "What the grader catches").
#include <nlohmann/json.hpp>

#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "grader/chapters.hpp"
#include "grader/rubric.hpp"

namespace wb::grader {

// How much a flag counts: reject (the chapter scores 0) or warning (reported only).
enum class Severity { reject, warning };
NLOHMANN_JSON_SERIALIZE_ENUM(Severity, {{Severity::reject, "reject"}, {Severity::warning, "warning"}})

// Where a submission keeps the editable files: a copy of the workbook
// (chapters/<slug>/<file>) or just the chapters (<slug>/<file>).
enum class Layout { workbook, chapters };
NLOHMANN_JSON_SERIALIZE_ENUM(Layout, {{Layout::workbook, "workbook"}, {Layout::chapters, "chapters"}})

struct Flag {
  std::string chapter_id;
  std::string file;
  int line = 0;
  std::string code;      // forbidden_include, incbin, test_channel, test_harness, process_group,
                         // reads_environment, ends_process, starts_processes, cpu_threads,
                         // file_io, static_init, same_as_reference, calls_reference, ...
  Severity severity = Severity::warning;
  std::string message;
  nlohmann::json to_json() const;
};

struct SubmittedChapter {
  std::string id;
  bool present = false;                    // at least one editable file found
  std::vector<std::string> taken;          // editable files taken from the submission
  std::vector<std::string> from_starter;   // editable files missing, the starter's used
  std::string reject_reason;               // set when a file cannot be used at all
  std::string reject_detail;
  std::vector<Flag> flags;
  bool unchanged_starter = false;          // every taken file equals the starter
};

struct PreparedSubmission {
  std::filesystem::path input;
  bool archive = false;
  Layout layout = Layout::workbook;
  std::string prefix;        // where that layout starts inside the submission
  std::map<std::string, SubmittedChapter> chapters;
  std::vector<std::string> ignored;  // notable ignored files, with why
  std::vector<std::string> notes;
  std::filesystem::path student_root;
  nlohmann::json to_json() const;
};

struct SourceTrees {
  std::filesystem::path pristine;   // the instructor's tree: chapters/, tests/, lib/...
  std::filesystem::path solutions;  // solutions/ (for the same-as-reference note); may be empty
};

// Builds `work`/student/<slug>/<file> from `input` (a directory or an archive, extracted
// into `work`/extracted). InputError for a missing, empty or unusable submission.
PreparedSubmission prepare_submission(const std::filesystem::path& input,
                                      const std::vector<Chapter>& chapters, const SourceTrees& trees,
                                      const std::filesystem::path& work, const GradingLimits& limits);

// A submission's missing editable files are filled from the instructor's chapters/ (the
// starters). An instructor who solved the exercises in that clone would grade every missing
// file with their own solution, so chapters/ must match the committed tree: InputError naming
// the changed files when `git status` shows edits under chapters/. Returns "" when it
// matches, or a note when `source_dir` is not a git checkout (nothing to compare against).
std::string check_committed_starters(const std::filesystem::path& source_dir);

// File names that exist only among the tests of chapter `c` in `pristine` (tests/<slug>/ and
// not chapters/<slug>/): the CPU references and harness helpers chapter code may not include.
std::vector<std::string> test_only_headers(const Chapter& c, const std::filesystem::path& pristine);

// Static checks of one editable file (comments removed first). `forbidden_headers` are
// file names that exist only among the tests (CPU references, harness helpers).
std::vector<Flag> scan_source(const std::string& text, const std::string& chapter_id,
                              const std::string& file,
                              const std::vector<std::string>& forbidden_headers);
// The text without comments (string literals kept), same line numbers.
std::string strip_comments(const std::string& text);
// Without comments and whitespace: for "is this the starter / the reference" comparisons.
std::string normalized_source(const std::string& text);

}  // namespace wb::grader
