#pragma once
// Results files: what a timing run measured, with the environment it ran in, as JSON.
// Schema "workbook-results/1", documented in docs/results-schema.md. The notebooks read
// only these files.
#include <nlohmann/json.hpp>

#include <filesystem>
#include <string>

#include "wb/timing.hpp"

namespace wb {

// GPU name, compute capability, SM count, L2, driver and runtime versions, peak clocks,
// measured ceilings, git revision, host name, time. Requires a device.
nlohmann::json environment_json();
nlohmann::json to_json(const Stats& s);

class ResultsWriter {
 public:
  // chapter: "04_fused_softmax"; build: "solution" | "student"
  ResultsWriter(std::string chapter, std::string build);
  // One measured variant. `impl`: solution, student, baseline, cpu...; `variant`: e.g.
  // "fused"; `shape`: "16x151936"; `extra` is merged into the entry (tokens_per_s,
  // breakdown_us, params...).
  void add(const std::string& variant, const std::string& impl, const std::string& shape,
           const Stats& stats, const nlohmann::json& extra = nlohmann::json::object());
  // An entry that is not a harness timing (e.g. tokens/s of a CPU run): `metrics` as given.
  void add_metrics(const std::string& variant, const std::string& impl, const std::string& shape,
                   const nlohmann::json& metrics);
  const nlohmann::json& json() const { return doc_; }
  // Writes atomically (temporary file, then rename).
  void write(const std::filesystem::path& path) const;
  // $WB_RESULTS_DIR/<chapter>-<build>.json, or results/<chapter>-<build>.json
  std::filesystem::path default_path() const;

 private:
  nlohmann::json doc_;
};

// "2026-11-24T03:26:30Z": the timestamp of results files, reports and rendered pages.
std::string utc_now_iso();

// Atomic write of any text (used for every file the workbook writes).
void write_file_atomic(const std::filesystem::path& path, const std::string& text);

}  // namespace wb
