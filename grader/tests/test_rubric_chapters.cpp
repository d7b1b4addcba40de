// Chapter manifests and the rubric: discovered, validated, and consistent with the tests.
#include <doctest/doctest.h>

#include <regex>
#include <set>

#include "grader/chapters.hpp"
#include "grader/rubric.hpp"
#include "grader/util.hpp"
#include "wb/rubric.hpp"
#include "test_common.hpp"

using namespace wb::grader;
using grader_test::TempDir;
using grader_test::write;

TEST_CASE("the workbook's own chapters are discovered, correctness first") {
  const auto chapters = discover_chapters(WB_SOURCE_DIR);
  REQUIRE_FALSE(chapters.empty());
  std::set<std::string> ids;
  for (const auto& c : chapters) {
    CAPTURE(c.slug);
    CHECK(ids.insert(c.id).second);
    CHECK_FALSE(c.editable.empty());
    REQUIRE_FALSE(c.kinds().empty());
    if (c.test_of_kind("correctness")) CHECK(c.kinds().front() == "correctness");
    for (const auto& f : c.editable) CHECK(fs::exists(fs::path(WB_SOURCE_DIR) / "chapters" / c.slug / f));
    CHECK(c.binary("correctness") == "test_" + c.id + "_correctness_student");
  }
}

TEST_CASE("chapters are found by id, number, slug or name; unknown ones listed") {
  const auto chapters = discover_chapters(WB_SOURCE_DIR);
  const Chapter& first = chapters.front();
  CHECK(find_chapter(chapters, first.id).slug == first.slug);
  CHECK(find_chapter(chapters, first.slug).id == first.id);
  CHECK(find_chapter(chapters, std::to_string(std::stoi(first.id))).id == first.id);
  CHECK(find_chapter(chapters, first.slug.substr(first.id.size() + 1)).id == first.id);
  CHECK_THROWS_WITH_AS(find_chapter(chapters, "99_nope"), doctest::Contains(first.slug.c_str()), InputError);
  CHECK(select_chapters(chapters, {}).size() == chapters.size());
  CHECK(select_chapters(chapters, {first.id + "," + first.id}).size() == 1);
}

TEST_CASE("bad manifests are refused with the file and the field") {
  TempDir dir;
  auto manifest = [&](const std::string& text) {
    write(dir / "tests/07_x/chapter.json", text);
    return dir / "tests/07_x/chapter.json";
  };
  CHECK_THROWS_WITH_AS(parse_chapter_manifest(manifest(R"({"id":"07","slug":"07_x","tests":[{"file":"t.cu","kind":"correctness"}]})")),
                       doctest::Contains("editable"), InputError);
  CHECK_THROWS_WITH_AS(parse_chapter_manifest(manifest(R"({"id":"07","slug":"07_x","editable":["../../x.cu"],"tests":[{"file":"t.cu","kind":"correctness"}]})")),
                       doctest::Contains("plain relative"), InputError);
  CHECK_THROWS_WITH_AS(parse_chapter_manifest(manifest(R"({"id":"07","slug":"08_x","editable":["a.cu"],"tests":[{"file":"t.cu","kind":"correctness"}]})")),
                       doctest::Contains("must start with the id"), InputError);
  CHECK_THROWS_WITH_AS(parse_chapter_manifest(manifest(R"({"id":"07","slug":"07_x","editable":["a.cu"],"tests":[{"file":"t.cu","kind":"my_kind"}]})")),
                       doctest::Contains("kind"), InputError);
  CHECK_THROWS_AS(parse_chapter_manifest(manifest("{not json")), InputError);
}

