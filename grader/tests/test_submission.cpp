// Taking a submission apart: only editable files, from any reasonable layout, checked.
#include <doctest/doctest.h>

#include <algorithm>

#include "grader/chapters.hpp"
#include "grader/grade.hpp"
#include "grader/submission.hpp"
#include "grader/util.hpp"
#include "test_common.hpp"

using namespace wb::grader;
using grader_test::TempDir;
using grader_test::write;

namespace {

// A two-chapter workbook in miniature.
struct MiniWorkbook {
  TempDir dir;
  std::vector<Chapter> chapters;
  SourceTrees trees;
  MiniWorkbook() {
    write(dir / "pristine/chapters/07_x/api.cuh", "#pragma once\nvoid k();\n");
    write(dir / "pristine/chapters/07_x/k.cu", "#include \"api.cuh\"\nvoid k() { /* TODO */ }\n");
    write(dir / "pristine/tests/07_x/reference.hpp", "#pragma once\nvoid reference();\n");
    write(dir / "pristine/tests/07_x/test_correctness.cu", "// the real test\n");
    write(dir / "pristine/tests/07_x/chapter.json",
          R"({"id": "07", "slug": "07_x", "title": "X", "editable": ["k.cu"],
              "tests": [{"file": "test_correctness.cu", "kind": "correctness"}]})");
    write(dir / "pristine/chapters/08_y/y.cu", "void y() {}\n");
    write(dir / "pristine/tests/08_y/chapter.json",
          R"({"id": "08", "slug": "08_y", "title": "Y", "editable": ["y.cu"],
              "tests": [{"file": "t.cu", "kind": "correctness"}]})");
    write(dir / "solutions/07_x/k.cu", "#include \"api.cuh\"\n// the reference\nvoid k() { launch(); }\n");
    chapters = discover_chapters(dir / "pristine");
    trees = {dir / "pristine", dir / "solutions"};
  }
  PreparedSubmission prepare(const fs::path& sub, GradingLimits limits = {}) {
    fs::remove_all(dir / "work");
    return prepare_submission(sub, chapters, trees, dir / "work", limits);
  }
};

bool any_contains(const std::vector<std::string>& v, const std::string& needle) {
  return std::any_of(v.begin(), v.end(), [&](const std::string& s) { return s.find(needle) != std::string::npos; });
}

}  // namespace

TEST_CASE("a copy of the workbook: editable files taken, edited tests ignored and said so") {
  MiniWorkbook wb;
  const fs::path sub = wb.dir / "alice";
  write(sub / "chapters/07_x/k.cu", "#include \"api.cuh\"\nvoid k() { work(); }\n");
  write(sub / "chapters/07_x/api.cuh", "#pragma once\nvoid k(); // edited\n");
  write(sub / "tests/07_x/test_correctness.cu", "TEST_CASE(\"always passes\") {}\n");
  write(sub / "solutions/07_x/k.cu", "the reference, copied\n");
  const PreparedSubmission s = wb.prepare(sub);
  CHECK(s.layout == Layout::workbook);
  CHECK(s.prefix == "");
  const auto& c7 = s.chapters.at("07");
  CHECK(c7.present);
  CHECK(c7.taken == std::vector<std::string>{"k.cu"});
  CHECK(c7.reject_reason.empty());
  CHECK_FALSE(c7.unchanged_starter);
  CHECK(grader_test::read(s.student_root / "07_x/k.cu") == "#include \"api.cuh\"\nvoid k() { work(); }\n");
  CHECK_FALSE(fs::exists(s.student_root / "07_x/api.cuh"));  // headers never taken
  CHECK(any_contains(s.ignored, "tests/07_x/test_correctness.cu: modified, ignored"));
  CHECK(any_contains(s.ignored, "chapters/07_x/api.cuh: modified, ignored"));
  CHECK(any_contains(s.notes, "solutions/"));
  CHECK_FALSE(s.chapters.at("08").present);
}

TEST_CASE("just the chapters, with or without a wrapping directory") {
  MiniWorkbook wb;
  write(wb.dir / "bob/07_x/k.cu", "void k() { 1; }\n");
  PreparedSubmission s = wb.prepare(wb.dir / "bob");
  CHECK(s.layout == Layout::chapters);
  CHECK(s.chapters.at("07").taken.size() == 1);

  write(wb.dir / "carol/carol-workbook/chapters/07_x/k.cu", "void k() { 2; }\n");
  write(wb.dir / "carol/carol-workbook/chapters/08_y/y.cu", "void y() { 3; }\n");
  s = wb.prepare(wb.dir / "carol");
  CHECK(s.layout == Layout::workbook);
  CHECK(s.prefix == "carol-workbook/");
  CHECK(s.chapters.at("08").taken.size() == 1);
}

TEST_CASE("files under solutions/ are never taken") {
  MiniWorkbook wb;
  write(wb.dir / "dave/solutions/07_x/k.cu", "copied reference\n");
  CHECK_THROWS_AS(wb.prepare(wb.dir / "dave"), InputError);
}

