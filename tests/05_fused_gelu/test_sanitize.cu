// Chapter 05 under compute-sanitizer: a float4 load of the last partial pack reads a few
// bytes past the end of x and gives right answers; no output comparison sees it. This binary
// runs a small GELU workload again under memcheck and racecheck (wb::run_self_under_sanitizer)
// and fails when either tool reports an error. Used by the known-wrong versions that only a
// sanitizer catches; .ci/gpu-run test runs the whole correctness suites under both tools.
#include <cuda_runtime.h>

#include <string>
#include <vector>

#include "gelu.cuh"
#include "reference.hpp"
#include "wb/buffer.hpp"
#include "wb/check.hpp"
#include "wb/random.hpp"
#include "wb/sanitize_self.hpp"
#include "wb/testing.hpp"

namespace {

// Every remainder mod 4, aligned and not; x and y are allocations of exactly n floats (no
// guard bands), so memcheck sees a read one float past the end.
TEST_CASE("GELU workload for compute-sanitizer" * doctest::skip()) {
  WB_REQUIRE_GPU();
  for (const std::size_t n : {std::size_t(1), std::size_t(5), std::size_t(4097), std::size_t(4098),
                              std::size_t(4099), std::size_t(100000), std::size_t(100003)})
    for (const std::size_t offset : {std::size_t(0), std::size_t(1)}) {
      const std::vector<float> host = ch05::reference::random_inputs(n, "ch05/sanitize");
      wb::DeviceBuffer<float> x(n + offset), y(n + offset), scratch(ch05::gelu_unfused_scratch_count(n));
      WB_CUDA(cudaMemcpy(x.data() + offset, host.data(), n * sizeof(float), cudaMemcpyHostToDevice));
      ch05::gelu_fused(x.data() + offset, y.data() + offset, n, nullptr);
      ch05::gelu_unfused(x.data() + offset, y.data() + offset, scratch.data(), n, nullptr);
      WB_CUDA(cudaDeviceSynchronize());
    }
}

void expect_clean(const std::string& tool, const std::string& finding, const std::string& rule) {
  const wb::SanitizerRun run = wb::run_self_under_sanitizer(tool, "GELU workload for compute-sanitizer");
  wb::testing::record_metric(tool + "_s", run.seconds);
  if (!run.ran) {
    wb::testing::mark_skipped("skipped: " + run.problem);
    return;
  }
  if (!run.problem.empty()) FAIL_CHECK("ch05 GELU under compute-sanitizer " << tool << ": " << run.problem);
  if (run.errors > 0)
    FAIL_CHECK("ch05 GELU under compute-sanitizer " << tool << ", seed " << wb::base_seed() << ": "
               << tool << " found " << run.errors << " " << finding << ":\n" << run.excerpt << rule);
}

TEST_CASE("GELU: no access outside an allocation (compute-sanitizer memcheck)") {
  WB_REQUIRE_GPU();
  expect_clean("memcheck", "error(s): accesses outside an allocation",
               "rule: read only your own elements.\nhint: a float4 load of the last partial pack "
               "reads up to 12 bytes past the end of x even when only the valid elements are "
               "stored: load the last n % 4 elements one by one.");
}

TEST_CASE("GELU: no shared-memory races (compute-sanitizer racecheck)") {
  WB_REQUIRE_GPU();
  expect_clean("racecheck", "hazard(s) in shared memory (a data race)",
               "rule: no data races.\nhint: an elementwise kernel needs no shared memory; if you "
               "stage through it, put a __syncthreads() between the writes and the reads.");
}

}  // namespace
