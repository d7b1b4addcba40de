#include "grader/chapters.hpp"

#include <algorithm>
#include <set>

#include "grader/util.hpp"

namespace wb::grader {

std::string Chapter::binary(const std::string& kind, const std::string& build) const {
  return "test_" + id + "_" + kind + "_" + build;
}

std::vector<std::string> Chapter::kinds() const {
  std::vector<std::string> kinds;
  for (const auto& t : tests)
    if (t.kind == "correctness" && std::find(kinds.begin(), kinds.end(), t.kind) == kinds.end())
      kinds.push_back(t.kind);
  for (const auto& t : tests)
    if (std::find(kinds.begin(), kinds.end(), t.kind) == kinds.end()) kinds.push_back(t.kind);
  return kinds;
}

const ChapterTest* Chapter::test_of_kind(const std::string& kind) const {
  for (const auto& t : tests)
    if (t.kind == kind) return &t;
  return nullptr;
}

namespace {

// A manifest names files; none may climb out of its directory.
void check_relative(const std::string& name, const fs::path& manifest, const std::string& field) {
  const fs::path p(name);
  bool bad = name.empty() || p.is_absolute() || name.find('\\') != std::string::npos;
  for (const auto& part : p)
    if (part == "..") bad = true;
  if (bad)
    throw InputError(manifest.string() + ": " + field + " entry '" + name +
                     "' must be a plain relative file name");
}

std::string get_string(const json& j, const char* key, const fs::path& manifest) {
  if (!j.contains(key) || !j[key].is_string() || j[key].get<std::string>().empty())
    throw InputError(manifest.string() + ": \"" + key + "\" must be a non-empty string");
  return j[key].get<std::string>();
}

std::vector<std::string> get_strings(const json& j, const char* key, const fs::path& manifest,
                                     bool required) {
  std::vector<std::string> out;
  if (!j.contains(key)) {
    if (required) throw InputError(manifest.string() + ": \"" + key + "\" is missing");
    return out;
  }
  if (!j[key].is_array()) throw InputError(manifest.string() + ": \"" + key + "\" must be a list");
  for (const auto& v : j[key]) {
    if (!v.is_string()) throw InputError(manifest.string() + ": \"" + key + "\" must list strings");
    out.push_back(v.get<std::string>());
    check_relative(out.back(), manifest, key);
  }
  return out;
}

}  // namespace

Chapter parse_chapter_manifest(const fs::path& manifest) {
  const json j = read_json_file(manifest, "chapter manifest");
  if (!j.is_object()) throw InputError(manifest.string() + ": expected a JSON object");
  Chapter c;
  c.id = get_string(j, "id", manifest);
  c.slug = get_string(j, "slug", manifest);
  c.title = j.value("title", c.slug);
  if (!starts_with(c.slug, c.id + "_"))
    throw InputError(manifest.string() + ": slug '" + c.slug + "' must start with the id '" +
                     c.id + "_'");
  if (c.slug != safe_name(c.slug) || c.id != safe_name(c.id))
    throw InputError(manifest.string() + ": id and slug may hold only letters, digits, '.', '_', '-'");
  c.editable = get_strings(j, "editable", manifest, true);
  if (c.editable.empty()) throw InputError(manifest.string() + ": \"editable\" is empty");
  c.support = get_strings(j, "support", manifest, false);
  c.uses = get_strings(j, "uses", manifest, false);
  if (!j.contains("tests") || !j["tests"].is_array() || j["tests"].empty())
    throw InputError(manifest.string() + ": \"tests\" must be a non-empty list");
  for (const auto& t : j["tests"]) {
    ChapterTest test;
    test.file = get_string(t, "file", manifest);
    test.kind = get_string(t, "kind", manifest);
    if (test.kind != safe_name(test.kind) || test.kind.find('_') != std::string::npos)
      throw InputError(manifest.string() + ": test kind '" + test.kind +
                       "' may hold only letters, digits, '.' and '-'");
    test.gpu = t.value("gpu", true);
    test.timeout_s = t.value("timeout", 600.0);
    c.tests.push_back(test);
  }
  if (j.contains("peer_script")) {
    c.peer_script = get_string(j, "peer_script", manifest);
    check_relative(c.peer_script, manifest, "peer_script");
  }
  if (j.contains("bench")) {
    c.bench = get_string(j, "bench", manifest);
    check_relative(c.bench, manifest, "bench");
  }
  return c;
}

std::vector<Chapter> discover_chapters(const fs::path& source_dir) {
  const fs::path tests = source_dir / "tests";
  if (!fs::is_directory(tests))
    throw InputError("no tests/ directory in " + source_dir.string() +
                     ": is this the workbook's source tree?");
  std::vector<Chapter> chapters;
  std::set<std::string> ids;
  for (const auto& entry : fs::directory_iterator(tests)) {
    const fs::path manifest = entry.path() / "chapter.json";
    if (!entry.is_directory() || !fs::exists(manifest)) continue;
    Chapter c = parse_chapter_manifest(manifest);
    if (entry.path().filename() != c.slug)
      throw InputError(manifest.string() + ": slug '" + c.slug + "' differs from its directory name");
    if (!ids.insert(c.id).second)
      throw InputError("two chapters have the id " + c.id + " (" + manifest.string() + ")");
    chapters.push_back(std::move(c));
  }
  std::sort(chapters.begin(), chapters.end(),
            [](const Chapter& a, const Chapter& b) { return a.id < b.id; });
  return chapters;
}

const Chapter& find_chapter(const std::vector<Chapter>& chapters, const std::string& wanted) {
  const std::string w = trim(wanted);
  for (const auto& c : chapters)
    if (c.id == w || c.slug == w || c.slug.substr(c.id.size() + 1) == w) return c;
  // "4" for "04".
  if (!w.empty() && std::all_of(w.begin(), w.end(), ::isdigit)) {
    for (const auto& c : chapters)
      if (!c.id.empty() && std::all_of(c.id.begin(), c.id.end(), ::isdigit) &&
          std::stoi(c.id) == std::stoi(w))
        return c;
  }
  std::string known;
  for (const auto& c : chapters) known += "\n  " + c.id + "  " + c.slug;
  throw InputError("no chapter '" + w + "'; the chapters are:" + known);
}

std::vector<Chapter> select_chapters(const std::vector<Chapter>& chapters,
                                     const std::vector<std::string>& wanted) {
  std::vector<std::string> names;
  for (const auto& w : wanted) {
    std::string cur;
    for (char ch : w + ",") {
      if (ch == ',' || ch == ' ' || ch == ';') {
        if (!trim(cur).empty()) names.push_back(trim(cur));
        cur.clear();
      } else {
        cur += ch;
      }
    }
  }
  if (names.empty()) return chapters;
  std::vector<Chapter> out;
  std::set<std::string> seen;
  for (const auto& n : names) {
    const Chapter& c = find_chapter(chapters, n);
    if (seen.insert(c.id).second) out.push_back(c);
  }
  std::sort(out.begin(), out.end(), [](const Chapter& a, const Chapter& b) { return a.id < b.id; });
  return out;
}

}  // namespace wb::grader
