#pragma once
// What the bench programs of chapters 01-03 share: the matvec bandwidth table and one rung
// of the transfer ladder (tokens/s of a backend with its per-token breakdown).
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "wb/model/checkpoint.hpp"
#include "wb/model/ladder.hpp"
#include "wb/model/matmul.hpp"
#include "wb/model/matvec_check.hpp"
#include "wb/results.hpp"
#include "wb/timing.hpp"

namespace wb::model {

struct MatvecShape {
  int d, n;  // d rows of n columns
  std::string name() const { return std::to_string(d) + "x" + std::to_string(n); }
};
// 32000x4096 (a 7B model's classifier), 11008x4096 (its feed-forward), 4096x4096 (its
// attention projections), 768x768 (the 110M model's).
std::vector<MatvecShape> bandwidth_shapes();

// Times `kernel` on each shape with wb::Bench (device clock, `cache`), checks its output
// after timing on a fresh x, adds one entry per shape to `writer` (variant e.g.
// "matvec cold") and prints a table row to stdout.
void bench_matvec_bandwidth(ResultsWriter& writer, const DeviceMatvec& kernel, const std::string& variant,
                            const std::string& impl, Cache cache, const std::vector<MatvecShape>& shapes);

// One rung of the ladder: `steps` greedy forward passes of `model` through `backend`
// (tokens/s over all but the first), the CUDA API calls of one more token, and the
// per-token breakdown: for a GPU rung the replay of `protocol` with `kernel`, for the CPU
// the measured matmul time as "kernel". Returns the metrics object of the results entry:
// {"tokens_per_s", "breakdown_us": {alloc, h2d, kernel, d2h, free}, "matmul_us_per_token",
//  "other_us_per_token", "api_per_token": {...}, "threads", "steps", ...}.
nlohmann::json measure_rung(const Model& model, Matmul& backend, int threads, int steps,
                            std::optional<Protocol> protocol = std::nullopt,
                            const DeviceMatvec& kernel = {});

// One line per rung for the console.
void print_rung_header();
void print_rung(const std::string& variant, const nlohmann::json& metrics, double cpu1_tokens_per_s,
                double cpu_all_tokens_per_s);

}  // namespace wb::model
