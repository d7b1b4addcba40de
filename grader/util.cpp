#include "grader/util.hpp"

#include <cctype>

#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <ctime>
#include <fstream>
#include <random>
#include <sstream>

#include "wb/results.hpp"

namespace wb::grader {

std::string trim(std::string_view s) {
  const auto b = s.find_first_not_of(" \t\r\n");
  if (b == std::string_view::npos) return "";
  const auto e = s.find_last_not_of(" \t\r\n");
  return std::string(s.substr(b, e - b + 1));
}

std::vector<std::string> split_lines(std::string_view s) {
  std::vector<std::string> lines;
  std::size_t pos = 0;
  while (pos < s.size()) {
    std::size_t end = s.find('\n', pos);
    if (end == std::string_view::npos) end = s.size();
    std::string_view line = s.substr(pos, end - pos);
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    lines.emplace_back(line);
    pos = end + 1;
  }
  return lines;
}

bool starts_with(std::string_view s, std::string_view p) { return s.substr(0, p.size()) == p; }
bool ends_with(std::string_view s, std::string_view x) {
  return s.size() >= x.size() && s.substr(s.size() - x.size()) == x;
}

std::string to_lower(std::string_view s) {
  std::string r(s);
  for (auto& c : r) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return r;
}

std::string join(const std::vector<std::string>& parts, std::string_view sep) {
  std::string r;
  for (std::size_t i = 0; i < parts.size(); ++i) {
    if (i) r += sep;
    r += parts[i];
  }
  return r;
}

void replace_all(std::string& s, std::string_view from, std::string_view to) {
  if (from.empty()) return;
  std::size_t pos = 0;
  while ((pos = s.find(from, pos)) != std::string::npos) {
    s.replace(pos, from.size(), to);
    pos += to.size();
  }
}

bool glob_match(std::string_view p, std::string_view t) {
  // Iterative matcher with backtracking to the last '*': linear in practice.
  std::size_t pi = 0, ti = 0, star = std::string_view::npos, mark = 0;
  while (ti < t.size()) {
    if (pi < p.size() && (p[pi] == '?' || p[pi] == t[ti])) {
      ++pi, ++ti;
    } else if (pi < p.size() && p[pi] == '*') {
      star = pi++;
      mark = ti;
    } else if (star != std::string_view::npos) {
      pi = star + 1;
      ti = ++mark;
    } else {
      return false;
    }
  }
  while (pi < p.size() && p[pi] == '*') ++pi;
  return pi == p.size();
}

std::string clip_text(std::string_view s, std::size_t max_lines, std::size_t max_chars) {
  const auto lines = split_lines(s);
  std::string out;
  std::size_t shown = 0;
  for (; shown < lines.size() && shown < max_lines; ++shown) {
    if (out.size() + lines[shown].size() > max_chars) break;
    if (shown) out += '\n';
    out += lines[shown];
  }
  if (shown < lines.size()) {
    if (out.empty() && !lines.empty()) out = lines[0].substr(0, max_chars);
    out += "\n[... " + std::to_string(lines.size() - std::max<std::size_t>(shown, 1)) +
           " more line(s) cut]";
  }
  return out;
}

std::string tail_lines(std::string_view s, std::size_t max_lines) {
  auto lines = split_lines(s);
  while (!lines.empty() && trim(lines.back()).empty()) lines.pop_back();
  if (lines.size() <= max_lines) return join(lines, "\n");
  std::vector<std::string> last(lines.end() - static_cast<std::ptrdiff_t>(max_lines), lines.end());
  return "[... " + std::to_string(lines.size() - max_lines) + " earlier line(s) cut]\n" +
         join(last, "\n");
}

std::string printable(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  std::size_t i = 0;
  while (i < s.size()) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    if (c < 0x80) {
      if (c == '\n' || c == '\t' || (c >= 0x20 && c != 0x7f)) out += static_cast<char>(c);
      else if (c == '\r') {
      } else out += "\xEF\xBF\xBD";  // U+FFFD
      ++i;
      continue;
    }
    // A valid UTF-8 sequence is copied as is; anything else becomes U+FFFD.
    int len = (c >> 5) == 0x6 ? 2 : (c >> 4) == 0xE ? 3 : (c >> 3) == 0x1E ? 4 : 0;
    bool ok = len > 0 && i + len <= s.size();
    for (int k = 1; ok && k < len; ++k)
      ok = (static_cast<unsigned char>(s[i + k]) >> 6) == 0x2;
    if (ok) {
      out.append(s.substr(i, len));
      i += len;
    } else {
      out += "\xEF\xBF\xBD";
      ++i;
    }
  }
  return out;
}

std::string safe_name(std::string_view s) {
  std::string r;
  for (char c : s) {
    const bool ok = std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '_' || c == '-';
    r += ok ? c : '_';
  }
  while (!r.empty() && r.front() == '.') r.erase(r.begin());  // no hidden names, no . or ..
  if (r.empty()) r = "_";
  if (r.size() > 100) r.resize(100);
  return r;
}

std::uint64_t fnv1a64(std::string_view s, std::uint64_t h) {
  for (unsigned char c : s) {
    h ^= c;
    h *= 1099511628211ULL;
  }
  return h;
}

std::uint64_t splitmix64(std::uint64_t x) {
  x += 0x9E3779B97F4A7C15ULL;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ULL;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBULL;
  return x ^ (x >> 31);
}

