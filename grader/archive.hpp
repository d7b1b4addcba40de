#pragma once
// Submissions packed as .zip or .tar(.gz|.bz2|.xz), read with libarchive (in process; it
// never writes anything itself). Every member is checked before anything is written: an
// absolute name or a ".." component rejects the whole archive; only regular files within the
// size limits are extracted (links, devices and oversized members are listed and skipped),
// into an empty directory, each file created here with O_EXCL|O_NOFOLLOW, its bytes counted
// as they are written (a member cannot be larger than it says), within a time limit. A path
// held twice ("./a.cu" and "a.cu", or a copy appended by `tar -rf`) counts as its last copy,
// as tar extracts it; a file where another member needs a directory refuses the archive.
// Anything else is "not a valid zip or tar archive".
#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

namespace wb::grader {

struct ArchiveMember {
  std::string name;        // the path it lands at: member_path of the name the archive writes
  char type = '?';         // '-' file, 'd' directory, 'l' symlink, 'h' hard link, others
  std::uint64_t size = 0;
};

struct ArchiveLimits {
  std::uint64_t archive_bytes = 512ull << 20;
  std::uint64_t member_bytes = 64ull << 20;
  std::uint64_t total_bytes = 512ull << 20;
  std::size_t members = 20000;
  double timeout_s = 300;
};

struct ExtractResult {
  std::vector<std::string> extracted;                        // regular files written
  std::vector<std::pair<std::string, std::string>> skipped;  // member, why
  std::vector<std::string> replaced;  // paths held more than once: their earlier copies were not extracted
};

bool is_archive_path(const std::filesystem::path& path);
// "alice.tar.gz" -> "alice"
std::string archive_stem(const std::filesystem::path& path);

// InputError for an absolute name ("/a", "C:\\a"), a ".." component or a control character.
// A backslash separates components, as Windows tools write names.
void check_member_name(const std::string& name, const std::string& archive);
// Where a checked member name lands: "./a//b/" -> "a/b" and "a\\b" -> "a/b" (no ".", no empty
// component), so "./a.cu" and "a.cu" are the same file; "." and "./" give "".
std::string member_path(const std::string& name);

std::vector<ArchiveMember> list_archive(const std::filesystem::path& archive, const ArchiveLimits& limits);
ExtractResult extract_archive(const std::filesystem::path& archive, const std::filesystem::path& dest,
                              const ArchiveLimits& limits);

}  // namespace wb::grader
