// Archives: every member checked before anything is written; only regular files extracted.
#include <doctest/doctest.h>

#include "grader/archive.hpp"
#include "grader/process.hpp"
#include "grader/util.hpp"
#include "test_common.hpp"

using namespace wb::grader;
using grader_test::TarMember;
using grader_test::TempDir;

namespace {
fs::path make_tar(const TempDir& dir, const std::string& name, const std::vector<TarMember>& members) {
  const fs::path p = dir / name;
  grader_test::write(p, grader_test::tar_archive(members));
  return p;
}

// Nothing may appear outside the extraction directory: compare a listing of the parent.
std::size_t entries_in(const fs::path& dir) {
  std::size_t n = 0;
  for (auto it = fs::recursive_directory_iterator(dir); it != fs::recursive_directory_iterator(); ++it) ++n;
  return n;
}
}  // namespace

TEST_CASE("archive names: which files count as archives, and the student name") {
  CHECK(is_archive_path("alice.zip"));
  CHECK(is_archive_path("alice.TAR.GZ"));
  CHECK(is_archive_path("a.tgz"));
  CHECK_FALSE(is_archive_path("alice.cu"));
  CHECK(archive_stem("alice.tar.gz") == "alice");
  CHECK(archive_stem("bob.smith.zip") == "bob.smith");
}

TEST_CASE("member names: absolute, '..' and control characters are refused; backslashes separate") {
  CHECK_NOTHROW(check_member_name("chapters/04_fused_softmax/softmax_fused.cu", "a.tar"));
  CHECK_NOTHROW(check_member_name("a..b/c", "a.tar"));
  CHECK_THROWS_AS(check_member_name("/etc/passwd", "a.tar"), InputError);
  CHECK_THROWS_AS(check_member_name("x/../../y", "a.tar"), InputError);
  CHECK_THROWS_AS(check_member_name("..", "a.tar"), InputError);
  CHECK_THROWS_AS(check_member_name("..\\x", "a.tar"), InputError);
  CHECK_THROWS_AS(check_member_name("a\\..\\..\\x", "a.zip"), InputError);
  CHECK_THROWS_AS(check_member_name("\\etc\\passwd", "a.zip"), InputError);
  CHECK_THROWS_AS(check_member_name("C:\\Users\\x.cu", "a.zip"), InputError);
  CHECK_NOTHROW(check_member_name("chapters\\04_x\\a.cu", "a.zip"));  // PowerShell's Compress-Archive
  CHECK_THROWS_AS(check_member_name("a\nb", "a.tar"), InputError);
}

TEST_CASE("a member lands at its name without '.' and empty components") {
  CHECK(member_path("chapters/04_x/a.cu") == "chapters/04_x/a.cu");
  CHECK(member_path("./chapters//04_x/./a.cu") == "chapters/04_x/a.cu");
  CHECK(member_path("dir/") == "dir");
  CHECK(member_path("./") == "");
  CHECK(member_path(".") == "");
  CHECK(member_path("a..b/.c") == "a..b/.c");  // dots inside a name are part of it
  CHECK(member_path("chapters\\04_x\\a.cu") == "chapters/04_x/a.cu");
}

TEST_CASE("the listing names every member with its type; links are recognised") {
  TempDir dir;
  const fs::path tar = make_tar(dir, "l.tar",
                                {{"a/", "", '5'},
                                 {"a/04_x/f.cu", "abc"},
                                 {"a/link", "", '2', "/etc/passwd"},
                                 {"a/hard", "", '1', "a/04_x/f.cu"},
                                 {" name with a leading space", "twelve bytes"}});
  const auto members = list_archive(tar, {});
  REQUIRE(members.size() == 5);
  CHECK(members[0].type == 'd');
  CHECK(members[1].name == "a/04_x/f.cu");
  CHECK(members[1].size == 3);
  CHECK(members[2].type == 'l');
  CHECK(members[2].name == "a/link");
  CHECK(members[3].type == 'h');
  CHECK(members[3].name == "a/hard");
  CHECK(members[4].name == " name with a leading space");
}

