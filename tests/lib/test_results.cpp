// Host tests of the results plumbing that needs no GPU.
#include <filesystem>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "wb/results.hpp"
#include "wb/testing.hpp"

TEST_CASE("stats serialize with every documented field") {
  wb::Stats s = wb::summarize("x", {1.0, 2.0, 3.0}, 3000);
  const nlohmann::json j = wb::to_json(s);
  for (const char* key : {"cache", "clock", "median_us", "min_us", "max_us", "mean_us", "p25_us",
                          "p75_us", "noise", "samples", "converged", "bytes", "flops", "gbps",
                          "pct_of_peak", "floor_us"})
    CHECK_MESSAGE(j.contains(key), key);
  CHECK(j["median_us"] == 2.0);
  CHECK(j["cache"] == "cold");
}

TEST_CASE("atomic writes replace the file whole") {
  const auto dir = std::filesystem::temp_directory_path() / "wb_test_results";
  std::filesystem::create_directories(dir);
  const auto path = dir / "a.json";
  wb::write_file_atomic(path, "first\n");
  wb::write_file_atomic(path, "second\n");
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  CHECK(text.str() == "second\n");
  for (const auto& e : std::filesystem::directory_iterator(dir))
    CHECK_MESSAGE(e.path().filename().string().find(".tmp") == std::string::npos, e.path());
  std::filesystem::remove_all(dir);
}