TEST_CASE("the shipped rubric loads, and its pass marks match what the timing tests record") {
  const Rubric r = load_rubric(fs::path(WB_SOURCE_DIR) / "data/rubric.json");
  const auto chapters = discover_chapters(WB_SOURCE_DIR);
  for (const auto& c : chapters) {
    CAPTURE(c.slug);
    CHECK(r.max_points(c) > 0);
    const auto& marks = r.for_chapter(c.id).pass_marks;
    if (marks.empty()) continue;
    // The test names and record_metric(...) literals of the chapter's tests.
    std::vector<std::string> names, metric_literals;
    for (const auto& t : c.tests) {
      const std::string src = read_text_file(fs::path(WB_SOURCE_DIR) / "tests" / c.slug / t.file);
      static const std::regex test_re(R"(TEST_CASE\(\s*"([^"]*)\")");
      static const std::regex metric_re(R"(record_metric\(([^;]*))");
      static const std::regex literal_re(R"xx("([^"]*)")xx");
      for (auto it = std::sregex_iterator(src.begin(), src.end(), test_re); it != std::sregex_iterator(); ++it)
        names.push_back((*it)[1]);
      for (auto it = std::sregex_iterator(src.begin(), src.end(), metric_re); it != std::sregex_iterator(); ++it) {
        const std::string args = (*it)[1];
        for (auto l = std::sregex_iterator(args.begin(), args.end(), literal_re); l != std::sregex_iterator(); ++l)
          metric_literals.push_back((*l)[1]);
      }
    }
    for (const auto& m : marks) {
      CAPTURE(m.test);
      CAPTURE(m.metric);
      bool test_found = false, metric_found = false;
      for (const auto& n : names) test_found = test_found || m.applies_to(n);
      for (const auto& l : metric_literals) metric_found = metric_found || (!l.empty() && ends_with(m.metric, l));
      CHECK_MESSAGE(test_found, "no test of chapter " << c.id << " matches the pass mark's test pattern");
      CHECK_MESSAGE(metric_found, "no test of chapter " << c.id << " records the pass mark's metric");
    }
  }
}

TEST_CASE("rubric: defaults, per-chapter overrides, weights and marks") {
  const nlohmann::json doc = nlohmann::json::parse(R"({
    "schema": "workbook-rubric/1",
    "defaults": {"points": {"correctness": 6, "timing": 4}, "weights": {"*slow*": 0.5}},
    "chapters": {"04": {"points": {"timing": 2}, "weights": {"*big*": 3},
                        "timeout_s": {"correctness": 60},
                        "pass_marks": [{"test": "fused*", "metric": "speedup", "min": 2}]}},
    "limits": {"build_timeout_s": 100}
  })");
  const Rubric r = parse_rubric(doc, "test");
  CHECK(r.points("04", "correctness") == 6);
  CHECK(r.points("04", "timing") == 2);
  CHECK(r.points("05", "timing") == 4);
  CHECK(r.points("05", "other") == 0);
  CHECK(r.weight("04", "a big slow test") == 3);   // the chapter's own weights first
  CHECK(r.weight("05", "a slow test") == 0.5);
  CHECK(r.weight("05", "plain") == 1);
  ChapterTest t{"t.cu", "correctness", true, 600};
  CHECK(r.timeout_s("04", t) == 60);
  CHECK(r.timeout_s("05", t) == 600);
  REQUIRE(r.for_chapter("04").pass_marks.size() == 1);
  CHECK(r.for_chapter("04").pass_marks[0].describe() == ">= 2");
  CHECK(r.limits.build_timeout_s == 100);
  CHECK(parse_rubric(doc, "x").digest == r.digest);
}

TEST_CASE("rubric mistakes are clear errors") {
  auto bad = [](const std::string& text) { return parse_rubric(nlohmann::json::parse(text), "r.json"); };
  CHECK_THROWS_WITH_AS(bad(R"({"schema":"workbook-rubric/1","chapterz":{}})"), doctest::Contains("unknown key \"chapterz\""), InputError);
  CHECK_THROWS_WITH_AS(bad(R"({"schema":"nope"})"), doctest::Contains("schema"), InputError);
  CHECK_THROWS_WITH_AS(bad(R"({"schema":"workbook-rubric/1","defaults":{"points":{"correctness":-1}}})"),
                       doctest::Contains("defaults.points.correctness"), InputError);
  CHECK_THROWS_WITH_AS(bad(R"({"schema":"workbook-rubric/1","chapters":{"04":{"pass_marks":[{"metric":"x"}]}}})"),
                       doctest::Contains("min"), InputError);
  CHECK_THROWS_WITH_AS(bad(R"({"schema":"workbook-rubric/1","sanitizer":{"penalty":2}})"), doctest::Contains("fraction"), InputError);
  CHECK_THROWS_WITH_AS(bad(R"({"schema":"workbook-rubric/1","sanitizer":{"jobs":2.5}})"), doctest::Contains("sanitizer.jobs"), InputError);
  CHECK(bad(R"({"schema":"workbook-rubric/1","sanitizer":{"jobs":4}})").sanitizer_jobs == 4);
  TempDir dir;
  write(dir / "r.json", "{ \"schema\": ");
  CHECK_THROWS_WITH_AS(load_rubric(dir / "r.json"), doctest::Contains("not valid JSON"), InputError);
  CHECK_THROWS_WITH_AS(load_rubric(dir / "missing.json"), doctest::Contains("not found"), InputError);
}

// One source for a chapter's timing marks: the tests read data/rubric.json through
// wb::pass_mark, the grader through load_rubric; both must see the same numbers.
TEST_CASE("wb::pass_mark reads the marks the grader's rubric has, and says where a mark is missing") {
  const Rubric rubric = load_rubric(fs::path(WB_SOURCE_DIR) / "data/rubric.json");
  int checked = 0;
  for (const auto& [id, chapter] : rubric.chapters)
    for (const auto& mark : chapter.pass_marks) {
      CAPTURE(id);
      CAPTURE(mark.metric);
      if (mark.min) CHECK(wb::pass_mark(id, mark.metric) == *mark.min);
      if (mark.max) CHECK(wb::pass_mark(id, mark.metric, "max") == *mark.max);
      ++checked;
    }
  CHECK(checked > 0);
  try {
    wb::pass_mark("04", "no_such_metric");
    FAIL("expected an error");
  } catch (const std::runtime_error& e) {
    CHECK(std::string(e.what()).find("rubric.json") != std::string::npos);
    CHECK(std::string(e.what()).find("no_such_metric") != std::string::npos);
  }
  TempDir dir;
  write(dir / "r.json", R"({"chapters": {"04": {"pass_marks": [{"metric": "speedup_vs_unfused", "min": 9.5}]}}})");
  ::setenv("WB_RUBRIC", (dir / "r.json").c_str(), 1);
  CHECK(wb::pass_mark("04", "speedup_vs_unfused") == 9.5);
  ::setenv("WB_RUBRIC", (dir / "missing.json").c_str(), 1);
  CHECK_THROWS_WITH_AS(wb::pass_mark("04", "speedup_vs_unfused"), doctest::Contains("cannot read the rubric"),
                       std::runtime_error);
  ::unsetenv("WB_RUBRIC");
}
