#pragma once
// Running one test binary (build/bin/test_NN_<kind>_<build>) and reading back its test
// report (docs/CONTRACTS.md, "workbook-test-report/1").
//
// The channel: the grader creates a private directory (mode 0700) with an unpredictable
// report path and a fresh nonce, passes both in the environment (WB_TEST_REPORT,
// WB_REPORT_NONCE), and accepts the report only when the nonce, seed, binary and chapter
// match, the exit code agrees with the verdicts, and doctest's own summary line agrees with
// the counts. The test's main removes both variables before any test runs; student code
// still shares the process, so this defeats replayed or stale reports and careless
// tampering, not a determined attacker (docs/grading.md, "Threat model").
#include <nlohmann/json.hpp>

#include <cstdint>
#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "grader/process.hpp"

namespace wb::grader {

struct CaseResult {
  std::string name;
  std::string status;   // passed | failed | todo | skipped
  std::string message;  // first failure ('' when passed)
  std::string hint;
  std::string reason;   // for failed: classify_failure(message)
  double seconds = 0;
  nlohmann::json metrics = nlohmann::json::object();
  std::vector<std::string> notes;

  // Skipped for lack of a CUDA device (WB_REQUIRE_GPU): not gradable on this machine.
  bool skipped_no_device() const;
  // Skipped for another reason the test gave (optional data such as WB_DATA_DIR not set):
  // not counted either way; `notes` say why.
  bool skipped_optional() const { return status == "skipped" && !skipped_no_device(); }
};

// How a test binary's run ended. completed: a valid report was read (its cases say the
// rest); not_gradable: GPU tests that could not run on this machine.
enum class RunOutcome { not_run, completed, not_built, not_started, timeout, crashed, memory, no_report,
                        invalid_report, not_gradable };
NLOHMANN_JSON_SERIALIZE_ENUM(RunOutcome, {{RunOutcome::not_run, "not_run"},
                                          {RunOutcome::completed, "completed"},
                                          {RunOutcome::not_built, "not_built"},
                                          {RunOutcome::not_started, "not_started"},
                                          {RunOutcome::timeout, "timeout"},
                                          {RunOutcome::crashed, "crashed"},
                                          {RunOutcome::memory, "memory"},
                                          {RunOutcome::no_report, "no_report"},
                                          {RunOutcome::invalid_report, "invalid_report"},
                                          {RunOutcome::not_gradable, "not_gradable"}})

struct TestRun {
  std::string kind;
  std::string binary;
  // completed: a valid report was read (its cases say the rest)
  // not_built | not_run | not_started | timeout | crashed | memory | no_report | invalid_report
  RunOutcome outcome = RunOutcome::not_run;
  std::string problem;  // what went wrong, for every outcome but completed
  int exit_code = -1;
  int signal = 0;
  double seconds = 0;
  double timeout_s = 0;
  std::string output;   // what the binary printed (capped)
  std::uint64_t seed = 0;
  std::string device;
  std::vector<CaseResult> cases;
  std::vector<std::string> warnings;

  bool completed() const { return outcome == RunOutcome::completed; }
  bool all_skipped() const;   // completed, and every case skipped for lack of a CUDA device
  nlohmann::json to_json() const;
  static TestRun from_json(const nlohmann::json& j);
};

struct TestRunOptions {
  std::filesystem::path binary;
  std::string chapter_id;
  std::string kind;
  std::filesystem::path scratch;           // a private run directory is made inside
  std::optional<std::uint64_t> seed;       // WB_SEED; unset: the binary draws its own
  std::optional<std::string> gpu;          // CUDA_VISIBLE_DEVICES for the child
  bool scrub_environment = true;           // grading: only the names the test needs
  ProcessLimits limits;
  std::vector<std::string> wrapper;        // e.g. {"compute-sanitizer", "--tool", "memcheck"}
  std::vector<std::string> extra_args;
};

TestRun run_test_binary(const TestRunOptions& options);

// What the report and the process say together (separate from running, for tests).
struct ReportExpectations {
  std::string binary;
  std::string chapter_id;
  std::string nonce;
  std::optional<std::uint64_t> seed;
  // The variables that steer the tests (wb::kTestEnvironmentNames) as the grader started the
  // process with them, a name absent when unset; nullopt: not checked. A report that carries
  // other values was written by a process whose code changed its own environment.
  std::optional<std::map<std::string, std::string>> environment;
  bool quick_expected = false;  // the run asked for the quick form (under a sanitizer, WB_QUICK)
};
TestRun interpret_test_run(const std::string& kind, const ProcessResult& process,
                           const std::optional<std::string>& report_text,
                           const ReportExpectations& expect);

// The likely cause of a failed test from its message, the kind of test and the chapter:
// todo | cuda_fault | out_of_memory | timing_rule | cuda_error | too_slow | wrong_answer.
// "rule N" is a timing rule (chapter 00's seven) in timing tests and in chapter 00, whose
// subject they are; elsewhere it is the chapter's own contract (chapter 07's sampler rules).
std::string classify_failure(const std::string& message, const std::string& kind = "correctness",
                             const std::string& chapter_id = "");

// doctest's "[doctest] test cases: N | P passed | F failed | S skipped" (the last one).
struct DoctestSummary {
  int total = 0, passed = 0, failed = 0, skipped = 0;
};
std::optional<DoctestSummary> parse_doctest_summary(const std::string& output);

}  // namespace wb::grader
