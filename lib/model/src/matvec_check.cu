#include "wb/model/matvec_check.hpp"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <stdexcept>

#include "wb/buffer.hpp"
#include "wb/check.hpp"
#include "wb/guarded_buffer.hpp"
#include "wb/random.hpp"
#include "wb/timing.hpp"

namespace wb::model {

std::vector<double> matvec_reference(std::span<const float> W, std::span<const float> x, int n, int d) {
  if (W.size() != std::size_t(n) * std::size_t(d) || x.size() != std::size_t(n))
    throw std::invalid_argument("matvec_reference: W must hold d*n floats and x n floats");
  std::vector<double> out(static_cast<std::size_t>(d));
  for (int i = 0; i < d; ++i) {
    const float* row = W.data() + std::size_t(i) * std::size_t(n);
    double sum = 0.0;
    for (int j = 0; j < n; ++j) sum += double(row[j]) * double(x[std::size_t(j)]);
    out[std::size_t(i)] = sum;
  }
  return out;
}

Tolerance matvec_tolerance(int n) { return {2e-5 * std::sqrt(double(n)), 1e-5}; }

namespace {
struct Inputs {
  std::vector<float> W, x;
  std::vector<double> expected;
};

Inputs make_inputs(int n, int d, const MatvecCheck& check) {
  const std::string label = "ch" + check.chapter + "/matvec/" + std::to_string(d) + "x" + std::to_string(n);
  Inputs in;
  in.W = random_uniform(std::size_t(n) * std::size_t(d), -1.0f, 1.0f, label + "/W");
  in.x = random_uniform(std::size_t(n), -1.0f, 1.0f, label + "/x");
  in.expected = matvec_reference(in.W, in.x, n, d);
  return in;
}

// How long the work queued on the test's stream ahead of the launch runs (a spin kernel):
// longer than launching and running a small matvec, so a launch on another stream finishes first.
constexpr double kQueuedAheadNs = 500e3;

bool all_poison(const std::vector<float>& y) {
  return std::all_of(y.begin(), y.end(), [](float v) { return std::bit_cast<std::uint32_t>(v) == 0xFFFFFFFFu; });
}

// The diagnosis of a y left all poison: the same call again with nothing queued on `stream`
// and the device idle; true when it then writes y (it ran, but off `stream`).
bool writes_when_stream_idle(const DeviceMatvec& launch, GuardedBuffer<float>& y, const GuardedBuffer<float>& x,
                             const GuardedBuffer<float>& W, int n, int d, cudaStream_t stream) {
  y.poison(stream);
  WB_CUDA(cudaDeviceSynchronize());
  launch(y.data(), x.data(), W.data(), n, d, stream);
  WB_CUDA(cudaGetLastError());
  WB_CUDA(cudaDeviceSynchronize());
  return !all_poison(y.download());
}

CompareSpec spec_for(int n, int d, const MatvecCheck& check) {
  CompareSpec spec;
  spec.chapter = check.chapter;
  spec.what = check.what + " (W " + std::to_string(d) + "x" + std::to_string(n) + ", i.e. d=" +
              std::to_string(d) + " rows of n=" + std::to_string(n) + ")";
  spec.shape = {std::size_t(d)};
  spec.tol = matvec_tolerance(n);
  spec.hint = check.hint;
  return spec;
}
}  // namespace

CompareResult check_device_matvec(const DeviceMatvec& launch, int n, int d, const MatvecCheck& check) {
  const Inputs in = make_inputs(n, d, check);
  // Guard bands around y catch stores past its ends; around W and x they make reads a
  // little past the end read the band instead of faulting (or not) by allocator luck.
  GuardedBuffer<float> W{std::span<const float>(in.W)}, x{std::span<const float>(in.x)}, y{std::size_t(d)};
  cudaStream_t stream;
  WB_CUDA(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  // The poison goes on `stream` behind a spin, so a launch that ignores `stream` (the legacy
  // default stream does not wait for a non-blocking stream) runs first and has its y
  // overwritten: a result that depends on the stream, not on luck.
  launch_spin_kernel(kQueuedAheadNs, stream);
  y.poison(stream);
  launch(y.data(), x.data(), W.data(), n, d, stream);
  WB_CUDA(cudaGetLastError());
  WB_CUDA(cudaStreamSynchronize(stream));
  const CompareSpec spec = spec_for(n, d, check);
  if (d > 0 && all_poison(y.download()) && writes_when_stream_idle(launch, y, x, W, n, d, stream)) {
    WB_CUDA(cudaStreamDestroy(stream));
    CompareResult r;
    r.message = "chapter " + check.chapter + ", " + spec.what + ": rule: " + check.what +
                " enqueues its work on `stream`. Behind work already queued on `stream` (a " +
                "kernel, then y poisoned), y came back untouched; with `stream` idle, the same " +
                "call writes y. So the kernel ran on another stream, before that work.\nhint: " +
                "launch with <<<grid, block, 0, stream>>>: without the stream, the launch goes " +
                "to the default stream, which does not wait for a non-blocking stream's work.";
    return r;
  }
  WB_CUDA(cudaStreamDestroy(stream));
  if (const std::string overrun = y.overrun("y"); !overrun.empty()) {
    CompareResult r;
    r.message = "chapter " + check.chapter + ", " + spec.what +
                ": rule: write only your own elements. The kernel " + overrun +
                ".\nhint: the grid is rounded up, so the last block has rows (or threads) "
                "past d: guard the store with if (row < d). If you keep those threads alive "
                "for a warp shuffle or a __syncthreads, they may add zeros, but they must not "
                "write.";
    return r;
  }
  // W and x are inputs: the kernel may only read them.
  for (const std::string& change : {W.input_change(in.W, "W"), x.input_change(in.x, "x")}) {
    if (change.empty()) continue;
    CompareResult r;
    r.message = "chapter " + check.chapter + ", " + spec.what +
                ": rule: inputs are read-only. The kernel " + change +
                ".\nhint: W and x are const float*: accumulate in registers and write only y.";
    return r;
  }
  const std::vector<float> got = y.download();
  return compare(got, in.expected, spec);
}

CompareResult check_host_matvec(const HostMatvec& matvec, int n, int d, const MatvecCheck& check) {
  const Inputs in = make_inputs(n, d, check);
  std::vector<float> out(std::size_t(d), std::numeric_limits<float>::quiet_NaN());  // poisoned
  matvec(out.data(), in.x.data(), in.W.data(), n, d);
  return compare(out, in.expected, spec_for(n, d, check));
}

}  // namespace wb::model
