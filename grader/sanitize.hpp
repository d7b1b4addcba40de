#pragma once
// compute-sanitizer over a chapter's correctness tests (memcheck, racecheck...): used by
// `grade --sanitize` (reported beside the verdict) and `check --sanitize` (printed). CUDA
// objects carry -lineinfo, so each error names its kernel's file:line.
#include <filesystem>
#include <functional>
#include <string>
#include <vector>

#include "grader/test_run.hpp"

namespace wb::grader {

struct SanitizerResult {
  std::string tool;
  bool ran = false;
  int errors = 0;
  std::string excerpt;  // compute-sanitizer's own lines ("=========  Invalid __global__ read ... at file.cu:42")
  std::string problem;  // why it did not run or did not finish
  std::string output;   // everything it printed (for a log file)
  nlohmann::json to_json() const;
};

// compute-sanitizer on PATH, in $CUDA_HOME/bin or /usr/local/cuda/bin; empty when absent.
std::filesystem::path find_compute_sanitizer();

// The time limit of one sanitizer run (racecheck: of one test case) unless the rubric says
// otherwise: on the H200 at b4c5d82, 14 at a time, chapter 07's two slowest racecheck cases
// took 956 s and 975 s.
inline constexpr double kDefaultSanitizerTimeoutS = 1200;

// Runs the test binary `base` describes under `tool`. Without compute-sanitizer the result
// says so in `problem` (ran = false).
//
// racecheck follows every shared-memory access and is the slow tool (chapter 07's suite
// under it is over an hour of work on an H200): given `cases`, the names of the test cases
// the binary's own correctness run reported, it runs each on its own (doctest --test-case),
// `jobs` at a time, each with base.limits.timeout_s, and the result sums them (a case that
// does not finish is named in `problem`). The names come from that report, not from asking
// the binary again, so code linked into it cannot shorten the list. Without names, and for
// every other tool, the whole binary runs once.
SanitizerResult run_sanitizer_tool(const std::string& tool, TestRunOptions base, int jobs = 1,
                                   const std::vector<std::string>& cases = {});

// Runs at a time when the caller does not say: half the host's cores, 1 to 8 (each run is a
// CPU-bound tool process sharing the one GPU).
int default_sanitizer_jobs();

// The names of the test cases a run reported, in its order.
std::vector<std::string> case_names(const TestRun& run);

// A --test-case filter that matches exactly `name`: doctest splits filters at commas, so a
// comma is matched by '?' (one character) instead.
std::string test_case_filter(const std::string& name);

// "ERROR SUMMARY: 3 errors" / "RACECHECK SUMMARY: ... (2 errors, ...)": the error count.
int sanitizer_error_count(const std::string& output, int exit_code);

}  // namespace wb::grader
