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

// Runs the test binary `base` describes under `tool`. Without compute-sanitizer the result
// says so in `problem` (ran = false).
SanitizerResult run_sanitizer_tool(const std::string& tool, TestRunOptions base);

// "ERROR SUMMARY: 3 errors" / "RACECHECK SUMMARY: ... (2 errors, ...)": the error count.
int sanitizer_error_count(const std::string& output, int exit_code);

}  // namespace wb::grader