TEST_CASE("missing, empty and unrecognisable submissions are clear errors") {
  MiniWorkbook wb;
  CHECK_THROWS_WITH_AS(wb.prepare(wb.dir / "nobody"), doctest::Contains("not found"), InputError);
  fs::create_directories(wb.dir / "empty");
  CHECK_THROWS_WITH_AS(wb.prepare(wb.dir / "empty"), doctest::Contains("empty"), InputError);
  write(wb.dir / "random/notes.txt", "hello");
  CHECK_THROWS_WITH_AS(wb.prepare(wb.dir / "random"), doctest::Contains("chapters/07_x/k.cu"), InputError);
  write(wb.dir / "file.cu", "x");
  CHECK_THROWS_WITH_AS(wb.prepare(wb.dir / "file.cu"), doctest::Contains("not an archive"), InputError);
}

TEST_CASE("an editable file that is a link, too large or binary costs its chapter only") {
  MiniWorkbook wb;
  write(wb.dir / "eve/chapters/08_y/y.cu", "void y() {}\n");
  fs::create_directories(wb.dir / "eve/chapters/07_x");
  fs::create_symlink(wb.dir / "solutions/07_x/k.cu", wb.dir / "eve/chapters/07_x/k.cu");
  PreparedSubmission s = wb.prepare(wb.dir / "eve");
  CHECK(s.chapters.at("07").reject_reason == "bad_file");
  CHECK(s.chapters.at("07").reject_detail.find("symbolic link") != std::string::npos);
  CHECK(s.chapters.at("08").reject_reason.empty());

  write(wb.dir / "frank/chapters/07_x/k.cu", std::string(3000, 'x'));
  GradingLimits small;
  small.editable_file_kb = 1;
  s = wb.prepare(wb.dir / "frank", small);
  CHECK(s.chapters.at("07").reject_reason == "bad_file");
  CHECK(s.chapters.at("07").reject_detail.find("KB") != std::string::npos);

  write(wb.dir / "gina/chapters/07_x/k.cu", std::string("bin\0ary", 7));
  s = wb.prepare(wb.dir / "gina");
  CHECK(s.chapters.at("07").reject_detail.find("not a text file") != std::string::npos);
}

TEST_CASE("including the tests' reference rejects the chapter; the starter and the reference are noticed") {
  MiniWorkbook wb;
  write(wb.dir / "hal/chapters/07_x/k.cu", "#include \"reference.hpp\"\nvoid k() { reference(); }\n");
  PreparedSubmission s = wb.prepare(wb.dir / "hal");
  CHECK(s.chapters.at("07").reject_reason == "calls_reference");

  write(wb.dir / "ivy/chapters/07_x/k.cu", "#include \"api.cuh\"\n  void k() {   /* mine */ }\n");
  s = wb.prepare(wb.dir / "ivy");
  CHECK(s.chapters.at("07").unchanged_starter);

  write(wb.dir / "jo/07_x/k.cu", "#include \"api.cuh\"\nvoid k() { launch(); }  // copied\n");
  s = wb.prepare(wb.dir / "jo");
  const auto& flags = s.chapters.at("07").flags;
  CHECK(std::any_of(flags.begin(), flags.end(), [](const Flag& f) { return f.code == "same_as_reference"; }));
  CHECK(s.chapters.at("07").reject_reason.empty());  // a note, not a verdict
}

TEST_CASE("an archive submission goes through the same checks") {
  MiniWorkbook wb;
  write(wb.dir / "kim.tar", grader_test::tar_archive({{"kim/chapters/07_x/k.cu", "void k() { 7; }\n"},
                                                       {"kim/tests/07_x/test_correctness.cu", "forged\n"}}));
  const PreparedSubmission s = wb.prepare(wb.dir / "kim.tar");
  CHECK(s.archive);
  CHECK(s.chapters.at("07").taken.size() == 1);
  CHECK(any_contains(s.ignored, "test_correctness.cu: modified"));
}

TEST_CASE("an archive that holds a file twice is graded on its last copy, as tar extracts it") {
  MiniWorkbook wb;
  // `tar -rf kim.tar chapters/07_x/k.cu` after an edit appends the new copy; "./" is how
  // `tar -cf kim.tar .` names every member.
  write(wb.dir / "kim.tar", grader_test::tar_archive({{"./chapters/07_x/k.cu", "void k() { 1; }\n"},
                                                       {"./chapters/08_y/y.cu", "void y() { 8; }\n"},
                                                       {"chapters/07_x/k.cu", "void k() { 2; }\n"}}));
  const PreparedSubmission s = wb.prepare(wb.dir / "kim.tar");
  CHECK(s.chapters.at("07").reject_reason.empty());
  CHECK(s.chapters.at("08").reject_reason.empty());
  CHECK(grader_test::read(s.student_root / "07_x/k.cu") == "void k() { 2; }\n");
  CHECK(grader_test::read(s.student_root / "08_y/y.cu") == "void y() { 8; }\n");
  CHECK(any_contains(s.ignored, "chapters/07_x/k.cu: held more than once in the archive; its last copy"));
}

