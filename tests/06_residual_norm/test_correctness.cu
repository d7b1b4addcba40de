// Chapter 06 correctness: residual add + LayerNorm / RMSNorm, unfused and fused, fp32 and
// half precision, against a double-precision CPU reference on fresh random inputs (WB_SEED
// reproduces a run). Every output sits between guard bands and starts as NaN; every input is
// checked unchanged afterwards. Then the two tests a micro-benchmark cannot replace: a stack
// of pre-LN blocks (does the kernel fit the model?) and 32 layers of residual adds (does the
// residual stream keep its precision?).
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "../lib/captured_graph.hpp"
#include "../lib/enqueue_only.hpp"
#include "../lib/hashed_fill.cuh"
#include "../lib/kernel_coverage_test.hpp"
#include "../lib/owned_stream.hpp"
#include "../lib/poisoned_shared_memory.cuh"
#include "add_norm.cuh"
#include "reference.hpp"
#include "wb/buffer.hpp"
#include "wb/check.hpp"
#include "wb/guarded_buffer.hpp"
#include "wb/kernel_coverage.hpp"  // quick(): under compute-sanitizer
#include "wb/not_implemented.hpp"
#include "wb/random.hpp"
#include "wb/testing.hpp"
#include "wb/upload.hpp"

namespace {

using ch06::Norm;
using ch06::NormParams;
using ch06::reference::Data;
using ch06::reference::Problem;

enum class Impl { Unfused, Fused };
const char* name_of(Impl impl) { return impl == Impl::Fused ? "fused" : "unfused"; }

// The three element types of delta and h, and what a round trip through each does to a float.
template <typename T> struct Type;
template <> struct Type<float> {
  static constexpr const char* name = "fp32";
  static constexpr wb::Tolerance tol = ch06::reference::kHFp32Tol;
  static float round(float v) { return v; }
  static float widen(float v) { return v; }
  static float narrow(float v) { return v; }
};
template <> struct Type<__half> {
  static constexpr const char* name = "fp16";
  static constexpr wb::Tolerance tol = ch06::reference::kHFp16Tol;
  static float round(float v) { return __half2float(__float2half_rn(v)); }
  static float widen(__half v) { return __half2float(v); }
  static __half narrow(float v) { return __float2half_rn(v); }
};
template <> struct Type<__nv_bfloat16> {
  static constexpr const char* name = "bf16";
  static constexpr wb::Tolerance tol = ch06::reference::kHBf16Tol;
  static float round(float v) { return __bfloat162float(__float2bfloat16_rn(v)); }
  static float widen(__nv_bfloat16 v) { return __bfloat162float(v); }
  static __nv_bfloat16 narrow(float v) { return __float2bfloat16_rn(v); }
};

// Where each array starts inside its allocation, in elements: 1 makes a view that is not
// 16-byte aligned; each pointer gets its own offset.
struct Offsets {
  std::size_t x = 0, delta = 0, r = 0, h = 0, weight = 0, bias = 0;
};

struct Output {
  std::vector<float> r, h;
  bool ran = true;  // false: the call failed, and the test has already said why
};

// An fp32 LayerNorm problem on the device: its inputs uploaded into allocations of exactly their
// size, r and h allocated; call() enqueues either implementation on it. With `repeat` > 1 the
// problem's rows are repeated that many times on the device (a long call without a host copy).
struct OnDevice {
  explicit OnDevice(const Problem& problem, int repeat = 1)
      : p(problem), rows(p.rows * repeat), n(std::size_t(rows) * p.dim), x(n), delta(n), r(n), h(n),
        weight(p.dim), bias(p.dim) {
    x.upload(p.x);
    delta.upload(p.delta);
    for (std::size_t done = p.x.size(); done < n; done *= 2)
      for (float* a : {x.data(), delta.data()})
        WB_CUDA(cudaMemcpy(a + done, a, std::min(done, n - done) * sizeof(float), cudaMemcpyDeviceToDevice));
    WB_CUDA(cudaDeviceSynchronize());  // a device-to-device copy does not wait for itself
    weight.upload(p.weight);
    bias.upload(p.bias);
  }
  void call(Impl impl, cudaStream_t stream) {
    const NormParams params{Norm::LayerNorm, weight.data(), bias.data(), p.eps};
    if (impl == Impl::Fused) {
      ch06::add_norm_fused(x.data(), delta.data(), r.data(), h.data(), rows, p.dim, params, stream);
    } else {
      ch06::residual_add(x.data(), delta.data(), r.data(), n, stream);
      ch06::norm_rows(r.data(), h.data(), rows, p.dim, params, stream);
    }
  }
  const Problem& p;
  const int rows;
  const std::size_t n;
  wb::DeviceBuffer<float> x, delta, r, h, weight, bias;
};

// How the test enqueues the call: directly on a non-blocking stream, or captured into a CUDA
// graph on a blocking stream and replayed (all work on `stream`: tests/lib/captured_graph.hpp).
enum class Launch { Direct, Graph };

template <typename T>
std::string what_of(Impl impl) {
  return std::string(name_of(impl)) + " add + norm, " + Type<T>::name;
}

// Runs one add + norm on the GPU (both kernels for Impl::Unfused) and returns r and h (h
// widened to float). Fails the test when a guard band or an input changed. `rms_bias`, when
// not null, is the bias pointer an RMSNorm call is handed instead of the problem's.
template <typename T>
Output run(Impl impl, const Problem& p, Offsets off = {}, Launch launch = Launch::Direct,
           const float* rms_bias = nullptr) {
  const std::size_t n = std::size_t(p.rows) * p.dim;
  const std::string what = what_of<T>(impl) + ", " + ch06::reference::describe(p);
  wb::GuardedBuffer<float> x_buf(n + off.x), r_buf(n + off.r);
  wb::GuardedBuffer<T> delta_buf(n + off.delta), h_buf(n + off.h);
  wb::GuardedBuffer<float> weight_buf(p.weight.size() + off.weight), bias_buf(p.bias.size() + off.bias);
  std::vector<T> delta_typed(n);
  for (std::size_t i = 0; i < n; ++i) delta_typed[i] = Type<T>::narrow(p.delta[i]);
  // upload_bytes waits for the copy's DMA: the kernel below runs on a non-blocking stream,
  // which nothing orders after a plain cudaMemcpy (it once read delta's NaN poison so).
  wb::upload_bytes(x_buf.data() + off.x, p.x.data(), n * sizeof(float));
  wb::upload_bytes(delta_buf.data() + off.delta, delta_typed.data(), n * sizeof(T));
  wb::upload_bytes(weight_buf.data() + off.weight, p.weight.data(), p.weight.size() * sizeof(float));
  wb::upload_bytes(bias_buf.data() + off.bias, p.bias.data(), p.bias.size() * sizeof(float));
  // A graph's stream is blocking: a launch on the legacy stream breaks the capture.
  const wb::testing::OwnedStream owned(launch == Launch::Graph ? cudaStreamDefault : cudaStreamNonBlocking);
  const cudaStream_t stream = owned.s;
  r_buf.poison(stream);
  h_buf.poison(stream);
  wb::testing::poison_shared_memory(stream);  // a shared read before its write gets 0xFF bytes

  NormParams params;
  params.norm = p.norm;
  params.weight = weight_buf.data() + off.weight;
  params.bias = p.norm == Norm::LayerNorm || p.rmsnorm_gets_bias ? bias_buf.data() + off.bias : nullptr;
  if (p.norm == Norm::RMSNorm && rms_bias != nullptr) params.bias = rms_bias;
  params.eps = p.eps;
  const float* x = x_buf.data() + off.x;
  const T* delta = delta_buf.data() + off.delta;
  float* r = r_buf.data() + off.r;
  T* h = h_buf.data() + off.h;
  const auto enqueue = [&](cudaStream_t s) {
    if (impl == Impl::Fused) {
      ch06::add_norm_fused(x, delta, r, h, p.rows, p.dim, params, s);
    } else {
      ch06::residual_add(x, delta, r, n, s);
      ch06::norm_rows(r, h, p.rows, p.dim, params, s);
    }
  };
  if (launch == Launch::Direct) {
    enqueue(stream);
  } else {
    std::unique_ptr<wb::testing::CapturedGraph> graph;
    try {
      graph = std::make_unique<wb::testing::CapturedGraph>(stream, enqueue);
    } catch (const wb::NotImplemented&) {
      throw;
    } catch (const std::exception& e) {
      const std::string error = e.what();
      FAIL_CHECK("ch06 " << what << ", seed " << wb::base_seed()
                         << ": capturing the call into a CUDA graph failed: " << error.substr(0, error.find('\n'))
                         << "\n" << wb::testing::kEverythingOnStreamHint);
      return Output{{}, {}, false};
    }
    // Work that escaped the stream ran once, during the capture: poison its outputs again, so
    // that only what the replay writes counts.
    r_buf.poison(stream);
    h_buf.poison(stream);
    graph->replay(stream);
  }
  // Read back on the same (non-blocking) stream: work that escaped it races with the copy.
  Output out{std::vector<float>(n), std::vector<float>(n)};
  std::vector<T> h_typed(n);
  if (n > 0) {
    WB_CUDA(cudaMemcpyAsync(out.r.data(), r, n * sizeof(float), cudaMemcpyDeviceToHost, stream));
    WB_CUDA(cudaMemcpyAsync(h_typed.data(), h, n * sizeof(T), cudaMemcpyDeviceToHost, stream));
  }
  WB_CUDA(cudaStreamSynchronize(stream));
  for (std::size_t i = 0; i < n; ++i) out.h[i] = Type<T>::widen(h_typed[i]);

  const std::string hint_overrun =
      ".\nhint: one block per row: a thread whose index passes dim must not store (guard every "
      "store with if (i < dim)), and block b must stay inside row b.";
  for (const auto& [buffer, name] :
       {std::pair<std::string, std::string>{r_buf.overrun("r"), "r"},
        {h_buf.overrun("h"), "h"}})
    if (!buffer.empty())
      FAIL_CHECK("ch06 " << what << ", seed " << wb::base_seed()
                         << ": rule: write only your own elements. The kernel " << buffer
                         << hint_overrun);
  const std::string read_only_hint =
      ".\nhint: x, delta, weight and bias are inputs (const pointers): write r and h only.";
  for (const std::string& change :
       {x_buf.input_change(p.x, "x", off.x), weight_buf.input_change(p.weight, "weight", off.weight),
        bias_buf.input_change(p.bias, "bias", off.bias)})
    if (!change.empty())
      FAIL_CHECK("ch06 " << what << ", seed " << wb::base_seed()
                         << ": rule: inputs are read-only. The kernel " << change
                         << read_only_hint);
  std::vector<T> delta_now(n);
  if (n > 0)
    WB_CUDA(cudaMemcpy(delta_now.data(), delta, n * sizeof(T), cudaMemcpyDeviceToHost));
  if (n > 0 && std::memcmp(delta_now.data(), delta_typed.data(), n * sizeof(T)) != 0)
    FAIL_CHECK("ch06 " << what << ", seed " << wb::base_seed()
                       << ": rule: inputs are read-only. The kernel changed delta"
                       << read_only_hint);
  return out;
}

// Runs and checks r (bit for bit) and h (against the double reference).
template <typename T>
void check(Impl impl, const Problem& p, Offsets off = {}, const std::string& extra = "",
           Launch launch = Launch::Direct, const float* rms_bias = nullptr) {
  const Output out = run<T>(impl, p, off, launch, rms_bias);
  if (!out.ran) return;
  const std::string what = what_of<T>(impl) + extra;
  const std::string r_failure = ch06::reference::check_residual(p, out.r, what);
  if (!r_failure.empty()) FAIL_CHECK(r_failure);
  const std::vector<float> r = ch06::reference::residual(p);
  const std::string h_failure =
      ch06::reference::check_normalized(p, r, out.h, Type<T>::tol, what);
  if (!h_failure.empty()) FAIL_CHECK(h_failure);
}

template <typename T>
Problem problem(int rows, int dim, Norm norm, Data data, const std::string& tag) {
  return ch06::reference::make_problem(
      rows, dim, norm, data,
      "ch06/" + tag + "/" + Type<T>::name + "/" + std::to_string(rows) + "x" +
          std::to_string(dim) + "/" + ch06::reference::norm_name(norm),
      &Type<T>::round);
}

struct Shape {
  int rows, dim;
};
// 1, odd dims, dims that are not a multiple of 4, 32 or the block size, the model widths
// (100, 512, 768, 1024: the reference's warp-per-row kernel with 2, 4, 6 and 8 packs per
// lane, 1024 its largest row, in row counts that leave its last block of 4 rows part empty;
// 1028, 2560, 4096, 6144: its block-per-row packed kernel with 1, 2 and 4 packs per thread),
// the largest row that fits in one block's registers in the reference (16384) and rows past
// it (16385, 20000: another path), and one far past any register budget (65537: 64 values
// a thread of 1024 threads do not hold it; a row kept in registers needs another path).
const std::vector<Shape> kShapes = {{1, 1},     {1, 3},     {7, 17},    {3, 100},  {1, 512},
                                    {33, 768},  {7, 1024},  {2, 1028},  {5, 1001}, {9, 2560},
                                    {3, 4096},  {3, 6144},  {2, 8191},  {2, 16384},
                                    {2, 16385}, {1, 20000}, {1, 65537}};

// RMSNorm is handed the problem's bias here (add_norm.cuh: ignored, may be null), which h
// must not show; the other tests hand it null.
template <typename T>
void check_shapes(Impl impl, Norm norm, const std::vector<Shape>& shapes) {
  for (const Shape& s : shapes) {
    Problem p = problem<T>(s.rows, s.dim, norm, Data::Typical, "shapes");
    p.rmsnorm_gets_bias = norm == Norm::RMSNorm;
    check<T>(impl, p, {}, p.rmsnorm_gets_bias ? " (RMSNorm handed a non-null bias, which it must ignore)" : "");
  }
}

TEST_CASE("fused add + LayerNorm, fp32, matches the double reference on every shape") {
  WB_REQUIRE_GPU();
  check_shapes<float>(Impl::Fused, Norm::LayerNorm, kShapes);
}

TEST_CASE("fused add + RMSNorm, fp32, matches the double reference on every shape") {
  WB_REQUIRE_GPU();
  check_shapes<float>(Impl::Fused, Norm::RMSNorm, kShapes);
}

TEST_CASE("unfused add then norm, fp32, both norms, every shape") {
  WB_REQUIRE_GPU();
  check_shapes<float>(Impl::Unfused, Norm::LayerNorm, kShapes);
  check_shapes<float>(Impl::Unfused, Norm::RMSNorm, kShapes);
}

TEST_CASE("half precision delta and h (fp16, bf16), fp32 residual stream") {
  WB_REQUIRE_GPU();
  const std::vector<Shape> shapes = {{1, 1},    {7, 17},   {3, 100},  {7, 512},
                                     {33, 768},  {1, 1024}, {2, 1028}, {9, 2560},
                                     {5, 2561},  {3, 6144}, {2, 16384}, {1, 20000}};
  for (const Impl impl : {Impl::Fused, Impl::Unfused})
    for (const Norm norm : {Norm::LayerNorm, Norm::RMSNorm}) {
      check_shapes<__half>(impl, norm, shapes);
      check_shapes<__nv_bfloat16>(impl, norm, shapes);
    }
}

TEST_CASE("rows with mean 1e4 and spread 1: the variance must be computed stably") {
  WB_REQUIRE_GPU();
  for (const Impl impl : {Impl::Fused, Impl::Unfused})
    for (const Shape s : std::vector<Shape>{{4, 768}, {3, 4096}, {2, 16384}, {1, 20000}}) {
      check<float>(impl, problem<float>(s.rows, s.dim, Norm::LayerNorm, Data::LargeMean, "mean1e4"),
                   {}, " (rows with mean 1e4)");
      // Row 0 moved to mean 0: every row needs a pivot of its own (its first value, not the
      // matrix's), or the rows with mean 1e4 are summed as numbers near 1e4 again.
      Problem mixed =
          problem<float>(s.rows, s.dim, Norm::LayerNorm, Data::LargeMean, "mean1e4-row0-at-0");
      for (int i = 0; i < s.dim; ++i) mixed.x[i] -= 1e4f;
      check<float>(impl, mixed, {}, " (row 0 with mean 0, the other rows with mean 1e4)");
      // The same rows with the mean carried by delta (x ~ N(0, 0.5), delta ~ 1e4 + N(0, 1)):
      // r is the same, and a pivot near the row must come from r, not from x alone.
      Problem in_delta =
          problem<float>(s.rows, s.dim, Norm::LayerNorm, Data::LargeMean, "mean1e4-in-delta");
      std::swap(in_delta.x, in_delta.delta);
      check<float>(impl, in_delta, {}, " (rows with mean 1e4 carried by delta, x small: the pivot "
                                       "must be near r = x + delta)");
      // Smaller means, as far from 0 against their spread: means of 30 to 90 (either sign),
      // spread 0.01 (var 1.25e-4, above eps). It is the ratio that makes E[r^2] - E[r]^2
      // cancel, not the size of the mean.
      Problem moderate =
          problem<float>(s.rows, s.dim, Norm::LayerNorm, Data::LargeMean, "mean-30-to-90");
      for (int row = 0; row < s.rows; ++row) {
        const float mean = (row % 2 == 0 ? 1.0f : -1.0f) * (30.0f + 20.0f * (row % 4));
        for (int i = 0; i < s.dim; ++i) {
          const std::size_t k = std::size_t(row) * s.dim + i;
          moderate.x[k] = (moderate.x[k] - 1e4f) * 0.01f + mean;
          moderate.delta[k] *= 0.01f;
        }
      }
      check<float>(impl, moderate, {}, " (rows with means of 30 to 90 and spread 0.01)");
    }
}

// The rows above keep the pivot (the row's first value) within a few spreads of the mean, where
// even E[d^2] - E[d]^2 over d = r - pivot holds: its cancellation error grows with
// (pivot - mean)^2 against the variance, and only a pivot far from the mean shows it. Here the
// first value of each row is +64 or -64 and the others are of spread about 2 (x ~ N(0, 2),
// delta ~ N(0, 1)), both in multiples of 1/32: r is exact, every d = r - pivot and every sum of
// them is exact in float, and dim (1024: a warp per row in the reference; 2048: a block per
// row) divides exactly, so a mean taken first and the squared deviations from it are right to
// a few roundings, while the shifted one-pass formula is off by several times the tolerance
// in most rows (an emulation of both in fp32: the two-pass and Welford at under 3% of the
// tolerance, the one-pass at 3 to 5 times it in the worst row of each shape).
// The same rows go through the reference's other two paths, which a one-pass formula in only
// some kernels would slip past: 2048 with x one float into its allocation (not 16-byte
// aligned: one value at a time), and 20000 (longer than a block's registers hold). There the
// values are multiples of 1/8, so that the sums of d (up to 20000 x 83 < 2^21) stay exact too:
// the two-pass mean is then one rounding off (at most 0.3 of the tolerance in h), while the
// one-pass formula misses by 4 to 20 times it in the worst row (emulated in fp32, 12 seeds).
TEST_CASE("rows whose first value is far from the mean: the pivot does not make E[d^2] - E[d]^2 safe") {
  WB_REQUIRE_GPU();
  struct OutlierCase {
    Shape s;
    std::size_t x_offset;  // floats into x's allocation: 1 is not 16-byte aligned
    float grid;            // every value of x and delta a multiple of 1 / grid
    const char* path;
  };
  const std::vector<OutlierCase> cases = {
      {{32, 1024}, 0, 32.0f, "multiples of 1/32"},
      {{32, 2048}, 0, 32.0f, "multiples of 1/32"},
      {{32, 2048}, 1, 32.0f, "multiples of 1/32; x one float into its allocation, not 16-byte aligned"},
      {{16, 20000}, 0, 8.0f, "multiples of 1/8; rows longer than a block's registers hold"}};
  for (const Impl impl : {Impl::Fused, Impl::Unfused})
    for (const OutlierCase& c : cases) {
      const Shape s = c.s;
      Problem p = problem<float>(s.rows, s.dim, Norm::LayerNorm, Data::Typical, "pivot-outlier");
      for (float& v : p.x) v = std::round(v * c.grid) / c.grid;
      for (float& v : p.delta) v = std::round(v * c.grid) / c.grid;
      for (int row = 0; row < s.rows; ++row) p.x[std::size_t(row) * s.dim] = row % 2 == 0 ? 64.0f : -64.0f;
      const std::string what = what_of<float>(impl) +
                               " (rows whose first value is +-64, the other values of spread about 2, " + c.path + ")";
      Offsets off;
      off.x = c.x_offset;
      const Output out = run<float>(impl, p, off);
      if (!out.ran) continue;
      const std::string r_failure = ch06::reference::check_residual(p, out.r, what);
      if (!r_failure.empty()) FAIL_CHECK(r_failure);
      const std::string h_failure = ch06::reference::check_normalized(
          p, ch06::reference::residual(p), out.h, ch06::reference::kHFp32Tol, what);
      if (!h_failure.empty())
        FAIL_CHECK("ch06 " << what << ", " << ch06::reference::describe(p) << ", seed " << wb::base_seed()
                   << ": h is wrong on rows whose first value (the pivot) is far from the row's mean.\n"
                   << "rule: the variance by a stable method, for any row: a row's first value may be an "
                      "outlier (a channel of massive activations), so the pivot r[0] may sit far from the mean.\n"
                      "hint: the pivot makes the values small only when it is near the mean; E[d^2] - E[d]^2 over "
                      "d = r - pivot still cancels, and its error grows with (pivot - mean)^2. Take the mean first, "
                      "then sum the squared deviations from it (a second pass over the registers), or use "
                      "Welford's update, in every kernel: the one-value-at-a-time and long-row paths too.\n"
                   << h_failure);
    }
}

// eps is inside the square root, 1 / sqrt(var + eps). With rows of spread ~1 and eps = 1e-5,
// 1 / (sqrt(var) + eps) is off by ~5e-6, inside the tolerance; rows of spread ~2e-3 (var
// ~3e-6, below eps) and a large eps both tell them apart.
TEST_CASE("eps inside the square root: rows of small spread, and a large eps") {
  WB_REQUIRE_GPU();
  const std::string formula = ", where h = (r - mean) / sqrt(var + eps) * weight + bias, not / (sqrt(var) + eps)";
  for (const Impl impl : {Impl::Fused, Impl::Unfused})
    for (const Norm norm : {Norm::LayerNorm, Norm::RMSNorm})
      for (const Shape s : std::vector<Shape>{{4, 768}, {5, 1001}, {3, 4096}, {1, 20000}}) {
        Problem small = problem<float>(s.rows, s.dim, norm, Data::Typical, "small-spread");
        for (float& v : small.x) v *= 1e-3f;
        for (float& v : small.delta) v *= 1e-3f;
        check<float>(impl, small, {}, " (rows of spread ~2e-3: var ~3e-6 is below eps = 1e-5" + formula + ")");
        Problem large_eps = problem<float>(s.rows, s.dim, norm, Data::Typical, "large-eps");
        large_eps.eps = 0.5f;
        check<float>(impl, large_eps, {}, " (eps = 0.5" + formula + ")");
      }
}

TEST_CASE("a constant row (variance 0) gives h = bias, never NaN") {
  WB_REQUIRE_GPU();
  for (const Impl impl : {Impl::Fused, Impl::Unfused})
    for (const Norm norm : {Norm::LayerNorm, Norm::RMSNorm})
      for (const Shape s : std::vector<Shape>{{3, 1}, {5, 768}, {2, 20000}}) {
        check<float>(impl, problem<float>(s.rows, s.dim, norm, Data::ConstantRows, "constant"),
                     {}, " (constant rows)");
        check<__half>(impl, problem<__half>(s.rows, s.dim, norm, Data::ConstantRows, "constant"),
                      {}, " (constant rows)");
      }
}

TEST_CASE("views that are not 16-byte aligned, each pointer on its own") {
  WB_REQUIRE_GPU();
  for (const Impl impl : {Impl::Fused, Impl::Unfused})
    // Offsets of 2 floats too: 8 bytes off, aligned for a pack of 4 halves but not for a float4
    // (a pack check by the element type of delta and h alone lets them through).
    for (const Offsets off : std::vector<Offsets>{{1, 0, 0, 0}, {0, 1, 0, 0}, {0, 0, 1, 0},
                                                  {0, 0, 0, 1}, {0, 0, 0, 0, 1, 0}, {0, 0, 0, 0, 0, 2},
                                                  {2, 0, 0, 0}, {0, 0, 2, 0}, {0, 0, 0, 0, 2, 2},
                                                  {3, 2, 1, 3, 1, 3}}) {
      const std::string where = " (views x+" + std::to_string(off.x) + ", delta+" +
                                std::to_string(off.delta) + ", r+" + std::to_string(off.r) +
                                ", h+" + std::to_string(off.h) + ", weight+" + std::to_string(off.weight) +
                                ", bias+" + std::to_string(off.bias) + ")";
      check<float>(impl, problem<float>(6, 2560, Norm::LayerNorm, Data::Typical, "views"), off, where);
      check<__half>(impl, problem<__half>(5, 768, Norm::RMSNorm, Data::Typical, "views"), off, where);
    }
}

// add_norm.cuh: "all work enqueued on `stream`". Each call is captured into a CUDA graph and
// replayed, through every path of the reference (warp per row, block per row, unaligned rows,
// rows longer than a block holds).
TEST_CASE("fused and unfused add + norm captured into a CUDA graph: all work on the given stream") {
  WB_REQUIRE_GPU();
  if (wb::debug_sync_enabled()) {
    wb::testing::mark_skipped("skipped: WB_DEBUG_SYNC=1 synchronizes after every launch, which a graph capture forbids");
    return;
  }
  for (const Impl impl : {Impl::Fused, Impl::Unfused})
    for (const Shape s : std::vector<Shape>{{33, 768}, {9, 2560}, {5, 1001}, {5, 2561}, {1, 20000}}) {
      check<float>(impl, problem<float>(s.rows, s.dim, Norm::LayerNorm, Data::Typical, "graph"), {},
                   " (captured into a CUDA graph, then replayed)", Launch::Graph);
      check<__half>(impl, problem<__half>(s.rows, s.dim, Norm::RMSNorm, Data::Typical, "graph"), {},
                    " (captured into a CUDA graph, then replayed)", Launch::Graph);
    }
}

// add_norm.cuh: all work enqueued on `stream`, no synchronization, no allocation, no copies
// (tests/lib/enqueue_only.hpp), through the reference's paths.
TEST_CASE("rule: a call only enqueues work (no allocation, synchronization or host copy; counted with CUPTI)") {
  WB_REQUIRE_GPU();
  for (const Shape s : std::vector<Shape>{{33, 768}, {5, 1001}, {1, 20000}}) {
    const Problem p = problem<float>(s.rows, s.dim, Norm::LayerNorm, Data::Typical, "enqueue-only");
    OnDevice on_device(p);
    const wb::testing::OwnedStream owned;
    const cudaStream_t stream = owned.s;
    for (const Impl impl : {Impl::Fused, Impl::Unfused}) {
      const std::string broke = wb::testing::enqueue_only_violation([&] { on_device.call(impl, stream); });
      WB_CUDA(cudaStreamSynchronize(stream));
      if (!broke.empty())
        FAIL_CHECK("ch06 " << what_of<float>(impl) << ", " << ch06::reference::describe(p)
                           << ": rule: all work enqueued on `stream`: no synchronization, no allocation, "
                              "no copies. Of two calls in a row, one or both "
                           << broke << ".\n" << wb::testing::kEnqueueOnlyHint);
    }
  }
}

// add_norm.cuh: all work enqueued on `stream`, and no allocation: a call has no memory but its
// arguments. A server runs several sequences' layers at once, on several streams, so scratch of
// the kernels' own (a __device__ array that passes a row's partial sums from one kernel to the
// next) is written by two calls at once. A long call runs on one stream while eight short ones
// come and go on another, of higher priority (the GPU schedules their blocks first, so they run
// while the long call's blocks are still coming), each call with its own inputs and outputs:
// rows of 20000 values, longer than a block's registers hold, where a design is most tempted to
// split a row over blocks. Another call's rows are numbered from 0 too, so they land on the long
// call's first rows in any scratch indexed by row. (Left out under compute-sanitizer, which runs
// one kernel at a time.)
TEST_CASE("two calls at once on two streams each get their own rows (no scratch of the kernels' own)") {
  WB_REQUIRE_GPU();
  if (wb::coverage::quick()) {
    wb::testing::mark_skipped("skipped under compute-sanitizer / WB_QUICK: the tools run one kernel at a time, "
                              "so two calls never overlap");
    return;
  }
  constexpr int kRows = 16, kDim = 20000, kRepeat = 256, kShortCalls = 8, kChecked = 64;
  const Problem long_rows = problem<float>(kRows, kDim, Norm::LayerNorm, Data::Typical, "two-streams/long");
  Problem short_rows = problem<float>(kRows, kDim, Norm::LayerNorm, Data::Typical, "two-streams/short");
  for (float& v : short_rows.x) v *= 10.0f;  // 10 times the spread: statistics that do not fit the long rows
  for (float& v : short_rows.delta) v *= 10.0f;
  Problem long_checked = long_rows;  // the long call's first kChecked rows
  long_checked.rows = kChecked;
  long_checked.x = long_checked.delta = {};
  for (int i = 0; i < kChecked / kRows; ++i) {
    long_checked.x.insert(long_checked.x.end(), long_rows.x.begin(), long_rows.x.end());
    long_checked.delta.insert(long_checked.delta.end(), long_rows.delta.begin(), long_rows.delta.end());
  }
  int least = 0, greatest = 0;
  WB_CUDA(cudaDeviceGetStreamPriorityRange(&least, &greatest));
  const wb::testing::OwnedStream stream_a(cudaStreamNonBlocking, least), stream_b(cudaStreamNonBlocking, greatest);
  for (const Impl impl : {Impl::Fused, Impl::Unfused}) {
    OnDevice long_call(long_rows, kRepeat);
    std::vector<std::unique_ptr<OnDevice>> short_calls;
    for (int i = 0; i < kShortCalls; ++i) short_calls.push_back(std::make_unique<OnDevice>(short_rows));
    long_call.r.poison();
    long_call.h.poison();
    for (auto& c : short_calls) {
      c->r.poison();
      c->h.poison();
    }
    WB_CUDA(cudaDeviceSynchronize());
    long_call.call(impl, stream_a.s);  // then the short ones while it runs
    for (auto& c : short_calls) c->call(impl, stream_b.s);
    WB_CUDA(cudaStreamSynchronize(stream_a.s));
    WB_CUDA(cudaStreamSynchronize(stream_b.s));

    const std::string what = what_of<float>(impl) + ", two calls at once on two streams (" +
                             std::to_string(long_call.rows) + "x" + std::to_string(kDim) + " on stream A, and " +
                             std::to_string(kShortCalls) + " calls of " + std::to_string(kRows) + "x" +
                             std::to_string(kDim) + " on stream B, of higher priority, while it runs)";
    std::vector<float> r(long_checked.x.size()), h(long_checked.x.size());
    WB_CUDA(cudaMemcpy(r.data(), long_call.r.data(), r.size() * sizeof(float), cudaMemcpyDeviceToHost));
    WB_CUDA(cudaMemcpy(h.data(), long_call.h.data(), h.size() * sizeof(float), cudaMemcpyDeviceToHost));
    std::string failure = ch06::reference::check_residual(long_checked, r, what + ", the long call's first rows") +
                          ch06::reference::check_normalized(long_checked, ch06::reference::residual(long_checked), h,
                                                            ch06::reference::kHFp32Tol, what + ", the long call's first rows");
    for (std::size_t i = 0; i < short_calls.size() && failure.empty(); ++i) {
      const std::string call = what + ", short call " + std::to_string(i + 1);
      const std::vector<float> short_r = short_calls[i]->r.download();
      failure = ch06::reference::check_residual(short_rows, short_r, call) +
                ch06::reference::check_normalized(short_rows, ch06::reference::residual(short_rows),
                                                  short_calls[i]->h.download(), ch06::reference::kHFp32Tol, call);
    }
    if (!failure.empty()) {
      FAIL_CHECK("ch06 " << what << ", seed " << wb::base_seed()
                         << ": wrong results with two calls running at once (the cases above check each call "
                            "alone).\nrule: all work enqueued on `stream`, nothing allocated: a "
                            "call's only memory is its arguments, so two calls running at once, each with its own x, "
                            "delta, r and h, must not see each other.\nhint: keep a row's partial sums in registers "
                            "and shared memory (one block per row); a __device__ array or a static buffer that passes "
                            "them from one kernel to the next is one for the whole process, and every call running at "
                            "the time writes it.\n"
                         << failure);
      return;
    }
  }
}

// A block sum called twice on one shared array (the mean, then the squared deviations) needs
// a barrier before the second call's writes, or a fast warp overwrites a partial that a slow
// warp is still reading. On a few rows the warps leave each barrier together and the window
// stays shut; at full occupancy (many blocks an SM, warps scheduled apart) it opens: on an
// H200, one such submission's single call at 4096x2560 in the timing test's re-check wrote
// about 5,000 wrong values of 10.5 million. So: 16 calls at that shape, each checked.
TEST_CASE("4096 rows at full occupancy, 16 calls each checked (the block sums' barriers)") {
  WB_REQUIRE_GPU();
  if (wb::coverage::quick()) {
    wb::testing::mark_skipped("skipped under compute-sanitizer / WB_QUICK: racecheck reports a missing barrier "
                              "directly");
    return;
  }
  constexpr int kRows = 4096, kDim = 2560, kCalls = 16;
  const Problem p = problem<float>(kRows, kDim, Norm::LayerNorm, Data::Typical, "occupancy");
  const std::vector<float> r_expected = ch06::reference::residual(p);
  const wb::testing::OwnedStream stream(cudaStreamNonBlocking);
  for (const Impl impl : {Impl::Fused, Impl::Unfused}) {
    OnDevice on_device(p);
    for (int call = 1; call <= kCalls; ++call) {
      on_device.r.poison(stream.s);
      on_device.h.poison(stream.s);
      on_device.call(impl, stream.s);
      WB_CUDA(cudaStreamSynchronize(stream.s));
      const std::string what = what_of<float>(impl) + ", " + ch06::reference::describe(p) + ", call " +
                               std::to_string(call) + " of " + std::to_string(kCalls) + " back to back";
      const std::vector<float> r_got = on_device.r.download();
      const std::string failure =
          ch06::reference::check_residual(p, r_got, what) +
          ch06::reference::check_normalized(p, r_expected, on_device.h.download(), ch06::reference::kHFp32Tol, what);
      // Every value of r still the poison, after a first call that was right: not a race (which
      // gets a few rows wrong), but a call that did nothing because its arguments repeated.
      if (!failure.empty() && call > 1 &&
          std::all_of(r_got.begin(), r_got.end(), [](float v) { return std::isnan(v); })) {
        FAIL_CHECK("ch06 " << what << ", seed " << wb::base_seed()
                           << ": rule: every call does its work. Call 1 with the same arguments was right; "
                              "between the calls r and h were poisoned (NaN), and this call left all of them "
                              "unwritten.\nhint: the same pointers do not mean the same values (a model writes a "
                              "new delta into the same buffer every layer, and the caller may overwrite r and h): "
                              "never skip or cache a call by its arguments; enqueue the kernel on every call.\n"
                           << failure);
        break;
      }
      if (!failure.empty()) {
        FAIL_CHECK("ch06 " << what << ", seed " << wb::base_seed() << ": " << failure
                           << "\nrule: a block's threads share shared memory only across a barrier. Wrong rows "
                              "that come and go from call to call, at full occupancy, are a race.\nhint: a block "
                              "sum that is called twice on the same shared array needs a __syncthreads() before "
                              "the second call writes it (a fast warp would overwrite a partial a slow warp still "
                              "reads). `./workbook check 06 --sanitize` (racecheck) names the line.");
        break;
      }
    }
  }
}

TEST_CASE("more rows than a grid's y or z dimension holds (70000 rows)") {
  WB_REQUIRE_GPU();
  for (const Impl impl : {Impl::Fused, Impl::Unfused})
    check<float>(impl, problem<float>(70000, 9, Norm::LayerNorm, Data::Typical, "rows70000"), {},
                 " (70000 rows: launch rows in grid.x, whose limit is 2^31 - 1)");
}

// A model batch at a model width: 8192 rows of 768 (bench.cu's shape, a BERT / GPT-2-small
// batch of 8192 tokens), which no case above uses (they take 768 in 4 to 33 rows, and 8192
// rows nowhere). Every row of every call is computed, whatever the shape: a shortcut for one
// shape (a row count or width written into the code for a benchmark) leaves rows unwritten or
// wrong here.
TEST_CASE("a model batch: 8192 rows of 768, every row computed (no shape is special)") {
  WB_REQUIRE_GPU();
  const Problem p = problem<float>(8192, 768, Norm::LayerNorm, Data::Typical, "batch-8192x768");
  for (const Impl impl : {Impl::Fused, Impl::Unfused}) {
    const std::string what = what_of<float>(impl) + " (a batch of 8192 rows of 768)";
    const Output out = run<float>(impl, p);
    if (!out.ran) continue;
    const std::string failure =
        ch06::reference::check_residual(p, out.r, what) +
        ch06::reference::check_normalized(p, ch06::reference::residual(p), out.h, ch06::reference::kHFp32Tol, what);
    if (!failure.empty())
      FAIL_CHECK("ch06 " << what << ", " << ch06::reference::describe(p) << ", seed " << wb::base_seed()
                 << ": rule: every call computes r and h for all its rows x dim values, whatever the shape: "
                    "8192 x 768 is a model batch like any other.\nhint: nothing in the kernels or their launch "
                    "may depend on one particular rows or dim (a shortcut for a benchmark's shape): the same "
                    "rows of 768 are right in the smaller cases above.\n"
                 << failure);
  }
}

// Rows longer than any the other tests use (100000 and 131072 values: past 92682, two halves of
// a row count more than 2^31 pairs), whose channels sit at two levels, -1 and +1 (plus noise of
// spread 0.5), alternating every channel (row 0), every 32 channels (row 1), every 1024 (row 2),
// and by halves (row 3). A statistic merged from parts (per thread, per warp, per block: Chan's
// formula for M2 weighs the parts' mean difference by count_a * count_b / n) must be right
// whichever way the levels fall across the parts; random rows leave every part with nearly the
// same mean, where a wrong merge term hardly shows.
TEST_CASE("rows of 100000 and 131072 values whose channels sit at two levels") {
  WB_REQUIRE_GPU();
  for (const Impl impl : {Impl::Fused, Impl::Unfused})
    for (const int dim : {100000, 131072})
      for (const Norm norm : {Norm::LayerNorm, Norm::RMSNorm}) {
        Problem p = problem<float>(4, dim, norm, Data::Typical, "two-levels");
        const int widths[4] = {1, 32, 1024, (dim + 1) / 2};
        for (int row = 0; row < 4; ++row)
          for (int i = 0; i < dim; ++i) {
            const std::size_t k = std::size_t(row) * dim + i;
            p.x[k] = ((i / widths[row]) % 2 ? 1.0f : -1.0f) + 0.25f * p.x[k];  // x ~ N(0, 2): noise 0.5
            p.delta[k] *= 0.25f;
          }
        const std::string what = what_of<float>(impl) + " (channels at two levels, alternating every 1, 32 "
                                                        "and 1024 channels and by halves)";
        const Output out = run<float>(impl, p);
        const std::string r_failure = ch06::reference::check_residual(p, out.r, what);
        if (!r_failure.empty()) FAIL_CHECK(r_failure);
        const std::string h_failure = ch06::reference::check_normalized(
            p, ch06::reference::residual(p), out.h, ch06::reference::kHFp32Tol, what);
        if (!h_failure.empty())
          FAIL_CHECK("ch06 " << what << ", " << ch06::reference::describe(p) << ", seed " << wb::base_seed()
                     << ": h is wrong on rows of " << dim << " values whose channels sit at two levels.\n"
                     << "rule: any dim >= 1, and any values: the statistics of a row must not depend on how its "
                        "values fall across your threads, warps and blocks.\nhint: when partial statistics "
                        "are merged (Chan's formula: M2 = M2_a + M2_b + d^2 * n_a * n_b / n), count_a * count_b "
                        "passes 2^31 for rows of more than 92682 values: keep counts in float or 64 bits. A "
                        "merge that is wrong only when the parts' means differ passes random rows and fails "
                        "these.\n"
                     << h_failure);
      }
}

// Inputs whose last element is the last float of their allocation: a read past the end of a
// row or of the matrix leaves the allocation (compute-sanitizer's memcheck reports it; the
// suite runs under it on the GPU).
TEST_CASE("inputs that end exactly where their allocation ends") {
  WB_REQUIRE_GPU();
  const Problem p = problem<float>(3, 1001, Norm::LayerNorm, Data::Typical, "tight");
  OnDevice on_device(p);
  for (const Impl impl : {Impl::Fused, Impl::Unfused}) {
    on_device.r.poison();
    on_device.h.poison();
    on_device.call(impl, nullptr);
    WB_CUDA(cudaDeviceSynchronize());
    const std::string what = what_of<float>(impl) + " (tight allocations)";
    const std::string r_failure = ch06::reference::check_residual(p, on_device.r.download(), what);
    if (!r_failure.empty()) FAIL_CHECK(r_failure);
    const std::string h_failure = ch06::reference::check_normalized(
        p, ch06::reference::residual(p), on_device.h.download(), ch06::reference::kHFp32Tol, what);
    if (!h_failure.empty()) FAIL_CHECK(h_failure);
  }
}

// add_norm.cuh: NormParams::bias is "for RMSNorm never read (null or anything)": a caller may
// leave a placeholder there (a shorter buffer, one already freed). Here it is
// 4 floats (NaN) that end exactly where mapped device memory ends (wb::InputAtEnd): reading
// bias past them is an illegal address, and adding them makes h NaN. Through every path of the
// reference (warp per row, block per row, unaligned rows, rows longer than a block holds).
TEST_CASE("RMSNorm with a bias it must not read (4 floats at the very end of their allocation)") {
  WB_REQUIRE_GPU();
  wb::InputAtEnd placeholder(4);
  placeholder.upload(std::vector<float>(4, std::nanf("")));
  for (const Impl impl : {Impl::Fused, Impl::Unfused})
    for (const Shape s : std::vector<Shape>{{33, 768}, {9, 2560}, {5, 1001}, {1, 20000}}) {
      const std::string extra = " (RMSNorm handed a bias pointer to 4 floats that end where mapped memory ends)";
      try {
        check<float>(impl, problem<float>(s.rows, s.dim, Norm::RMSNorm, Data::Typical, "bias-placeholder"), {},
                     extra, Launch::Direct, placeholder.data());
        check<__half>(impl, problem<__half>(s.rows, s.dim, Norm::RMSNorm, Data::Typical, "bias-placeholder"), {},
                      extra, Launch::Direct, placeholder.data());
      } catch (const wb::NotImplemented&) {
        throw;
      } catch (const std::exception& e) {
        const std::string error = e.what();
        FAIL_CHECK("ch06 " << what_of<float>(impl) << ", RMSNorm " << s.rows << "x" << s.dim << extra << ", seed "
                           << wb::base_seed() << ": the call failed: " << error.substr(0, error.find('\n'))
                           << "\nrule: RMSNorm has no bias: add_norm.cuh says NormParams::bias is ignored for it "
                              "(may be null), so it may point at anything (here: a 4-float placeholder), and the "
                              "kernel must not read it.\nhint: load bias only when params.norm is LayerNorm, not "
                              "whenever the pointer is non-null; and decide the packed path's alignment check of "
                              "bias the same way.");
        return;  // a fault is sticky
      }
    }
}

// Expects `call` to throw std::invalid_argument naming `needle`. A starter's NotImplemented
// passes through, so the test reads as "to do".
void expect_invalid_argument(const std::function<void()>& call, const std::string& needle,
                             const std::string& what) {
  try {
    call();
  } catch (const wb::NotImplemented&) {
    throw;
  } catch (const std::invalid_argument& e) {
    const std::string message = e.what();
    CHECK_MESSAGE(message.find(needle) != std::string::npos,
                  "ch06 " << what << ": the error should name '" << needle << "', got: " << message);
    return;
  }
  FAIL_CHECK("ch06 " << what << ": expected std::invalid_argument, nothing was thrown\n"
             << "hint: keep the check_norm_args / check_add_args line at the top of each "
                "entry point");
}

TEST_CASE("bad arguments are rejected with a message that names them") {
  WB_REQUIRE_GPU();
  wb::DeviceBuffer<float> x(64), delta(64), r(64), h(64), w(8), b(8);
  NormParams params{Norm::LayerNorm, w.data(), b.data(), 1e-5f};
  // Valid calls first: a starter's NotImplemented surfaces here, as "to do".
  ch06::add_norm_fused(x.data(), delta.data(), r.data(), h.data(), 8, 8, params, nullptr);
  ch06::residual_add(x.data(), delta.data(), r.data(), 64, nullptr);
  ch06::norm_rows(r.data(), h.data(), 8, 8, params, nullptr);
  WB_CUDA(cudaDeviceSynchronize());
  expect_invalid_argument(
      [&] { ch06::add_norm_fused(x.data(), delta.data(), r.data(), h.data(), 8, 0, params, nullptr); },
      "dim", "add_norm_fused(dim = 0)");
  expect_invalid_argument(
      [&] { ch06::add_norm_fused(x.data(), delta.data(), r.data(), h.data(), -1, 8, params, nullptr); },
      "rows", "add_norm_fused(rows = -1)");
  NormParams no_bias = params;
  no_bias.bias = nullptr;
  expect_invalid_argument(
      [&] { ch06::norm_rows(r.data(), h.data(), 8, 8, no_bias, nullptr); }, "bias",
      "norm_rows(LayerNorm without bias)");
  NormParams zero_eps = params;
  zero_eps.eps = 0.0f;
  expect_invalid_argument(
      [&] { ch06::add_norm_fused(x.data(), delta.data(), r.data(), h.data(), 8, 8, zero_eps, nullptr); },
      "eps", "add_norm_fused(eps = 0)");
  expect_invalid_argument([&] { ch06::residual_add(nullptr, delta.data(), r.data(), 64, nullptr); },
                          "null", "residual_add(x = nullptr)");
  // rows == 0 / n == 0: nothing to do, whatever the pointers.
  ch06::add_norm_fused(nullptr, static_cast<const float*>(nullptr), nullptr,
                       static_cast<float*>(nullptr), 0, 8, params, nullptr);
  ch06::residual_add(nullptr, static_cast<const float*>(nullptr), nullptr, 0, nullptr);
  WB_CUDA(cudaDeviceSynchronize());
}

// ---------------------------------------------------------------------------------------
// Does the kernel fit the model? A stack of pre-LN blocks, each  r += W_l norm(r), run with
// the fused kernel (the add that ends block l and the norm that begins block l + 1 in one
// call), against the same stack in double precision.
TEST_CASE("a stack of pre-LN blocks run with the fused kernel matches the double model") {
  WB_REQUIRE_GPU();
  constexpr int kRows = 4, kDim = 96, kLayers = 6;
  for (const Norm norm : {Norm::LayerNorm, Norm::RMSNorm}) {
    auto rng = wb::rng_for(std::string("ch06/model/") + ch06::reference::norm_name(norm));
    Problem p;  // x, weight, bias; delta is computed layer by layer
    p.rows = kRows;
    p.dim = kDim;
    p.norm = norm;
    p.x = wb::random_normal(std::size_t(kRows) * kDim, 0.0f, 2.0f, rng);
    p.weight = wb::random_uniform(kDim, 0.5f, 1.5f, rng);
    p.bias = wb::random_uniform(kDim, -0.5f, 0.5f, rng);
    std::vector<std::vector<float>> W(kLayers);  // each sublayer: a fixed dim x dim linear map
    for (auto& w : W) w = wb::random_normal(std::size_t(kDim) * kDim, 0.0f, 1.0f / std::sqrt(float(kDim)), rng);

    // The model in double: r_0 = x; each block adds W_l norm(r_l).
    std::vector<double> r_ref(p.x.begin(), p.x.end());
    const auto norm_double = [&](const std::vector<double>& r) {
      std::vector<double> h(r.size());
      for (int row = 0; row < kRows; ++row) {
        const double* v = r.data() + std::size_t(row) * kDim;
        double mean = 0, sq = 0;
        for (int i = 0; i < kDim; ++i) mean += norm == Norm::LayerNorm ? v[i] : v[i] * v[i];
        mean /= kDim;
        if (norm == Norm::LayerNorm) {
          for (int i = 0; i < kDim; ++i) sq += (v[i] - mean) * (v[i] - mean);
          sq /= kDim;
        }
        const double scale = 1.0 / std::sqrt((norm == Norm::LayerNorm ? sq : mean) + p.eps);
        for (int i = 0; i < kDim; ++i)
          h[std::size_t(row) * kDim + i] =
              (v[i] - (norm == Norm::LayerNorm ? mean : 0.0)) * scale * p.weight[i] +
              (norm == Norm::LayerNorm ? p.bias[i] : 0.0);
      }
      return h;
    };
    const auto sublayer = [&](const std::vector<double>& h, int layer) {
      std::vector<double> delta(h.size());
      for (int row = 0; row < kRows; ++row)
        for (int o = 0; o < kDim; ++o) {
          double acc = 0;
          for (int i = 0; i < kDim; ++i)
            acc += double(W[layer][std::size_t(o) * kDim + i]) * h[std::size_t(row) * kDim + i];
          delta[std::size_t(row) * kDim + o] = acc;
        }
      return delta;
    };

    // The GPU run: h_0 from the double model (rounded to float), then one fused call per
    // block; the sublayer itself runs on the CPU from the kernel's own h.
    wb::DeviceBuffer<float> r_dev(p.x.size()), r_next(p.x.size()), delta_dev(p.x.size()),
        h_dev(p.x.size()), weight(kDim), bias(kDim);
    weight.upload(p.weight);
    bias.upload(p.bias);
    r_dev.upload(p.x);
    std::vector<double> h_ref = norm_double(r_ref);
    std::vector<float> h_gpu(h_ref.begin(), h_ref.end());
    const NormParams params{norm, weight.data(), norm == Norm::LayerNorm ? bias.data() : nullptr, p.eps};
    for (int layer = 0; layer < kLayers; ++layer) {
      const std::vector<double> delta_ref = sublayer(h_ref, layer);
      for (std::size_t i = 0; i < r_ref.size(); ++i) r_ref[i] += delta_ref[i];
      h_ref = norm_double(r_ref);

      const std::vector<double> delta_from_gpu = sublayer(std::vector<double>(h_gpu.begin(), h_gpu.end()), layer);
      delta_dev.upload(std::vector<float>(delta_from_gpu.begin(), delta_from_gpu.end()));
      r_next.poison();
      h_dev.poison();
      ch06::add_norm_fused(r_dev.data(), delta_dev.data(), r_next.data(), h_dev.data(), kRows,
                           kDim, params, nullptr);
      WB_CUDA(cudaDeviceSynchronize());
      std::swap(r_dev, r_next);
      h_gpu = h_dev.download();

      wb::CompareSpec spec;
      spec.chapter = "06";
      spec.what = std::string("pre-LN stack (") + ch06::reference::norm_name(norm) +
                  "), the next block's input h after block " + std::to_string(layer);
      spec.shape = {std::size_t(kRows), std::size_t(kDim)};
      spec.tol = {1e-4, 1e-4};  // fp32 through `layer + 1` blocks
      spec.hint =
          "the kernel does not compute the pre-LN pair r = x + delta, h = norm(r). A kernel "
          "that returns norm(x) + delta (the post-LN order, \"LN(x) + residual\") can pass a "
          "micro-benchmark and still not fit this model: the sublayer sits between the norm "
          "and the add.";
      const wb::CompareResult result = wb::compare(h_gpu, h_ref, spec);
      if (!result.ok) {
        FAIL_CHECK(result.message);
        break;
      }
    }
  }
}

// ---------------------------------------------------------------------------------------
// Does the residual stream keep its precision? 32 layers of adds of half-precision sublayer
// outputs: the kernel's fp32 residual stream must be exactly the fp32 sum (r is x + delta in
// fp32, every layer), which stays near the double-precision sum; a residual stream kept in
// fp16 drifts away from it, and the test records by how much.
TEST_CASE("32 layers of adds: the residual stream stays fp32 (an fp16 one drifts)") {
  WB_REQUIRE_GPU();
  constexpr int kRows = 8, kDim = 2048, kLayers = 32;
  const std::size_t n = std::size_t(kRows) * kDim;
  auto rng = wb::rng_for("ch06/residual32");
  const std::vector<float> x0 = wb::random_normal(n, 0.0f, 1.0f, rng);
  std::vector<double> exact(x0.begin(), x0.end());
  std::vector<float> fp32_stream = x0;
  std::vector<__half> fp16_stream(n);
  for (std::size_t i = 0; i < n; ++i) fp16_stream[i] = __float2half_rn(x0[i]);

  wb::DeviceBuffer<float> r_a(n), r_b(n), weight(kDim), bias(kDim);
  wb::DeviceBuffer<__half> delta_dev(n), h_dev(n);
  weight.upload(wb::random_uniform(kDim, 0.5f, 1.5f, rng));
  bias.upload(wb::random_uniform(kDim, -0.5f, 0.5f, rng));
  r_a.upload(x0);
  const NormParams params{Norm::LayerNorm, weight.data(), bias.data(), 1e-5f};
  for (int layer = 0; layer < kLayers; ++layer) {
    // Sublayer outputs of a trained model are small against the stream: N(0, 0.3).
    const std::vector<float> d = wb::random_normal(n, 0.0f, 0.3f, rng);
    std::vector<__half> d_half(n);
    for (std::size_t i = 0; i < n; ++i) {
      d_half[i] = __float2half_rn(d[i]);
      const float d_f = __half2float(d_half[i]);
      exact[i] += d_f;
      fp32_stream[i] += d_f;
      fp16_stream[i] = __float2half_rn(__half2float(fp16_stream[i]) + d_f);
    }
    delta_dev.upload(d_half);
    r_b.poison();
    ch06::add_norm_fused(r_a.data(), delta_dev.data(), r_b.data(), h_dev.data(), kRows, kDim,
                         params, nullptr);
    WB_CUDA(cudaDeviceSynchronize());
    std::swap(r_a, r_b);
  }
  const std::vector<float> r_gpu = r_a.download();
  double fp32_err = 0, fp16_err = 0, norm = 0;
  std::size_t differ = 0;
  for (std::size_t i = 0; i < n; ++i) {
    fp32_err = std::max(fp32_err, std::abs(fp32_stream[i] - exact[i]));
    fp16_err = std::max(fp16_err, std::abs(__half2float(fp16_stream[i]) - exact[i]));
    norm = std::max(norm, std::abs(exact[i]));
    if (std::memcmp(&r_gpu[i], &fp32_stream[i], sizeof(float)) != 0) ++differ;
  }
  wb::testing::record_metric("fp32_stream_max_error", fp32_err);
  wb::testing::record_metric("fp16_stream_max_error", fp16_err);
  MESSAGE("after 32 layers, the largest error against the double sum: fp32 residual stream "
          << fp32_err << ", fp16 residual stream " << fp16_err << " (values up to " << norm << ")");
  CHECK_MESSAGE(differ == 0,
                "ch06 fused add + norm, fp16 delta, 32 layers, seed "
                    << wb::base_seed() << ": rule: the residual stream stays fp32. " << differ
                    << " of " << n << " values of r differ from the fp32 sum of the same adds "
                    << "(an fp16 stream is off by up to " << fp16_err << ", fp32 by " << fp32_err
                    << ").\nhint: r = x + float(delta), stored as a float: never round r through "
                       "half precision, even when delta and h are half.");
}

// ---------------------------------------------------------------------------------------
// More than 2^32 elements in one call ("any rows and dim"): 32769 rows of 131072 values (longer
// than a block's registers hold), 262163 rows of 16383 (odd: one value at a time), and the
// packed widths, 1048577 rows of 4096 (a block per row in the reference) and 4194305 rows of
// 1024 (a warp per row), fp16 delta and h (x and r fp32: 51.5 GB in all, the same buffers for
// every shape). A row starts at row * dim: past 2^31 from row 16384 (131081, 524288, 2097152)
// on, past 2^32 from row 32768 (262161, 1048576, 4194304) on. An offset computed in int goes
// negative there, and one computed in 32-bit unsigned (blockIdx.x * dim, or an unsigned row
// times dim: two 32-bit numbers, widened only after the multiply, whatever type is on the left)
// wraps to the start of the matrix, so the last rows are never written. (The reference counts
// the packed kernels' offsets in packs, row * (dim / 4), which would wrap only past 2^34
// elements, more than a GPU holds; a packed kernel whose row start is computed in elements
// wraps at 2^32 like any other, hence the packed widths here.) x is uniform in [-2, 2) from
// the seed, made on the device, and delta 0 (r = x); the rows on both sides of each boundary
// and the last are poisoned before each call and checked after. Last before the kernel
// coverage (a fault is sticky); skipped on a GPU without the memory and under compute-sanitizer.
TEST_CASE("more than 2^32 elements in one call (64-bit row offsets)") {
  WB_REQUIRE_GPU();
  if (wb::coverage::quick()) {
    wb::testing::mark_skipped("skipped: the 2^32-element case is left out under compute-sanitizer / WB_QUICK");
    return;
  }
  const Shape shapes[] = {{32769, 131072}, {262163, 16383}, {1048577, 4096}, {4194305, 1024}};
  std::size_t n = 0;
  for (const Shape s : shapes) n = std::max(n, std::size_t(s.rows) * s.dim);
  const std::size_t need = n * 2 * (sizeof(float) + sizeof(__half)) + (1ull << 30);
  std::size_t free_bytes = 0, total_bytes = 0;
  WB_CUDA(cudaMemGetInfo(&free_bytes, &total_bytes));
  if (free_bytes < need) {
    wb::testing::mark_skipped("skipped: the 2^32-element case needs " + std::to_string((need >> 30) + 1) +
                              " GB of free device memory, this GPU has " + std::to_string(free_bytes >> 30) + " GB");
    return;
  }
  const std::string rule =
      "\nrule: any rows and dim: one call may hold more than 2^31 and 2^32 elements.\nhint: compute a row's "
      "offset in 64 bits, static_cast<std::size_t>(row) * dim, on every path (the packed and warp-per-row "
      "kernels too): blockIdx.x * dim, or an unsigned row times dim, multiplies two 32-bit numbers and wraps "
      "before the size_t on the left sees the product.";
  std::string what = "fp16 (more than 2^32 elements in one call)";
  try {
    wb::DeviceBuffer<float> x(n), r(n);
    wb::DeviceBuffer<__half> delta(n), h(n);
    wb::testing::fill_hashed_uniform<<<4096, 256>>>(x.data(), n, wb::base_seed(), -2.0f, 2.0f);
    WB_CHECK_LAUNCH("fill_hashed_uniform");
    WB_CUDA(cudaMemset(delta.data(), 0, delta.bytes()));
    for (const Shape s : shapes) {
      auto rng = wb::rng_for("ch06/more-than-2^32/" + std::to_string(s.dim));
      const std::vector<float> weight = wb::random_uniform(s.dim, 0.5f, 1.5f, rng);
      const std::vector<float> bias = wb::random_uniform(s.dim, -1.0f, 1.0f, rng);
      const wb::DeviceBuffer<float> weight_dev(weight), bias_dev(bias);
      const NormParams params{Norm::LayerNorm, weight_dev.data(), bias_dev.data(), 1e-5f};
      const int past_2_31 = int(((1ull << 31) + s.dim - 1) / s.dim), past_2_32 = int(((1ull << 32) + s.dim - 1) / s.dim);
      const int checked[] = {0, past_2_31 - 1, past_2_31, past_2_32 - 1, past_2_32, s.rows - 1};
      for (const Impl impl : {Impl::Fused, Impl::Unfused}) {
        what = what_of<__half>(impl) + ", " + std::to_string(s.rows) + "x" + std::to_string(s.dim) +
               " (more than 2^32 elements in one call; row " + std::to_string(past_2_31) + " starts past 2^31, row " +
               std::to_string(past_2_32) + " past 2^32)";
        for (const int row : checked) {
          WB_CUDA(cudaMemset(r.data() + std::size_t(row) * s.dim, 0xFF, s.dim * sizeof(float)));
          WB_CUDA(cudaMemset(h.data() + std::size_t(row) * s.dim, 0xFF, s.dim * sizeof(__half)));
        }
        if (impl == Impl::Fused) {
          ch06::add_norm_fused(x.data(), delta.data(), r.data(), h.data(), s.rows, s.dim, params, nullptr);
        } else {
          ch06::residual_add(x.data(), delta.data(), r.data(), std::size_t(s.rows) * s.dim, nullptr);
          ch06::norm_rows(r.data(), h.data(), s.rows, s.dim, params, nullptr);
        }
        WB_CUDA(cudaDeviceSynchronize());
        for (const int row : checked) {  // each as a problem of one row
          Problem p;
          p.rows = 1;
          p.dim = s.dim;
          p.x.resize(s.dim);
          p.delta.assign(s.dim, 0.0f);
          p.weight = weight;
          p.bias = bias;
          std::vector<float> got_r(s.dim), got_h(s.dim);
          std::vector<__half> h_half(s.dim);
          const std::size_t at = std::size_t(row) * s.dim;
          WB_CUDA(cudaMemcpy(p.x.data(), x.data() + at, s.dim * sizeof(float), cudaMemcpyDeviceToHost));
          WB_CUDA(cudaMemcpy(got_r.data(), r.data() + at, s.dim * sizeof(float), cudaMemcpyDeviceToHost));
          WB_CUDA(cudaMemcpy(h_half.data(), h.data() + at, s.dim * sizeof(__half), cudaMemcpyDeviceToHost));
          for (int i = 0; i < s.dim; ++i) got_h[i] = __half2float(h_half[i]);
          const std::string row_what = what + ", row " + std::to_string(row) + " (checked alone: [0, i] is its column i)";
          const std::string failure = ch06::reference::check_residual(p, got_r, row_what) +
                                      ch06::reference::check_normalized(p, ch06::reference::residual(p), got_h,
                                                                        ch06::reference::kHFp16Tol, row_what);
          if (!failure.empty()) {
            FAIL_CHECK(failure << rule);
            return;
          }
        }
      }
    }
  } catch (const wb::NotImplemented&) {
    throw;
  } catch (const std::exception& e) {
    const std::string error = e.what();
    FAIL_CHECK("ch06 " << what << ", seed " << wb::base_seed() << ": the call failed: "
                       << error.substr(0, error.find('\n')) << rule);
    // A fault is sticky: nothing more can run on this device (this case is last for that).
  }
}

// Last: every kernel of the reference (both fused paths, the add and the norm, for fp32,
// fp16 and bf16) must have run above.
TEST_CASE("kernel coverage: every kernel of the reference ran in this suite") {
  WB_REQUIRE_GPU();
  kernel_coverage_test::check_reference("_ZN4ch06", "06");
}

}  // namespace
