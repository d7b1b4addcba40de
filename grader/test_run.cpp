#include "grader/test_run.hpp"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <regex>

#include "grader/util.hpp"
#include "wb/test_environment.hpp"

namespace wb::grader {

bool CaseResult::skipped_no_device() const {
  if (status != "skipped") return false;
  if (notes.empty()) return true;
  for (const auto& n : notes)
    if (n.find("no CUDA device") != std::string::npos) return true;
  return false;
}

bool TestRun::all_skipped() const {
  if (!completed() || cases.empty()) return false;
  for (const auto& c : cases)
    if (!c.skipped_no_device()) return false;
  return true;
}

json TestRun::to_json() const {
  json cs = json::array();
  for (const auto& c : cases)
    cs.push_back({{"name", c.name}, {"status", c.status}, {"message", c.message},
                  {"hint", c.hint}, {"reason", c.reason}, {"duration_s", c.seconds},
                  {"metrics", c.metrics}, {"notes", c.notes}});
  return {{"kind", kind}, {"binary", binary}, {"outcome", outcome}, {"problem", problem},
          {"exit_code", exit_code}, {"signal", signal}, {"seconds", seconds},
          {"timeout_s", timeout_s}, {"seed", seed}, {"device", device},
          {"cases", cs}, {"warnings", warnings}, {"output_tail", tail_lines(output, 60)}};
}

TestRun TestRun::from_json(const json& j) {
  TestRun r;
  r.kind = j.value("kind", "");
  r.binary = j.value("binary", "");
  r.outcome = j.value("outcome", RunOutcome::not_run);
  r.problem = j.value("problem", "");
  r.exit_code = j.value("exit_code", -1);
  r.signal = j.value("signal", 0);
  r.seconds = j.value("seconds", 0.0);
  r.timeout_s = j.value("timeout_s", 0.0);
  r.seed = j.value("seed", std::uint64_t{0});
  r.device = j.value("device", "");
  r.output = j.value("output_tail", "");
  for (const auto& c : j.value("cases", json::array())) {
    CaseResult cr;
    cr.name = c.value("name", "");
    cr.status = c.value("status", "");
    cr.message = c.value("message", "");
    cr.hint = c.value("hint", "");
    cr.reason = c.value("reason", "");
    cr.seconds = c.value("duration_s", 0.0);
    cr.metrics = c.value("metrics", json::object());
    cr.notes = c.value("notes", std::vector<std::string>{});
    r.cases.push_back(cr);
  }
  r.warnings = j.value("warnings", std::vector<std::string>{});
  return r;
}

std::string classify_failure(const std::string& message, const std::string& kind, const std::string& chapter_id) {
  const std::string m = to_lower(message);
  auto has = [&](const char* s) { return m.find(s) != std::string::npos; };
  if (has("not implemented yet")) return "todo";
  if (has("cudaerrorillegaladdress") || has("illegal memory access") ||
      has("cudaerrormisalignedaddress") || has("misaligned address") ||
      has("cudaerrorlaunchfailure") || has("unspecified launch failure") ||
      has("cudaerrorillegalinstruction") || has("cudaerrorhardwarestackerror") ||
      has("cudaerrorinvalidaddressspace") || has("not supported on global/shared address space") ||
      has("cudaerrorinvalidpc") || has("cudaerrorassert"))
    return "cuda_fault";
  if (has("cudaerrormemoryallocation") || has("out of memory") || has("std::bad_alloc") ||
      has("bad_alloc"))
    return "out_of_memory";
  const bool about_timing = kind == "timing" || chapter_id == "00";
  if (about_timing && std::regex_search(m, std::regex(R"(\brule [0-9]+\b)"))) return "timing_rule";
  if (has("cudaerror")) return "cuda_error";
  // A timing test that fails without breaking a rule is slow, unless its re-check of the
  // output on fresh inputs (rule 7) is what failed. Other kinds (chapter 08's "model") check
  // answers, not speed: their failures are wrong answers.
  if (kind == "timing" && !has("after timing") && !has("re-check") &&
      !has("fresh input") && !has("mismatch"))
    return "too_slow";
  return "wrong_answer";
}

std::optional<DoctestSummary> parse_doctest_summary(const std::string& output) {
  // Colour codes would only appear on a terminal; strip them anyway.
  static const std::regex ansi("\x1b\\[[0-9;]*m");
  const std::string text = std::regex_replace(output, ansi, "");
  static const std::regex line(
      R"(\[doctest\] test cases:\s*([0-9]+)\s*\|\s*([0-9]+) passed\s*\|\s*([0-9]+) failed)");
  std::optional<DoctestSummary> last;
  for (auto it = std::sregex_iterator(text.begin(), text.end(), line); it != std::sregex_iterator(); ++it) {
    DoctestSummary s;
    s.total = std::stoi((*it)[1]);
    s.passed = std::stoi((*it)[2]);
    s.failed = std::stoi((*it)[3]);
    last = s;
  }
  return last;
}

namespace {

void fail(TestRun& run, RunOutcome outcome, const std::string& problem) {
  run.outcome = outcome;
  run.problem = problem;
  run.cases.clear();
}

// The variables of wb::kTestEnvironmentNames in a process environment ("NAME=value" entries).
std::map<std::string, std::string> steering_variables(const std::vector<std::string>& env) {
  std::map<std::string, std::string> out;
  for (const std::string& kv : env) {
    const std::size_t eq = kv.find('=');
    if (eq == std::string::npos) continue;
    const std::string name = kv.substr(0, eq);
    if (std::find(wb::kTestEnvironmentNames.begin(), wb::kTestEnvironmentNames.end(), name) !=
        wb::kTestEnvironmentNames.end())
      out[name] = kv.substr(eq + 1);
  }
  return out;
}

std::string describe_value(const std::optional<std::string>& v) {
  return v ? "'" + *v + "'" : std::string("unset");
}

// The environment the tests read (the report's "environment", taken when the test's main
// started, and "quick") against the one the grader gave the process. Code in the test
// process can change its own environment before main (a static initializer's setenv):
// WB_QUICK or a sanitizer's variable leaves out the largest cases, an unset WB_DATA_DIR skips
// the end-to-end ones. Reports without these keys are not checked (their binaries predate
// them; a forged report fails on the nonce).
std::string environment_problem(const json& r, const ReportExpectations& expect) {
  if (!expect.environment) return "";
  const std::string rule =
      ". Code in the test process changed its environment (setenv, putenv, unsetenv, or in a static "
      "initializer, before the tests began): chapter code must leave the environment alone.";
  if (r.contains("environment") && r["environment"].is_object()) {
    for (const char* name : wb::kTestEnvironmentNames) {
      const auto given = expect.environment->find(name);
      const std::optional<std::string> want =
          given == expect.environment->end() ? std::nullopt : std::optional<std::string>(given->second);
      const json& seen = r["environment"].contains(name) ? r["environment"][name] : json(nullptr);
      const std::optional<std::string> got =
          seen.is_string() ? std::optional<std::string>(seen.get<std::string>()) : std::nullopt;
      if (want != got)
        return "the tests read " + std::string(name) + " as " + describe_value(got) + ", but the grader started them with " +
               describe_value(want) + rule;
    }
  }
  if (r.contains("quick") && r["quick"].is_boolean() && r["quick"].get<bool>() && !expect.quick_expected)
    return "the tests ran in their quick form (the largest cases left out, as under compute-sanitizer), which this "
           "run did not ask for" + rule;
  return "";
}

// Checks a parsed report against what this run must produce; returns the first problem.
std::string validate_report(const json& r, const ReportExpectations& expect) {
  if (!r.is_object()) return "the report is not a JSON object";
  if (r.value("schema", "") != "workbook-test-report/1")
    return "the report's schema is '" + r.value("schema", std::string("?")) +
           "', not workbook-test-report/1";
  if (!expect.nonce.empty() && r.value("nonce", "") != expect.nonce)
    return "the report does not carry this run's nonce: it was not written by this test run";
  if (!expect.binary.empty() && r.value("binary", "") != expect.binary)
    return "the report names binary '" + r.value("binary", std::string("?")) + "', expected '" +
           expect.binary + "'";
  if (!expect.chapter_id.empty() && r.value("chapter", "") != expect.chapter_id)
    return "the report names chapter '" + r.value("chapter", std::string("?")) + "', expected '" +
           expect.chapter_id + "'";
  if (expect.seed) {
    if (!r.contains("seed") || !r["seed"].is_number_unsigned() ||
        r["seed"].get<std::uint64_t>() != *expect.seed)
      return "the report's seed differs from the seed the grader supplied";
  }
  if (const std::string changed = environment_problem(r, expect); !changed.empty()) return changed;
  if (!r.contains("tests") || !r["tests"].is_array()) return "the report has no tests list";
  for (const auto& t : r["tests"]) {
    if (!t.is_object() || !t.contains("name") || !t["name"].is_string() || !t.contains("status") ||
        !t["status"].is_string())
      return "a test entry lacks a name or status";
    const std::string s = t["status"];
    if (s != "passed" && s != "failed" && s != "todo" && s != "skipped")
      return "a test entry has the unknown status '" + s + "'";
  }
  return "";
}

}  // namespace

TestRun interpret_test_run(const std::string& kind, const ProcessResult& process,
                           const std::optional<std::string>& report_text,
                           const ReportExpectations& expect) {
  TestRun run;
  run.kind = kind;
  run.binary = expect.binary;
  run.exit_code = process.exit_code;
  run.signal = process.signal;
  run.seconds = process.seconds;
  run.output = printable(process.output);
  if (expect.seed) run.seed = *expect.seed;

  if (!process.started) {
    fail(run, RunOutcome::not_started, "the test binary could not be started: " + process.start_error);
    return run;
  }
  if (process.timed_out) {
    fail(run, RunOutcome::timeout, run.binary + " " + process.describe(run.timeout_s));
    return run;
  }
  if (process.memory_exceeded) {
    fail(run, RunOutcome::memory, run.binary + " used more host memory than allowed and was stopped");
    return run;
  }
  if (process.signal) {
    fail(run, RunOutcome::crashed, run.binary + " crashed: " + process.describe());
    return run;
  }
  if (!report_text) {
    fail(run, RunOutcome::no_report,
         run.binary + " " + process.describe() +
             " without writing its test report: the process ended before its tests finished "
             "(exit() or abort() called from the code under test, or a crash at startup)");
    return run;
  }
  json report;
  try {
    report = json::parse(*report_text);
  } catch (const std::exception& e) {
    fail(run, RunOutcome::invalid_report, "the test report is not valid JSON: " + std::string(e.what()));
    return run;
  }
  if (const std::string problem = validate_report(report, expect); !problem.empty()) {
    fail(run, RunOutcome::invalid_report, problem);
    return run;
  }
  if (report.contains("seed") && report["seed"].is_number_unsigned()) run.seed = report["seed"];
  if (report.contains("device") && report["device"].is_string()) run.device = report["device"];

  int failed = 0, todo = 0, skipped = 0;
  for (const auto& t : report["tests"]) {
    CaseResult c;
    c.name = printable(t["name"].get<std::string>());
    c.status = t["status"];
    c.message = printable(t.value("message", ""));
    c.hint = printable(t.value("hint", ""));
    c.seconds = t.value("duration_s", 0.0);
    if (t.contains("metrics") && t["metrics"].is_object()) c.metrics = t["metrics"];
    if (t.contains("notes") && t["notes"].is_array())
      for (const auto& n : t["notes"])
        if (n.is_string()) c.notes.push_back(printable(n.get<std::string>()));
    if (c.status == "failed") c.reason = classify_failure(c.message, kind, expect.chapter_id), ++failed;
    if (c.status == "todo") c.reason = "todo", ++todo;
    if (c.status == "skipped") ++skipped;
    run.cases.push_back(std::move(c));
  }
  const int total = static_cast<int>(run.cases.size());

  // The exit code must agree with the verdicts (test_main: 0 all passed, 1 something
  // failed, 77 everything skipped).
  const int expected_exit = (total > 0 && skipped == total) ? 77 : (failed + todo > 0 ? 1 : 0);
  if (process.exit_code != expected_exit) {
    fail(run, RunOutcome::invalid_report,
         run.binary + " exited with code " + std::to_string(process.exit_code) +
             " but its report implies " + std::to_string(expected_exit) +
             ": the process was ended by the code under test, or the report was tampered with");
    return run;
  }
  // doctest prints its own summary; a run that ended early (exit() after forging a report)
  // has none, and a forged report rarely matches it.
  const auto summary = parse_doctest_summary(process.output);
  if (!summary) {
    if (process.output_truncated)
      run.warnings.push_back("doctest's summary line was not found (output was cut)");
    else {
      fail(run, RunOutcome::invalid_report,
           run.binary + " did not finish its test run normally (doctest's summary line is "
                        "missing): the code under test ended the process early");
      return run;
    }
  } else if (summary->total != total || summary->failed != failed + todo) {
    fail(run, RunOutcome::invalid_report,
         "the test report (" + std::to_string(total) + " tests, " + std::to_string(failed + todo) +
             " failed or to do) disagrees with doctest's own summary (" +
             std::to_string(summary->total) + " tests, " + std::to_string(summary->failed) +
             " failed)");
    return run;
  }
  run.outcome = RunOutcome::completed;
  return run;
}

TestRun run_test_binary(const TestRunOptions& o) {
  const std::string binary_name = o.binary.filename().string();
  if (!fs::exists(o.binary)) {
    TestRun run;
    run.kind = o.kind;
    run.binary = binary_name;
    fail(run, RunOutcome::not_built, binary_name + " was not built");
    return run;
  }
  // A private directory per run: the report path inside is unpredictable and only this
  // user can list or write it.
  fs::create_directories(o.scratch);
  std::string templ = (o.scratch / "run-XXXXXX").string();
  if (!::mkdtemp(templ.data())) throw std::runtime_error("cannot create a run directory in " + o.scratch.string());
  const fs::path run_dir = templ;
  ::chmod(run_dir.c_str(), 0700);
  const fs::path home = run_dir / "home";
  fs::create_directories(home / "tmp");
  const fs::path report = run_dir / ("report-" + random_hex(12) + ".json");
  const std::string nonce = random_hex(16);

  std::vector<std::pair<std::string, std::string>> set = {
      {"WB_TEST_REPORT", report.string()}, {"WB_REPORT_NONCE", nonce}};
  if (o.seed) set.emplace_back("WB_SEED", std::to_string(*o.seed));
  if (o.gpu) set.emplace_back("CUDA_VISIBLE_DEVICES", *o.gpu);
  std::vector<std::string> env;
  if (o.scrub_environment) {
    set.emplace_back("HOME", home.string());
    set.emplace_back("TMPDIR", (home / "tmp").string());
    set.emplace_back("LC_ALL", "C");
    set.emplace_back("WB_RESULTS_DIR", (home / "results").string());
    env = make_environment(set, test_environment_names());
  } else {
    env = inherited_environment(set, {"WB_TEST_REPORT", "WB_REPORT_NONCE"});
  }

  // What the tests will read (before env moves): the process's environment, and the NAME=value
  // words of a wrapper that sets more (the sanitizer runs' `env WB_SANITIZE_TOOL=racecheck`).
  std::map<std::string, std::string> steering = steering_variables(env);
  for (const auto& [name, value] : steering_variables(o.wrapper)) steering[name] = value;

  ProcessSpec spec;
  spec.argv = o.wrapper;
  spec.argv.push_back(fs::absolute(o.binary).string());
  spec.argv.insert(spec.argv.end(), o.extra_args.begin(), o.extra_args.end());
  spec.env = std::move(env);
  spec.cwd = home;
  spec.limits = o.limits;
  const ProcessResult process = run_process(spec);

  std::optional<std::string> text;
  std::error_code ec;
  if (fs::is_regular_file(report, ec)) {
    try {
      text = read_text_file(report, 32u << 20);
    } catch (const std::exception&) {
      text = std::string("(unreadable)");
    }
  }
  ReportExpectations expect{binary_name, o.chapter_id, nonce, o.seed};
  expect.environment = steering;
  const auto quick = steering.find("WB_QUICK");
  expect.quick_expected =
      !o.wrapper.empty() || (quick != steering.end() && wb::switched_on(quick->second));
  TestRun run = interpret_test_run(o.kind, process, text, expect);
  run.timeout_s = o.limits.timeout_s;
  if (run.outcome == RunOutcome::timeout) run.problem = binary_name + " " + process.describe(o.limits.timeout_s);
  fs::remove_all(run_dir, ec);
  return run;
}

}  // namespace wb::grader
