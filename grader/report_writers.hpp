#pragma once
// What a grade report becomes: report.md (what a student reads), Gradescope's
// results.json, JUnit XML, and rows of a class gradebook (CSV).
#include <nlohmann/json.hpp>

#include <filesystem>
#include <string>
#include <vector>

namespace wb::grader {

std::string render_markdown(const nlohmann::json& report);
nlohmann::json render_gradescope(const nlohmann::json& report, const std::string& visibility);
std::string render_junit(const nlohmann::json& report);

// Writes report.json, report.md, results.json and junit.xml into `dir`, each atomically.
void write_reports(const nlohmann::json& report, const std::filesystem::path& dir, const std::string& visibility);

// The gradebook: one row per student (per-chapter points, total, max, status), sorted by
// student, chapter columns from the reports themselves.
std::string render_gradebook_csv(const std::vector<nlohmann::json>& reports);
std::string csv_field(const std::string& s);

}  // namespace wb::grader
