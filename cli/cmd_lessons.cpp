// `workbook lessons [--check]`: fills the measured numbers in the lessons from the results
// files, so no figure in a lesson is typed by hand; and checks that none is.
//
// 1. Measured numbers. A lesson marks each one like this (the text between the markers is
//    replaced):
//      <!-- wb:04_fused_softmax-solution.json;variant=fused shape=16x151936;median_us;%.1f -->8.1<!-- /wb -->
//    Fields, separated by ";" (a "|" would split a Markdown table cell): results file (in the
//    results dir), selector, key, printf format.
//    - selector: space-separated key=value pairs matched against the file's "results"
//      entries (the first match); "A/B" divides the value for selector A by the value for
//      selector B (a ratio); "-" selects the file itself, so the key can be a dotted path
//      such as environment.ceilings.copy_gbps.
//    - key: a dotted path (breakdown_us.h2d); "k1+k2+..." adds several keys of the same
//      entry (a total of parts measured together); "SUM/SUM" divides two such sums of the
//      same entry (a share, a rate: breakdown_us.kernel/breakdown_us.alloc+breakdown_us.h2d).
//    - format: a printf format for one double, optionally after a factor and "*":
//      "100*%.0f" prints a fraction as a percentage, "0.001*%.1f" bytes per us as GB/s.
//
// 2. Constants that are not measured (a guard band's 16 KiB, a pass mark of 50%, the bytes a
//    4096x4096 matrix holds, a datasheet rate) are wrapped in a fact marker, which is left as
//    written:
//      y sits between two guard bands of <!-- wb:fact -->16 KiB<!-- /wb -->
//    Anything may follow "fact" inside the comment (a source, how it was computed).
//
// 3. The unit check (every run; it fails `--check`). A number followed by a unit, e.g.
//    "10 GB/s", "3.5 us", "2.8x", "98%", "438 MB", "23 times", outside both kinds of marker
//    is reported as FILE:LINE: it is either a measured figure typed by hand (quote it through
//    a results marker) or a constant (wrap it in a fact marker), or the sentence should say
//    it without a figure. Units: ns us µs ms s seconds, B KB kB MB GB TB KiB MiB GiB TiB bytes,
//    the same per second (GB/s ...), tok/s tokens/s, TFLOP/s GFLOP/s TFLOPS, MHz GHz,
//    % (with or without a space), x (directly after the number: 2.8x, not 4096x4096) and
//    "times". Not scanned: fenced code blocks (```), indented code blocks (4+ spaces after a
//    blank line), `inline code` and HTML comments. Numbers written as words ("a fifth",
//    "three launches") are not numbers to it; hyphenated adjectives ("16-byte loads",
//    "64-bit words") are not units.
//
// Exit status: 0 all good; 1 with --check, when a marker's text differs from the results
// or the unit check found something; 2 when a marker cannot be resolved (its results file
// or entry is missing), after every such marker has been listed as FILE:LINE. Without
// --check the lessons are rewritten (resolvable markers only) and unit-check findings are
// printed as warnings.
#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cctype>
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

const std::regex& marker_regex() {
  static const std::regex marker(R"(<!-- wb:([^>]*?) -->([^<]*)<!-- /wb -->)");
  return marker;
}

bool is_fact(const std::string& spec) { return spec == "fact" || spec.rfind("fact ", 0) == 0; }

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

// "k1+k2+...": the sum of several keys of one entry; "SUM/SUM": the ratio of two sums.
double sum_at(const json& node, const std::string& keys, const std::string& where) {
  const auto slash = keys.find('/');
  if (slash != std::string::npos)
    return sum_at(node, keys.substr(0, slash), where) / sum_at(node, keys.substr(slash + 1), where);
  double total = 0;
  std::istringstream parts(keys);
  for (std::string key; std::getline(parts, key, '+');) total += value_at(node, key, where);
  return total;
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
    v = sum_at(select_entry(doc, f[1], f[0]), f[2], f[0] + " [" + f[1] + "]");
  } else {
    const std::string a = f[1].substr(0, slash), b = f[1].substr(slash + 1);
    v = sum_at(select_entry(doc, a, f[0]), f[2], f[0] + " [" + a + "]") /
        sum_at(select_entry(doc, b, f[0]), f[2], f[0] + " [" + b + "]");
  }
  std::string format = f[3];
  const auto star = format.find('*');
  if (star != std::string::npos) {  // "FACTOR*%.1f"
    try {
      v *= std::stod(format.substr(0, star));
    } catch (const std::exception&) {
      throw std::runtime_error("marker '" + spec + "': the format's factor '" + format.substr(0, star) +
                               "' is not a number");
    }
    format = format.substr(star + 1);
  }
  if (std::count(format.begin(), format.end(), '%') != 1 || format.find("%s") != std::string::npos)
    throw std::runtime_error("marker '" + spec + "': the format must hold exactly one number conversion, e.g. %.1f");
  char buf[64];
  std::snprintf(buf, sizeof buf, format.c_str(), v);
  return buf;
}