TEST_CASE("a file that is no archive is 'not a valid zip or tar archive', in those words") {
  TempDir dir;
  grader_test::write(dir / "junk.zip", "this is not an archive at all, just some text");
  try {
    list_archive(dir / "junk.zip", {});
    FAIL("expected the archive to be refused");
  } catch (const InputError& e) {
    const std::string what = e.what();
    CHECK(what.find("not a valid zip or tar archive") != std::string::npos);
    CHECK(what.find("CMake") == std::string::npos);
  }
}

TEST_CASE("too many members: refused before anything is written") {
  TempDir dir;
  ArchiveLimits limits;
  limits.members = 2;
  const fs::path tar = make_tar(dir, "many.tar", {{"a.cu", "1"}, {"b.cu", "2"}, {"c.cu", "3"}});
  CHECK_THROWS_AS(extract_archive(tar, dir / "out", limits), InputError);
  CHECK_FALSE(fs::exists(dir / "out/a.cu"));
}

TEST_CASE("a clean archive extracts its regular files only") {
  TempDir dir;
  const fs::path tar = make_tar(dir, "alice.tar",
                                {{"work/", "", '5'},
                                 {"work/chapters/04_x/a.cu", "kernel code\n"},
                                 {"work/link.cu", "", '2', "/etc/passwd"},
                                 {"work/notes.txt", "hello"}});
  const ExtractResult r = extract_archive(tar, dir / "out", {});
  CHECK(r.extracted.size() == 2);
  CHECK(grader_test::read(dir / "out/work/chapters/04_x/a.cu") == "kernel code\n");
  CHECK_FALSE(fs::exists(fs::symlink_status(dir / "out/work/link.cu")));
  REQUIRE(r.skipped.size() == 1);
  CHECK(r.skipped[0].first == "work/link.cu");
  CHECK(r.skipped[0].second.find("link") != std::string::npos);
}

TEST_CASE("an archive with an absolute or '..' member is refused and nothing is written") {
  TempDir dir;
  const fs::path evil_abs = make_tar(dir, "abs.tar", {{"ok.cu", "x"}, {"/tmp/wb-grader-evil.cu", "evil"}});
  const fs::path evil_dot = make_tar(dir, "dot.tar", {{"ok.cu", "x"}, {"a/../../evil.cu", "evil"}});
  const std::size_t before = entries_in(dir.path());
  for (const fs::path& a : {evil_abs, evil_dot}) {
    try {
      extract_archive(a, dir / "out", {});
      FAIL("expected the archive to be refused");
    } catch (const InputError& e) {
      CHECK(std::string(e.what()).find("nothing was extracted") != std::string::npos);
    }
  }
  CHECK(entries_in(dir.path()) == before);
  CHECK_FALSE(fs::exists("/tmp/wb-grader-evil.cu"));
  CHECK_FALSE(fs::exists(dir.path().parent_path() / "evil.cu"));
}

TEST_CASE("oversized members are skipped, oversized or empty archives refused") {
  TempDir dir;
  ArchiveLimits limits;
  limits.member_bytes = 1024;
  const fs::path tar = make_tar(dir, "big.tar", {{"small.cu", "x"}, {"big.cu", std::string(4096, 'y')}});
  const ExtractResult r = extract_archive(tar, dir / "out", limits);
  CHECK(r.extracted == std::vector<std::string>{"small.cu"});
  REQUIRE(r.skipped.size() == 1);
  CHECK(r.skipped[0].second.find("too large") != std::string::npos);

  limits.archive_bytes = 100;
  CHECK_THROWS_AS(list_archive(tar, limits), InputError);
  grader_test::write(dir / "empty.zip", "");
  CHECK_THROWS_AS(list_archive(dir / "empty.zip", {}), InputError);
  grader_test::write(dir / "junk.tar.gz", "this is not an archive at all");
  CHECK_THROWS_AS(list_archive(dir / "junk.tar.gz", {}), InputError);
}

