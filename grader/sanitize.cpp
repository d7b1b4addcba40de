#include "grader/sanitize.hpp"

#include <algorithm>
#include <cstdlib>
#include <regex>

#include "grader/util.hpp"

namespace wb::grader {

namespace {
constexpr int kSanitizerErrorExit = 86;  // --error-exitcode: apart from the tests' own codes
}

nlohmann::json SanitizerResult::to_json() const {
  return {{"tool", tool}, {"ran", ran}, {"errors", errors}, {"excerpt", excerpt}, {"problem", problem}};
}

fs::path find_compute_sanitizer() {
  std::vector<fs::path> extra;
  if (const char* h = std::getenv("CUDA_HOME")) extra.emplace_back(fs::path(h) / "bin");
  extra.emplace_back("/usr/local/cuda/bin");
  return find_program("compute-sanitizer", extra);
}

int sanitizer_error_count(const std::string& text, int exit_code) {
  static const std::regex summary(R"(ERROR SUMMARY:\s*([0-9]+) error)");
  static const std::regex race(R"(RACECHECK SUMMARY:.*\(([0-9]+) error)");
  int errors = 0;
  for (const auto* re : {&summary, &race})
    for (auto it = std::sregex_iterator(text.begin(), text.end(), *re); it != std::sregex_iterator(); ++it)
      errors = std::max(errors, std::stoi((*it)[1]));
  if (errors == 0 && exit_code == kSanitizerErrorExit) errors = 1;
  return errors;
}

SanitizerResult run_sanitizer_tool(const std::string& tool, TestRunOptions t) {
  SanitizerResult s;
  s.tool = tool;
  const fs::path program = find_compute_sanitizer();
  if (program.empty()) {
    s.problem = "compute-sanitizer was not found (PATH, $CUDA_HOME/bin, /usr/local/cuda/bin); it comes with "
                "the CUDA toolkit";
    return s;
  }
  // WB_SANITIZE_TOOL tells the tests which tool runs them (wb::coverage::racecheck()): env
  // sets it past the grader's scrubbed environment, and the tool passes it to the test.
  t.wrapper = {"/usr/bin/env", "WB_SANITIZE_TOOL=" + tool, program.string(), "--tool", tool, "--error-exitcode", std::to_string(kSanitizerErrorExit),
               "--print-limit", "20"};
  if (tool == "racecheck") t.wrapper.insert(t.wrapper.end(), {"--racecheck-report", "hazard"});
  const TestRun r = run_test_binary(t);
  s.output = r.output;
  s.ran = r.outcome != RunOutcome::timeout && r.outcome != RunOutcome::not_started;
  s.errors = sanitizer_error_count(r.output, r.exit_code);
  if (s.errors > 0) {
    std::vector<std::string> lines;
    for (const auto& l : split_lines(r.output))
      if (starts_with(l, "=========") && lines.size() < 25) lines.push_back(l);
    s.excerpt = join(lines, "\n");
  }
  if (r.outcome == RunOutcome::timeout || r.outcome == RunOutcome::not_started) s.problem = r.problem;
  return s;
}

}  // namespace wb::grader
