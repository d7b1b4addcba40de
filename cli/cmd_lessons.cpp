// `workbook lessons [--check]`: fills the measured numbers in the lessons from the results
// files, so no figure in a lesson is typed by hand.
//
// A lesson marks each number like this (the text between the markers is replaced):
//   <!-- wb:04_fused_softmax-solution.json;variant=fused shape=16x151936;median_us;%.1f -->8.1<!-- /wb -->
// Fields, separated by ";" (a "|" would split a Markdown table cell): results file (in the results dir), selector, key, printf format. The selector is
// space-separated key=value pairs matched against the file's "results" entries (first match);
// "A/B" divides the value for selector A by the value for selector B (a ratio); "-" selects
// the file itself, so the key can be a dotted path such as environment.ceilings.copy_gbps.
#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <regex>
#include <sstream>

#include "commands.hpp"
#include "wb/results.hpp"

namespace fs = std::filesystem;
using nlohmann::json;

namespace wb::cli {
namespace {

std::string read_text(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  if (!in) throw std::runtime_error("cannot read " + p.string());
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

const json& load_results(const fs::path& dir, const std::string& name, std::map<std::string, json>& cache) {
  auto it = cache.find(name);
  if (it != cache.end()) return it->second;
  const fs::path p = dir / name;
  if (!fs::exists(p)) throw std::runtime_error("results file " + p.string() + " does not exist");
  try {
    return cache[name] = json::parse(read_text(p));
  } catch (const json::exception& e) {
    throw std::runtime_error("results file " + p.string() + " is not valid JSON: " + e.what());
  }
}

std::string as_string(const json& v) { return v.is_string() ? v.get<std::string>() : v.dump(); }

const json& select_entry(const json& doc, const std::string& selector, const std::string& file) {
  if (selector == "-") return doc;
  std::istringstream words(selector);
  std::vector<std::pair<std::string, std::string>> want;
  for (std::string w; words >> w;) {
    const auto eq = w.find('=');
    if (eq == std::string::npos) throw std::runtime_error("selector word '" + w + "' has no '='");
    want.emplace_back(w.substr(0, eq), w.substr(eq + 1));
  }
  for (const json& e : doc.at("results")) {
    bool ok = true;
    for (const auto& [k, v] : want) ok = ok && e.contains(k) && as_string(e[k]) == v;
    if (ok) return e;
  }
  throw std::runtime_error(file + " has no result matching '" + selector + "'");
}

double value_at(const json& node, const std::string& dotted, const std::string& where) {
  const json* cur = &node;
  std::istringstream parts(dotted);
  for (std::string part; std::getline(parts, part, '.');) {
    if (!cur->contains(part)) throw std::runtime_error(where + " has no key '" + dotted + "'");
    cur = &(*cur)[part];
  }
  if (!cur->is_number()) throw std::runtime_error(where + ": '" + dotted + "' is not a number");
  return cur->get<double>();
}

std::string evaluate(const fs::path& dir, const std::string& spec, std::map<std::string, json>& cache) {
  std::vector<std::string> f;
  std::istringstream in(spec);
  for (std::string part; std::getline(in, part, ';');) f.push_back(part);
  if (f.size() != 4) throw std::runtime_error("marker '" + spec + "' needs 4 fields: file;selector;key;format");
  const json& doc = load_results(dir, f[0], cache);
  const auto slash = f[1].find('/');
  double v = 0;
  if (slash == std::string::npos) {
    v = value_at(select_entry(doc, f[1], f[0]), f[2], f[0] + " [" + f[1] + "]");
  } else {
    const std::string a = f[1].substr(0, slash), b = f[1].substr(slash + 1);
    v = value_at(select_entry(doc, a, f[0]), f[2], f[0] + " [" + a + "]") /
        value_at(select_entry(doc, b, f[0]), f[2], f[0] + " [" + b + "]");
  }
  char buf[64];
  std::snprintf(buf, sizeof buf, f[3].c_str(), v);
  return buf;
}

// Returns the lesson with every marker's text recomputed; counts markers and changes.
std::string fill(const std::string& text, const fs::path& dir, const fs::path& lesson, int& markers,
                 int& changed, std::map<std::string, json>& cache) {
  static const std::regex marker(R"(<!-- wb:([^>]*?) -->([^<]*)<!-- /wb -->)");
  std::string out;
  auto begin = std::sregex_iterator(text.begin(), text.end(), marker);
  std::size_t last = 0;
  for (auto it = begin; it != std::sregex_iterator(); ++it) {
    const auto& m = *it;
    out += text.substr(last, m.position() - last);
    std::string value;
    try {
      value = evaluate(dir, m[1].str(), cache);
    } catch (const std::exception& e) {
      throw std::runtime_error(lesson.string() + ": " + e.what());
    }
    ++markers;
    if (value != m[2].str()) ++changed;
    out += "<!-- wb:" + m[1].str() + " -->" + value + "<!-- /wb -->";
    last = m.position() + m.length();
  }
  return out + text.substr(last);
}

int run_lessons(const fs::path& source, const fs::path& results_dir, bool check) {
  std::map<std::string, json> cache;
  int total_markers = 0, stale = 0;
  for (const auto& entry : fs::directory_iterator(source / "chapters")) {
    const fs::path lesson = entry.path() / "README.md";
    if (!fs::exists(lesson)) continue;
    const std::string text = read_text(lesson);
    int markers = 0, changed = 0;
    const std::string filled = fill(text, results_dir, lesson, markers, changed, cache);
    total_markers += markers;
    if (changed == 0) continue;
    if (check) {
      std::cerr << lesson.string() << ": " << changed << " of " << markers
                << " measured numbers differ from " << results_dir.string()
                << " (run ./workbook lessons to update them)\n";
      stale += changed;
    } else {
      wb::write_file_atomic(lesson, filled);
      std::cout << "updated " << changed << " number(s) in " << lesson.string() << "\n";
    }
  }
  std::cout << total_markers << " measured numbers in the lessons"
            << (check ? (stale ? ", " + std::to_string(stale) + " stale" : ", all match the results files") : "")
            << "\n";
  return stale ? 1 : 0;
}

}  // namespace

void register_lessons(CLI::App& app) {
  auto* cmd = app.add_subcommand("lessons", "Fill the lessons' measured numbers from results files");
  static std::string results_dir;
  static std::string source = WB_SOURCE_DIR;
  static bool check = false;
  cmd->add_option("--results", results_dir, "results directory (default: <source>/data/results)");
  cmd->add_option("--source", source, "workbook source tree")->check(CLI::ExistingDirectory);
  cmd->add_flag("--check", check, "only verify that the lessons match the results; exit 1 if not");
  cmd->callback([] {
    const fs::path dir = results_dir.empty() ? fs::path(source) / "data" / "results" : fs::path(results_dir);
    try {
      set_exit_code(run_lessons(source, dir, check));
    } catch (const std::exception& e) {
      std::cerr << "workbook lessons: " << e.what() << "\n";
      set_exit_code(2);
    }
  });
}

}  // namespace wb::cli
