// Chapter 06 timing: the fused add + LayerNorm against the unfused pair, timed in the same
// run by the workbook's harness (cold L2, events on the work's stream, median of a stable
// sample), graded as ratios that hold on any GPU: against each other, and against the device
// copy bandwidth measured on this GPU for the bytes the fused pass must move. Each timing
// ends by re-checking the output on fresh inputs.
#include <cuda_runtime.h>

#include <sstream>
#include <string>
#include <vector>

#include "add_norm.cuh"
#include "reference.hpp"
#include "wb/buffer.hpp"
#include "wb/check.hpp"
#include "wb/rubric.hpp"
#include "wb/testing.hpp"
#include "wb/timing.hpp"

namespace {

constexpr int kRows = 4096, kDim = 2560;  // a GPT-NeoX-2.7B-wide batch of 4096 tokens
constexpr std::size_t kN = std::size_t(kRows) * kDim;
// The fused pass reads x and delta and writes r and h: 16 bytes per element. The unfused
// pair moves 24 (r out and back in) in two launches.
constexpr double kFusedBytes = 16.0 * kN;
const double kMinCopyFraction = wb::pass_mark("06", "fraction_of_copy");  // data/rubric.json
const double kMinSpeedup = wb::pass_mark("06", "speedup_vs_unfused");      // data/rubric.json

enum class Impl { Unfused, Fused };

struct Buffers {
  wb::DeviceBuffer<float> x{kN}, delta{kN}, r{kN}, h{kN}, weight{kDim}, bias{kDim};
  ch06::reference::Problem problem;

  Buffers() { upload("ch06/timing"); }
  void upload(const std::string& label) {
    problem = ch06::reference::make_problem(kRows, kDim, ch06::Norm::LayerNorm,
                                            ch06::reference::Data::Typical, label);
    x.upload(problem.x);
    delta.upload(problem.delta);
    weight.upload(problem.weight);
    bias.upload(problem.bias);
  }
  void run(Impl impl, cudaStream_t stream) {
    const ch06::NormParams params{ch06::Norm::LayerNorm, weight.data(), bias.data(), 1e-5f};
    if (impl == Impl::Fused) {
      ch06::add_norm_fused(x.data(), delta.data(), r.data(), h.data(), kRows, kDim, params, stream);
    } else {
      ch06::residual_add(x.data(), delta.data(), r.data(), kN, stream);
      ch06::norm_rows(r.data(), h.data(), kRows, kDim, params, stream);
    }
  }
};

// The re-check's fresh inputs (rule 7), made and uploaded BEFORE the timing: the re-check then
// follows the timed calls with no host pause (device copies on the same stream), so a kernel
// cannot tell it from a timed call by the time between calls (one that skips work when the same
// pointers come back within microseconds, leaving the last answer there, fails it).
struct FreshInputs {
  ch06::reference::Problem problem;
  wb::DeviceBuffer<float> x{kN}, delta{kN}, weight{kDim}, bias{kDim};

