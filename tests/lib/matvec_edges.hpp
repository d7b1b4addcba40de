#pragma once
// The edges of the matvec contract (chapters 01-03: "any n >= 1 and d >= 1", W d x n
// row-major, x and y anywhere in device memory), as probes that only a kernel obeying it
// passes. Included by the chapters' test sources; each check returns a wb::CompareResult
// whose message names the chapter, the shape, the rule broken and a hint.
//
//   - layouts: W, x and y each start at their own offset from a 16-byte boundary (a kernel
//     that loads float4 must check every pointer it vectorizes, and n % 4 for the rows);
//   - fenced: W, x and y end exactly where mapped memory ends (or start where it starts),
//     so one element read or written past either end faults (FencedBuffer);
//   - tall: more rows than a grid's y or z dimension holds (65535);
//   - huge: d * n past 2^31 floats (a 151936 x 16384 classifier, 10 GB), so 32-bit index
//     arithmetic overflows; skipped, saying so, on a GPU without the memory; and past 2^32
//     floats (17 GB, W only on the device), where 32-bit unsigned arithmetic wraps;
//   - pinned: a host wrapper with W, x and out in pinned host memory, out read the moment it
//     returns (a missing synchronization shows only there);
//   - captured: the launch captured into a CUDA graph on a blocking stream of the test's own
//     and replayed: a launch without `stream`, or one that synchronizes, fails there.
//
// Inputs: |v| in [0.25, 0.75) with a random sign, from the seed (WB_SEED reproduces them).
// One term left out or counted twice moves its row by at least 1/16, far beyond any
// rounding, so a wrong kernel fails for every seed, and a right one passes for every seed.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <functional>
#include <limits>
#include <memory>
#include <span>
#include <sstream>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "captured_graph.hpp"
#include "fenced_buffer.hpp"
#include "owned_stream.hpp"
#include "wb/buffer.hpp"
#include "wb/check.hpp"
#include "wb/compare.hpp"
#include "wb/guarded_buffer.hpp"
#include "wb/model/matvec_check.hpp"
#include "wb/not_implemented.hpp"
#include "wb/random.hpp"

