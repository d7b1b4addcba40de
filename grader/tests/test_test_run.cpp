// Running a test binary and trusting (or not) its report: the channel's checks.
#include <doctest/doctest.h>

#include "grader/test_run.hpp"
#include "grader/util.hpp"
#include "test_common.hpp"

using namespace wb::grader;

namespace {

// The helper, under a test binary's name, acting out `mode`.
TestRun run_as_test(const std::string& mode, double timeout = 30, const std::string& kind = "correctness") {
  static grader_test::TempDir dir;
  const fs::path link = dir / ("test_99_" + kind + "_student");
  if (!fs::exists(link)) fs::create_symlink(grader_test::helper(), link);
  TestRunOptions o;
  o.binary = link;
  o.chapter_id = "99";
  o.kind = kind;
  o.scratch = dir / "runs";
  o.seed = 1234;
  o.limits.timeout_s = timeout;
  o.extra_args = {"report", mode};
  // The helper's own first argument selects its mode; the binary path is argv[0].
  return run_test_binary(o);
}

}  // namespace

TEST_CASE("an honest passing run is read back") {
  const TestRun r = run_as_test("pass");
  CHECK(r.outcome == RunOutcome::completed);
  REQUIRE(r.cases.size() == 2);
  CHECK(r.cases[0].status == "passed");
  CHECK(r.seed == 1234);
  CHECK(r.device == "Test GPU");
  CHECK(r.cases[0].metrics["speedup"] == 2.5);
}

TEST_CASE("failures keep their message, hint and likely cause") {
  const TestRun r = run_as_test("fail");
  REQUIRE(r.outcome == RunOutcome::completed);
  CHECK(r.cases[1].status == "failed");
  CHECK(r.cases[1].hint == "check the tail");
  CHECK(r.cases[1].reason == "wrong_answer");
  const TestRun illegal = run_as_test("illegal");
  CHECK(illegal.cases[0].reason == "cuda_fault");
}

TEST_CASE("starters read as to do, a machine without a GPU as skipped") {
  const TestRun todo = run_as_test("todo");
  CHECK(todo.outcome == RunOutcome::completed);
  CHECK(todo.cases[0].status == "todo");
  const TestRun skip = run_as_test("skip");
  CHECK(skip.outcome == RunOutcome::completed);
  CHECK(skip.all_skipped());
}

TEST_CASE("a report with another nonce or seed is not trusted") {
  const TestRun nonce = run_as_test("wrong-nonce");
  CHECK(nonce.outcome == RunOutcome::invalid_report);
  CHECK(nonce.problem.find("nonce") != std::string::npos);
  const TestRun seed = run_as_test("wrong-seed");
  CHECK(seed.outcome == RunOutcome::invalid_report);
  CHECK(seed.problem.find("seed") != std::string::npos);
}

TEST_CASE("a report whose tests read another environment than the grader gave is not trusted") {
  // Code in the test process (a static initializer's setenv) switched the suite to its quick
  // form, which leaves out the largest cases, or hid the checkpoint the end-to-end cases need.
  const TestRun quick = run_as_test("set-quick");
  CHECK(quick.outcome == RunOutcome::invalid_report);
  CHECK(quick.problem.find("the tests read WB_QUICK as '1', but the grader started them with unset") == 0);
  CHECK(quick.problem.find("chapter code must leave the environment alone") != std::string::npos);
  const TestRun sanitizer = run_as_test("sanitizer-quick");
  CHECK(sanitizer.outcome == RunOutcome::invalid_report);
  CHECK(sanitizer.problem.find("quick form") != std::string::npos);
  ::setenv("WB_DATA_DIR", "/data/llama2c", 1);
  const TestRun data = run_as_test("unset-data-dir");
  const TestRun honest = run_as_test("pass");
  ::unsetenv("WB_DATA_DIR");
  CHECK(data.outcome == RunOutcome::invalid_report);
  CHECK(data.problem.find("WB_DATA_DIR as unset, but the grader started them with '/data/llama2c'") !=
        std::string::npos);
  CHECK(honest.outcome == RunOutcome::completed);  // the same environment, read back unchanged
}

