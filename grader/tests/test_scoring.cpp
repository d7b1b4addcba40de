// Verdicts and points from what happened: correctness gates timing, weights, pass marks,
// and every way a chapter can fail to be judged.
#include <doctest/doctest.h>

#include "grader/grade.hpp"
#include "grader/rubric.hpp"
#include "grader/util.hpp"
#include "grader/verdict.hpp"

using namespace wb::grader;
using nlohmann::json;

namespace {

Chapter chapter() {
  Chapter c;
  c.id = "07";
  c.slug = "07_x";
  c.title = "X";
  c.editable = {"k.cu"};
  c.tests = {{"test_timing.cu", "timing", true, 600}, {"test_correctness.cu", "correctness", true, 600}};
  return c;
}

TestRun completed(const std::string& kind, std::vector<std::pair<std::string, std::string>> cases,
                  json metrics = json::object()) {
  TestRun r;
  r.kind = kind;
  r.binary = "test_07_" + kind + "_student";
  r.outcome = RunOutcome::completed;
  r.seed = 5;
  for (auto& [name, status] : cases) {
    CaseResult c;
    c.name = name;
    c.status = status;
    if (status == "failed") c.message = "ch07 " + name + ": 3 of 9 elements differ\nhint: the tail", c.hint = "the tail",
                            c.reason = kind == "timing" ? "too_slow" : "wrong_answer";
    if (status == "todo") c.message = "not implemented yet: ch07", c.reason = "todo";
    c.metrics = metrics;
    r.cases.push_back(c);
  }
  return r;
}

TestRun not_run(const std::string& kind, RunOutcome outcome = RunOutcome::not_run) {
  TestRun r;
  r.kind = kind;
  r.outcome = outcome;
  r.problem = outcome == RunOutcome::not_run ? "not run: every correctness test must pass first" : "skipped";
  return r;
}

Rubric rubric(const std::string& extra = "") {
  return parse_rubric(json::parse(R"({"schema":"workbook-rubric/1","defaults":{"points":{"correctness":6,"timing":4}})" +
                                  extra + "}"),
                      "test");
}

json score(const ChapterRuns& runs, const Rubric& r = rubric()) {
  const Chapter c = chapter();
  return score_chapter(c, runs, judge_chapter(c, runs), r, json());
}

}  // namespace

TEST_CASE("correctness runs before timing, whatever the manifest's order") {
  CHECK(chapter().kinds() == std::vector<std::string>{"correctness", "timing"});
}

TEST_CASE("everything passing: full points, 'passing timing'") {
  ChapterRuns runs;
  runs.build.attempted = runs.build.ok = true;
  runs.runs = {completed("correctness", {{"a", "passed"}, {"b", "passed"}}), completed("timing", {{"t", "passed"}})};
  const Verdict v = judge_chapter(chapter(), runs);
  CHECK(v.state == ChapterState::passing_timing);
  CHECK(v.complete);
  const json s = score(runs);
  CHECK(s["score"] == 10);
  CHECK(s["max_score"] == 10);
}

TEST_CASE("a starter: every test to do, zero points") {
  ChapterRuns runs;
  runs.runs = {completed("correctness", {{"a", "todo"}, {"b", "todo"}}), not_run("timing")};
  const Verdict v = judge_chapter(chapter(), runs);
  CHECK(v.state == ChapterState::todo);
  CHECK(v.label == "to do");
  CHECK(v.test == "a");
  CHECK(score(runs)["score"] == 0);
}

TEST_CASE("partial correctness earns its share; timing is gated") {
  ChapterRuns runs;
  runs.runs = {completed("correctness", {{"a", "passed"}, {"b", "failed"}, {"c", "passed"}}), not_run("timing")};
  const Verdict v = judge_chapter(chapter(), runs);
  CHECK(v.state == ChapterState::failing);
  CHECK(v.reason == "wrong_answer");
  CHECK(v.test == "b");
  CHECK(v.hint == "the tail");
  const json s = score(runs);
  CHECK(s["score"] == 4);
  CHECK(s["kinds"][1]["status"] == "gated");
}

TEST_CASE("some done, the rest to do: in progress") {
  ChapterRuns runs;
  runs.runs = {completed("correctness", {{"a", "passed"}, {"b", "todo"}}), not_run("timing")};
  CHECK(judge_chapter(chapter(), runs).state == ChapterState::in_progress);
  CHECK(score(runs)["score"] == 3);
}

