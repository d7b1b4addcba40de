#include "grader/sanitize.hpp"

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <regex>
#include <thread>

#include "grader/process.hpp"
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

int default_sanitizer_jobs() {
  const unsigned cores = std::thread::hardware_concurrency();
  return std::clamp(static_cast<int>(cores / 2), 1, 8);
}

std::vector<std::string> case_names(const TestRun& run) {
  std::vector<std::string> names;
  for (const CaseResult& c : run.cases) names.push_back(c.name);
  return names;
}

std::string test_case_filter(const std::string& name) {
  std::string filter = name;
  std::replace(filter.begin(), filter.end(), ',', '?');
  return "--test-case=" + filter;
}

namespace {

// One run of the tool over what `t` describes (the whole binary, or one test case).
SanitizerResult run_once(const std::string& tool, const TestRunOptions& t) {
  SanitizerResult s;
  s.tool = tool;
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

// Each case under the tool on its own, `jobs` at a time; the results in the list's order.
std::vector<SanitizerResult> run_each_case(const std::string& tool, const TestRunOptions& t,
                                           const std::vector<std::string>& cases, int jobs) {
  std::vector<SanitizerResult> results(cases.size());
  std::atomic<std::size_t> next{0};
  auto worker = [&] {
    for (std::size_t i; !interrupted() && (i = next++) < cases.size();) {
      TestRunOptions one = t;
      one.extra_args.push_back(test_case_filter(cases[i]));
      results[i] = run_once(tool, one);
    }
  };
  std::vector<std::thread> pool;
  const std::size_t threads = std::min<std::size_t>(static_cast<std::size_t>(std::max(1, jobs)), cases.size());
  for (std::size_t j = 0; j < threads; ++j) pool.emplace_back(worker);
  for (auto& th : pool) th.join();
  return results;
}

// The cases' results as one: errors summed, every output kept under its case's name.
SanitizerResult merge_cases(const std::string& tool, const std::vector<std::string>& cases,
                            const std::vector<SanitizerResult>& results) {
  SanitizerResult s;
  s.tool = tool;
  s.ran = true;
  std::vector<std::string> excerpt, unfinished;
  for (std::size_t i = 0; i < cases.size(); ++i) {
    const SanitizerResult& r = results[i];
    const std::string head = "[workbook] " + tool + ", test case " + std::to_string(i + 1) + " of " +
                             std::to_string(cases.size()) + ": " + cases[i];
    s.output += head + "\n" + r.output + (r.output.empty() || r.output.back() == '\n' ? "" : "\n");
    s.errors += r.errors;
    if (!r.ran) {
      s.ran = false;
      unfinished.push_back("\"" + cases[i] + "\" (" + (r.problem.empty() ? "not run" : r.problem) + ")");
    }
    if (r.errors > 0 && excerpt.size() < 25) {
      excerpt.push_back("in test case \"" + cases[i] + "\":");
      for (const auto& l : split_lines(r.excerpt))
        if (excerpt.size() < 25) excerpt.push_back(l);
    }
  }
  s.excerpt = join(excerpt, "\n");
  if (!unfinished.empty()) {
    s.problem = std::to_string(unfinished.size()) + " of " + std::to_string(cases.size()) +
                " test cases did not finish: " + unfinished.front();
    if (unfinished.size() > 1) s.problem += " and " + std::to_string(unfinished.size() - 1) + " more";
  }
  return s;
}

}  // namespace

SanitizerResult run_sanitizer_tool(const std::string& tool, TestRunOptions t, int jobs,
                                   const std::vector<std::string>& cases) {
  const fs::path program = find_compute_sanitizer();
  if (program.empty()) {
    SanitizerResult s;
    s.tool = tool;
    s.problem = "compute-sanitizer was not found (PATH, $CUDA_HOME/bin, /usr/local/cuda/bin); it comes with "
                "the CUDA toolkit";
    return s;
  }
  // WB_SANITIZE_TOOL tells the tests which tool runs them (wb::coverage::racecheck()): env
  // sets it past the grader's scrubbed environment, and the tool passes it to the test.
  t.wrapper = {"/usr/bin/env", "WB_SANITIZE_TOOL=" + tool, program.string(), "--tool", tool, "--error-exitcode", std::to_string(kSanitizerErrorExit),
               "--print-limit", "20"};
  if (tool == "racecheck") t.wrapper.insert(t.wrapper.end(), {"--racecheck-report", "hazard"});
  if (tool != "racecheck" || cases.empty()) return run_once(tool, t);
  return merge_cases(tool, cases, run_each_case(tool, t, cases, jobs));
}

}  // namespace wb::grader
