#pragma once
// Small helpers shared by the grader: text, time, hashing, files.
#include <nlohmann/json.hpp>

#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

namespace wb::grader {

namespace fs = std::filesystem;
using nlohmann::json;

// Thrown for input the grader refuses (a bad submission, rubric, roster or option). The
// message says what was wrong and where; the CLI prints it and exits with code 2.
// The JSON name of one of the grader's enums (each has one NLOHMANN_JSON_SERIALIZE_ENUM
// mapping beside its definition): "reject", "workbook", "timeout"...
template <typename Enum>
  requires std::is_enum_v<Enum>
std::string to_string(Enum e) {
  return nlohmann::json(e).get<std::string>();
}

class InputError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

std::string trim(std::string_view s);
std::vector<std::string> split_lines(std::string_view s);
bool starts_with(std::string_view s, std::string_view prefix);
bool ends_with(std::string_view s, std::string_view suffix);
std::string to_lower(std::string_view s);
std::string join(const std::vector<std::string>& parts, std::string_view sep);
// "a;b", "a,b" or "a b" -> {"a", "b"} (CMake lists, option values); empty items dropped.
std::vector<std::string> split_list(std::string_view text);
void replace_all(std::string& s, std::string_view from, std::string_view to);

// Glob with * and ? (the rubric's test-name patterns).
bool glob_match(std::string_view pattern, std::string_view text);

// At most `max_lines` lines and `max_chars` characters, with a note of what was cut.
std::string clip_text(std::string_view s, std::size_t max_lines, std::size_t max_chars);
// The last `max_lines` lines.
std::string tail_lines(std::string_view s, std::size_t max_lines);
// Replaces bytes that are not printable UTF-8 text (control characters except \n and \t,
// invalid sequences) so reports stay valid JSON/XML whatever a submission printed.
std::string printable(std::string_view s);

// Text for XML and HTML (attribute values included): & < > " ' escaped, after printable().
std::string markup_escape(std::string_view s);
// `p` relative to the current directory when it lies below it, else as given (for messages).
std::string display_path(const fs::path& p);

// A name safe as a file or directory name: [A-Za-z0-9._-], never empty, never "." or "..".
std::string safe_name(std::string_view s);

// 64-bit FNV-1a and a stronger mix (splitmix64), for identities, not for security.
std::uint64_t fnv1a64(std::string_view s, std::uint64_t h = 1469598103934665603ULL);
std::uint64_t splitmix64(std::uint64_t x);
std::string hex64(std::uint64_t v);
// Unpredictable bits from the operating system (std::random_device).
std::uint64_t random_u64();
std::string random_hex(std::size_t bytes);

// "2026-11-24T03:26:30Z": the one timestamp format of reports, logs and rendered pages.
std::string utc_now_iso();
std::string human_seconds(double s);  // "850 ms", "12.3 s", "2 min 05 s"
std::string format_points(double v);  // "7", "7.5", "6.67"
double round2(double v);

std::string read_text_file(const fs::path& path, std::uintmax_t max_bytes = 64u << 20);
// Parses a JSON file; errors name the file and the line/column of the problem.
json read_json_file(const fs::path& path, std::string_view what);
// Atomic write (temporary file + rename), creating parent directories.
void write_text_atomic(const fs::path& path, const std::string& text);

// PATH lookup; empty when not found.
fs::path find_program(std::string_view name, const std::vector<fs::path>& extra_dirs = {});
// This executable (for scripts the grader writes).
fs::path self_executable();

// Shell-quoted for a POSIX shell ('...').
std::string shell_quote(std::string_view s);
// True when `path` is inside `dir` (lexically, after making both absolute and normal).
bool path_inside(const fs::path& path, const fs::path& dir);

}  // namespace wb::grader
