#pragma once
// What happened to one chapter (its build and its test runs) and the verdict a student
// reads: to do / in progress / failing / passing correctness / passing timing, or why it
// could not be judged. Shared by `check` (the student's scorecard) and `grade`.
#include <nlohmann/json.hpp>

#include <string>
#include <vector>

#include "grader/chapters.hpp"
#include "grader/test_run.hpp"

namespace wb::grader {

struct BuildOutcome {
  bool attempted = false;
  bool ok = false;
  bool timed_out = false;
  double seconds = 0;
  std::string log;      // the build's output (capped)
  std::string excerpt;  // the first compiler errors, for the scorecard and the report

  nlohmann::json to_json() const;
  static BuildOutcome from_json(const nlohmann::json& j);
};

struct ChapterRuns {
  bool missing = false;         // nothing of this chapter in the submission
  std::string missing_detail;
  bool rejected = false;        // refused before or after building (a cheat, a bad file)
  std::string reject_reason;    // reason code: forbidden_include, test_channel, calls_reference...
  std::string reject_detail;
  BuildOutcome build;
  std::vector<TestRun> runs;    // in run order; runs that did not happen say why
};

// Where a chapter stands, worst first after the three that stop it before any test.
enum class ChapterState { missing, rejected, compile_error, not_gradable, todo, in_progress, failing,
                          passing_correctness, passing_timing };
NLOHMANN_JSON_SERIALIZE_ENUM(ChapterState, {{ChapterState::missing, "missing"},
                                            {ChapterState::rejected, "rejected"},
                                            {ChapterState::compile_error, "compile_error"},
                                            {ChapterState::not_gradable, "not_gradable"},
                                            {ChapterState::todo, "todo"},
                                            {ChapterState::in_progress, "in_progress"},
                                            {ChapterState::failing, "failing"},
                                            {ChapterState::passing_correctness, "passing_correctness"},
                                            {ChapterState::passing_timing, "passing_timing"}})

struct Verdict {
  ChapterState state = ChapterState::missing;
  std::string label;    // the words the scorecard prints
  std::string reason;   // code of the first problem (docs/report-schema.md)
  std::string message;  // the first problem, as the student should read it
  std::string hint;
  std::string test;     // the test case it comes from, if any
  std::string kind;     // the kind of test it comes from, if any
  bool complete = false;  // every test of every kind ran and passed
  bool gradable = true;   // false when GPU tests could not run here
};

Verdict judge_chapter(const Chapter& chapter, const ChapterRuns& runs);
std::string state_label(ChapterState state);
// A hint for a reason when the test's own message carries none.
std::string default_hint(const std::string& reason, const TestRun* run = nullptr);

}  // namespace wb::grader
