// What instructors and students read: report.md, Gradescope results.json, JUnit, the CSV.
#include <doctest/doctest.h>

#include "grader/grade.hpp"
#include "grader/report_writers.hpp"
#include "grader/util.hpp"
#include "test_common.hpp"

using namespace wb::grader;
using nlohmann::json;

namespace {

json sample_report() {
  return json::parse(R"({
    "schema": "workbook-grade-report/1", "student": "alice <script>", "status": "graded", "error": "",
    "graded_at": "2025-01-01T00:00:00Z", "seed": 77, "score": 13, "max_score": 20,
    "grader": {"device": "NVIDIA H200", "no_gpu_reason": ""},
    "submission": {"ignored": ["tests/04_x/test_correctness.cu: modified, ignored"], "notes": []},
    "chapters": [
      {"id": "04", "slug": "04_x", "title": "Fused & fast", "state": "passing_correctness", "label": "passing correctness",
       "reason": "too_slow", "message": "fused is 1.2x faster; the mark is 2x\nhint: read once", "hint": "read once",
       "test": "fused is 2x faster", "kind": "timing", "complete": false, "gradable": true, "score": 7, "max_score": 10,
       "flags": [{"severity": "warning", "file": "k.cu", "line": 3, "message": "reads environment variables"}],
       "sanitizer": [],
       "kinds": [
         {"kind": "correctness", "status": "scored", "score": 7, "max_score": 7,
          "tests": [{"name": "matches <the> reference", "status": "passed", "reason": "", "score": 7, "max_score": 7,
                     "message": "", "hint": "", "duration_s": 0.5, "pass_marks": []}]},
         {"kind": "timing", "status": "scored", "score": 0, "max_score": 3,
          "tests": [{"name": "fused is 2x faster", "status": "failed", "reason": "too_slow", "score": 0, "max_score": 3,
                     "message": "fused is 1.2x faster; the mark is 2x", "hint": "read once", "duration_s": 2,
                     "pass_marks": [{"metric": "speedup", "mark": ">= 2", "value": 1.2, "ok": false, "note": ""}]}]}]},
      {"id": "05", "slug": "05_y", "title": "Y", "state": "compile_error", "label": "compile error", "reason": "compile_error",
       "message": "05_y/g.cu(3): error: expected a \";\"", "hint": "fix the first error first", "test": "", "kind": "",
       "complete": false, "gradable": true, "score": 0, "max_score": 10, "flags": [], "sanitizer": [],
       "kinds": [{"kind": "correctness", "status": "not_run", "note": "compile error", "score": 0, "max_score": 7, "tests": []},
                 {"kind": "timing", "status": "not_run", "note": "compile error", "score": 0, "max_score": 3, "tests": []}]}
    ]})");
}

}  // namespace

TEST_CASE("report.md: score, table, first problem with hint, pass marks, ignored files") {
  const std::string md = render_markdown(sample_report());
  CHECK(md.find("**Score: 13 / 20**") != std::string::npos);
  CHECK(md.find("| 04 Fused & fast | passing correctness | 1/1 | 0/1 | 7 / 10 |") != std::string::npos);
  CHECK(md.find("below the timing pass mark") != std::string::npos);
  CHECK(md.find("**Hint:** read once") != std::string::npos);
  CHECK(md.find("| fused is 2x faster | speedup | 1.2 | >= 2 | **not met** |") != std::string::npos);
  CHECK(md.find("expected a \";\"") != std::string::npos);
  CHECK(md.find("test_correctness.cu: modified, ignored") != std::string::npos);
  CHECK(md.find("reads environment variables") != std::string::npos);
}

TEST_CASE("Gradescope results.json: a score, and tests with the required fields") {
  const json g = render_gradescope(sample_report(), "after_published");
  CHECK(g["score"] == 13);
  double max_total = 0;
  for (const auto& t : g["tests"]) {
    for (const char* key : {"name", "score", "max_score", "status", "output", "visibility"}) CHECK(t.contains(key));
    CHECK((t["status"] == "passed" || t["status"] == "failed"));
    CHECK(t["visibility"] == "after_published");
    max_total += t["max_score"].get<double>();
  }
  CHECK(max_total == 20);  // every point of the rubric appears once
  CHECK(g["tests"][0]["status"] == "passed");
  CHECK(g["tests"][1]["output"].get<std::string>().find("speedup = 1.2 (pass mark >= 2, not met)") != std::string::npos);
  CHECK(g["tests"][2]["output"].get<std::string>().find("expected a") != std::string::npos);
}

