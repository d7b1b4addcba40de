#pragma once
// The rubric: points per chapter and per kind of test, weights per test, pass marks on the
// metrics timing tests record, time limits. data/rubric.json ships the defaults; the
// format is in docs/grading.md. Correctness gates every other kind: timing points are
// earned only when every correctness test of the chapter passed.
#include <nlohmann/json.hpp>

#include <cstdint>
#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "grader/chapters.hpp"
#include "grader/sanitize.hpp"  // kDefaultSanitizerTimeoutS

namespace wb::grader {

struct PassMark {
  std::string test = "*";     // glob over test names
  std::string metric;         // a key of the test's "metrics"
  std::optional<double> min;  // the metric must be >= min
  std::optional<double> max;  // and <= max
  std::string note;           // what the mark means, shown beside it
  bool applies_to(const std::string& test_name) const;
  std::string describe() const;  // ">= 1.5", "<= 20", "in [1, 2]"
};

struct ChapterRubric {
  std::map<std::string, double> points;     // kind -> points
  std::map<std::string, double> timeout_s;  // kind -> seconds (overrides the manifest)
  std::vector<std::pair<std::string, double>> weights;  // test-name glob -> weight (first match)
  std::vector<PassMark> pass_marks;
};

struct GradingLimits {
  double build_timeout_s = 900;
  double test_memory_gb = 32;
  double file_size_mb = 256;
  double output_kb = 256;
  double editable_file_kb = 1024;
  double archive_mb = 512;
  double archive_member_mb = 64;
  double archive_members = 20000;
};

struct Rubric {
  std::string source;   // the file it came from
  std::string digest;   // identity of its contents (resuming refuses a changed rubric)
  ChapterRubric defaults;
  std::map<std::string, ChapterRubric> chapters;  // already merged with the defaults
  GradingLimits limits;
  double sanitizer_penalty = 0;                   // fraction of correctness points lost
  double sanitizer_timeout_s = kDefaultSanitizerTimeoutS;  // per run (racecheck: per test case)
  int sanitizer_jobs = 0;                          // racecheck runs at a time; 0: default_sanitizer_jobs()
  std::vector<std::string> sanitizer_tools = {"memcheck", "racecheck"};
  std::string visibility = "visible";             // Gradescope test visibility

  const ChapterRubric& for_chapter(const std::string& id) const;
  double points(const std::string& chapter_id, const std::string& kind) const;
  double weight(const std::string& chapter_id, const std::string& test_name) const;
  double timeout_s(const std::string& chapter_id, const ChapterTest& test) const;
  double max_points(const Chapter& chapter) const;
};

// Reads and validates a rubric file; InputError names the file and the offending key.
Rubric load_rubric(const std::filesystem::path& path);
Rubric parse_rubric(const nlohmann::json& doc, const std::string& source);

}  // namespace wb::grader