int line_of(const std::string& text, std::size_t pos) {
  return 1 + int(std::count(text.begin(), text.begin() + std::ptrdiff_t(pos), '\n'));
}

struct LessonReport {
  std::string filled;                 // the lesson with every resolvable marker recomputed
  int markers = 0, changed = 0;
  std::vector<std::string> unresolved;  // "FILE:LINE: why"
  std::vector<std::string> unmarked;    // "FILE:LINE: ..." from the unit check
};

// Recomputes every measured marker; fact markers and unresolvable ones keep their text.
void fill(const std::string& text, const fs::path& dir, const std::string& name,
          std::map<std::string, json>& cache, LessonReport& r) {
  std::size_t last = 0;
  for (auto it = std::sregex_iterator(text.begin(), text.end(), marker_regex());
       it != std::sregex_iterator(); ++it) {
    const auto& m = *it;
    r.filled += text.substr(last, m.position() - last);
    last = m.position() + m.length();
    const std::string spec = m[1].str();
    if (is_fact(spec)) {
      r.filled += m.str();
      continue;
    }
    ++r.markers;
    std::string value;
    try {
      value = evaluate(dir, spec, cache);
    } catch (const std::exception& e) {
      r.unresolved.push_back(name + ":" + std::to_string(line_of(text, m.position())) + ": " + e.what());
      r.filled += m.str();
      continue;
    }
    if (value != m[2].str()) ++r.changed;
    r.filled += "<!-- wb:" + spec + " -->" + value + "<!-- /wb -->";
  }
  r.filled += text.substr(last);
}

// The text with everything the unit check must not read overwritten by 'M' (newlines
// kept, so line numbers stay): markers with their values, HTML comments, inline code.
std::string mask_exempt(const std::string& text) {
  std::string out = text;
  auto blank = [&](std::size_t from, std::size_t to) {
    for (std::size_t i = from; i < to && i < out.size(); ++i)
      if (out[i] != '\n') out[i] = 'M';
  };
  for (auto it = std::sregex_iterator(text.begin(), text.end(), marker_regex());
       it != std::sregex_iterator(); ++it)
    blank(std::size_t(it->position()), std::size_t(it->position() + it->length()));
  for (std::size_t p = out.find("<!--"); p != std::string::npos; p = out.find("<!--", p + 1)) {
    const std::size_t end = out.find("-->", p);
    blank(p, end == std::string::npos ? out.size() : end + 3);
  }
  return out;
}

// Code blocks and inline code are code, not prose: blank them line by line.
std::vector<std::string> prose_lines(const std::string& masked) {
  std::vector<std::string> lines;
  std::istringstream in(masked);
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  bool fenced = false, indented = false;
  for (std::size_t i = 0; i < lines.size(); ++i) {
    std::string& line = lines[i];
    const bool blank_line = line.find_first_not_of(" \t\r") == std::string::npos;
    const std::size_t first = line.find_first_not_of(' ');
    if (first != std::string::npos && line.compare(first, 3, "```") == 0) {
      fenced = !fenced;
      line.clear();
      continue;
    }
    if (fenced) {
      line.clear();
      continue;
    }
    const bool previous_blank =
        i == 0 || lines[i - 1].find_first_not_of(" \t\r") == std::string::npos;
    const bool four_spaces = line.rfind("    ", 0) == 0 || line.rfind("\t", 0) == 0;
    if (!blank_line) indented = four_spaces && (indented || previous_blank);
    if (indented) {
      line.clear();
      continue;
    }
    for (std::size_t a = line.find('`'); a != std::string::npos; a = line.find('`', a + 1)) {
      const std::size_t b = line.find('`', a + 1);
      if (b == std::string::npos) break;
      for (std::size_t k = a; k <= b; ++k) line[k] = 'M';
      a = b;
    }
  }
  return lines;
}