TEST_CASE("scan_source: includes that reach outside, the test channel, and notes") {
  auto codes = [](const std::string& text) {
    std::vector<std::string> out;
    for (const auto& f : scan_source(text, "07", "k.cu", {"reference.hpp"})) out.push_back(f.code + ":" + to_string(f.severity));
    return out;
  };
  auto has = [](const std::vector<std::string>& v, const std::string& s) {
    return std::find(v.begin(), v.end(), s) != v.end();
  };
  CHECK(codes("#include <cuda_runtime.h>\n#include \"api.cuh\"\n#include \"wb/check.hpp\"\n").empty());
  CHECK(has(codes("#include \"../../solutions/07_x/k.cu\"\n"), "forbidden_include:reject"));
  CHECK(has(codes("#  include </work/main/solutions/07_x/k.cu>\n"), "forbidden_include:reject"));
  CHECK(has(codes("#define F \"x\"\n#include F\n"), "forbidden_include:reject"));
  CHECK(has(codes("#include \"reference.hpp\"\n"), "calls_reference:reject"));
  CHECK(has(codes("asm(\".incbin \\\"/etc/passwd\\\"\");\n"), "incbin:reject"));
  CHECK(has(codes("auto p = getenv(\"WB_TEST_REPORT\");\n"), "test_channel:reject"));
  CHECK(has(codes("#include \"wb/testing.hpp\"\n"), "test_harness:reject"));
  CHECK(has(codes("void f() { setsid(); }\n"), "process_group:reject"));
  // Opening the tests' namespaces: an inline "checker" there could win the link over theirs.
  CHECK(has(codes("namespace ch07::reference {\ninline bool close(float, float) { return true; }\n}\n"),
            "replaces_harness:reject"));
  CHECK(has(codes("namespace ch07 { namespace reference {\n"), "replaces_harness:reject"));
  CHECK(has(codes("namespace wb {\n"), "replaces_harness:reject"));
  CHECK(codes("namespace ch07 {\nnamespace {\nconstexpr int kReferenceThreads = 256;\n}\n}\n").empty());
  CHECK(has(codes("static int x = cuptiSubscribe(&subscriber, callback, nullptr);\n"), "instrumentation:reject"));
  CHECK(has(codes("void f() { exit(0); }\n"), "ends_process:warning"));
  CHECK(has(codes("std::thread t(work);\n"), "cpu_threads:warning"));
  // Comments do not count; strings do.
  CHECK(codes("// exit(0) would be wrong here; #include \"../x\"\n/* system( */\n").empty());
  CHECK(normalized_source("a  b // c\n/* d */ e") == "abe");
}

TEST_CASE("the student root is reused: unchanged files keep their time stamps, stale files go") {
  MiniWorkbook wb;
  write(wb.dir / "s1/chapters/07_x/k.cu", "void k() { 1; }\n");
  write(wb.dir / "s1/chapters/08_y/y.cu", "void y() { 1; }\n");
  write(wb.dir / "s2/chapters/07_x/k.cu", "void k() { 1; }\n");
  const fs::path work = wb.dir / "shared-work";
  PreparedSubmission a = prepare_submission(wb.dir / "s1", wb.chapters, wb.trees, work, {});
  const auto stamp = fs::last_write_time(a.student_root / "07_x/k.cu");
  CHECK(fs::exists(a.student_root / "08_y/y.cu"));
  PreparedSubmission b = prepare_submission(wb.dir / "s2", wb.chapters, wb.trees, work, {});
  CHECK(fs::last_write_time(b.student_root / "07_x/k.cu") == stamp);  // same content: the object stays valid
  CHECK_FALSE(fs::exists(b.student_root / "08_y/y.cu"));              // s2 has no chapter 08
  write(wb.dir / "s2/chapters/07_x/k.cu", "void k() { 2; }\n");
  PreparedSubmission c = prepare_submission(wb.dir / "s2", wb.chapters, wb.trees, work, {});
  CHECK(grader_test::read(c.student_root / "07_x/k.cu") == "void k() { 2; }\n");
}

TEST_CASE("a submission that cannot be read is refused before anything is made: no logs directory") {
  TempDir dir;
  GradeOptions o;
  o.source_dir = WB_SOURCE_DIR;
  o.gpu_tests = false;
  const auto chapters = discover_chapters(WB_SOURCE_DIR);
  const Workspace ws{dir / "tree", dir / "build", dir / "scratch"};
  CHECK_THROWS_AS(grade_submission(dir / "missing.zip", "x", chapters, o, ws, dir / "out/logs"), InputError);
  write(dir / "junk.zip", "this is not an archive");
  CHECK_THROWS_WITH_AS(grade_submission(dir / "junk.zip", "x", chapters, o, ws, dir / "out/logs"),
                       doctest::Contains("not a valid zip or tar archive"), InputError);
  CHECK_FALSE(fs::exists(dir / "out/logs"));
}