TEST_CASE("timing failing after correctness passes: 'passing correctness', timing points lost") {
  ChapterRuns runs;
  runs.runs = {completed("correctness", {{"a", "passed"}}), completed("timing", {{"t1", "passed"}, {"t2", "failed"}})};
  const Verdict v = judge_chapter(chapter(), runs);
  CHECK(v.state == ChapterState::passing_correctness);
  CHECK_FALSE(v.complete);
  CHECK(v.reason == "too_slow");
  CHECK(score(runs)["score"] == 8);
}

TEST_CASE("weights and pass marks shape the timing points") {
  ChapterRuns runs;
  runs.runs = {completed("correctness", {{"a", "passed"}}),
               completed("timing", {{"fast one", "passed"}, {"slow one", "passed"}}, {{"speedup", 1.5}})};
  const Rubric r = rubric(R"(,"chapters":{"07":{"weights":{"fast*":3},
      "pass_marks":[{"test":"slow*","metric":"speedup","min":2},{"test":"fast*","metric":"absent","max":1}]}})");
  const json s = score(runs, r);
  // "fast one" (3 of 4 timing points) misses a mark it cannot show; "slow one" is below 2.
  CHECK(s["score"] == 6);
  const json& t = s["kinds"][1]["tests"];
  CHECK(t[0]["max_score"] == 3);
  CHECK(t[0]["reason"] == "below_pass_mark");
  CHECK(t[0]["pass_marks"][0]["problem"].get<std::string>().find("did not record") != std::string::npos);
  CHECK(t[1]["pass_marks"][0]["value"] == 1.5);
  CHECK(t[1]["pass_marks"][0]["ok"] == false);
}

TEST_CASE("a crash, a hang or an untrusted report costs the chapter, with the reason") {
  for (const RunOutcome outcome : {RunOutcome::crashed, RunOutcome::timeout, RunOutcome::no_report,
                                   RunOutcome::invalid_report, RunOutcome::memory}) {
    CAPTURE(outcome);
    ChapterRuns runs;
    TestRun r = not_run("correctness", outcome);
    r.problem = "test_07_correctness_student: " + to_string(outcome);
    runs.runs = {r, not_run("timing")};
    const Verdict v = judge_chapter(chapter(), runs);
    CHECK(v.state == ChapterState::failing);
    CHECK(v.reason == to_string(outcome));
    CHECK_FALSE(v.hint.empty());
    const json s = score(runs);
    CHECK(s["score"] == 0);
    CHECK(s["kinds"][0]["status"] == "failed_to_run");
  }
}

TEST_CASE("compile errors, rejections and missing chapters score zero with their reason") {
  ChapterRuns compile;
  compile.build.attempted = true;
  compile.build.excerpt = "07_x/k.cu(3): error: expected a \";\"";
  Verdict v = judge_chapter(chapter(), compile);
  CHECK(v.state == ChapterState::compile_error);
  CHECK(v.message.find("expected a") != std::string::npos);
  CHECK(score(compile)["score"] == 0);

  ChapterRuns rejected;
  rejected.rejected = true;
  rejected.reject_reason = "calls_reference";
  rejected.reject_detail = "k.cu calls the tests' reference";
  v = judge_chapter(chapter(), rejected);
  CHECK(v.state == ChapterState::rejected);
  CHECK(v.reason == "calls_reference");

  ChapterRuns missing;
  missing.missing = true;
  CHECK(judge_chapter(chapter(), missing).state == ChapterState::missing);
  CHECK(score(missing)["max_score"] == 10);
}

TEST_CASE("no GPU: not gradable, never passing") {
  ChapterRuns runs;
  runs.runs = {completed("correctness", {{"a", "skipped"}, {"b", "skipped"}}), not_run("timing", RunOutcome::not_gradable)};
  const Verdict v = judge_chapter(chapter(), runs);
  CHECK(v.state == ChapterState::not_gradable);
  CHECK_FALSE(v.gradable);
  CHECK_FALSE(v.complete);
  const json s = score(runs);
  CHECK(s["score"] == 0);
  CHECK(s["kinds"][0]["status"] == "not_gradable");

  ChapterRuns timing_only;
  timing_only.runs = {completed("correctness", {{"a", "passed"}}), completed("timing", {{"t", "skipped"}})};
  const Verdict t = judge_chapter(chapter(), timing_only);
  CHECK(t.state == ChapterState::passing_correctness);
  CHECK_FALSE(t.gradable);
  CHECK_FALSE(t.complete);
}