  explicit FreshInputs(const std::string& label)
      : problem(ch06::reference::make_problem(kRows, kDim, ch06::Norm::LayerNorm,
                                              ch06::reference::Data::Typical, label)) {
    x.upload(problem.x);
    delta.upload(problem.delta);
    weight.upload(problem.weight);
    bias.upload(problem.bias);
  }
  void copy_into(Buffers& b, cudaStream_t stream) const {
    const auto copy = [stream](float* to, const float* from, std::size_t count) {
      WB_CUDA(cudaMemcpyAsync(to, from, count * sizeof(float), cudaMemcpyDeviceToDevice, stream));
    };
    copy(b.x.data(), x.data(), kN);
    copy(b.delta.data(), delta.data(), kN);
    copy(b.weight.data(), weight.data(), kDim);
    copy(b.bias.data(), bias.data(), kDim);
  }
};

wb::Stats time_add_norm(Impl impl, Buffers& buffers) {
  const std::string what = impl == Impl::Fused ? "fused add + LayerNorm" : "unfused add + LayerNorm";
  wb::BenchOptions options;
  options.name = what + " 4096x2560";
  options.bytes = kFusedBytes;  // what any add + norm must move: the same for both
  wb::Bench bench(options);
  const auto work = [&](cudaStream_t stream) { buffers.run(impl, stream); };
  const FreshInputs fresh("ch06/timing/verify/" + what);
  const auto verify = [&] {  // rule 7: fresh inputs, poisoned outputs, checked after timing
    fresh.copy_into(buffers, bench.stream());
    buffers.r.poison(bench.stream());
    buffers.h.poison(bench.stream());
    buffers.run(impl, bench.stream());
    WB_CUDA(cudaStreamSynchronize(bench.stream()));
    const std::string where = what + " (re-checked after timing)";
    std::string failure = ch06::reference::check_residual(fresh.problem, buffers.r.download(), where);
    if (failure.empty())
      failure = ch06::reference::check_normalized(
          fresh.problem, ch06::reference::residual(fresh.problem), buffers.h.download(),
          ch06::reference::kHFp32Tol, where);
    if (!failure.empty())
      FAIL(failure << "\nrule: every call computes r and h from the inputs it is given (this one came "
                      "right after the timed calls, on the same buffers, with new inputs).\nhint: keep no "
                      "state between calls: no answer remembered from the last call, no work skipped "
                      "because the pointers or the shape repeat.");
  };
  return bench.run(work, verify);
}

TEST_CASE("fused add + LayerNorm moves at least 60% of the copy bandwidth at 4096x2560") {
  WB_REQUIRE_GPU();
  Buffers buffers;
  const wb::Stats fused = time_add_norm(Impl::Fused, buffers);
  const double copy_gbps = wb::measured_ceilings().copy_gbps;
  const double fraction = fused.gbps / copy_gbps;
  wb::testing::record_metric("fused_us", fused.median_us);
  wb::testing::record_metric("fused_gbps", fused.gbps);
  wb::testing::record_metric("copy_gbps", copy_gbps);
  wb::testing::record_metric("fraction_of_copy", fraction);
  std::ostringstream message;
  message << "ch06 timing, 4096x2560 fp32: the fused add + LayerNorm moves " << fused.gbps
          << " GB/s (16 bytes per element), " << 100 * fraction
          << "% of the copy bandwidth measured on this GPU (" << copy_gbps
          << " GB/s); the pass mark is " << 100 * kMinCopyFraction << "%.\nhint: read each "
          << "row once into registers (a block per row, each thread several values), and "
          << "write r and h from there; re-reading the row from memory for the statistics "
          << "costs a pass.";
  CHECK_MESSAGE(fraction >= kMinCopyFraction, message.str());
}

TEST_CASE("fused add + LayerNorm is faster than the unfused pair at 4096x2560 (pass mark: rubric)") {
  WB_REQUIRE_GPU();
  Buffers buffers;
  const wb::Stats unfused = time_add_norm(Impl::Unfused, buffers);
  const wb::Stats fused = time_add_norm(Impl::Fused, buffers);
  const double speedup = unfused.median_us / fused.median_us;
  wb::testing::record_metric("fused_us", fused.median_us);
  wb::testing::record_metric("unfused_us", unfused.median_us);
  wb::testing::record_metric("speedup_vs_unfused", speedup);
  std::ostringstream message;
  message << "ch06 timing, 4096x2560 fp32: fused " << fused.median_us << " us, unfused "
          << unfused.median_us << " us: " << speedup << "x, the pass mark is " << kMinSpeedup
          << "x.\nhint: the fused kernel must not write r and read it back: keep the row in "
             "registers between the add and the norm.";
  CHECK_MESSAGE(speedup >= kMinSpeedup, message.str());
}

}  // namespace
