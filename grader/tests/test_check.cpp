// The student's scorecard: each state in words, the first thing to fix with its hint and a
// command to rerun it, and an exit status that never calls "skipped" a pass.
#include <doctest/doctest.h>

#include "grader/check.hpp"
#include "grader/util.hpp"

using namespace wb::grader;

namespace {

Chapter chapter(const std::string& id, const std::string& title) {
  Chapter c;
  c.id = id;
  c.slug = id + "_x";
  c.title = title;
  c.editable = {"k.cu"};
  c.tests = {{"test_correctness.cu", "correctness", true, 600}, {"test_timing.cu", "timing", true, 600}};
  return c;
}

TestRun run(const std::string& kind, std::vector<std::pair<std::string, std::string>> cases) {
  TestRun r;
  r.kind = kind;
  r.outcome = RunOutcome::completed;
  r.seed = 99;
  for (auto& [name, status] : cases) {
    CaseResult c;
    c.name = name;
    c.status = status;
    if (status == "failed") {
      c.message = "ch04 fused softmax 3x5: 2 of 15 elements differ\n  [2, 4] got NaN, expected 0.2\nhint: write the tail";
      c.hint = "write the tail";
      c.reason = "wrong_answer";
    }
    if (status == "todo") c.message = "not implemented yet: ch05 gelu_fused (steps 3-4)", c.reason = "todo";
    r.cases.push_back(c);
  }
  return r;
}

CheckedChapter checked(const Chapter& c, std::vector<TestRun> runs) {
  CheckedChapter cc{c, {}, {}, ""};
  cc.runs.build.attempted = cc.runs.build.ok = true;
  cc.runs.runs = std::move(runs);
  cc.verdict = judge_chapter(c, cc.runs);
  return cc;
}

}  // namespace

TEST_CASE("the scorecard: passing, failing with hint and reproduce command, to do") {
  CheckOptions o;
  o.build_dir = "/home/s/workbook/build";
  std::vector<CheckedChapter> cs = {
      checked(chapter("00", "Measure right"), {run("correctness", {{"a", "passed"}}), run("timing", {{"t", "passed"}})}),
      checked(chapter("04", "Fused softmax"), {run("correctness", {{"a", "passed"}, {"fused, tail", "failed"}})}),
      checked(chapter("05", "Fused GELU"), {run("correctness", {{"g", "todo"}, {"h", "todo"}})})};
  const std::string card = render_scorecard(cs, o);
  CHECK(card.find("00  Measure right") != std::string::npos);
  CHECK(card.find("passing timing") != std::string::npos);
  CHECK(card.find("1/1 correctness, 1/1 timing") != std::string::npos);
  CHECK(card.find("failing") != std::string::npos);
  CHECK(card.find("FAIL fused, tail  [correctness]") != std::string::npos);
  CHECK(card.find("[2, 4] got NaN") != std::string::npos);
  CHECK(card.find("hint: write the tail") != std::string::npos);
  CHECK(card.find("reproduce: WB_SEED=99 '/home/s/workbook/build/bin/test_04_correctness_student' '--test-case=fused\\, tail'") !=
        std::string::npos);
  CHECK(card.find("to do") != std::string::npos);
  CHECK(card.find("next: g") != std::string::npos);
  CHECK(card.find("not implemented yet: ch05 gelu_fused") != std::string::npos);
  CHECK(card.find("1 passing, 1 failing, 1 to do.") != std::string::npos);
  CHECK(check_exit_code(cs) == 1);
}

TEST_CASE("without a GPU: skipped, said plainly, never passing, exit 77") {
  CheckOptions o;
  TestRun skipped = run("correctness", {{"a", "skipped"}, {"b", "skipped"}});
  std::vector<CheckedChapter> cs = {checked(chapter("04", "Fused softmax"), {skipped})};
  const std::string card = render_scorecard(cs, o);
  CHECK(card.find("skipped: no GPU") != std::string::npos);
  CHECK(card.find("GPU tests could not run here") != std::string::npos);
  CHECK(card.find("passing") == std::string::npos);
  CHECK(card.find("skipped, not passed") != std::string::npos);
  CHECK(check_exit_code(cs) == 77);
}

TEST_CASE("a compile error shows the compiler's first error; everything passing exits 0") {
  CheckOptions o;
  CheckedChapter broken{chapter("04", "Fused softmax"), {}, {}, ""};
  broken.runs.build.attempted = true;
  broken.runs.build.excerpt = "chapters/04_x/k.cu(12): error: identifier \"blockIdx_x\" is undefined";
  broken.verdict = judge_chapter(broken.chapter, broken.runs);
  const std::string card = render_scorecard({broken}, o);
  CHECK(card.find("compile error") != std::string::npos);
  CHECK(card.find("identifier \"blockIdx_x\" is undefined") != std::string::npos);
  CHECK(card.find("hint: fix the first error first") != std::string::npos);

  std::vector<CheckedChapter> done = {
      checked(chapter("00", "Measure right"), {run("correctness", {{"a", "passed"}}), run("timing", {{"t", "passed"}})})};
  CHECK(check_exit_code(done) == 0);
  CHECK(check_exit_code({broken}) == 1);
}