TEST_CASE("zip archives made by the usual tools extract too") {
  TempDir dir;
  grader_test::write(dir / "src/04_x/a.cu", "zip content\n");
  ProcessSpec spec;
  spec.argv = {find_program("cmake").string(), "-E", "tar", "cf", (dir / "s.zip").string(), "--format=zip", "04_x"};
  spec.env = make_environment({}, {"PATH"});
  spec.cwd = dir / "src";
  REQUIRE(run_process(spec).ok());
  const ExtractResult r = extract_archive(dir / "s.zip", dir / "out", {});
  CHECK(grader_test::read(dir / "out/04_x/a.cu") == "zip content\n");
}

TEST_CASE("a path held twice is extracted once, from its last copy; the earlier copy is not 'skipped'") {
  TempDir dir;
  // A copy appended by `tar -rf`, and the same file spelled "./a.cu" and "a.cu".
  const fs::path tar = make_tar(dir, "twice.tar",
                                {{"./", "", '5'},
                                 {"./04_x/a.cu", "old\n"},
                                 {"04_x//b.cu", "b1\n"},
                                 {"04_x/a.cu", "new\n"},
                                 {"./04_x/./b.cu", "b2\n"},
                                 {"04_x/a.cu", "newest\n"}});
  const ExtractResult r = extract_archive(tar, dir / "out", {});
  CHECK(r.extracted == std::vector<std::string>{"04_x/a.cu", "04_x/b.cu"});
  CHECK(grader_test::read(dir / "out/04_x/a.cu") == "newest\n");
  CHECK(grader_test::read(dir / "out/04_x/b.cu") == "b2\n");
  CHECK(r.replaced == std::vector<std::string>{"04_x/a.cu", "04_x/b.cu"});
  CHECK(r.skipped.empty());

  // The last copy decides: a file replaced by a link is not extracted at all.
  const fs::path relinked = make_tar(dir, "relinked.tar", {{"a.cu", "mine"}, {"a.cu", "", '2', "/etc/passwd"}});
  const ExtractResult l = extract_archive(relinked, dir / "out2", {});
  CHECK(l.extracted.empty());
  REQUIRE(l.skipped.size() == 1);
  CHECK(l.skipped[0].second.find("link") != std::string::npos);
  CHECK(l.replaced == std::vector<std::string>{"a.cu"});
}

TEST_CASE("a file where another member needs a directory refuses the archive, naming both") {
  TempDir dir;
  const fs::path tar = make_tar(dir, "clash.tar", {{"04_x/a.cu", "x"}, {"04_x", "I am a file"}});
  const std::size_t before = entries_in(dir.path());
  try {
    extract_archive(tar, dir / "out", {});
    FAIL("expected the archive to be refused");
  } catch (const InputError& e) {
    const std::string what = e.what();
    CHECK(what.find("'04_x' as a file and '04_x/a.cu' inside it") != std::string::npos);
    CHECK(what.find("nothing was extracted") != std::string::npos);
  }
  CHECK(entries_in(dir.path()) == before);

  const fs::path dot = make_tar(dir, "dot.tar", {{".", "a file named ."}});
  CHECK_THROWS_WITH_AS(list_archive(dot, {}), doctest::Contains("names no file"), InputError);
}

TEST_CASE("an archive written with backslashes (Windows tools) extracts into directories") {
  TempDir dir;
  const fs::path tar = make_tar(dir, "win.tar", {{"chapters\\04_x\\a.cu", "from Windows\n"}});
  const ExtractResult r = extract_archive(tar, dir / "out", {});
  CHECK(r.extracted == std::vector<std::string>{"chapters/04_x/a.cu"});
  CHECK(grader_test::read(dir / "out/chapters/04_x/a.cu") == "from Windows\n");
}
