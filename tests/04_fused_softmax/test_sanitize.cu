// Chapter 04 under compute-sanitizer: some mistakes give right answers on a kind schedule (a
// block reduction missing a __syncthreads) or read a few bytes past an allocation, and no
// output comparison sees them. This binary runs a small softmax workload again under
// racecheck and memcheck (wb::run_self_under_sanitizer) and fails when either tool reports
// an error. Used by the known-wrong versions that only a sanitizer catches; .ci/gpu-run test
// runs the whole correctness suites under both tools.
#include <cuda_runtime.h>

#include <string>
#include <vector>

#include "reference.hpp"
#include "softmax.cuh"
#include "wb/buffer.hpp"
#include "wb/check.hpp"
#include "wb/random.hpp"
#include "wb/sanitize_self.hpp"
#include "wb/testing.hpp"

namespace {

// Every shape of parallelism, small enough to run instrumented: short rows, a block per row,
// long rows split or batched, with cols % 4 == 0 and != 0. x and y are allocations of exactly
// rows * cols floats (no guard bands), so memcheck sees a read one float past the end.
TEST_CASE("softmax workload for compute-sanitizer" * doctest::skip()) {
  WB_REQUIRE_GPU();
  const std::vector<std::pair<int, int>> shapes = {{7, 37},   {33, 1000},  {5, 1025},
                                                   {9, 4096}, {3, 8191},   {2, 16384},
                                                   {300, 100}, {1, 151936}, {16, 151937}};
  for (const auto [rows, cols] : shapes)
    for (const bool edge : {false, true}) {
      const std::size_t count = static_cast<std::size_t>(rows) * cols;
      const std::string label = "ch04/sanitize/" + std::to_string(rows) + "x" + std::to_string(cols);
      const std::vector<float> host = edge ? ch04::reference::edge_logits(rows, cols, label)
                                           : ch04::reference::random_logits(count, label);
      wb::DeviceBuffer<float> x(count), y(count), row_max(rows), row_sum(rows);
      x.upload(host);
      ch04::softmax_fused(x.data(), y.data(), rows, cols, nullptr);
      ch04::softmax_unfused(x.data(), y.data(), row_max.data(), row_sum.data(), rows, cols, nullptr);
      WB_CUDA(cudaDeviceSynchronize());
    }
}

void expect_clean(const std::string& tool, const std::string& finding, const std::string& rule) {
  const wb::SanitizerRun run = wb::run_self_under_sanitizer(tool, "softmax workload for compute-sanitizer");
  wb::testing::record_metric(tool + "_s", run.seconds);
  if (!run.ran) {
    wb::testing::mark_skipped("skipped: " + run.problem);
    return;
  }
  if (!run.problem.empty()) FAIL_CHECK("ch04 softmax under compute-sanitizer " << tool << ": " << run.problem);
  if (run.errors > 0)
    FAIL_CHECK("ch04 softmax under compute-sanitizer " << tool << ", seed " << wb::base_seed()
               << ": " << tool << " found " << run.errors << " " << finding << ":\n"
               << run.excerpt << rule);
}

TEST_CASE("softmax: no shared-memory races (compute-sanitizer racecheck)") {
  WB_REQUIRE_GPU();
  expect_clean("racecheck", "hazard(s) in shared memory (a data race)",
               "rule: no data races: a result that is right only when the schedule is kind is "
               "wrong.\nhint: in a block reduction, put a __syncthreads() between the writes of "
               "the per-warp partials to shared memory and their reads, and another before the "
               "same shared array is written again (a second reduction that reuses it).");
}

TEST_CASE("softmax: no access outside an allocation (compute-sanitizer memcheck)") {
  WB_REQUIRE_GPU();
  expect_clean("memcheck", "error(s): accesses outside an allocation",
               "rule: read and write only your own elements.\nhint: guard every load and store "
               "with the row and column bounds; a float4 load of a row's last partial pack reads "
               "past the row.");
}

}  // namespace
