#include "grader/archive.hpp"

#include <archive.h>
#include <archive_entry.h>
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <map>
#include <set>

#include "grader/util.hpp"

namespace wb::grader {

bool is_archive_path(const fs::path& path) {
  const std::string n = to_lower(path.filename().string());
  for (const char* ext : {".zip", ".tar", ".tar.gz", ".tgz", ".tar.bz2", ".tbz2", ".tar.xz", ".txz"})
    if (ends_with(n, ext)) return true;
  return false;
}

std::string archive_stem(const fs::path& path) {
  const std::string n = path.filename().string();
  const std::string l = to_lower(n);
  for (const char* ext : {".tar.gz", ".tar.bz2", ".tar.xz", ".tgz", ".tbz2", ".txz", ".zip", ".tar"})
    if (ends_with(l, ext)) return n.substr(0, n.size() - std::string(ext).size());
  return n;
}

namespace {

// The components of a member name. A backslash separates them too: Windows tools (PowerShell's
// Compress-Archive among them) write "chapters\04_x\a.cu", and a student's file is not named
// with a backslash.
std::vector<std::string> name_components(const std::string& name) {
  std::vector<std::string> parts(1);
  for (char c : name) {
    if (c == '/' || c == '\\') parts.emplace_back();
    else parts.back() += c;
  }
  return parts;
}

// The error that refuses a whole archive for one of its members, before anything is written.
InputError refused(const std::string& archive, const std::string& member, const std::string& why) {
  return InputError("archive " + archive + " is refused: member '" + printable(member) + "' " + why +
                    "; nothing was extracted");
}

}  // namespace

void check_member_name(const std::string& name, const std::string& archive) {
  auto refuse = [&](const std::string& why) { throw refused(archive, name, why); };
  if (name.empty()) refuse("has an empty name");
  const auto parts = name_components(name);
  if (parts.front().empty() && parts.size() > 1) refuse("has an absolute path");
  if (parts.front().size() == 2 && parts.front()[1] == ':') refuse("has an absolute (drive letter) path");
  for (unsigned char c : name)
    if (c < 0x20 || c == 0x7f) refuse("contains a control character");
  for (const auto& part : parts)
    if (part == "..") refuse("climbs out with '..'");
}

std::string member_path(const std::string& name) {
  std::string path;
  for (const auto& part : name_components(name))
    if (!part.empty() && part != ".") path += (path.empty() ? "" : "/") + part;
  return path;
}

namespace {

// One libarchive reader over one file: zip and every tar flavour, any compression filter.
class Reader {
 public:
  Reader(const fs::path& archive) : name_(archive.string()), a_(archive_read_new()) {
    if (!a_) throw std::runtime_error("libarchive: out of memory");
    archive_read_support_filter_all(a_);
    archive_read_support_format_tar(a_);
    archive_read_support_format_gnutar(a_);
    archive_read_support_format_zip(a_);
    if (archive_read_open_filename(a_, archive.c_str(), 64 * 1024) != ARCHIVE_OK) invalid();
  }
  ~Reader() { archive_read_free(a_); }
  Reader(const Reader&) = delete;
  Reader& operator=(const Reader&) = delete;

  // The next member's header; nullptr at the end. InputError for a damaged archive.
  archive_entry* next() {
    archive_entry* entry = nullptr;
    const int r = archive_read_next_header(a_, &entry);
    if (r == ARCHIVE_EOF) return nullptr;
    if (r != ARCHIVE_OK && r != ARCHIVE_WARN) invalid();
    return entry;
  }
  // Reads the current member's data into `out`, at most `limit` bytes; false when it has more.
  bool read_data(int fd, std::uint64_t limit, const std::chrono::steady_clock::time_point deadline) {
    std::uint64_t written = 0;
    char buf[64 * 1024];
    for (;;) {
      const la_ssize_t n = archive_read_data(a_, buf, sizeof buf);
      if (n == 0) return true;
      if (n < 0) invalid();
      written += static_cast<std::uint64_t>(n);
      if (written > limit) return false;
      if (std::chrono::steady_clock::now() > deadline)
        throw InputError("archive " + name_ + " took too long to extract; nothing was kept");
      for (la_ssize_t off = 0; off < n;) {
        const ssize_t w = ::write(fd, buf + off, static_cast<std::size_t>(n - off));
        if (w < 0) throw std::runtime_error("cannot write an extracted file: " + std::string(std::strerror(errno)));
        off += w;
      }
    }
  }