TEST_CASE("report.md lists the files filled in from the starter and does not show the hidden seed") {
  json r = sample_report();
  r["submission"]["filled_from_starter"] = {{"04", {"softmax_unfused.cu"}}};
  const std::string md = render_markdown(r);
  CHECK(md.find("## Files filled in from the starter") != std::string::npos);
  CHECK(md.find("- chapter 04: softmax_unfused.cu") != std::string::npos);
  CHECK(md.find("77") == std::string::npos);  // the seed of sample_report()
  CHECK(md.find("hidden seed") != std::string::npos);
}

TEST_CASE("Gradescope results.json: tests not gradable here are not called failed") {
  json r = sample_report();
  r["status"] = "incomplete";
  r["grader"]["no_gpu_reason"] = "no CUDA device on this machine";
  r["chapters"][0]["kinds"][1] = {{"kind", "timing"}, {"status", "not_gradable"}, {"score", 0}, {"max_score", 3},
                                  {"note", "no GPU"}, {"tests", json::array()}};
  const json g = render_gradescope(r, "visible");
  const json& t = g["tests"][1];
  CHECK(t["name"].get<std::string>().find("(not graded here)") != std::string::npos);
  CHECK_FALSE(t.contains("status"));  // Gradescope derives it from the score; the output says why
  CHECK(t["score"] == 0);
  CHECK(t["output"].get<std::string>().find("NOT GRADED") == 0);
  CHECK(t["output"].get<std::string>().find("no CUDA device on this machine") != std::string::npos);
}

TEST_CASE("JUnit XML: counts and escaping") {
  const std::string x = render_junit(sample_report());
  CHECK(x.find("<?xml version=\"1.0\" encoding=\"UTF-8\"?>") == 0);
  CHECK(x.find("name=\"workbook: alice &lt;script&gt;\"") != std::string::npos);
  CHECK(x.find("name=\"matches &lt;the&gt; reference\"") != std::string::npos);
  CHECK(x.find("tests=\"3\" failures=\"1\" errors=\"1\"") != std::string::npos);
  CHECK(x.find("<error type=\"compile_error\"") != std::string::npos);
  CHECK(x.find("<script>") == std::string::npos);
  CHECK(markup_escape(std::string("a\x01&\"'<>")) == "a\xEF\xBF\xBD&amp;&quot;&#39;&lt;&gt;");
}

TEST_CASE("gradebook CSV: one row per student, sorted, fields escaped, no formulas") {
  json a = sample_report();
  a["student"] = "=HYPERLINK(\"x\")";
  json b = sample_report();
  b["student"] = "bob, jr";
  json c = {{"student", "carl"}, {"status", "invalid"}, {"error", "submission carl is empty"}, {"score", 0},
            {"max_score", 20}, {"chapters", json::array()}};
  const std::string csv = render_gradebook_csv({b, c, a});
  const auto lines = split_lines(csv);
  REQUIRE(lines.size() == 4);
  CHECK(lines[0] == "student,04_x,05_y,total,max_score,status,notes");
  CHECK(lines[1].rfind("\"'=HYPERLINK(\"\"x\"\")\",7,0,13,20,graded,", 0) == 0);
  CHECK(lines[2].rfind("\"bob, jr\",7,0,13,20,graded", 0) == 0);
  CHECK(lines[3] == "carl,,,0,20,invalid,submission carl is empty");
  CHECK(lines[1].find("05 compile error") != std::string::npos);
}

TEST_CASE("write_reports writes the four files, report.json last") {
  grader_test::TempDir dir;
  write_reports(sample_report(), dir / "out", "visible");
  for (const char* f : {"report.json", "report.md", "results.json", "junit.xml"}) CHECK(fs::exists(dir / "out" / f));
  CHECK(read_json_file(dir / "out/report.json", "report")["student"] == "alice <script>");
  CHECK(read_json_file(dir / "out/results.json", "results")["tests"].size() == 4);
}