void unit_check(const std::string& text, const std::string& name, LessonReport& r) {
  // A number, then a unit that ends the word. "x" and "%" attach to the number directly
  // ("%" may also follow one space); the other units follow at most one space.
  static const std::regex number_unit(
      R"((\d[\d,]*(?:\.\d+)?(?:[eE][-+]?\d+)?)(?:)"
      R"( ?(?:tokens per second|tokens/s|tok/s|TFLOP/s|GFLOP/s|TFLOPS|[KMGT]i?B/s|kB/s|)"
      R"(seconds|ns|us|µs|ms|s|KiB|MiB|GiB|TiB|kB|KB|MB|GB|TB|bytes|byte|B|MHz|GHz|times|%))"
      R"(|x)(?![A-Za-z0-9_]))");
  const std::vector<std::string> lines = prose_lines(mask_exempt(text));
  for (std::size_t i = 0; i < lines.size(); ++i) {
    const std::string& line = lines[i];
    for (auto it = std::sregex_iterator(line.begin(), line.end(), number_unit);
         it != std::sregex_iterator(); ++it) {
      const std::size_t at = std::size_t(it->position());
      if (at > 0) {  // the number must start a word: not "sm_90", "H200", "1.5" inside "11.5"
        const char before = line[at - 1];
        if (std::isalnum(static_cast<unsigned char>(before)) || before == '.' || before == '_' ||
            before == ',' || before == '^')
          continue;
      }
      r.unmarked.push_back(name + ":" + std::to_string(i + 1) + ": \"" + it->str() +
                           "\" is a number with a unit outside a results marker");
    }
  }
}

int run_lessons(const fs::path& source, const fs::path& results_dir, bool check) {
  std::map<std::string, json> cache;
  int total_markers = 0, stale = 0;
  std::vector<std::string> unresolved, unmarked;
  std::vector<fs::path> lessons;
  for (const auto& entry : fs::directory_iterator(source / "chapters"))
    if (fs::exists(entry.path() / "README.md")) lessons.push_back(entry.path() / "README.md");
  std::sort(lessons.begin(), lessons.end());
  for (const fs::path& lesson : lessons) {
    const std::string name = fs::relative(lesson, source).generic_string();
    const std::string text = read_text(lesson);
    LessonReport r;
    fill(text, results_dir, name, cache, r);
    unit_check(text, name, r);
    total_markers += r.markers;
    unresolved.insert(unresolved.end(), r.unresolved.begin(), r.unresolved.end());
    unmarked.insert(unmarked.end(), r.unmarked.begin(), r.unmarked.end());
    if (r.changed == 0) continue;
    if (check) {
      std::cerr << name << ": " << r.changed << " of " << r.markers
                << " measured numbers differ from " << results_dir.string()
                << " (run ./workbook lessons to update them)\n";
      stale += r.changed;
    } else {
      wb::write_file_atomic(lesson, r.filled);
      std::cout << "updated " << r.changed << " number(s) in " << name << "\n";
    }
  }
  for (const auto& u : unresolved) std::cerr << u << "\n";
  for (const auto& u : unmarked) std::cerr << u << (check ? "" : " (warning)") << "\n";
  if (!unmarked.empty())
    std::cerr << unmarked.size()
              << " number(s) with a unit outside a marker: quote a measured figure through a "
                 "results marker <!-- wb:FILE;SELECTOR;KEY;FORMAT -->..<!-- /wb -->, wrap a "
                 "constant that is not measured in <!-- wb:fact -->..<!-- /wb -->, or say it "
                 "without a figure (grader/cmd_lessons.cpp explains the rule)\n";
  std::cout << total_markers << " measured numbers in the lessons";
  if (check)
    std::cout << (stale ? ", " + std::to_string(stale) + " stale" : ", all match the results files");
  if (!unresolved.empty()) std::cout << ", " << unresolved.size() << " unresolved";
  if (!unmarked.empty()) std::cout << ", " << unmarked.size() << " number(s) with a unit outside a marker";
  std::cout << "\n";
  if (!unresolved.empty()) return 2;
  return check && (stale || !unmarked.empty()) ? 1 : 0;
}

}  // namespace

void register_lessons(CLI::App& app) {
  auto* cmd = app.add_subcommand("lessons", "Fill the lessons' measured numbers from results files");
  static std::string results_dir;
  static std::string source = WB_SOURCE_DIR;
  static bool check = false;
  cmd->add_option("--results", results_dir, "results directory (default: <source>/data/results)");
  cmd->add_option("--source", source, "workbook source tree")->check(CLI::ExistingDirectory);
  cmd->add_flag("--check", check,
                "only verify: every marker matches the results and no number with a unit is "
                "typed outside a marker; exit 1 if not");
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
