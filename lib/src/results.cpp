#include "wb/results.hpp"

#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <ctime>
#include <fstream>
#include <stdexcept>

#include "wb/device.hpp"

namespace wb {

namespace {
std::string version_string(int v) {  // 13000 -> "13.0"
  return std::to_string(v / 1000) + "." + std::to_string((v % 1000) / 10);
}

std::string host_name() {
  char buf[256] = {0};
  if (gethostname(buf, sizeof buf - 1) != 0) return "unknown";
  return buf;
}
}  // namespace

nlohmann::json environment_json() {
  const DeviceInfo& d = device_info();
  const Ceilings& c = measured_ceilings();
  return {
      {"gpu", d.name},
      {"compute_capability", d.compute_capability()},
      {"sm_count", d.sm_count},
      {"l2_bytes", d.l2_bytes},
      {"global_mem_bytes", d.global_mem_bytes},
      {"sm_clock_mhz", d.sm_clock_mhz},
      {"mem_clock_mhz", d.mem_clock_mhz},
      {"mem_bus_bits", d.mem_bus_bits},
      {"driver_version", version_string(d.driver_version)},
      {"runtime_version", version_string(d.runtime_version)},
      {"ceilings",
       {{"copy_gbps", c.copy_gbps},
        {"read_gbps", c.read_gbps},
        {"launch_us", c.launch_us},
        {"launch_sync_us", c.launch_sync_us},
        {"l2_bytes", c.l2_bytes}}},
      {"l2_flush", l2_flush_method()},
      {"git_revision", WB_GIT_REVISION},
      {"host", host_name()},
  };
}

nlohmann::json to_json(const Stats& s) {
  return {
      {"cache", to_string(s.cache)}, {"clock", to_string(s.clock)},
      {"median_us", s.median_us},    {"min_us", s.min_us},
      {"max_us", s.max_us},          {"mean_us", s.mean_us},
      {"p25_us", s.p25_us},          {"p75_us", s.p75_us},
      {"noise", s.noise},            {"samples", s.samples},
      {"converged", s.converged},    {"bytes", s.bytes},
      {"flops", s.flops},            {"gbps", s.gbps},
      {"pct_of_peak", s.pct_of_peak}, {"floor_us", s.floor_us},
  };
}

ResultsWriter::ResultsWriter(std::string chapter, std::string build) {
  doc_ = {{"schema", "workbook-results/1"},
          {"chapter", std::move(chapter)},
          {"build", std::move(build)},
          {"created_utc", utc_now_iso()},
          {"environment", environment_json()},
          {"results", nlohmann::json::array()}};
}

void ResultsWriter::add(const std::string& variant, const std::string& impl,
                        const std::string& shape, const Stats& stats, const nlohmann::json& extra) {
  nlohmann::json entry = {{"variant", variant}, {"impl", impl}, {"shape", shape}};
  entry.update(to_json(stats));
  entry.update(extra);
  doc_["results"].push_back(std::move(entry));
}

void ResultsWriter::add_metrics(const std::string& variant, const std::string& impl,
                                const std::string& shape, const nlohmann::json& metrics) {
  nlohmann::json entry = {{"variant", variant}, {"impl", impl}, {"shape", shape}};
  entry.update(metrics);
  doc_["results"].push_back(std::move(entry));
}

std::filesystem::path ResultsWriter::default_path() const {
  const char* dir = std::getenv("WB_RESULTS_DIR");
  const std::filesystem::path base = dir && *dir ? dir : "results";
  return base / (doc_["chapter"].get<std::string>() + "-" + doc_["build"].get<std::string>() + ".json");
}

void ResultsWriter::write(const std::filesystem::path& path) const {
  write_file_atomic(path, doc_.dump(1) + "\n");
}

std::string utc_now_iso() {
  const std::time_t t = std::chrono::system_clock::to_time_t(std::chrono::system_clock::now());
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

void write_file_atomic(const std::filesystem::path& path, const std::string& text) {
  if (path.has_parent_path()) std::filesystem::create_directories(path.parent_path());
  // Write beside the target, then rename: a reader never sees half a file, and an
  // interrupted run leaves the old file intact.
  const std::filesystem::path tmp = path.string() + ".tmp." + std::to_string(::getpid());
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    if (!out) throw std::runtime_error("cannot write " + tmp.string());
    out << text;
    out.flush();
    if (!out) throw std::runtime_error("write failed for " + tmp.string() + " (disk full?)");
  }
  std::filesystem::rename(tmp, path);
}

}  // namespace wb
