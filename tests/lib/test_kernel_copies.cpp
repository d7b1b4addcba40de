// Chapters 02 and 03 paste chapter 01's matvec kernel unchanged (they are about memory, not
// about the kernel). Their reference solutions carry copies of it between two marker lines;
// this test fails when a copy drifts from chapter 01's, so a fix made in one file cannot
// silently miss the others. A starter that carries the markers is checked the same way.
#include <doctest/doctest.h>

#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

namespace {

namespace fs = std::filesystem;

const std::string kBegin = "// ==== BEGIN matvec kernel";
const std::string kEnd = "// ==== END matvec kernel ====";
const std::string kOriginal = "solutions/01_naive_matvec/matvec.cu";
const std::vector<std::string> kCopies = {"solutions/02_preallocated/preallocated.cu",
                                          "solutions/03_persistent_weights/persistent.cu"};
const std::vector<std::string> kStarters = {"chapters/01_naive_matvec/matvec.cu",
                                            "chapters/02_preallocated/preallocated.cu",
                                            "chapters/03_persistent_weights/persistent.cu"};

std::string read_text(const std::string& relative) {
  std::ifstream in(fs::path(WB_SOURCE_DIR) / relative, std::ios::binary);
  if (!in) return {};
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

std::vector<std::string> split_lines(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
    lines.push_back(line);
  }
  return lines;
}

// The lines from the BEGIN marker to the END marker (both included), or nullopt when the
// file has no BEGIN marker. A BEGIN without an END is an error message in `error`.
std::optional<std::vector<std::string>> marked_block(const std::string& text, std::string& error) {
  const std::vector<std::string> lines = split_lines(text);
  std::size_t begin = lines.size();
  for (std::size_t i = 0; i < lines.size(); ++i)
    if (lines[i].rfind(kBegin, 0) == 0) {
      begin = i;
      break;
    }
  if (begin == lines.size()) return std::nullopt;
  for (std::size_t i = begin + 1; i < lines.size(); ++i)
    if (lines[i].rfind(kEnd, 0) == 0)
      return std::vector<std::string>(lines.begin() + begin, lines.begin() + i + 1);
  error = "has the line '" + kBegin + " ...' but no line '" + kEnd + "' after it";
  return std::nullopt;
}

// "" when the blocks are equal, otherwise where they first differ.
std::string first_difference(const std::vector<std::string>& original,
                             const std::vector<std::string>& copy) {
  for (std::size_t i = 0; i < original.size() || i < copy.size(); ++i) {
    const bool in_original = i < original.size(), in_copy = i < copy.size();
    if (in_original && in_copy && original[i] == copy[i]) continue;
    std::ostringstream out;
    out << "line " << i + 1 << " of the kernel block differs:\n  chapter 01: "
        << (in_original ? "'" + original[i] + "'" : "(the block has ended)")
        << "\n  this copy:  " << (in_copy ? "'" + copy[i] + "'" : "(the block has ended)");
    return out.str();
  }
  return "";
}

std::string fix_hint(const std::string& file) {
  return "hint: the kernel is chapter 01's and chapters 02 and 03 paste it unchanged. Make the "
         "change in " + kOriginal + ", then replace everything from the line '" + kBegin +
         " ...' to the line '" + kEnd + "' in " + file +
         " with the same lines of " + kOriginal + " (or make the same edit in every copy).";
}

// Checks one file against chapter 01's block; `required`: the file must carry the markers.
void check_copy(const std::vector<std::string>& original, const std::string& file, bool required) {
  const std::string text = read_text(file);
  REQUIRE_MESSAGE(!text.empty(), "cannot read " << file << " under " << WB_SOURCE_DIR);
  std::string error;
  const auto copy = marked_block(text, error);
  if (!error.empty()) FAIL_CHECK(file << " " << error << "\n" << fix_hint(file));
  if (!copy) {
    if (required)
      FAIL_CHECK(file << " has no copy of chapter 01's matvec kernel between the lines '" << kBegin
                      << " ...' and '" << kEnd << "'.\n" << fix_hint(file));
    return;
  }
  const std::string difference = first_difference(original, *copy);
  CHECK_MESSAGE(difference.empty(), file << ": its copy of the matvec kernel has drifted from "
                                         << kOriginal << "; " << difference << "\n"
                                         << fix_hint(file));
}

std::vector<std::string> original_block() {
  const std::string text = read_text(kOriginal);
  REQUIRE_MESSAGE(!text.empty(), "cannot read " << kOriginal << " under " << WB_SOURCE_DIR);
  std::string error;
  const auto block = marked_block(text, error);
  REQUIRE_MESSAGE(block.has_value(), kOriginal << " must mark its matvec kernel with the lines '"
                                               << kBegin << " ...' and '" << kEnd << "' " << error);
  return *block;
}

}  // namespace

TEST_CASE("the reference solutions of chapters 02 and 03 carry chapter 01's matvec kernel unchanged") {
  const std::vector<std::string> original = original_block();
  CHECK(original.size() > 10);  // the markers enclose a kernel, not nothing
  for (const std::string& file : kCopies) check_copy(original, file, /*required=*/true);
}

TEST_CASE("a starter that carries the marked kernel carries chapter 01's") {
  const std::vector<std::string> original = original_block();
  for (const std::string& file : kStarters) check_copy(original, file, /*required=*/false);
}

// The probes: the comparison itself must catch an edited line, a missing line, a missing end.
TEST_CASE("the drift check catches an edited line, a dropped line and a missing end marker") {
  const std::string first = kBegin + " (chapter 01) ====\n";
  const std::string block = first + "int a = 1;\nint b = 2;\n" + kEnd + "\n";
  std::string error;
  const auto original = marked_block("// before\n" + block + "// after\n", error);
  REQUIRE(original.has_value());
  CHECK(original->size() == 4);
  CHECK(error.empty());

  const auto edited = marked_block(block.substr(0, block.find("2;")) + "3;\n" + kEnd + "\n", error);
  REQUIRE(edited.has_value());
  CHECK(first_difference(*original, *edited).find("line 3") != std::string::npos);

  const auto dropped = marked_block(first + "int a = 1;\n" + kEnd + "\n", error);
  REQUIRE(dropped.has_value());
  CHECK(first_difference(*original, *dropped).find("line 3") != std::string::npos);

  CHECK(first_difference(*original, *original).empty());
  CHECK(!marked_block("no markers here\n", error).has_value());
  CHECK(error.empty());
  CHECK(!marked_block(first + "int a = 1;\n", error).has_value());
  CHECK(error.find("no line") != std::string::npos);
}
