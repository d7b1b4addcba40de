#include "grader/rubric.hpp"

#include <set>

#include "grader/util.hpp"

namespace wb::grader {

bool PassMark::applies_to(const std::string& test_name) const { return glob_match(test, test_name); }

std::string PassMark::describe() const {
  if (min && max) return "in [" + format_points(*min) + ", " + format_points(*max) + "]";
  if (min) return ">= " + format_points(*min);
  if (max) return "<= " + format_points(*max);
  return "(none)";
}

namespace {

[[noreturn]] void bad(const std::string& source, const std::string& where, const std::string& what) {
  throw InputError("rubric " + source + ": " + where + ": " + what);
}

void only_keys(const json& j, const std::set<std::string>& known, const std::string& source,
               const std::string& where) {
  if (!j.is_object()) bad(source, where, "must be a JSON object");
  for (const auto& [k, v] : j.items()) {
    if (!known.count(k)) {
      std::string list;
      for (const auto& n : known) list += (list.empty() ? "" : ", ") + n;
      bad(source, where, "unknown key \"" + k + "\" (known: " + list + ")");
    }
  }
}

double non_negative(const json& v, const std::string& source, const std::string& where) {
  if (!v.is_number()) bad(source, where, "must be a number");
  const double d = v.get<double>();
  if (!(d >= 0)) bad(source, where, "must not be negative");
  return d;
}

void read_chapter(const json& j, ChapterRubric& c, const std::string& source, const std::string& where) {
  only_keys(j, {"points", "timeout_s", "weights", "pass_marks", "note"}, source, where);
  if (j.contains("points")) {
    if (!j["points"].is_object()) bad(source, where + ".points", "must map test kinds to points");
    for (const auto& [kind, v] : j["points"].items())
      c.points[kind] = non_negative(v, source, where + ".points." + kind);
  }
  if (j.contains("timeout_s")) {
    if (!j["timeout_s"].is_object()) bad(source, where + ".timeout_s", "must map test kinds to seconds");
    for (const auto& [kind, v] : j["timeout_s"].items()) {
      const double t = non_negative(v, source, where + ".timeout_s." + kind);
      if (t < 1) bad(source, where + ".timeout_s." + kind, "must be at least 1 second");
      c.timeout_s[kind] = t;
    }
  }
  if (j.contains("weights")) {
    if (!j["weights"].is_object()) bad(source, where + ".weights", "must map test names (globs) to weights");
    std::vector<std::pair<std::string, double>> w;
    for (const auto& [name, v] : j["weights"].items())
      w.emplace_back(name, non_negative(v, source, where + ".weights." + name));
    // A chapter's own weights are tried before the defaults'.
    w.insert(w.end(), c.weights.begin(), c.weights.end());
    c.weights = std::move(w);
  }
  if (j.contains("pass_marks")) {
    if (!j["pass_marks"].is_array()) bad(source, where + ".pass_marks", "must be a list");
    int i = 0;
    for (const auto& m : j["pass_marks"]) {
      const std::string at = where + ".pass_marks[" + std::to_string(i++) + "]";
      only_keys(m, {"test", "metric", "min", "max", "note"}, source, at);
      PassMark pm;
      if (m.contains("test")) {
        if (!m["test"].is_string()) bad(source, at + ".test", "must be a string (a glob)");
        pm.test = m["test"];
      }
      if (!m.contains("metric") || !m["metric"].is_string())
        bad(source, at, "needs \"metric\": the name of a metric the test records");
      pm.metric = m["metric"];
      if (m.contains("min")) {
        if (!m["min"].is_number()) bad(source, at + ".min", "must be a number");
        pm.min = m["min"].get<double>();
      }
      if (m.contains("max")) {
        if (!m["max"].is_number()) bad(source, at + ".max", "must be a number");
        pm.max = m["max"].get<double>();
      }
      if (!pm.min && !pm.max) bad(source, at, "needs \"min\" or \"max\"");
      pm.note = m.value("note", "");
      c.pass_marks.push_back(pm);
    }
  }
}

}  // namespace

Rubric parse_rubric(const json& doc, const std::string& source) {
  only_keys(doc, {"schema", "description", "defaults", "chapters", "limits", "sanitizer", "gradescope"},
            source, "top level");
  if (doc.value("schema", "") != "workbook-rubric/1")
    bad(source, "schema", "must be \"workbook-rubric/1\"");
  Rubric r;
  r.source = source;
  r.digest = hex64(fnv1a64(doc.dump()));
  if (doc.contains("defaults")) read_chapter(doc["defaults"], r.defaults, source, "defaults");
  if (doc.contains("chapters")) {
    if (!doc["chapters"].is_object()) bad(source, "chapters", "must map chapter ids to settings");
    for (const auto& [id, j] : doc["chapters"].items()) {
      ChapterRubric c = r.defaults;
      read_chapter(j, c, source, "chapters." + id);
      r.chapters[id] = std::move(c);
    }
  }
  if (doc.contains("limits")) {
    const json& l = doc["limits"];
    only_keys(l, {"build_timeout_s", "test_memory_gb", "file_size_mb", "output_kb",
                  "editable_file_kb", "archive_mb", "archive_member_mb", "archive_members"},
              source, "limits");
    auto get = [&](const char* key, double& field) {
      if (l.contains(key)) {
        field = non_negative(l[key], source, std::string("limits.") + key);
        if (field <= 0) bad(source, std::string("limits.") + key, "must be positive");
      }
    };
    get("build_timeout_s", r.limits.build_timeout_s);
    get("test_memory_gb", r.limits.test_memory_gb);
    get("file_size_mb", r.limits.file_size_mb);
    get("output_kb", r.limits.output_kb);
    get("editable_file_kb", r.limits.editable_file_kb);
    get("archive_mb", r.limits.archive_mb);
    get("archive_member_mb", r.limits.archive_member_mb);
    get("archive_members", r.limits.archive_members);
  }
  if (doc.contains("sanitizer")) {
    const json& s = doc["sanitizer"];
    only_keys(s, {"tools", "penalty", "timeout_s", "jobs"}, source, "sanitizer");
    if (s.contains("penalty")) {
      r.sanitizer_penalty = non_negative(s["penalty"], source, "sanitizer.penalty");
      if (r.sanitizer_penalty > 1) bad(source, "sanitizer.penalty", "is a fraction (0 to 1)");
    }
    if (s.contains("timeout_s")) r.sanitizer_timeout_s = non_negative(s["timeout_s"], source, "sanitizer.timeout_s");
    if (s.contains("jobs")) {
      const double jobs = non_negative(s["jobs"], source, "sanitizer.jobs");
      if (jobs != static_cast<int>(jobs) || jobs > 64) bad(source, "sanitizer.jobs", "is a whole number of runs at a time, 0 to 64 (0: half the cores, at most 8)");
      r.sanitizer_jobs = static_cast<int>(jobs);
    }
    if (s.contains("tools")) {
      r.sanitizer_tools.clear();
      for (const auto& t : s["tools"]) {
        if (!t.is_string() || (t != "memcheck" && t != "racecheck" && t != "initcheck" && t != "synccheck"))
          bad(source, "sanitizer.tools", "lists compute-sanitizer tools: memcheck, racecheck, initcheck, synccheck");
        r.sanitizer_tools.push_back(t);
      }
    }
  }
  if (doc.contains("gradescope")) {
    only_keys(doc["gradescope"], {"visibility"}, source, "gradescope");
    r.visibility = doc["gradescope"].value("visibility", "visible");
    if (r.visibility != "visible" && r.visibility != "hidden" && r.visibility != "after_due_date" &&
        r.visibility != "after_published")
      bad(source, "gradescope.visibility", "must be visible, hidden, after_due_date or after_published");
  }
  return r;
}

Rubric load_rubric(const fs::path& path) {
  const json doc = read_json_file(path, "rubric");
  return parse_rubric(doc, path.string());
}

const ChapterRubric& Rubric::for_chapter(const std::string& id) const {
  const auto it = chapters.find(id);
  return it == chapters.end() ? defaults : it->second;
}

double Rubric::points(const std::string& chapter_id, const std::string& kind) const {
  const auto& c = for_chapter(chapter_id);
  const auto it = c.points.find(kind);
  return it == c.points.end() ? 0.0 : it->second;
}

double Rubric::weight(const std::string& chapter_id, const std::string& test_name) const {
  for (const auto& [glob, w] : for_chapter(chapter_id).weights)
    if (glob_match(glob, test_name)) return w;
  return 1.0;
}

double Rubric::timeout_s(const std::string& chapter_id, const ChapterTest& test) const {
  const auto& c = for_chapter(chapter_id);
  const auto it = c.timeout_s.find(test.kind);
  return it == c.timeout_s.end() ? test.timeout_s : it->second;
}

double Rubric::max_points(const Chapter& chapter) const {
  double total = 0;
  for (const auto& kind : chapter.kinds()) total += points(chapter.id, kind);
  return total;
}

}  // namespace wb::grader