namespace matvec_edges {

// Value i of the stream `seed`, exactly the same on the host and on the device: 23 random
// bits give |v| = 0.25 + k / 2^24 (exact in float), the top bit the sign.
__host__ __device__ inline float hashed_value(std::uint64_t seed, std::uint64_t i) {
  std::uint64_t z = seed + (i + 1) * 0x9E3779B97F4A7C15ull;  // splitmix64
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  z ^= z >> 31;
  const float v = 0.25f + float(std::uint32_t(z) & 0x7FFFFFu) * (1.0f / 16777216.0f);
  return (z >> 63) ? -v : v;
}

inline std::uint64_t seed_for(const std::string& label) { return wb::rng_for(label)(); }

inline std::vector<float> signed_values(std::size_t n, const std::string& label) {
  const std::uint64_t seed = seed_for(label);
  std::vector<float> v(n);
  for (std::size_t i = 0; i < n; ++i) v[i] = hashed_value(seed, i);
  return v;
}

// Refills `v` in place (same pointer, new values).
inline void refill(std::vector<float>& v, const std::string& label) {
  const std::uint64_t seed = seed_for(label);
  for (std::size_t i = 0; i < v.size(); ++i) v[i] = hashed_value(seed, i);
}

namespace detail {

__global__ void fill_hashed(float* out, std::size_t count, std::uint64_t seed) {
  for (std::size_t i = blockIdx.x * std::size_t(blockDim.x) + threadIdx.x; i < count;
       i += std::size_t(gridDim.x) * blockDim.x)
    out[i] = hashed_value(seed, i);
}

// out[i] = sum_j W[i*n + j] * x[j] in double, with W given by a function of its index, rows
// spread over the host's threads (a 10 GB W takes well under a second).
template <typename WeightAt>
std::vector<double> reference(const WeightAt& w_at, const std::vector<float>& x, int n, int d) {
  std::vector<double> out(std::size_t(d), 0.0);
  const unsigned threads = std::max(1u, std::min(32u, std::thread::hardware_concurrency()));
  std::vector<std::thread> pool;
  for (unsigned t = 0; t < threads; ++t)
    pool.emplace_back([&, t] {
      for (std::size_t r = t; r < std::size_t(d); r += threads) {
        double sum = 0;
        const std::size_t row = r * std::size_t(n);
        for (std::size_t j = 0; j < std::size_t(n); ++j) sum += double(w_at(row + j)) * double(x[j]);
        out[r] = sum;
      }
    });
  for (auto& th : pool) th.join();
  return out;
}

inline std::string shape_of(int n, int d) {
  return "W " + std::to_string(d) + "x" + std::to_string(n) + " (d=" + std::to_string(d) + " rows of n=" +
         std::to_string(n) + ")";
}

inline wb::CompareResult failure(const std::string& message) {
  wb::CompareResult r;
  r.ok = false;
  r.message = message + "\n  reproduce with WB_SEED=" + std::to_string(wb::base_seed());
  return r;
}

inline wb::CompareResult success() {
  wb::CompareResult r;
  r.ok = true;
  return r;
}

inline wb::CompareSpec spec(const std::string& chapter, const std::string& what, int n, int d,
                            const std::string& hint) {
  wb::CompareSpec s;
  s.chapter = chapter;
  s.what = what + ", " + shape_of(n, d);
  s.shape = {std::size_t(d)};
  s.tol = wb::model::matvec_tolerance(n);
  s.hint = hint;
  return s;
}

// The first compare failure, with the rule's name put in front of its message.
inline wb::CompareResult with_rule(wb::CompareResult r, const std::string& rule) {
  if (!r.ok) r.message = rule + ": " + r.message;
  return r;
}

}  // namespace detail

const std::string kAlignmentRule = "rule: any alignment (W, x and y may each start at any float)";
const std::string kAlignmentHint =
    "hint: float4 loads need 16-byte aligned addresses: check every pointer you vectorize "
    "(reinterpret_cast<std::uintptr_t>(p) % 16 == 0) and n % 4 == 0 (else row i starts at W + i*n, "
    "unaligned), and fall back to scalar loads otherwise; never assume cudaMalloc's alignment, the "
    "caller may pass a pointer into the middle of an array.";

const std::string kTailRule = "rule: every column counts (any n >= 1, any d >= 1)";
const std::string kTailHint =
    "hint: when n is not a multiple of your block size (or of 4 with float4 loads), the last "
    "columns of each row (the tail) still have to be added; when d is not a multiple of your rows "
    "per block, round the grid up and guard the extra rows.";

// y = W x with W, x and y at w_off, x_off, y_off floats past a 256-byte boundary. y sits
// between guard bands; W and x must be unchanged afterwards.
inline wb::CompareResult check_layout(const wb::model::DeviceMatvec& launch, int n, int d, int w_off, int x_off,
                                      int y_off, const std::string& chapter) {
  const std::string label = "ch" + chapter + "/edges/layout/" + std::to_string(d) + "x" + std::to_string(n);
  const std::string layout = "W at +" + std::to_string(4 * w_off) + " B, x at +" + std::to_string(4 * x_off) +
                             " B, y at +" + std::to_string(4 * y_off) + " B from a 16-byte boundary";
  const std::string what = "launch_matvec with " + layout;
  try {
    const std::vector<float> W = signed_values(std::size_t(d) * std::size_t(n), label + "/W");
    const std::vector<float> x = signed_values(std::size_t(n), label + "/x");
    wb::DeviceBuffer<float> W_dev(W.size() + 4), x_dev(x.size() + 4);
    WB_CUDA(cudaMemcpy(W_dev.data() + w_off, W.data(), W.size() * sizeof(float), cudaMemcpyHostToDevice));
    WB_CUDA(cudaMemcpy(x_dev.data() + x_off, x.data(), x.size() * sizeof(float), cudaMemcpyHostToDevice));
    wb::GuardedBuffer<float> y_raw(std::size_t(d) + 4);
    std::vector<float> guard_host(std::size_t(d) + 4);  // the bands around the y the kernel gets
    WB_CUDA(cudaMemcpy(guard_host.data(), y_raw.data(), guard_host.size() * sizeof(float), cudaMemcpyDeviceToHost));
    WB_CUDA(cudaMemset(y_raw.data() + y_off, 0xFF, std::size_t(d) * sizeof(float)));
    launch(y_raw.data() + y_off, x_dev.data() + x_off, W_dev.data() + w_off, n, d, nullptr);
    WB_CUDA(cudaGetLastError());
    WB_CUDA(cudaDeviceSynchronize());
    const std::vector<float> all = y_raw.download();
    const std::string overrun = y_raw.overrun("y");
    for (int i = 0; i < 4 + d; ++i) {
      const bool mine = i >= y_off && i < y_off + d;
      if ((!mine && std::memcmp(&all[std::size_t(i)], &guard_host[std::size_t(i)], sizeof(float)) != 0) ||
          !overrun.empty())
        return detail::failure("chapter " + chapter + ", " + what + ", " + detail::shape_of(n, d) +
                               ": rule: write only your own elements. The kernel wrote outside y[0.." +
                               std::to_string(d - 1) + "] (element " + std::to_string(i - y_off) +
                               ").\nhint: guard every store with if (row < d), and store y[row], not a "
                               "vector of rows.");
    }
    std::vector<float> W_after(W.size()), x_after(x.size());
    WB_CUDA(cudaMemcpy(W_after.data(), W_dev.data() + w_off, W.size() * sizeof(float), cudaMemcpyDeviceToHost));
    WB_CUDA(cudaMemcpy(x_after.data(), x_dev.data() + x_off, x.size() * sizeof(float), cudaMemcpyDeviceToHost));
    for (const std::string& change : {wb::describe_input_change(W, W_after, "W"), wb::describe_input_change(x, x_after, "x")})
      if (!change.empty())
        return detail::failure("chapter " + chapter + ", " + what + ", " + detail::shape_of(n, d) +
                               ": rule: inputs are read-only. The kernel " + change +
                               ".\nhint: W and x are const float*: accumulate in registers and write only y.");
    const std::vector<float> got(all.begin() + y_off, all.begin() + y_off + d);
    const auto expected = wb::model::matvec_reference(W, x, n, d);
    // With every pointer aligned, a wrong answer is about n or d, not alignment.
    const bool aligned = w_off == 0 && x_off == 0 && y_off == 0;
    return detail::with_rule(
        wb::compare(got, expected, detail::spec(chapter, what, n, d, aligned ? kTailHint : kAlignmentHint)),
        aligned ? kTailRule : kAlignmentRule);
  } catch (const wb::NotImplemented&) {
    throw;  // a starter: the test reads "to do", not a failed launch
  } catch (const std::exception& e) {
    return detail::failure("chapter " + chapter + ", " + what + ", " + detail::shape_of(n, d) + ": " + kAlignmentRule +
                           ". The launch failed: " + e.what() + "\n" + kAlignmentHint);
  }
}

const std::string kFenceRule = "rule: read and write only your own elements";

// y = W x with W, x and y each ending exactly where mapped memory ends (Fence::After) or
// starting exactly where it starts (Fence::Before).
inline wb::CompareResult check_fenced(const wb::model::DeviceMatvec& launch, int n, int d, wb_tests::Fence fence,
                                      const std::string& chapter) {
  const bool after = fence == wb_tests::Fence::After;
  const std::string label = "ch" + chapter + "/edges/fenced/" + std::to_string(d) + "x" + std::to_string(n);
  const std::string what = std::string("launch_matvec with W, x and y ") +
                           (after ? "ending exactly where mapped memory ends" : "starting exactly where mapped memory starts");
  const std::string hint =
      "hint: every load and store must stay inside [0, n) of its row and [0, d) of y: the last "
      "row's last float4 may not reach past n, a rounded-up thread may not load x[j] for j >= n "
      "(even to multiply it by zero), and no index may go below 0. Run compute-sanitizer "
      "(--tool memcheck) on your test binary to see the faulting access.";
  try {
    const std::vector<float> W = signed_values(std::size_t(d) * std::size_t(n), label + "/W");
    const std::vector<float> x = signed_values(std::size_t(n), label + "/x");
    wb_tests::FencedBuffer<float> W_dev(W.size(), fence), x_dev(x.size(), fence), y_dev(std::size_t(d), fence);
    W_dev.upload(W);
    x_dev.upload(x);
    y_dev.poison();
    launch(y_dev.data(), x_dev.data(), W_dev.data(), n, d, nullptr);
    WB_CUDA(cudaGetLastError());
    WB_CUDA(cudaDeviceSynchronize());
    const auto expected = wb::model::matvec_reference(W, x, n, d);
    return detail::with_rule(wb::compare(y_dev.download(), expected, detail::spec(chapter, what, n, d, kAlignmentHint)),
                             "rule: inputs may sit anywhere, even at the very end of memory (here W, x and y "
                             "start wherever that puts them, aligned or not)");
  } catch (const wb::NotImplemented&) {
    throw;  // a starter: the test reads "to do", not a failed launch
  } catch (const std::exception& e) {
    return detail::failure("chapter " + chapter + ", " + what + ", " + detail::shape_of(n, d) + ": " + kFenceRule +
                           " (inputs end exactly where memory ends). The kernel faulted: " + e.what() +
                           ": it read or wrote past an end of W, x or y.\n" + hint);
  }
}

const std::string kRowsRule = "rule: any number of rows (d may exceed 65535, a grid's y and z limit)";
const std::string kRowsHint =
    "hint: gridDim.y and gridDim.z are at most 65535, gridDim.x up to 2^31-1: put rows in "
    "blockIdx.x (or loop over rows with a stride), and compute row offsets as "
    "std::size_t(row) * n.";

// Many rows (a 151936-row classifier): y = W x through the guarded check.
inline wb::CompareResult check_tall(const wb::model::DeviceMatvec& launch, int n, int d, const std::string& chapter) {
  try {
    return detail::with_rule(wb::model::check_device_matvec(launch, n, d, {chapter, "launch_matvec", kRowsHint}),
                             kRowsRule);
  } catch (const wb::NotImplemented&) {
    throw;  // a starter: the test reads "to do", not a failed launch
  } catch (const std::exception& e) {
    return detail::failure("chapter " + chapter + ", launch_matvec, " + detail::shape_of(n, d) + ": " + kRowsRule +
                           ". The launch failed: " + e.what() + "\n" + kRowsHint);
  }
}

const std::string kIndexRule = "rule: 64-bit index arithmetic (d*n may exceed 2^31)";
const std::string kIndexHint =
    "hint: row * n overflows a 32-bit int once it passes 2^31 (here from row " +
    std::string("2^31 / n on): compute offsets as std::size_t(row) * std::size_t(n), and any "
                "flat index or grid-stride loop over all of W in std::size_t; a grid capped at "
                "some maximum must loop until every row is done.");

// Past 2^32 (kHuge32Rows x kHuge32Cols): an offset computed in 32-bit UNSIGNED arithmetic
// (blockIdx.x * n: blockIdx.x is an unsigned int) never goes negative, so it survives the
// 2^31 check above, but it wraps to 0 at 2^32 and the rows after that read the first rows.
const std::string kWrapRule = "rule: 64-bit index arithmetic (d*n may exceed 2^32, where unsigned int wraps)";
const std::string kWrapHint =
    "hint: blockIdx.x is an unsigned int, so blockIdx.x * n is computed in 32 bits: it does not go "
    "negative past 2^31, it wraps to 0 at 2^32 (here from row 2^32 / n on, which reads row 0 "
    "again). Widen before you multiply: std::size_t(blockIdx.x) * std::size_t(n); an unsigned "
    "or int result cast to std::size_t afterwards is already wrapped.";

struct HugeCheck {
  wb::CompareResult result;
  std::string skipped;  // why the check could not run here (not enough memory); empty when it ran
};

// d * n > 2^31 floats on the device: W generated there (hashed_value), the reference on the
// host's threads. W is exactly d*n*4 bytes of cudaMalloc (151936 x 16384 floats is a whole
// number of 2 MiB pages, so W ends where its allocation ends).
// `rule` and `hint` name the overflow the shape is there to catch (2^31 by default).
inline HugeCheck check_huge(const wb::model::DeviceMatvec& launch, int n, int d, const std::string& chapter,
                            const std::string& rule = kIndexRule, const std::string& hint = kIndexHint) {
  HugeCheck out;
  const std::size_t count = std::size_t(d) * std::size_t(n);
  const std::size_t need = count * sizeof(float) + (std::size_t(512) << 20);
  std::size_t free_bytes = 0, total_bytes = 0;
  WB_CUDA(cudaMemGetInfo(&free_bytes, &total_bytes));
  if (free_bytes < need) {
    out.skipped = "skipped: " + detail::shape_of(n, d) + " needs " + std::to_string(need >> 20) +
                  " MiB of device memory, this GPU has " + std::to_string(free_bytes >> 20) +
                  " MiB free (this check of index arithmetic runs on GPUs with more memory)";
    return out;
  }
  const std::string label = "ch" + chapter + "/edges/huge/" + std::to_string(d) + "x" + std::to_string(n);
  // The test's own buffers first: another test process may take the memory between the
  // cudaMemGetInfo above and these allocations (ctest runs several at once), which is this
  // machine's state, not the kernel's fault.
  std::optional<wb::DeviceBuffer<float>> W;
  try {
    W.emplace(count);
  } catch (const wb::CudaError& e) {
    if (e.code() != cudaErrorMemoryAllocation) throw;
    (void)cudaGetLastError();
    out.skipped = "skipped: " + detail::shape_of(n, d) + ": another process took the device memory this check needs";
    return out;
  }
  try {
    const std::uint64_t w_seed = seed_for(label + "/W");
    const std::vector<float> x = signed_values(std::size_t(n), label + "/x");
    wb::DeviceBuffer<float> x_dev{std::span<const float>(x)};
    wb::GuardedBuffer<float> y{std::size_t(d)};
    detail::fill_hashed<<<1024, 256>>>(W->data(), count, w_seed);
    WB_CHECK_LAUNCH("fill_hashed");
    WB_CUDA(cudaDeviceSynchronize());
    launch(y.data(), x_dev.data(), W->data(), n, d, nullptr);
    WB_CUDA(cudaGetLastError());
    WB_CUDA(cudaDeviceSynchronize());
    if (const std::string overrun = y.overrun("y"); !overrun.empty()) {
      out.result = detail::failure("chapter " + chapter + ", launch_matvec, " + detail::shape_of(n, d) + ": " +
                                   rule + ". The kernel " + overrun + ".\n" + hint);
      return out;
    }
    const auto expected = detail::reference([&](std::size_t i) { return hashed_value(w_seed, i); }, x, n, d);
    out.result = detail::with_rule(
        wb::compare(y.download(), expected, detail::spec(chapter, "launch_matvec", n, d, hint)), rule);
  } catch (const wb::NotImplemented&) {
    throw;  // a starter: the test reads "to do", not a failed launch
  } catch (const std::exception& e) {
    out.result = detail::failure("chapter " + chapter + ", launch_matvec, " + detail::shape_of(n, d) + ": " +
                                 rule + ". The kernel failed: " + e.what() + "\n" + hint);
  }
  return out;
}

// The same size through a host wrapper: W (10 GB) in host memory; `call` computes out = W x
// (for chapter 03 it loads W first). Checks the wrapper's own size arithmetic too.
using HostCall = std::function<void(float* out, const float* x, const float* W, int n, int d)>;
inline HugeCheck check_huge_host(const HostCall& call, int n, int d, const std::string& chapter,
                                 const std::string& what, std::size_t device_bytes_needed) {
  HugeCheck out;
  std::size_t free_bytes = 0, total_bytes = 0;
  WB_CUDA(cudaMemGetInfo(&free_bytes, &total_bytes));
  if (free_bytes < device_bytes_needed) {
    out.skipped = "skipped: " + what + " with " + detail::shape_of(n, d) + " needs " +
                  std::to_string(device_bytes_needed >> 20) + " MiB of device memory, this GPU has " +
                  std::to_string(free_bytes >> 20) + " MiB free";
    return out;
  }
  const std::string label = "ch" + chapter + "/edges/huge-host/" + std::to_string(d) + "x" + std::to_string(n);
  const std::size_t count = std::size_t(d) * std::size_t(n);
  const std::uint64_t w_seed = seed_for(label + "/W");
  // Uninitialized, then filled by every thread (a zero-filled 10 GB vector costs seconds).
  std::unique_ptr<float[]> W_owner(new float[count]);
  float* const W = W_owner.get();
  {
    const unsigned threads = std::max(1u, std::min(32u, std::thread::hardware_concurrency()));
    std::vector<std::thread> pool;
    for (unsigned t = 0; t < threads; ++t)
      pool.emplace_back([&, t] {
        const std::size_t begin = count / threads * t, end = t + 1 == threads ? count : count / threads * (t + 1);
        for (std::size_t i = begin; i < end; ++i) W[i] = hashed_value(w_seed, i);
      });
    for (auto& th : pool) th.join();
  }
  const std::vector<float> x = signed_values(std::size_t(n), label + "/x");
  std::vector<float> got(std::size_t(d), std::numeric_limits<float>::quiet_NaN());
  try {
    call(got.data(), x.data(), W, n, d);
    const auto expected = detail::reference([&](std::size_t i) { return W[i]; }, x, n, d);
    out.result = detail::with_rule(
        wb::compare(got, expected,
                    detail::spec(chapter, what, n, d,
                                 "hint: the byte counts of the copies are d*n*sizeof(float): compute them in "
                                 "std::size_t (std::size_t(n) * std::size_t(d) * sizeof(float)); n * d in int "
                                 "overflows first.")),
        kIndexRule);
  } catch (const wb::NotImplemented&) {
    throw;  // a starter: the test reads "to do", not a failed launch
  } catch (const std::exception& e) {
    out.result = detail::failure("chapter " + chapter + ", " + what + ", " + detail::shape_of(n, d) + ": " +
                                 kIndexRule + ". It failed: " + e.what() +
                                 "\nhint: sizes of d*n floats need std::size_t arithmetic all the way "
                                 "(std::size_t(n) * std::size_t(d) * sizeof(float)).");
  }
  return out;
}

// ---- Host wrappers: "when it returns, out holds the result", for any HOST memory.
// A cudaMemcpyAsync into pageable memory (a std::vector) happens to wait until the copy is
// done, so a wrapper that never synchronizes passes every test with std::vector outputs.
// Into pinned memory (cudaMallocHost, which a caller may well use for faster copies) it only
// enqueues the copy and returns. Here W, x and out are pinned and out is read the moment the
// call returns, as the caller's next line would.
const std::string kReturnRule =
    "rule: when the call returns, out holds the result (W, x and out may be pinned host memory)";
const std::string kReturnHint =
    "hint: cudaMemcpyAsync from or into pinned memory (cudaMallocHost) only enqueues the copy and "
    "returns at once; into pageable memory it happens to wait, which is why tests with a "
    "std::vector out passed. Copy out back with cudaMemcpy, or call cudaStreamSynchronize(stream) "
    "after the last cudaMemcpyAsync, before you return.";

namespace detail {
// Pinned host memory that frees itself.
struct PinnedFloats {
  float* p = nullptr;
  explicit PinnedFloats(std::size_t count) { WB_CUDA(cudaMallocHost(&p, count * sizeof(float))); }
  ~PinnedFloats() { cudaFreeHost(p); }
  PinnedFloats(const PinnedFloats&) = delete;
  PinnedFloats& operator=(const PinnedFloats&) = delete;
};
}  // namespace detail

// out = W x through `call` with W, x and out in pinned host memory (out NaN-poisoned), out
// read as soon as `call` returns. `what` names the call ("matvec_naive").
inline wb::CompareResult check_pinned_host(const HostCall& call, int n, int d, const std::string& chapter,
                                           const std::string& what) {
  const std::string label = "ch" + chapter + "/edges/pinned/" + std::to_string(d) + "x" + std::to_string(n);
  const std::string full = what + " with W, x and out in pinned host memory (cudaMallocHost)";
  try {
    const std::size_t count = std::size_t(d) * std::size_t(n);
    detail::PinnedFloats W{count}, x{std::size_t(n)}, out{std::size_t(d)};
    const std::uint64_t w_seed = seed_for(label + "/W"), x_seed = seed_for(label + "/x");
    for (std::size_t i = 0; i < count; ++i) W.p[i] = hashed_value(w_seed, i);
    for (std::size_t j = 0; j < std::size_t(n); ++j) x.p[j] = hashed_value(x_seed, j);
    std::fill(out.p, out.p + d, std::numeric_limits<float>::quiet_NaN());
    call(out.p, x.p, W.p, n, d);
    const std::vector<float> at_return(out.p, out.p + d);  // read at once, before anything else
    WB_CUDA(cudaDeviceSynchronize());  // let a copy still in flight land before the memory is freed
    const std::vector<float> later(out.p, out.p + d);
    const auto expected = wb::model::matvec_reference({W.p, count}, {x.p, std::size_t(n)}, n, d);
    const wb::CompareSpec s = detail::spec(chapter, full, n, d, kReturnHint);
    const wb::CompareResult r = wb::compare(at_return, expected, s);
    if (r.ok) return r;
    // Wrong at return but right after a synchronize: nothing but the missing wait.
    if (wb::compare(later, expected, s).ok)
      return detail::with_rule(r, kReturnRule + ". out was still being computed or copied when " + what +
                                      " returned (after a cudaDeviceSynchronize it was right)");
    return wb::compare(later, expected,
                       detail::spec(chapter, full + ", read after a cudaDeviceSynchronize", n, d,
                                    "hint: wrong even once every copy has landed, so not (only) a missing wait: "
                                    "fix this wrapper's other failures first."));
  } catch (const wb::NotImplemented&) {
    throw;  // a starter: the test reads "to do", not a failed call
  } catch (const std::exception& e) {
    return detail::failure("chapter " + chapter + ", " + full + ", " + detail::shape_of(n, d) + ": " + kReturnRule +
                           ". It failed: " + e.what());
  }
}

// ---- The suites the chapters run (the first failure of each, or success).

// Shapes: n of 1, 3, 4, 5, a warp's multiple, around 1024 and 4096 (every remainder mod 4 and
// every vector-width tail), d of 1 and a number that is no multiple of anything; layouts:
// every pointer alone off its boundary, then all three at different offsets. The aligned
// layout of each shape runs first, so a wrong answer there is reported as a tail problem.
inline wb::CompareResult check_all_layouts(const wb::model::DeviceMatvec& launch, const std::string& chapter) {
  struct Shape { int d, n; };
  const Shape shapes[] = {{1, 1}, {1, 4097}, {37, 3}, {37, 4}, {37, 5}, {37, 768}, {37, 1023},
                          {37, 1024}, {37, 4096}, {37, 4097}, {3, 16387}};
  const int layouts[][3] = {{0, 0, 0}, {1, 0, 0}, {0, 1, 0}, {0, 0, 1}, {3, 2, 1}, {2, 3, 3}};
  for (const Shape& s : shapes)
    for (const auto& l : layouts) {
      wb::CompareResult r = check_layout(launch, s.n, s.d, l[0], l[1], l[2], chapter);
      if (!r.ok) return r;
    }
  return detail::success();
}

inline wb::CompareResult check_all_fenced(const wb::model::DeviceMatvec& launch, const std::string& chapter) {
  struct Case { int d, n; wb_tests::Fence fence; };
  const Case cases[] = {{1, 1, wb_tests::Fence::After},      {3, 5, wb_tests::Fence::After},
                        {37, 4096, wb_tests::Fence::After},  {37, 4097, wb_tests::Fence::After},
                        {9, 1023, wb_tests::Fence::After},   {300, 768, wb_tests::Fence::After},
                        {33, 64, wb_tests::Fence::After},    {3, 5, wb_tests::Fence::Before},
                        {37, 4097, wb_tests::Fence::Before}, {37, 4096, wb_tests::Fence::Before}};
  for (const Case& c : cases) {
    wb::CompareResult r = check_fenced(launch, c.n, c.d, c.fence, chapter);
    if (!r.ok) return r;
  }
  return detail::success();
}

inline wb::CompareResult check_all_tall(const wb::model::DeviceMatvec& launch, const std::string& chapter) {
  struct Shape { int d, n; };
  for (const Shape s : {Shape{65536, 3}, Shape{151936, 96}, Shape{70001, 257}}) {
    wb::CompareResult r = check_tall(launch, s.n, s.d, chapter);
    if (!r.ok) return r;
  }
  return detail::success();
}

const std::string kStreamRule =
    "rule: launch_matvec enqueues its work on `stream` and returns without synchronizing";
const std::string kStreamHint =
    "hint: launch with <<<grid, block, 0, stream>>> (without the stream the kernel goes to the "
    "legacy default stream, unordered with the caller's stream), and leave the waiting to the "
    "caller: no cudaStreamSynchronize or cudaDeviceSynchronize in launch_matvec (to stop at a "
    "faulting launch, run with WB_DEBUG_SYNC=1).";

// Every other check passes the legacy stream or reads y back after a synchronize, so a launch
// that drops `stream` (<<<d, threads>>>) or waits for it gives right answers there. Captured
// into a CUDA graph on a blocking stream of the test's own, neither passes: the first breaks
// the capture (or runs outside the graph and leaves y poisoned in the replay), the second
// breaks the capture. Callers skip it under WB_DEBUG_SYNC=1, which synchronizes every launch.
inline wb::CompareResult check_captured(const wb::model::DeviceMatvec& launch, const std::string& chapter) {
  const int n = 300, d = 517;
  const wb::model::DeviceMatvec captured = [&](float* y, const float* x, const float* W, int cols, int rows,
                                               cudaStream_t poisoned_on) {
    WB_CUDA(cudaStreamSynchronize(poisoned_on));  // the check's own poisoning of y, before the capture
    const wb::testing::OwnedStream owned(cudaStreamDefault);  // blocking: a legacy-stream launch breaks it
    wb::testing::CapturedGraph graph(owned.s, [&](cudaStream_t s) { launch(y, x, W, cols, rows, s); });
    WB_CUDA(cudaMemsetAsync(y, 0xFF, std::size_t(rows) * sizeof(float), owned.s));  // only the replay writes y
    graph.replay(owned.s);
    WB_CUDA(cudaStreamSynchronize(owned.s));
  };
  try {
    return detail::with_rule(
        wb::model::check_device_matvec(captured, n, d,
                                       {chapter, "launch_matvec captured into a CUDA graph and replayed (the graph "
                                                 "holds only what was enqueued on `stream`)", kStreamHint}),
        kStreamRule);
  } catch (const wb::NotImplemented&) {
    throw;  // a starter: the test reads "to do"
  } catch (const std::exception& e) {
    return detail::failure("chapter " + chapter + ": " + kStreamRule + ". launch_matvec(y, x, W, " +
                           std::to_string(n) + ", " + std::to_string(d) + ", stream), captured into a CUDA "
                           "graph on a stream of the test's own, broke the capture: " + e.what() + "\n" +
                           kStreamHint);
  }
}

// The classifier of a 151936-token vocabulary over 16384 features: 2.49e9 floats.
constexpr int kHugeRows = 151936, kHugeCols = 16384;
// 131200 rows of 32768: 4.30e9 floats (17.2 GB, a whole number of 2 MiB pages), 128 rows past
// the 2^32 wrap. Only on the device (W generated there): a host copy would double the cost.
constexpr int kHuge32Rows = 131200, kHuge32Cols = 32768;

}  // namespace matvec_edges