std::string hex64(std::uint64_t v) {
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(v));
  return buf;
}

std::uint64_t random_u64() {
  std::random_device rd;
  return (static_cast<std::uint64_t>(rd()) << 32) ^ rd();
}

std::string random_hex(std::size_t bytes) {
  std::string r;
  while (r.size() < 2 * bytes) r += hex64(random_u64());
  r.resize(2 * bytes);
  return r;
}

std::string utc_now_iso() { return wb::utc_now_iso(); }  // one clock format for lib and grader

std::string human_seconds(double s) {
  char buf[48];
  if (s < 1) std::snprintf(buf, sizeof buf, "%.0f ms", s * 1e3);
  else if (s < 60) std::snprintf(buf, sizeof buf, "%.1f s", s);
  else std::snprintf(buf, sizeof buf, "%d min %02d s", static_cast<int>(s) / 60, static_cast<int>(s) % 60);
  return buf;
}

double round2(double v) { return std::round(v * 100.0) / 100.0; }

std::string format_points(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2f", round2(v));
  std::string r = buf;
  while (r.find('.') != std::string::npos && (r.back() == '0' || r.back() == '.')) {
    const bool dot = r.back() == '.';
    r.pop_back();
    if (dot) break;
  }
  return r == "-0" ? "0" : r;
}

std::string read_text_file(const fs::path& path, std::uintmax_t max_bytes) {
  std::error_code ec;
  const auto size = fs::file_size(path, ec);
  if (ec) throw InputError("cannot read " + path.string() + ": " + ec.message());
  if (size > max_bytes)
    throw InputError(path.string() + " is " + std::to_string(size) + " bytes, more than the " +
                     std::to_string(max_bytes) + " allowed");
  std::ifstream in(path, std::ios::binary);
  if (!in) throw InputError("cannot open " + path.string());
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

json read_json_file(const fs::path& path, std::string_view what) {
  if (!fs::exists(path)) throw InputError(std::string(what) + " not found: " + path.string());
  const std::string text = read_text_file(path, 16u << 20);
  try {
    return json::parse(text);
  } catch (const json::parse_error& e) {
    // Translate the byte offset into a line and column the author can find.
    std::size_t line = 1, col = 1;
    for (std::size_t i = 0; i < e.byte && i < text.size(); ++i) {
      if (text[i] == '\n') ++line, col = 1;
      else ++col;
    }
    throw InputError(std::string(what) + " " + path.string() + " is not valid JSON (line " +
                     std::to_string(line) + ", column " + std::to_string(col) + "): " + e.what());
  }
}

void write_text_atomic(const fs::path& path, const std::string& text) {
  wb::write_file_atomic(path, text);
}

fs::path find_program(std::string_view name, const std::vector<fs::path>& extra_dirs) {
  std::vector<fs::path> dirs;
  if (const char* p = std::getenv("PATH")) {
    std::string path = p;
    std::size_t pos = 0;
    while (pos <= path.size()) {
      auto end = path.find(':', pos);
      if (end == std::string::npos) end = path.size();
      if (end > pos) dirs.emplace_back(path.substr(pos, end - pos));
      pos = end + 1;
    }
  }
  dirs.insert(dirs.end(), extra_dirs.begin(), extra_dirs.end());
  for (const auto& d : dirs) {
    const fs::path candidate = d / std::string(name);
    if (::access(candidate.c_str(), X_OK) == 0 && fs::is_regular_file(candidate)) return candidate;
  }
  return {};
}

fs::path self_executable() {
  std::error_code ec;
  auto p = fs::read_symlink("/proc/self/exe", ec);
  return ec ? fs::path("workbook") : p;
}

std::string shell_quote(std::string_view s) {
  std::string r = "'";
  for (char c : s) {
    if (c == '\'') r += "'\\''";
    else r += c;
  }
  return r + "'";
}

bool path_inside(const fs::path& path, const fs::path& dir) {
  const fs::path p = fs::absolute(path).lexically_normal();
  const fs::path d = fs::absolute(dir).lexically_normal();
  auto pi = p.begin();
  for (auto di = d.begin(); di != d.end(); ++di, ++pi) {
    if (di->empty()) continue;  // trailing slash
    if (pi == p.end() || *pi != *di) return false;
  }
  return true;
}

}  // namespace wb::grader

namespace wb::grader {

std::vector<std::string> split_list(std::string_view text) {
  std::vector<std::string> out;
  std::string cur;
  for (char ch : std::string(text) + ";") {
    if (ch == ';' || ch == ',' || std::isspace(static_cast<unsigned char>(ch))) {
      if (!cur.empty()) out.push_back(cur);
      cur.clear();
    } else {
      cur += ch;
    }
  }
  return out;
}

std::string markup_escape(std::string_view raw) {
  const std::string s = printable(raw);
  std::string out;
  out.reserve(s.size());
  for (char c : s) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&quot;"; break;
      case '\'': out += "&#39;"; break;  // XML and HTML both know the numeric form
      default: out += c;
    }
  }
  return out;
}

std::string display_path(const fs::path& p) {
  const fs::path rel = p.lexically_relative(fs::current_path());
  return !rel.empty() && rel.native().rfind("..", 0) != 0 ? rel.string() : p.string();
}

}  // namespace wb::grader