 private:
  [[noreturn]] void invalid() {
    const char* why = archive_error_string(a_);
    throw InputError("archive " + name_ + " is not a valid zip or tar archive" +
                     (why && *why ? std::string(" (") + why + ")" : std::string()));
  }
  std::string name_;
  archive* a_;
};

// The member's header, its name checked (InputError) and then made the path it lands at.
ArchiveMember member_of(archive_entry* entry, const std::string& archive) {
  const char* name = archive_entry_pathname(entry);
  const std::string written = name ? name : "";
  check_member_name(written, archive);
  ArchiveMember m;
  m.name = member_path(written);
  m.size = archive_entry_size_is_set(entry) ? static_cast<std::uint64_t>(std::max<la_int64_t>(0, archive_entry_size(entry))) : 0;
  if (archive_entry_hardlink(entry)) {
    m.type = 'h';
  } else {
    switch (archive_entry_filetype(entry)) {
      case AE_IFREG: m.type = '-'; break;
      case AE_IFDIR: m.type = 'd'; break;
      case AE_IFLNK: m.type = 'l'; break;
      default: m.type = '?';
    }
  }
  // "." or "./" is the archive's top directory; any other member that names nothing is refused.
  if (m.name.empty() && m.type != 'd')
    throw refused(archive, written, "names no file");
  return m;
}

// Creates `dest`/`rel`'s parent directories (inside dest: names were checked) and the file
// itself, refusing to follow or replace anything that is already there.
int create_member_file(const fs::path& dest, const std::string& rel) {
  const fs::path path = dest / rel;
  fs::create_directories(path.parent_path());
  if (!path_inside(path, dest)) throw std::runtime_error("member " + rel + " would land outside " + dest.string());
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
  if (fd < 0) throw std::runtime_error("cannot create " + path.string() + ": " + std::strerror(errno));
  return fd;
}

}  // namespace

std::vector<ArchiveMember> list_archive(const fs::path& archive, const ArchiveLimits& limits) {
  std::error_code ec;
  const auto size = fs::file_size(archive, ec);
  if (ec) throw InputError("cannot read archive " + archive.string() + ": " + ec.message());
  if (size == 0) throw InputError("archive " + archive.string() + " is empty");
  if (size > limits.archive_bytes)
    throw InputError("archive " + archive.string() + " is " + std::to_string(size >> 20) +
                     " MB, more than the " + std::to_string(limits.archive_bytes >> 20) + " MB allowed");
  Reader reader(archive);
  std::vector<ArchiveMember> members;
  while (archive_entry* entry = reader.next()) {
    if (members.size() == limits.members)
      throw InputError("archive " + archive.string() + " has more than the " + std::to_string(limits.members) +
                       " members allowed");
    members.push_back(member_of(entry, archive.string()));
  }
  return members;
}

namespace {

// A file where another member needs a directory ("a" and "a/b.cu") cannot both be extracted:
// the archive is refused, naming both, before anything is written.
void refuse_file_directory_clash(const std::vector<ArchiveMember>& members, const std::vector<bool>& chosen,
                                 const std::string& archive) {
  std::set<std::string> files;
  for (std::size_t i = 0; i < members.size(); ++i)
    if (chosen[i]) files.insert(members[i].name);
  for (const auto& path : files)
    for (auto slash = path.find('/'); slash != std::string::npos; slash = path.find('/', slash + 1))
      if (files.count(path.substr(0, slash)))
        throw InputError("archive " + archive + " is refused: it holds '" + printable(path.substr(0, slash)) +
                         "' as a file and '" + printable(path) +
                         "' inside it as a directory; nothing was extracted");
}

// Which members to extract, by their place in the archive: regular files within the size
// limits; the rest is noted. A path the archive holds more than once counts once, as its last
// copy, which is what tar extracts (`tar -rf` appends a newer copy of a file; "./a.cu" and
// "a.cu" are one path): the earlier copies go into `replaced`, not `skipped`.
std::vector<bool> choose_members(const std::vector<ArchiveMember>& members, const ArchiveLimits& limits,
                                 const std::string& archive, ExtractResult& result) {
  std::map<std::string, std::size_t> last_copy;
  for (std::size_t i = 0; i < members.size(); ++i)
    if (members[i].type != 'd') last_copy[members[i].name] = i;
  std::vector<bool> chosen(members.size(), false);
  std::set<std::string> replaced;
  std::uint64_t total = 0;
  for (std::size_t i = 0; i < members.size(); ++i) {
    const ArchiveMember& m = members[i];
    if (m.type == 'd') continue;
    if (last_copy[m.name] != i) {
      replaced.insert(m.name);
      continue;
    }
    if (m.type != '-') {
      result.skipped.emplace_back(m.name, m.type == 'l' || m.type == 'h' ? "a link (links are never extracted)"
                                                                        : "not a regular file");
      continue;
    }
    if (m.size > limits.member_bytes) {
      result.skipped.emplace_back(m.name, "too large (" + std::to_string(m.size >> 10) + " KB; the limit is " +
                                              std::to_string(limits.member_bytes >> 10) + " KB)");
      continue;
    }
    if (total + m.size > limits.total_bytes) {
      result.skipped.emplace_back(m.name, "over the archive's total size limit");
      continue;
    }
    total += m.size;
    chosen[i] = true;
  }
  result.replaced.assign(replaced.begin(), replaced.end());
  refuse_file_directory_clash(members, chosen, archive);
  return chosen;
}

// Trust only what is on disk: regular files and directories inside `dest`.
void collect_extracted(const fs::path& dest, ExtractResult& result) {
  for (auto it = fs::recursive_directory_iterator(dest, fs::directory_options::none);
       it != fs::recursive_directory_iterator(); ++it) {
    const auto st = it->symlink_status();
    const std::string rel = it->path().lexically_relative(dest).generic_string();
    if (fs::is_directory(st)) continue;
    if (!fs::is_regular_file(st)) {
      fs::remove(it->path());
      result.skipped.emplace_back(rel, "not a regular file after extraction (removed)");
      continue;
    }
    result.extracted.push_back(rel);
  }
  std::sort(result.extracted.begin(), result.extracted.end());
}

}  // namespace

ExtractResult extract_archive(const fs::path& archive, const fs::path& dest, const ArchiveLimits& limits) {
  const auto members = list_archive(archive, limits);  // every name checked before any write
  ExtractResult result;
  const std::vector<bool> chosen = choose_members(members, limits, archive.string(), result);
  fs::create_directories(dest);
  if (!fs::is_empty(dest)) throw std::runtime_error("extraction directory " + dest.string() + " is not empty");
  if (std::find(chosen.begin(), chosen.end(), true) == chosen.end()) return result;

  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                                                               std::chrono::duration<double>(limits.timeout_s));
  Reader reader(archive);
  std::size_t index = 0;
  while (archive_entry* entry = reader.next()) {
    if (index >= chosen.size()) break;  // the same file, read again: no more members than listed
    const ArchiveMember m = member_of(entry, archive.string());
    if (!chosen[index++] || m.type != '-') continue;
    const int fd = create_member_file(dest, m.name);
    bool fits = false;
    try {
      fits = reader.read_data(fd, limits.member_bytes, deadline);
    } catch (...) {
      ::close(fd);
      fs::remove_all(dest);
      fs::create_directories(dest);
      throw;
    }
    ::close(fd);
    if (!fits) {  // it said it was small and was not
      fs::remove(dest / m.name);
      result.skipped.emplace_back(m.name, "larger than its header says (over " +
                                              std::to_string(limits.member_bytes >> 10) + " KB; removed)");
    }
  }
  collect_extracted(dest, result);
  return result;
}

}  // namespace wb::grader