TEST_CASE("a run that ends early or disagrees with itself is not trusted") {
  const TestRun early = run_as_test("exit-early");
  CHECK(early.outcome == RunOutcome::no_report);
  const TestRun summary = run_as_test("no-summary");
  CHECK(summary.outcome == RunOutcome::invalid_report);
  CHECK(summary.problem.find("summary") != std::string::npos);
  const TestRun exit_code = run_as_test("mismatch-exit");
  CHECK(exit_code.outcome == RunOutcome::invalid_report);
  CHECK(exit_code.problem.find("exited with code 1") != std::string::npos);
}

TEST_CASE("a hanging test binary times out") {
  const TestRun r = run_as_test("hang", 1);
  CHECK(r.outcome == RunOutcome::timeout);
  CHECK(r.problem.find("did not finish within 1 s") != std::string::npos);
  CHECK(r.cases.empty());
}

TEST_CASE("a binary that was not built is reported as such") {
  TestRunOptions o;
  o.binary = "/nonexistent/test_99_correctness_student";
  o.kind = "correctness";
  o.scratch = fs::temp_directory_path();
  CHECK(run_test_binary(o).outcome == RunOutcome::not_built);
}

TEST_CASE("classify_failure names the likely cause") {
  CHECK(classify_failure("not implemented yet: x") == "todo");
  CHECK(classify_failure("CUDA error cudaErrorIllegalAddress (an illegal memory access was encountered)") == "cuda_fault");
  // A load through a generic pointer that lands in no memory space (seen on an H200 for an index
  // before the start of x): a fault of the kernel like an illegal address, not an API misuse.
  CHECK(classify_failure("CUDA error cudaErrorInvalidAddressSpace (operation not supported on "
                         "global/shared address space) from cudaMemcpyAsync") == "cuda_fault");
  CHECK(classify_failure("CUDA error cudaErrorInvalidPc (invalid program counter)") == "cuda_fault");
  CHECK(classify_failure("CUDA error cudaErrorMemoryAllocation (out of memory) from cudaMalloc") == "out_of_memory");
  CHECK(classify_failure("rule 4 (no synchronization inside an event-timed region): ...", "timing") == "timing_rule");
  CHECK(classify_failure("rule 3: the work was called 1 time(s)", "correctness", "00") == "timing_rule");
  // Chapter 07's sampler rules are its contract, not the timing harness's: a wrong answer.
  CHECK(classify_failure("ch07 step 3: rule 4: row r draws with u = draw_uniform(seed, step, r)", "correctness",
                         "07") == "wrong_answer");
  CHECK(classify_failure("CUDA error cudaErrorInvalidValue") == "cuda_error");
  CHECK(classify_failure("ch04 fused softmax 3x5: 2 of 15 elements differ") == "wrong_answer");
  CHECK(classify_failure("the fused softmax is 1.2x faster, the pass mark is 2x", "timing") == "too_slow");
  CHECK(classify_failure("fused softmax (re-checked after timing): 3 elements differ", "timing") == "wrong_answer");
  // Chapter 08's "model" kind checks answers (logits, tokens): never "too slow".
  CHECK(classify_failure("ch08 graph replay: token 17 differs from the un-graphed loop", "model") == "wrong_answer");
}

TEST_CASE("doctest's summary line is found, colours or not") {
  const auto s = parse_doctest_summary("noise\n\x1b[0;36m[doctest] \x1b[0mtest cases:  5 |  3 passed |  2 failed | 0 skipped\n");
  REQUIRE(s);
  CHECK(s->total == 5);
  CHECK(s->passed == 3);
  CHECK(s->failed == 2);
  CHECK_FALSE(parse_doctest_summary("nothing here"));
}

TEST_CASE("a TestRun survives a round trip through JSON") {
  const TestRun r = run_as_test("fail");
  const TestRun back = TestRun::from_json(r.to_json());
  CHECK(back.outcome == r.outcome);
  REQUIRE(back.cases.size() == r.cases.size());
  CHECK(back.cases[1].message == r.cases[1].message);
  CHECK(back.cases[1].reason == r.cases[1].reason);
}
