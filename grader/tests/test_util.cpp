// Text and path helpers the reports depend on.
#include <doctest/doctest.h>

#include "grader/util.hpp"
#include "test_common.hpp"

using namespace wb::grader;

TEST_CASE("glob_match: * and ? as the rubric's test-name patterns use them") {
  CHECK(glob_match("*", ""));
  CHECK(glob_match("*", "anything at all"));
  CHECK(glob_match("fused softmax moves*", "fused softmax moves at least 60% of the copy bandwidth"));
  CHECK_FALSE(glob_match("fused softmax moves*", "unfused softmax moves"));
  CHECK(glob_match("*32000x4096*", "launch_matvec reads a 32000x4096 W at >= 50%"));
  CHECK(glob_match("a?c", "abc"));
  CHECK_FALSE(glob_match("a?c", "ac"));
  CHECK(glob_match("*a*b*c", "xxaxxbxxc"));
  CHECK_FALSE(glob_match("*a*b*c", "xxaxxcxxb"));
}

TEST_CASE("clip_text and tail_lines say what they cut") {
  const std::string text = "1\n2\n3\n4\n5\n6";
  CHECK(clip_text(text, 10, 1000) == text);
  const std::string clipped = clip_text(text, 2, 1000);
  CHECK(clipped.find("1\n2") == 0);
  CHECK(clipped.find("4 more line(s) cut") != std::string::npos);
  const std::string tail = tail_lines(text + "\n\n", 2);
  CHECK(tail.find("5\n6") != std::string::npos);
  CHECK(tail.find("4 earlier line(s) cut") != std::string::npos);
}

TEST_CASE("printable keeps text and UTF-8, replaces control bytes and broken sequences") {
  CHECK(printable("plain\ttext\n") == "plain\ttext\n");
  CHECK(printable("caf\xC3\xA9") == "caf\xC3\xA9");
  CHECK(printable(std::string("a\0b", 3)) == "a\xEF\xBF\xBD" "b");
  CHECK(printable("\x1b[31mred") == "\xEF\xBF\xBD[31mred");
  CHECK(printable("bad \xC3") == "bad \xEF\xBF\xBD");
}

TEST_CASE("safe_name makes any submission name a plain directory name") {
  CHECK(safe_name("alice") == "alice");
  CHECK(safe_name("Bob Smith (2)") == "Bob_Smith__2_");
  CHECK(safe_name("../../etc") == "_.._etc");
  CHECK(safe_name("..") == "_");
  CHECK(safe_name("") == "_");
  CHECK(safe_name(".hidden") == "hidden");
}

TEST_CASE("format_points prints what a gradebook should show") {
  CHECK(format_points(7) == "7");
  CHECK(format_points(7.5) == "7.5");
  CHECK(format_points(2.0 / 3.0) == "0.67");
  CHECK(format_points(0) == "0");
  CHECK(format_points(-0.0) == "0");
  CHECK(format_points(10.004) == "10");
}

TEST_CASE("path_inside is lexical and exact about components") {
  CHECK(path_inside("/a/b/c", "/a/b"));
  CHECK(path_inside("/a/b", "/a/b"));
  CHECK(path_inside("/a/b/../b/c", "/a/b/"));
  CHECK_FALSE(path_inside("/a/bc", "/a/b"));
  CHECK_FALSE(path_inside("/a/b/../c", "/a/b"));
}

TEST_CASE("read_json_file names the file and the line of a syntax error") {
  grader_test::TempDir dir;
  grader_test::write(dir / "bad.json", "{\n  \"a\": 1,\n  \"b\": ,\n}\n");
  try {
    read_json_file(dir / "bad.json", "rubric");
    FAIL("expected an InputError");
  } catch (const InputError& e) {
    const std::string m = e.what();
    CHECK(m.find("bad.json") != std::string::npos);
    CHECK(m.find("line 3") != std::string::npos);
  }
  CHECK_THROWS_AS(read_json_file(dir / "missing.json", "rubric"), InputError);
}

TEST_CASE("seeds: shell quoting and hex are what scripts and names need") {
  CHECK(shell_quote("it's") == "'it'\\''s'");
  CHECK(hex64(255) == "00000000000000ff");
  CHECK(random_hex(8).size() == 16);
  CHECK(random_hex(8) != random_hex(8));
}