TEST_CASE("sanitizer errors cost the configured fraction of correctness points") {
  ChapterRuns runs;
  runs.runs = {completed("correctness", {{"a", "passed"}}), completed("timing", {{"t", "passed"}})};
  const Rubric r = rubric(R"(,"sanitizer":{"penalty":0.5})");
  const Chapter c = chapter();
  const json san = json::array({{{"tool", "racecheck"}, {"ran", true}, {"errors", 2}}});
  const json s = score_chapter(c, runs, judge_chapter(c, runs), r, san);
  CHECK(s["score"] == 7);
}

TEST_CASE("fixture expectations: met, not met, and not checkable without a GPU") {
  const json report = json::parse(R"({
    "status": "graded", "score": 0, "max_score": 10,
    "submission": {"ignored": ["tests/x.cu: modified, ignored"]},
    "chapters": [{"id": "07", "state": "failing", "reason": "timeout", "gradable": true,
                  "message": "did not finish within 60 s", "score": 0, "flags": []}]})");
  std::vector<std::string> skipped;
  auto check = [&](const json& report_, const char* expected) {
    return check_expectations(report_, json::parse(expected), skipped);
  };
  CHECK(check(report, R"({"chapters": {"07": {"state": "failing", "reason": ["timeout", "crashed"], "message": "within"}}})").empty());
  CHECK(check(report, R"({"ignored": "tests/x"})").empty());
  CHECK(check(report, R"({"chapters": {"07": {"reason": "crashed"}}})").size() == 1);
  CHECK(check(report, R"({"chapters": {"*": {"max_score": 0}}})").empty());
  CHECK(check(report, R"({"chapters": {"07": {"flag": "test_channel"}}})").size() == 1);
  CHECK(check(report, R"({"chapters": {"07": {"max_scor": 0}}})").size() == 1);  // a typo checks nothing
  json cpu = report;
  cpu["chapters"][0]["state"] = "not_gradable";
  cpu["chapters"][0]["gradable"] = false;
  skipped.clear();
  CHECK(check(cpu, R"({"chapters": {"07": {"state": "failing"}}})").empty());
  CHECK(skipped.size() == 1);
}

TEST_CASE("fixture expectations: may_score names the only tests that may earn points") {
  const json report = json::parse(R"({
    "status": "graded", "score": 1.17, "max_score": 10,
    "chapters": [{"id": "04", "state": "failing", "reason": "out_of_memory", "gradable": true, "score": 1.17,
                  "kinds": [{"kind": "correctness", "tests": [
                    {"name": "fused softmax matches the double reference", "score": 0},
                    {"name": "unfused softmax matches the double reference", "score": 0.58},
                    {"name": "Unfused softmax: edge logits", "score": 0.59}]}]}]})");
  std::vector<std::string> skipped;
  CHECK(check_expectations(report, json::parse(R"({"chapters": {"04": {"may_score": "^unfused softmax"}}})"), skipped)
            .empty());
  json fused_scored = report;
  fused_scored["chapters"][0]["kinds"][0]["tests"][0]["score"] = 0.58;
  const auto problems =
      check_expectations(fused_scored, json::parse(R"({"chapters": {"04": {"may_score": "^unfused softmax"}}})"), skipped);
  REQUIRE(problems.size() == 1);
  CHECK(problems[0].find("'fused softmax matches the double reference' earned 0.58") != std::string::npos);
}

TEST_CASE("a test skipped for optional data is not counted; one skipped for lack of a GPU is") {
  ChapterRuns runs;
  TestRun correctness = completed("correctness", {{"a", "passed"}, {"b", "passed"}, {"needs data", "skipped"}});
  correctness.cases[2].notes = {"skipped: WB_DATA_DIR is not set; set it to a directory with stories260K.bin"};
  runs.runs = {correctness, completed("timing", {{"t", "passed"}})};
  const Verdict v = judge_chapter(chapter(), runs);
  CHECK(v.state == ChapterState::passing_timing);
  CHECK(v.gradable);
  const json s = score(runs);
  CHECK(s["score"] == 10);
  CHECK(s["kinds"][0]["tests"][2]["max_score"] == 0);

  runs.runs[0].cases[2].notes = {"skipped: no CUDA device"};
  CHECK_FALSE(judge_chapter(chapter(), runs).gradable);
}
