#pragma once
// The benches of the fusion chapters (04, 05): for every shape, a device copy of the same
// bytes (the ceiling at that size), the unfused version and the fused one, each timed by
// wb::Bench and re-checked on fresh inputs after timing; each entry records its speedup over
// the unfused version and its fraction of the same-size copy. Then a table on stdout.
//
//   wb::FusionBench bench("bench_05", "gelu", writer);
//   bench.measure("copy", "baseline", "2^24", options, copy, {});
//   bench.measure("fused", build, "2^24", options, fused, verify, {{"n", n}});
//   bench.print_table("chapter 05 GELU (solution build)", "n");
#include <cuda_runtime.h>

#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "wb/results.hpp"
#include "wb/timing.hpp"

namespace wb {

class FusionBench {
 public:
  // `tag` prefixes progress lines ("bench_05"); `op` names the benches ("gelu").
  FusionBench(std::string tag, std::string op, ResultsWriter& writer);

  // Times `work` as `variant` of `shape` and adds it to the results. `verify(stream)`, when
  // given, re-runs the work on fresh inputs after timing and throws on a wrong answer.
  // Measure "copy" first and "unfused" before "fused": the ratios refer to them. A variant
  // that throws wb::NotImplemented (a starter) is skipped with a note.
  void measure(const std::string& variant, const std::string& impl, const std::string& shape,
               BenchOptions options, const std::function<void(cudaStream_t)>& work,
               const std::function<void(cudaStream_t)>& verify,
               nlohmann::json extra = nlohmann::json::object());

  // One line per measured variant: median, GB/s, % of the measured copy ceiling, % of the
  // same-size copy.
  void print_table(const std::string& title, const std::string& shape_header) const;

 private:
  struct Row {
    std::string shape, variant;
    Stats stats;
    double vs_copy;  // time of a device copy of the same bytes / this time (0: no copy)
  };
  std::string tag_, op_;
  ResultsWriter& writer_;
  std::map<std::string, double> copy_us_, unfused_us_;  // by shape
  std::vector<Row> rows_;
};

}  // namespace wb
