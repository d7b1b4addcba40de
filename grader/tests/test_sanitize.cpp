// compute-sanitizer runs (grader/sanitize.cpp) without a GPU: a stand-in compute-sanitizer
// on PATH runs the helper and reports errors by test case, so that racecheck's one run per
// test case (filters, jobs, merging, a case that times out) is exercised here.
#include <doctest/doctest.h>
#include <sys/stat.h>

#include <cstdlib>

#include "grader/sanitize.hpp"
#include "grader/util.hpp"
#include "test_common.hpp"

using namespace wb::grader;

namespace {

// Skips its own options, runs the program, and then plays the tool: a race in the test case
// whose filter says "racy", a hang in the "slow" one, 0 errors otherwise. It also prints
// the arguments it got, so the tests can see the filters.
const char* kFakeSanitizer = R"SH(#!/bin/sh
while [ $# -gt 0 ]; do
  case "$1" in
    --tool|--error-exitcode|--print-limit|--racecheck-report) echo "option $1 $2"; shift 2 ;;
    *) break ;;
  esac
done
echo "args: $*"
"$@" > /dev/null; code=$?
case "$*" in
  *racy*) echo "========= Error: Race reported between Write access and Read access at ch99.cu:42"
          echo "========= RACECHECK SUMMARY: 1 hazard displayed (1 error, 0 warnings)"; exit 86 ;;
  *slow*) sleep 30 ;;
esac
echo "========= ERROR SUMMARY: 0 errors"
exit $code
)SH";

struct FakeTool {
  grader_test::TempDir dir;
  std::string old_path = std::getenv("PATH") ? std::getenv("PATH") : "";
  FakeTool() {
    const fs::path tool = dir / "bin/compute-sanitizer";
    grader_test::write(tool, kFakeSanitizer);
    ::chmod(tool.c_str(), 0755);
    ::setenv("PATH", ((dir / "bin").string() + ":" + old_path).c_str(), 1);
  }
  ~FakeTool() { ::setenv("PATH", old_path.c_str(), 1); }

  TestRunOptions options(double timeout_s) const {
    const fs::path link = dir / "test_99_correctness_student";
    if (!fs::exists(link)) fs::create_symlink(grader_test::helper(), link);
    TestRunOptions o;
    o.binary = link;
    o.chapter_id = "99";
    o.kind = "correctness";
    o.scratch = dir / "runs";
    o.seed = 1234;
    o.limits.timeout_s = timeout_s;
    o.extra_args = {"report", "pass"};
    return o;
  }
};

}  // namespace

TEST_CASE("each case gets a filter that matches only it, and the names come from a run's report") {
  // doctest splits filters at commas: a comma must not cut the name in two.
  CHECK(test_case_filter("second, with a comma") == "--test-case=second? with a comma");
  TestRun run;
  run.cases.resize(2);
  run.cases[0].name = "first";
  run.cases[1].name = "second, with a comma";
  CHECK(case_names(run) == std::vector<std::string>{"first", "second, with a comma"});
  CHECK(default_sanitizer_jobs() >= 1);
  CHECK(default_sanitizer_jobs() <= 8);
}

TEST_CASE("racecheck runs every test case on its own, sums their errors and names a case that did not finish") {
  FakeTool fake;
  const std::vector<std::string> cases = {"quiet, with a comma", "racy kernel", "slow kernel"};
  const SanitizerResult r = run_sanitizer_tool("racecheck", fake.options(3), /*jobs=*/3, cases);
  CHECK(r.tool == "racecheck");
  CHECK(r.errors == 1);              // the racy case's, and no other
  CHECK_FALSE(r.ran);                // the slow case hit its own time limit
  CHECK(r.problem.find("1 of 3 test cases did not finish") != std::string::npos);
  CHECK(r.problem.find("slow kernel") != std::string::npos);
  CHECK(r.excerpt.find("in test case \"racy kernel\"") != std::string::npos);
  CHECK(r.excerpt.find("ch99.cu:42") != std::string::npos);
  // Every case ran under the tool with its own filter, and its output is kept under its name.
  CHECK(r.output.find("test case 1 of 3: quiet, with a comma") != std::string::npos);
  CHECK(r.output.find("--test-case=quiet? with a comma") != std::string::npos);
  CHECK(r.output.find("--test-case=racy kernel") != std::string::npos);
  CHECK(r.output.find("option --racecheck-report hazard") != std::string::npos);
  CHECK(r.output.find("option --tool racecheck") != std::string::npos);
}

TEST_CASE("memcheck, and racecheck without case names, run the whole binary once") {
  FakeTool fake;
  const TestRunOptions o = fake.options(20);
  // The fake tool's race and hang are keyed by filter: a whole-binary run has neither.
  const SanitizerResult memcheck = run_sanitizer_tool("memcheck", o, 4, {"racy kernel"});
  CHECK(memcheck.ran);
  CHECK(memcheck.errors == 0);
  CHECK(memcheck.output.find("--test-case") == std::string::npos);
  CHECK(memcheck.output.find("option --tool memcheck") != std::string::npos);
  const SanitizerResult racecheck = run_sanitizer_tool("racecheck", o, 4);
  CHECK(racecheck.ran);
  CHECK(racecheck.output.find("--test-case") == std::string::npos);
  CHECK(racecheck.output.find("option --racecheck-report hazard") != std::string::npos);
}
