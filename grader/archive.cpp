#include "grader/archive.hpp"

#include <sys/stat.h>

#include <regex>

#include "grader/process.hpp"
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

void check_member_name(const std::string& name, const std::string& archive) {
  auto refuse = [&](const std::string& why) {
    throw InputError("archive " + archive + " is refused: member '" + printable(name) + "' " + why +
                     "; nothing was extracted");
  };
  if (name.empty()) refuse("has an empty name");
  if (name.front() == '/') refuse("has an absolute path");
  if (name.find('\\') != std::string::npos) refuse("contains a backslash");
  for (unsigned char c : name)
    if (c < 0x20 || c == 0x7f) refuse("contains a control character");
  std::size_t pos = 0;
  while (pos <= name.size()) {
    auto end = name.find('/', pos);
    if (end == std::string::npos) end = name.size();
    if (name.compare(pos, end - pos, "..") == 0 && end - pos == 2) refuse("climbs out with '..'");
    pos = end + 1;
  }
}

std::vector<ArchiveMember> parse_archive_listing(const std::string& listing, const std::string& archive) {
  // libarchive's `tv` line: mode nlink owner group size day month time-or-year name
  static const std::regex line_re(
      R"(^([-dlhcbps?])[rwxsStT-]{9}\S*\s+[0-9]+\s+\S+\s+\S+\s+([0-9]+)\s+\S+\s+\S+\s+\S+ (.*)$)");
  std::vector<ArchiveMember> members;
  for (const auto& line : split_lines(listing)) {
    if (line.empty()) continue;
    std::smatch m;
    if (!std::regex_match(line, m, line_re))
      throw InputError("archive " + archive + " is refused: cannot read the member listing line '" +
                       printable(line) + "' (a name with a newline, or an unusual member type)");
    ArchiveMember a;
    a.type = m[1].str()[0];
    a.size = std::stoull(m[2]);
    std::string name = m[3];
    if (a.type == 'l') {
      if (auto p = name.find(" -> "); p != std::string::npos) name = name.substr(0, p);
    } else if (auto p = name.find(" link to "); p != std::string::npos) {
      a.type = 'h';
      name = name.substr(0, p);
    }
    a.name = name;
    members.push_back(a);
  }
  return members;
}

namespace {

fs::path cmake_program() {
  fs::path p = find_program("cmake");
  if (p.empty()) throw InputError("cannot read archives: `cmake` is not on PATH");
  return p;
}

ProcessSpec tar_process(const std::vector<std::string>& args, const fs::path& cwd, const ArchiveLimits& limits) {
  ProcessSpec spec;
  spec.argv = {cmake_program().string(), "-E", "tar"};
  spec.argv.insert(spec.argv.end(), args.begin(), args.end());
  spec.env = make_environment({{"LC_ALL", "C"}, {"TZ", "UTC"}}, {"PATH", "HOME"});
  spec.cwd = cwd;
  spec.limits.timeout_s = limits.timeout_s;
  spec.limits.file_size_bytes = limits.member_bytes + (1u << 20);
  spec.limits.address_space_bytes = 4ull << 30;
  spec.limits.output_bytes = 64u << 20;  // the listing itself
  return spec;
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
  const ProcessResult r =
      run_process(tar_process({"tvf", fs::absolute(archive).string()}, fs::current_path(), limits));
  if (!r.ok() || r.output_truncated)
    throw InputError("cannot list archive " + archive.string() + " (" + r.describe(limits.timeout_s) +
                     "): " + clip_text(trim(r.output), 5, 600));
  // cmake prints its errors on the same stream; a clean listing has only member lines.
  auto members = parse_archive_listing(r.output, archive.string());
  if (members.size() > limits.members)
    throw InputError("archive " + archive.string() + " has " + std::to_string(members.size()) +
                     " members, more than the " + std::to_string(limits.members) + " allowed");
  for (const auto& m : members) check_member_name(m.name, archive.string());
  return members;
}

ExtractResult extract_archive(const fs::path& archive, const fs::path& dest, const ArchiveLimits& limits) {
  const auto members = list_archive(archive, limits);
  ExtractResult result;
  std::vector<std::string> wanted;
  std::uint64_t total = 0;
  for (const auto& m : members) {
    if (m.type == 'd') continue;
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
    wanted.push_back(m.name);
  }
  fs::create_directories(dest);
  if (!fs::is_empty(dest)) throw std::runtime_error("extraction directory " + dest.string() + " is not empty");
  if (wanted.empty()) return result;

  // The list of members to extract, outside `dest` (nothing but members lands there).
  const fs::path list = dest.parent_path() / (dest.filename().string() + ".members");
  std::string text;
  for (const auto& w : wanted) text += (w.front() == '-' ? "--add-file=" + w : w) + "\n";
  write_text_atomic(list, text);
  const ProcessResult r = run_process(
      tar_process({"xf", fs::absolute(archive).string(), "--files-from=" + list.string()}, dest, limits));
  fs::remove(list);
  if (!r.ok())
    throw InputError("cannot extract archive " + archive.string() + " (" + r.describe(limits.timeout_s) +
                     "): " + clip_text(trim(r.output), 5, 600));

  // Trust only what is on disk: regular files and directories inside `dest`.
  for (auto it = fs::recursive_directory_iterator(dest, fs::directory_options::none);
       it != fs::recursive_directory_iterator(); ++it) {
    const auto st = it->symlink_status();
    const std::string rel = it->path().lexically_relative(dest).generic_string();
    if (fs::is_directory(st)) {
      fs::permissions(it->path(), fs::perms::owner_all, fs::perm_options::add);
      continue;
    }
    if (!fs::is_regular_file(st)) {
      fs::remove(it->path());
      result.skipped.emplace_back(rel, "not a regular file after extraction (removed)");
      continue;
    }
    fs::permissions(it->path(), fs::perms::owner_read | fs::perms::owner_write, fs::perm_options::add);
    result.extracted.push_back(rel);
  }
  return result;
}

}  // namespace wb::grader
