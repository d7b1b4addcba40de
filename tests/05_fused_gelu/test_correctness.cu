// Chapter 05 correctness: the unfused and fused GELU against a double-precision CPU
// reference, on fresh random inputs (seeded: WB_SEED reproduces a run), with y and the
// scratch buffer filled with NaN before each call so that an element never written cannot
// pass; sizes that leave every possible tail after the last float4, inputs where tanh
// saturates, and views that are not 16-byte aligned.
#include <cuda_runtime.h>

#include <algorithm>
#include <bit>
#include <cfloat>
#include <cmath>
#include <exception>
#include <functional>
#include <memory>
#include <random>
#include <span>
#include <sstream>
#include <utility>
#include <stdexcept>
#include <string>
#include <vector>

#include "../lib/captured_graph.hpp"
#include "../lib/enqueue_only.hpp"
#include "../lib/hashed_fill.cuh"
#include "../lib/kernel_coverage_test.hpp"
#include "../lib/owned_event.hpp"
#include "../lib/owned_stream.hpp"
#include "gelu.cuh"
#include "reference.hpp"
#include "wb/buffer.hpp"
#include "wb/check.hpp"
#include "wb/global_timer.cuh"
#include "wb/guarded_buffer.hpp"
#include "wb/not_implemented.hpp"
#include "wb/random.hpp"
#include "wb/test_environment.hpp"
#include "wb/testing.hpp"
#include "wb/timing.hpp"

namespace {

using ch05::reference::check_gelu;
using ch05::reference::gelu_tanh;

enum class Impl { Unfused, Fused };
const char* name_of(Impl impl) { return impl == Impl::Fused ? "fused" : "unfused"; }

// A store outside y (or the scratch buffer) is wrong even when every output is right: the
// buffers sit between guard bands, and this fails the test when a band changed.
void check_no_overrun(const wb::GuardedBuffer<float>& buffer, const std::string& name,
                      Impl impl, std::size_t n) {
  const std::string overrun = buffer.overrun(name);
  if (overrun.empty()) return;
  FAIL_CHECK("ch05 " << name_of(impl) << " GELU, n = " << n << ", seed " << wb::base_seed()
             << ": rule: write only your own elements. The kernel " << overrun
             << ".\nhint: a grid rounded up has threads past n: guard every store with "
                "if (i < n). With float4 stores, only the n / 4 whole packs go four at a "
                "time; the last n % 4 elements are stored one by one.");
}

// x is an input: the kernel may only read it (GELU computed in place still returns the
// right y).
void check_input_unchanged(const wb::GuardedBuffer<float>& x_buf, std::size_t x_offset,
                           const std::vector<float>& x, Impl impl) {
  const std::string change = x_buf.input_change(x, "x", x_offset);
  if (change.empty()) return;
  FAIL_CHECK("ch05 " << name_of(impl) << " GELU, n = " << x.size() << ", seed "
             << wb::base_seed() << ": rule: inputs are read-only. The kernel " << change
             << ".\nhint: x is a const float*: the unfused steps write their temporaries to "
                "scratch and the last one to y, never to x.");
}

// Runs one GELU on the GPU and returns y. x starts `x_offset` floats, y `y_offset` floats and
// the unfused GELU's scratch `scratch_offset` floats past the start of their allocations: an
// offset of 1 makes a view that is not 16-byte aligned. Every buffer sits between guard
// bands: a store past the end fails the test, and so does a change to x.
std::vector<float> run_gelu(Impl impl, const std::vector<float>& x, std::size_t x_offset = 0,
                            std::size_t y_offset = 0, std::size_t scratch_offset = 0) {
  const std::size_t n = x.size();
  wb::GuardedBuffer<float> x_buf(n + x_offset), y_buf(n + y_offset);
  wb::GuardedBuffer<float> scratch(ch05::gelu_unfused_scratch_count(n) + scratch_offset);
  cudaStream_t stream = nullptr;
  WB_CUDA(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  struct StreamGuard {
    cudaStream_t s;
    ~StreamGuard() { cudaStreamDestroy(s); }
  } guard{stream};

  // On the work's stream: a cudaMemcpy from pageable memory may return before its last bytes
  // land, and nothing orders it before work on a non-blocking stream (the GELU would then
  // read the guard buffer's NaN poison now and then: a verdict that depends on the load).
  WB_CUDA(cudaMemcpyAsync(x_buf.data() + x_offset, x.data(), n * sizeof(float),
                          cudaMemcpyHostToDevice, stream));
  y_buf.poison(stream);
  scratch.poison(stream);
  if (impl == Impl::Fused)
    ch05::gelu_fused(x_buf.data() + x_offset, y_buf.data() + y_offset, n, stream);
  else
    ch05::gelu_unfused(x_buf.data() + x_offset, y_buf.data() + y_offset,
                       scratch.data() + scratch_offset, n, stream);
  // Read back on the same (non-blocking) stream: work that escaped it races with this copy.
  std::vector<float> y(n);
  WB_CUDA(cudaMemcpyAsync(y.data(), y_buf.data() + y_offset, n * sizeof(float),
                          cudaMemcpyDeviceToHost, stream));
  WB_CUDA(cudaStreamSynchronize(stream));
  check_no_overrun(y_buf, "y", impl, n);
  check_input_unchanged(x_buf, x_offset, x, impl);
  if (impl == Impl::Unfused) check_no_overrun(scratch, "scratch", impl, n);
  return y;
}

// The first line of an exception's message: a CudaError carries a generic "hint:" line of
// its own, and the test's hint (the rule this case probes) must be the first one.
std::string first_line(const std::exception& e) {
  const std::string text = e.what();
  return text.substr(0, text.find('\n'));
}

std::string views_name(std::size_t x_offset, std::size_t y_offset, std::size_t scratch_offset = 0) {
  const auto view = [](const char* name, std::size_t offset) {
    return std::string(name) + " + " + std::to_string(offset) +
           (offset % 4 == 0 ? " (16-byte aligned)" : " (not 16-byte aligned)");
  };
  return view("x", x_offset) + ", " + view("y", y_offset) +
         (scratch_offset ? ", " + view("scratch", scratch_offset) : "");
}

// A call that throws (a CUDA error from a launch or a fault) fails the test with n, the
// views and the rule the error points at.
std::string explain_error(const std::exception& e, Impl impl, std::size_t n, std::size_t x_offset,
                          std::size_t y_offset, std::size_t scratch_offset) {
  const std::string error = first_line(e);
  std::ostringstream m;
  m << "ch05 " << name_of(impl) << " GELU, n = " << n << ", "
    << views_name(x_offset, y_offset, scratch_offset) << ", seed " << wb::base_seed()
    << ": the call failed: " << error << "\n";
  if (error.find("misaligned") != std::string::npos && scratch_offset % 4 != 0)
    m << "rule: scratch may be any float pointer too (a slice of a larger workspace, as here): "
         "t0 = scratch and t1 = scratch + n are operands like x and y.\nhint: decide float4 or "
         "scalars for each op from the pointers that op touches (every one 16-byte aligned), not "
         "once from x and y: a fresh cudaMalloc is aligned, a slice of one need not be.";
  else if (error.find("misaligned") != std::string::npos)
    m << "rule: x and y may be any float pointers, their alignments chosen independently.\n"
         "hint: a float4 access needs a 16-byte aligned address: take the float4 path only when "
         "x AND y are both 16-byte aligned (or peel scalars until both are, when they share "
         "the same misalignment); else use scalars.";
  else if ((error.find("illegal") != std::string::npos || error.find("out of bounds") != std::string::npos) &&
           x_offset % 4 == y_offset % 4 && x_offset % 4 != 0 && n < 4)
    m << "rule: read and write only your own elements, for any n, however short.\nhint: x and y "
         "share their misalignment here, and n = " << n << " is shorter than the "
      << 4 - x_offset % 4 << " scalars before the first 16-byte boundary: clamp that head to n "
         "(head = min(head, n)), or n - head wraps around in size_t and the float4 loop (and its "
         "grid) run far past both buffers.";
  else if (error.find("illegal") != std::string::npos || error.find("out of bounds") != std::string::npos)
    m << "rule: read and write only your own elements.\nhint: guard every load and store with "
         "i < n, and index with size_t: an int index wraps around past 2^31.";
  else
    m << "hint: the entry points must enqueue valid launches for any n.";
  return m.str();
}

// One run and its check; false when it failed (already reported).
bool check_one(Impl impl, const std::vector<float>& x, const std::string& what,
               std::size_t x_offset = 0, std::size_t y_offset = 0, std::size_t scratch_offset = 0) {
  std::vector<float> y;
  try {
    y = run_gelu(impl, x, x_offset, y_offset, scratch_offset);
  } catch (const wb::NotImplemented&) {
    throw;
  } catch (const std::exception& e) {
    FAIL_CHECK(explain_error(e, impl, x.size(), x_offset, y_offset, scratch_offset));
    (void)cudaGetLastError();
    return false;
  }
  const std::string failure = check_gelu(x, y, gelu_tanh(x), what);
  if (failure.empty()) return true;
  FAIL_CHECK(failure);
  return false;
}

void check_sizes(Impl impl, const std::vector<std::size_t>& sizes) {
  for (const std::size_t n : sizes) {
    const std::string what = std::string(name_of(impl)) + " GELU";
    check_one(impl, ch05::reference::random_inputs(n, "ch05/" + what + "/" + std::to_string(n)), what);
  }
}

// Every remainder mod 4 (the float4 tail) and mod the block size, 1, and large.
const std::vector<std::size_t> kSizes = {1,    2,    3,     4,      5,         6,       7,
                                         8,    31,   255,   256,    257,       1000,    1023,
                                         4097, 4098, 4099,  65537,  1 << 20,   (1 << 20) + 3,
                                         (1 << 24) + 1, (1 << 24) + 2, (1 << 24) + 3};

TEST_CASE("fused GELU matches the double reference on every size") {
  WB_REQUIRE_GPU();
  check_sizes(Impl::Fused, kSizes);
}

TEST_CASE("unfused GELU matches the double reference on every size") {
  WB_REQUIRE_GPU();
  check_sizes(Impl::Unfused, kSizes);
}

void check_saturation(Impl impl) {
  for (const std::size_t n : {std::size_t(4099), std::size_t(1 << 20)}) {
    const std::string what =
        std::string(name_of(impl)) + " GELU where tanh saturates (|x| from 3 to 1e30)";
    check_one(impl, ch05::reference::saturating_inputs(n, "ch05/saturation/" + std::to_string(n)), what);
  }
}

TEST_CASE("fused GELU where tanh saturates: large |x|") {
  WB_REQUIRE_GPU();
  check_saturation(Impl::Fused);
}

TEST_CASE("unfused GELU where tanh saturates: large |x|") {
  WB_REQUIRE_GPU();
  check_saturation(Impl::Unfused);
}

// gelu.cuh: gelu(x) = x for large positive x "with no inf or NaN on the way", for any float x.
// At the top of the float range an order of operations can overflow where the formula does
// not: x * (1 + tanh(u)) * 0.5 forms 2x before halving it, and 2x is +inf once x > FLT_MAX / 2
// = 1.7e38. (nvcc 13.0 for sm_90 happens to fold that * 0.5 into the multiply, FMUL.D2, which
// halves before rounding: as compiled there it does not overflow, and passes. A compiler that
// keeps the two multiplies does not.) Random signs; magnitudes half log-uniform from 3 to 3e38, half uniform in [0, 3e38]
// (so about half of those are above FLT_MAX / 2).
std::vector<float> top_of_range_inputs(std::size_t n, const std::string& label) {
  constexpr double kTop = 3e38;  // below FLT_MAX by far more than a fast division's 2 ulps
  std::mt19937_64 rng = wb::rng_for(label);
  std::uniform_real_distribution<double> exponent(std::log10(3.0), std::log10(kTop)), linear(0.0, kTop);
  std::vector<float> x(n);
  for (std::size_t i = 0; i < n; ++i) {
    const double magnitude = std::min(i % 2 ? std::pow(10.0, exponent(rng)) : linear(rng), kTop);
    x[i] = static_cast<float>((rng() & 1 ? 1.0 : -1.0) * magnitude);
  }
  x.front() = 3e38f;  // and one at each end, where the tail and the first pack are
  x.back() = 2e38f;
  return x;
}

void check_top_of_range(Impl impl, std::size_t n) {
  const std::string what = std::string(name_of(impl)) + " GELU at the top of the float range (|x| up to 3e38)";
  const std::vector<float> x = top_of_range_inputs(n, "ch05/top-of-range/" + std::to_string(n));
  std::vector<float> y;
  try {
    y = run_gelu(impl, x);
  } catch (const wb::NotImplemented&) {
    throw;
  } catch (const std::exception& e) {
    FAIL_CHECK(explain_error(e, impl, n, 0, 0, 0));
    (void)cudaGetLastError();
    return;
  }
  const std::string failure = check_gelu(x, y, gelu_tanh(x), what);
  if (failure.empty()) return;
  for (std::size_t i = 0; i < n; ++i)
    if (!std::isfinite(y[i]) && x[i] > FLT_MAX / 2) {
      FAIL_CHECK("ch05 " << what << ", n = " << n << ", seed " << wb::base_seed() << ": y[" << i
                 << "] = " << y[i] << " for x = " << x[i] << ", where gelu(x) = x.\nrule: gelu(x) = x "
                 << "for large positive x, up to the largest float, with no inf on the way.\nhint: "
                 << "an intermediate overflowed: x * (1 + tanh(u)) is 2x once tanh(u) = 1, and 2x is "
                 << "inf for x > FLT_MAX / 2 = 1.7e38. Halve first, 0.5f * x * (1 + tanh(u)), or "
                 << "use x / (1 + exp(-2u)), which never exceeds |x|.\n" << failure);
      return;
    }
  FAIL_CHECK(failure);
}

TEST_CASE("fused and unfused GELU at the top of the float range: |x| up to 3e38") {
  WB_REQUIRE_GPU();
  for (const Impl impl : {Impl::Fused, Impl::Unfused})
    for (const std::size_t n : {std::size_t(7), std::size_t(4099)}) check_top_of_range(impl, n);
}

// Expects `call` to throw std::invalid_argument whose message contains `needle`. A
// NotImplemented from a starter passes through, so the test reads as "to do".
void expect_invalid_argument(const std::function<void()>& call, const std::string& needle,
                             const std::string& what) {
  try {
    call();
  } catch (const wb::NotImplemented&) {
    throw;
  } catch (const std::invalid_argument& e) {
    const std::string message = e.what();
    CHECK_MESSAGE(message.find(needle) != std::string::npos,
                  "ch05 " << what << ": the error should name '" << needle
                          << "', got: " << message);
    return;
  }
  FAIL_CHECK("ch05 " << what << ": expected std::invalid_argument, nothing was thrown\n"
             << "hint: keep the check_gelu_args(...) line at the top of each entry point");
}

TEST_CASE("bad arguments are rejected with a message that names them") {
  WB_REQUIRE_GPU();
  wb::DeviceBuffer<float> x(8), y(8), scratch(ch05::gelu_unfused_scratch_count(8));
  // A valid call first: a starter's NotImplemented surfaces here, as "to do".
  ch05::gelu_fused(x.data(), y.data(), 8, nullptr);
  ch05::gelu_unfused(x.data(), y.data(), scratch.data(), 8, nullptr);
  WB_CUDA(cudaDeviceSynchronize());

  expect_invalid_argument([&] { ch05::gelu_fused(nullptr, y.data(), 8, nullptr); }, "null",
                          "gelu_fused(x = nullptr)");
  expect_invalid_argument(
      [&] { ch05::gelu_unfused(x.data(), nullptr, scratch.data(), 8, nullptr); }, "null",
      "gelu_unfused(y = nullptr)");
  // n == 0 is not an error: nothing to do, whatever the pointers.
  ch05::gelu_fused(nullptr, nullptr, 0, nullptr);
  WB_CUDA(cudaDeviceSynchronize());
}

// gelu.cuh: "all work enqueued on `stream`". The call is captured into a CUDA graph on a
// stream of the test's own and replayed on new inputs (tests/lib/captured_graph.hpp says what
// that catches: work on the legacy default stream or another stream, a synchronize, an
// allocation). The read-back above only races with such work, which may win.
void check_graph(Impl impl, std::size_t n) {
  const std::string what = std::string("ch05 ") + name_of(impl) + " GELU captured into a CUDA graph, n = " +
                           std::to_string(n) + ", seed " + std::to_string(wb::base_seed());
  wb::GuardedBuffer<float> x_buf(n), y_buf(n), scratch(ch05::gelu_unfused_scratch_count(n));
  // Blocking: a launch on the legacy stream breaks the capture.
  const wb::testing::OwnedStream owned(cudaStreamDefault);
  const cudaStream_t stream = owned.s;
  std::unique_ptr<wb::testing::CapturedGraph> graph;
  try {
    graph = std::make_unique<wb::testing::CapturedGraph>(stream, [&](cudaStream_t s) {
      if (impl == Impl::Fused)
        ch05::gelu_fused(x_buf.data(), y_buf.data(), n, s);
      else
        ch05::gelu_unfused(x_buf.data(), y_buf.data(), scratch.data(), n, s);
    });
  } catch (const wb::NotImplemented&) {
    throw;
  } catch (const std::exception& e) {
    FAIL_CHECK(what << ": capturing the call failed: " << first_line(e) << "\n"
                    << wb::testing::kEverythingOnStreamHint);
    return;
  }
  for (int replay = 1; replay <= 2; ++replay) {
    const std::vector<float> x =
        ch05::reference::random_inputs(n, "ch05/graph/" + std::to_string(n) + "/" + std::to_string(replay));
    WB_CUDA(cudaMemcpyAsync(x_buf.data(), x.data(), n * sizeof(float), cudaMemcpyHostToDevice, stream));
    y_buf.poison(stream);
    scratch.poison(stream);
    graph->replay(stream);
    std::vector<float> y(n);
    WB_CUDA(cudaMemcpyAsync(y.data(), y_buf.data(), n * sizeof(float), cudaMemcpyDeviceToHost, stream));
    WB_CUDA(cudaStreamSynchronize(stream));
    const std::string failure = check_gelu(x, y, gelu_tanh(x), what + " (replay " + std::to_string(replay) + ")");
    if (!failure.empty()) {
      FAIL_CHECK(failure << "\nThe graph holds only what the call enqueued on `stream`: work that went "
                            "elsewhere ran once, while the call was captured, and not in the replay.\n"
                         << wb::testing::kEverythingOnStreamHint);
      return;
    }
  }
}

TEST_CASE("fused and unfused GELU captured into a CUDA graph: all work on the given stream") {
  WB_REQUIRE_GPU();
  if (wb::debug_sync_enabled()) {
    wb::testing::mark_skipped("skipped: WB_DEBUG_SYNC=1 synchronizes after every launch, which a graph capture forbids");
    return;
  }
  for (const Impl impl : {Impl::Fused, Impl::Unfused})
    for (const std::size_t n : {std::size_t(4099), std::size_t((1 << 20) + 3)}) check_graph(impl, n);
}

// gelu.cuh: enqueue on `stream` and return, no synchronization, no allocation, no copies
// (tests/lib/enqueue_only.hpp): a cudaMallocAsync'd temporary instead of the scratch buffer
// passes the graph capture above, not this.
TEST_CASE("rule: a call only enqueues work (no allocation, synchronization or host copy; counted with CUPTI)") {
  WB_REQUIRE_GPU();
  for (const std::size_t n : {std::size_t(7), std::size_t((1 << 20) + 3)}) {
    wb::DeviceBuffer<float> x(n), y(n), scratch(ch05::gelu_unfused_scratch_count(n));
    x.upload(ch05::reference::random_inputs(n, "ch05/enqueue-only/" + std::to_string(n)));
    const wb::testing::OwnedStream owned;
    const cudaStream_t stream = owned.s;
    for (const Impl impl : {Impl::Fused, Impl::Unfused}) {
      const std::string broke = wb::testing::enqueue_only_violation([&] {
        if (impl == Impl::Fused)
          ch05::gelu_fused(x.data(), y.data(), n, stream);
        else
          ch05::gelu_unfused(x.data(), y.data(), scratch.data(), n, stream);
      });
      WB_CUDA(cudaStreamSynchronize(stream));
      if (!broke.empty())
        FAIL_CHECK("ch05 " << name_of(impl) << " GELU, n = " << n
                           << ": rule: enqueue the work on `stream` and return without waiting: no "
                              "synchronization, no allocation, no copies. Of two calls in a row, one or both "
                           << broke << ".\n" << wb::testing::kEnqueueOnlyHint);
    }
  }
}

// After the others: a float4 access to a misaligned address is a sticky CUDA error that ends
// every later test of this process.
TEST_CASE("GELU of views: x and y alignments chosen independently") {
  WB_REQUIRE_GPU();
  // (x offset, y offset) in floats: both off (by as much, or not), then x aligned with y off,
  // and the reverse. n of 1 to 3 too: with x and y equally off (x + 1, y + 1), a head peeled
  // up to the next 16-byte boundary (3 scalars) can be longer than n.
  const std::vector<std::pair<std::size_t, std::size_t>> views = {{1, 1}, {2, 2}, {3, 3}, {1, 3}, {0, 2},
                                                                  {1, 0}, {0, 1}, {2, 0}, {3, 1}};
  for (const Impl impl : {Impl::Fused, Impl::Unfused})
    for (const auto [x_offset, y_offset] : views)
      for (const std::size_t n : {std::size_t(1), std::size_t(2), std::size_t(3), std::size_t(7),
                                  std::size_t(100003), std::size_t(100004)}) {
        const std::string what = std::string(name_of(impl)) + " GELU of views " +
                                 views_name(x_offset, y_offset);
        check_one(impl, ch05::reference::random_inputs(n, "ch05/view"), what, x_offset, y_offset);
      }
  // The unfused GELU's scratch is a caller's buffer too, and may be a slice of a larger
  // workspace: x and y aligned, n % 4 == 0, scratch 4 and 8 bytes off the 16-byte grid.
  for (const std::size_t scratch_offset : {std::size_t(1), std::size_t(2)})
    for (const std::size_t n : {std::size_t(7), std::size_t(100004)}) {
      const std::string what = "unfused GELU of views " + views_name(0, 0, scratch_offset);
      check_one(Impl::Unfused, ch05::reference::random_inputs(n, "ch05/view"), what, 0, 0,
                scratch_offset);
    }
}

// x ends exactly where mapped device memory ends (wb::InputAtEnd): a load past x[n - 1] is an
// illegal address here, where a guard band would have hidden it.
TEST_CASE("GELU with x at the very end of its allocation (a read past the end faults)") {
  WB_REQUIRE_GPU();
  for (const Impl impl : {Impl::Fused, Impl::Unfused})
    for (const std::size_t n : {std::size_t(1), std::size_t(5), std::size_t(4096), std::size_t(4099),
                                std::size_t(100003), std::size_t(1 << 20), std::size_t((1 << 20) + 3)}) {
      const std::vector<float> x = ch05::reference::random_inputs(n, "ch05/at-end");
      std::vector<float> y;
      try {
        wb::InputAtEnd x_buf(n);
        x_buf.upload(x);
        wb::GuardedBuffer<float> y_buf(n), scratch(ch05::gelu_unfused_scratch_count(n));
        if (impl == Impl::Fused)
          ch05::gelu_fused(x_buf.data(), y_buf.data(), n, nullptr);
        else
          ch05::gelu_unfused(x_buf.data(), y_buf.data(), scratch.data(), n, nullptr);
        WB_CUDA(cudaDeviceSynchronize());
        y = y_buf.download();
      } catch (const wb::NotImplemented&) {
        throw;
      } catch (const std::exception& e) {
        FAIL_CHECK("ch05 " << name_of(impl) << " GELU, n = " << n << ", seed " << wb::base_seed()
                   << ": rule: read only your own elements. In this test x ends exactly where "
                   << "mapped device memory ends, and the call failed (" << first_line(e) << "): the "
                   << "kernel read past the end of x.\nhint: guard every load with i < n, not "
                   << "only the stores: a thread past n must not load x[i] \"just in case\", and a "
                   << "float4 load of the last partial pack reads past the end.");
        return;  // sticky
      }
      const std::string failure = check_gelu(x, y, gelu_tanh(x), std::string(name_of(impl)) + " GELU, x at the end of its allocation");
      if (!failure.empty()) FAIL_CHECK(failure);
    }
}

// ---------------------------------------------------------------------------------------
// Launch patterns a real program has: calls on two streams at once, and a call beside another
// kernel that writes the floats just past its y. gelu.cuh puts each call's work on its own
// `stream` and nothing forbids calls that run at the same time: state shared between calls (a
// work counter in __device__ memory) mixes their work up, and a store to an element the call
// does not own, even of the bytes it just read there, undoes what another kernel wrote.

// One call's buffers: x uploaded, y between guard bands (NaN), a scratch of its own.
struct GeluCall {
  std::vector<float> x;
  wb::DeviceBuffer<float> x_dev;
  wb::GuardedBuffer<float> y;
  wb::DeviceBuffer<float> scratch;
  GeluCall(std::size_t n, const std::string& label)
      : x(ch05::reference::random_inputs(n, label)), x_dev(std::span<const float>(x)), y(n),
        scratch(ch05::gelu_unfused_scratch_count(n)) {}
  void launch(Impl impl, cudaStream_t stream) {
    if (impl == Impl::Fused)
      ch05::gelu_fused(x_dev.data(), y.data(), x.size(), stream);
    else
      ch05::gelu_unfused(x_dev.data(), y.data(), scratch.data(), x.size(), stream);
  }
};

TEST_CASE("fused and unfused GELU: two streams at once") {
  WB_REQUIRE_GPU();
  constexpr int kPerStream = 3;
  for (const Impl impl : {Impl::Fused, Impl::Unfused})
    for (const std::size_t n : {std::size_t(4099), std::size_t((1 << 20) + 3)}) {
      std::vector<std::unique_ptr<GeluCall>> calls;  // A0, B0, A1, B1, ...
      for (int i = 0; i < 2 * kPerStream; ++i)
        calls.push_back(std::make_unique<GeluCall>(
            n, "ch05/two-streams/" + std::string(i % 2 ? "b" : "a") + std::to_string(i / 2) + "/" + std::to_string(n)));
      WB_CUDA(cudaDeviceSynchronize());
      const wb::testing::OwnedStream gate, a, b;
      // Both streams wait for one event, recorded after a kernel that holds the gate's stream
      // for 5 ms: the calls queue up behind it meanwhile, and the two streams start together.
      const wb::testing::OwnedEvent open(cudaEventDisableTiming);  // orders the streams, times nothing
      wb::launch_spin_kernel(5e6, gate.s);
      WB_CUDA(cudaEventRecord(open.e, gate.s));
      WB_CUDA(cudaStreamWaitEvent(a.s, open.e, 0));
      WB_CUDA(cudaStreamWaitEvent(b.s, open.e, 0));
      const std::string where = std::string("ch05 ") + name_of(impl) + " GELU, n = " + std::to_string(n) +
                                ", two streams running at once (" + std::to_string(kPerStream) +
                                " calls each, on buffers of their own), seed " + std::to_string(wb::base_seed()) + ": ";
      try {
        for (int i = 0; i < kPerStream; ++i) {  // interleaved, so that the launches overlap
          calls[2 * i]->launch(impl, a.s);
          calls[2 * i + 1]->launch(impl, b.s);
        }
        WB_CUDA(cudaStreamSynchronize(a.s));
        WB_CUDA(cudaStreamSynchronize(b.s));
      } catch (const wb::NotImplemented&) {
        throw;
      } catch (const std::exception& e) {
        FAIL_CHECK(where << "the call failed: " << first_line(e)
                         << "\nhint: calls on two streams may run at the same time; each must use only its "
                            "own x, y (and scratch).");
        return;  // a fault is sticky
      }
      for (int i = 0; i < 2 * kPerStream; ++i) {
        GeluCall& call = *calls[i];
        const std::string failure = check_gelu(call.x, call.y.download(), gelu_tanh(call.x),
                                               std::string(name_of(impl)) + " GELU, call " + std::to_string(i / 2) +
                                                   " on stream " + (i % 2 ? "B" : "A") + " of two running at once");
        if (!failure.empty()) {
          FAIL_CHECK(where << "call " << i / 2 << " on stream " << (i % 2 ? "B" : "A")
                     << " came out wrong.\nrule: calls on different streams may run at the same time (gelu.cuh: "
                        "each call's work on its own `stream`); each computes its y from its x alone.\nhint: keep "
                        "no state in device memory that calls share (a __device__ work counter or flag, a "
                        "buffer of your own): two calls running together take each other's work, and a "
                        "counter that one call's last block resets breaks the other. A grid that covers the "
                        "array, or a grid-stride loop over it, needs no counter.\n"
                     << failure);
          break;
        }
        const std::string overrun = call.y.overrun("y");
        if (!overrun.empty())
          FAIL_CHECK(where << "call " << i / 2 << " on stream " << (i % 2 ? "B" : "A")
                           << ": rule: write only your own elements. The kernel " << overrun << ".");
      }
    }
}

// The floats just past y belong to another kernel that writes them while the GELU runs on
// another stream (y is one slice of a buffer whose next slice someone else fills). Its thread
// t owns cells[t]: it stores a counter there, waits about a microsecond and reads the cell
// back; any other value means a store by someone else landed in between. It runs until
// state[kStop] is set, or for deadline_ns (when the two kernels cannot run side by side), and
// leaves in state[kLast + t] the value its cell must keep from then on.
constexpr int kCells = 4;
enum NeighbourWord { kStarted, kStop, kTimedOut, kLost, kLostCell, kLostWrote, kLostRead, kLast, kStateWords = kLast + kCells };

__global__ void neighbour_kernel(unsigned* cells, unsigned* state, unsigned long long deadline_ns) {
  const int t = threadIdx.x;
  volatile unsigned* cell = cells + t;
  volatile unsigned* flags = state;
  const unsigned long long begin = wb::global_timer_ns();
  if (t == 0) flags[kStarted] = 1;
  unsigned k = 0;
  for (;;) {
    *cell = ++k;
    const long long wait_from = clock64();
    while (clock64() - wait_from < 2000) {
    }
    const unsigned seen = *cell;
    if (seen != k && atomicAdd(state + kLost, 1u) == 0) {
      flags[kLostCell] = t;
      flags[kLostWrote] = k;
      flags[kLostRead] = seen;
    }
    if (flags[kStop] != 0) break;
    if (wb::global_timer_ns() - begin > deadline_ns) {
      flags[kTimedOut] = 1;
      break;
    }
  }
  flags[kLast + t] = k;
}

__global__ void wait_for_flag(const unsigned* flag, unsigned long long deadline_ns) {
  const unsigned long long begin = wb::global_timer_ns();
  while (*static_cast<const volatile unsigned*>(flag) == 0 && wb::global_timer_ns() - begin < deadline_ns) __nanosleep(100);
}

__global__ void set_flag(unsigned* flag) { *static_cast<volatile unsigned*>(flag) = 1; }

void check_beside_neighbour(Impl impl, std::size_t n) {
  constexpr int kCalls = 200;
  constexpr unsigned long long kDeadlineNs = 2'000'000'000ull;
  const std::vector<float> x = ch05::reference::random_inputs(n, "ch05/neighbour/" + std::to_string(n));
  const wb::DeviceBuffer<float> x_dev{std::span<const float>(x)};
  wb::GuardedBuffer<float> y_buf(n + kCells);  // y[0, n): the call's; y[n, n + kCells): the neighbour's
  wb::DeviceBuffer<float> scratch(ch05::gelu_unfused_scratch_count(n));
  wb::DeviceBuffer<unsigned> state(kStateWords);
  WB_CUDA(cudaMemset(state.data(), 0, kStateWords * sizeof(unsigned)));
  WB_CUDA(cudaDeviceSynchronize());
  const std::string where = std::string("ch05 ") + name_of(impl) + " GELU, n = " + std::to_string(n) +
                            ", y 16-byte aligned, the " + std::to_string(kCells) +
                            " floats after y[n - 1] owned by another kernel that writes them at the same time "
                            "(y is one slice of a buffer whose next slice another stream fills), seed " +
                            std::to_string(wb::base_seed()) + ": ";
  const wb::testing::OwnedStream beside, work;
  float* y = y_buf.data();
  // Stops the neighbour whatever happened (a plain copy: it does not wait for the streams).
  const auto stop_neighbour = [&] {
    const unsigned one = 1;
    (void)cudaMemcpy(state.data() + kStop, &one, sizeof one, cudaMemcpyHostToDevice);
  };
  try {
    neighbour_kernel<<<1, kCells, 0, beside.s>>>(reinterpret_cast<unsigned*>(y + n), state.data(), kDeadlineNs);
    WB_CHECK_LAUNCH("neighbour_kernel");
    wait_for_flag<<<1, 1, 0, work.s>>>(state.data() + kStarted, kDeadlineNs);
    WB_CHECK_LAUNCH("wait_for_flag");
    for (int c = 0; c < kCalls; ++c) {
      if (impl == Impl::Fused)
        ch05::gelu_fused(x_dev.data(), y, n, work.s);
      else
        ch05::gelu_unfused(x_dev.data(), y, scratch.data(), n, work.s);
    }
    set_flag<<<1, 1, 0, work.s>>>(state.data() + kStop);
    WB_CHECK_LAUNCH("set_flag");
    WB_CUDA(cudaStreamSynchronize(work.s));
    WB_CUDA(cudaStreamSynchronize(beside.s));
  } catch (const wb::NotImplemented&) {
    stop_neighbour();
    throw;
  } catch (const std::exception& e) {
    stop_neighbour();
    FAIL_CHECK(where << "the call failed: " << first_line(e) << "\nhint: read and write only y[0] to y[n - 1].");
    return;  // a fault is sticky
  }
  const std::vector<unsigned> s = state.download();
  const std::vector<float> all = y_buf.download();
  const std::string rule =
      "rule: write only your own elements.";
  const std::string hint =
      "\nhint: a store of the bytes just read is still a store: the guard bands of the other tests "
      "cannot see it, another writer can. Only the n / 4 whole packs go four at a time; store the "
      "last n % 4 elements one by one, and load or store nothing at or past y[n].";
  if (s[kLost] > 0) {
    FAIL_CHECK(where << rule << " " << s[kLost] << " time(s) a value that kernel had just stored at y[n + "
                     << s[kLostCell] << "] was replaced by an older one (it stored its count " << s[kLostWrote]
                     << ", then read back " << s[kLostRead] << "): the GELU call loaded the floats past y[n - 1] "
                     << "and stored the same bytes back (a read-modify-write of the last, partial float4 pack), "
                     << "undoing the other kernel's store made in between." << hint);
    return;
  }
  for (int t = 0; t < kCells; ++t) {
    const unsigned now = std::bit_cast<unsigned>(all[n + t]);
    if (now != s[kLast + t]) {
      FAIL_CHECK(where << rule << " y[n + " << t << "] holds 0x" << std::hex << now << std::dec
                       << " after the calls, where its owner's last store was " << s[kLast + t]
                       << ": the GELU call stored to a float past y[n - 1] (a read-modify-write of the last, "
                       << "partial float4 pack puts back an old value)." << hint);
      return;
    }
  }
  const std::string failure = check_gelu(x, std::span<const float>(all).first(n), gelu_tanh(x),
                                         std::string(name_of(impl)) + " GELU beside another kernel's writes");
  if (!failure.empty()) FAIL_CHECK(failure);
  if (s[kTimedOut] != 0)
    wb::testing::record_note(where + "the other kernel and the calls did not run at the same time on this GPU: "
                                     "only the outputs were checked");
}

TEST_CASE("fused and unfused GELU beside another kernel writing the floats just past y") {
  WB_REQUIRE_GPU();
  if (wb::debug_sync_enabled() || wb::started_under_sanitizer()) {
    wb::testing::mark_skipped("skipped: under WB_DEBUG_SYNC=1 or compute-sanitizer, kernels do not run side by side");
    return;
  }
  for (const Impl impl : {Impl::Fused, Impl::Unfused})
    for (const std::size_t n : {std::size_t(5), std::size_t(4098), std::size_t(4099)}) check_beside_neighbour(impl, n);
}

// gelu.cuh: the call's work is enqueued on `stream`, so it runs after everything enqueued there
// before it. Here that is a kernel that writes x (a model's previous layer) and, as kernels
// written for programmatic dependent launch do, lets the next kernel launch early
// (griddepcontrol.launch_dependents) before it has written x. A plain launch still waits for it
// to finish; a launch with cudaLaunchAttributeProgrammaticStreamSerialization starts at once,
// and must call cudaGridDependencySynchronize() before it loads x.
__global__ void late_writer(const float* fresh, float* x, std::size_t n, unsigned long long delay_ns) {
#if __CUDA_ARCH__ >= 900
  cudaTriggerProgrammaticLaunchCompletion();  // dependents may launch now
#endif
  if (threadIdx.x == 0) {
    const unsigned long long begin = wb::global_timer_ns();
    while (wb::global_timer_ns() - begin < delay_ns) {
    }
  }
  __syncthreads();
  for (std::size_t i = threadIdx.x; i < n; i += blockDim.x) x[i] = fresh[i];
}

TEST_CASE("fused and unfused GELU after a kernel that lets the next one launch early (stream order)") {
  WB_REQUIRE_GPU();
  constexpr unsigned long long kDelayNs = 10'000'000;  // x is written 10 ms after the kernel starts
  const std::size_t n = (1 << 20) + 3;
  const std::vector<float> x = ch05::reference::random_inputs(n, "ch05/late-writer");
  const wb::DeviceBuffer<float> fresh{std::span<const float>(x)};
  for (const Impl impl : {Impl::Fused, Impl::Unfused})
    for (const std::size_t offset : {std::size_t(0), std::size_t(1)}) {
      wb::DeviceBuffer<float> x_buf(n + offset), scratch(ch05::gelu_unfused_scratch_count(n));
      wb::GuardedBuffer<float> y_buf(n + offset);
      const std::string where = std::string("ch05 ") + name_of(impl) + " GELU, n = " + std::to_string(n) + ", " +
                                views_name(offset, offset) + ", x written by the kernel just before the call on "
                                "its stream, which lets the next kernel launch early, seed " +
                                std::to_string(wb::base_seed()) + ": ";
      try {
        const wb::testing::OwnedStream stream;
        WB_CUDA(cudaMemsetAsync(x_buf.data(), 0, (n + offset) * sizeof(float), stream.s));  // gelu(0) = 0
        late_writer<<<1, 1024, 0, stream.s>>>(fresh.data(), x_buf.data() + offset, n, kDelayNs);
        WB_CHECK_LAUNCH("late_writer");
        if (impl == Impl::Fused)
          ch05::gelu_fused(x_buf.data() + offset, y_buf.data() + offset, n, stream.s);
        else
          ch05::gelu_unfused(x_buf.data() + offset, y_buf.data() + offset, scratch.data(), n, stream.s);
        WB_CUDA(cudaStreamSynchronize(stream.s));
      } catch (const wb::NotImplemented&) {
        throw;
      } catch (const std::exception& e) {
        FAIL_CHECK(explain_error(e, impl, n, offset, offset, 0));
        return;  // a fault is sticky
      }
      const std::vector<float> y = y_buf.download();
      const std::string failure = check_gelu(x, std::span<const float>(y).subspan(offset), gelu_tanh(x),
                                             std::string(name_of(impl)) + " GELU after a kernel that wrote x");
      if (!failure.empty())
        FAIL_CHECK(where << "rule: a call's work runs after all the work enqueued before it on `stream` "
                   "(gelu.cuh), here a kernel that stores x " << kDelayNs / 1'000'000 << " ms after it starts; "
                   "an output of 0 is gelu(0), of the x before that store.\nhint: a kernel launched with programmatic dependent launch "
                   "(cudaLaunchAttributeProgrammaticStreamSerialization) may start while the kernel before it "
                   "still runs: call cudaGridDependencySynchronize() before its first load of x, not only "
                   "before its stores (or launch it plainly).\n" << failure);
    }
}

// How many of y's elements still hold the poison (all bits set), and the first of them.
__global__ void count_unwritten(const float* y, std::size_t n, unsigned long long* how_many,
                                unsigned long long* first) {
  for (std::size_t i = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<std::size_t>(gridDim.x) * blockDim.x)
    if (__float_as_uint(y[i]) == 0xFFFFFFFFu) {
      atomicAdd(how_many, 1ull);
      atomicMin(first, static_cast<unsigned long long>(i));
    }
}

// "2^30 + 5" for 1073741829.
std::string as_power_of_two(unsigned long long i) {
  int k = 0;
  while (k < 63 && (1ull << (k + 1)) <= i) ++k;
  return i == 0 ? "0" : "2^" + std::to_string(k) + " + " + std::to_string(i - (1ull << k));
}

// One large GELU: every element written (counted on the GPU), then windows at the start, at
// 2^28, 2^30, 2^31 and 2^32 (those that fit in n), at the end, and spread between, checked
// against the double reference.
// `own_rule`, when given, is what an unwritten or wrong element means instead of the grid's reach.
void check_large(Impl impl, std::size_t n, std::size_t x_offset, std::size_t y_offset,
                 const std::string& own_rule = "") {
  std::ostringstream where;
  where << "ch05 " << name_of(impl) << " GELU, n = " << n << " (" << as_power_of_two(n) << "), "
        << views_name(x_offset, y_offset) << ", seed " << wb::base_seed() << ": ";
  const std::string rule = !own_rule.empty() ? own_rule :
      "rule: cover every element, however large n.\nhint: a grid has at most 2^31 - 1 blocks in "
      "x (65535 in y and z); a grid capped at some number of blocks needs a grid-stride loop, "
      "for (size_t i = first; i < n; i += (size_t)gridDim.x * blockDim.x), and indices must be "
      "size_t: an int wraps around at 2^31.";
  const char* unwritten_why = own_rule.empty() ? ": elements past the grid's reach were never processed"
                                               : ": those elements were never written";
  try {
    wb::DeviceBuffer<float> x(n + x_offset);
    wb::GuardedBuffer<float> y(n + y_offset);
    wb::GuardedBuffer<float> scratch(impl == Impl::Unfused ? ch05::gelu_unfused_scratch_count(n) : 0);
    wb::testing::fill_hashed_uniform<<<4096, 256>>>(x.data() + x_offset, n, wb::base_seed(), -6.0f, 6.0f);
    WB_CHECK_LAUNCH("fill_hashed_uniform");
    if (impl == Impl::Fused)
      ch05::gelu_fused(x.data() + x_offset, y.data() + y_offset, n, nullptr);
    else
      ch05::gelu_unfused(x.data() + x_offset, y.data() + y_offset, scratch.data(), n, nullptr);
    WB_CUDA(cudaDeviceSynchronize());
    wb::DeviceBuffer<unsigned long long> stats(2);
    const unsigned long long init[2] = {0, ~0ull};
    WB_CUDA(cudaMemcpy(stats.data(), init, sizeof init, cudaMemcpyHostToDevice));
    count_unwritten<<<4096, 256>>>(y.data() + y_offset, n, stats.data(), stats.data() + 1);
    WB_CHECK_LAUNCH("count_unwritten");
    const std::vector<unsigned long long> unwritten = stats.download();
    if (unwritten[0] > 0) {
      FAIL_CHECK(where.str() << unwritten[0] << " of the " << n << " outputs were not written; the "
                 << "first is y[" << unwritten[1] << "] = y[" << as_power_of_two(unwritten[1])
                 << "]" << unwritten_why << ".\n" << rule);
      return;
    }
    constexpr std::size_t kWindow = 8192;
    std::vector<std::size_t> starts = {0, (1ull << 28) - kWindow / 2, (1ull << 30) - kWindow / 2,
                                       (1ull << 31) - kWindow / 2, (1ull << 32) - kWindow / 2, n - kWindow};
    for (int i = 1; i < 8; ++i) starts.push_back(n / 8 * i);
    for (const std::size_t start : starts) {
      if (start + kWindow > n) continue;
      std::vector<float> xs(kWindow), ys(kWindow);
      WB_CUDA(cudaMemcpy(xs.data(), x.data() + x_offset + start, kWindow * sizeof(float), cudaMemcpyDeviceToHost));
      WB_CUDA(cudaMemcpy(ys.data(), y.data() + y_offset + start, kWindow * sizeof(float), cudaMemcpyDeviceToHost));
      const std::string failure =
          check_gelu(xs, ys, gelu_tanh(xs), std::string(name_of(impl)) + " GELU, elements from " + as_power_of_two(start));
      if (!failure.empty()) {
        if (start == 0)  // wrong from the first element on: the formula, not the reach
          FAIL_CHECK(failure);
        else
          FAIL_CHECK(where.str() << "the outputs from y[" << as_power_of_two(start)
                     << "] on are wrong (those before are right).\n" << rule << "\n" << failure);
        return;
      }
    }
    const std::string overrun = y.overrun("y");
    if (!overrun.empty()) FAIL_CHECK(where.str() << "the kernel " << overrun << ".\n" << rule);
  } catch (const wb::NotImplemented&) {
    throw;
  } catch (const std::exception& e) {
    FAIL_CHECK(where.str() << "the call failed: " << first_line(e) << "\n" << rule);
    throw;  // a fault is sticky: nothing more can run on this device
  }
}

TEST_CASE("GELU past 2^30 and 2^31 elements (a capped grid, an int index)") {
  WB_REQUIRE_GPU();
  if (wb::coverage::quick()) {
    wb::testing::mark_skipped("skipped: the 2^30- and 2^31-element cases are left out under compute-sanitizer / WB_QUICK");
    return;
  }
  std::size_t free_bytes = 0, total_bytes = 0;
  WB_CUDA(cudaMemGetInfo(&free_bytes, &total_bytes));
  const std::size_t past_2_30 = (1ull << 30) + 4099, past_2_31 = (1ull << 31) + 3;
  for (const Impl impl : {Impl::Fused, Impl::Unfused})
    for (const auto [x_offset, y_offset] : {std::pair<std::size_t, std::size_t>{0, 0}, {1, 3}})
      check_large(impl, past_2_30, x_offset, y_offset);
  // The fused GELU only past 2^31 (the unfused one would need 4 buffers of 8 GiB).
  if (free_bytes < 2 * past_2_31 * sizeof(float) + (2ull << 30)) {
    wb::testing::record_note("the 2^31-element case was left out: it needs 18 GB of free device memory, this GPU has " +
                             std::to_string(free_bytes >> 30) + " GB");
    return;
  }
  for (const auto [x_offset, y_offset] : {std::pair<std::size_t, std::size_t>{0, 0}, {1, 0}})
    check_large(Impl::Fused, past_2_31, x_offset, y_offset);
}

// 2^32 + 3 elements (16 GiB per array), x and y aligned: the float4 body reaches past 2^32
// and the last 3 elements are the scalar tail. The case above stops at 2^31 + 3, where a
// 32-bit unsigned index still holds every element; here one wraps: a tail index kept in an
// unsigned, 4 * (n / 4) + threadIdx.x, becomes threadIdx.x, so the tail's threads rewrite
// y[0 .. 255] and y[2^32 .. 2^32 + 2] are never written.
TEST_CASE("fused GELU past 2^32 elements (32-bit indices, the tail)") {
  WB_REQUIRE_GPU();
  if (wb::coverage::quick()) {
    wb::testing::mark_skipped("skipped: the 2^32-element case is left out under compute-sanitizer / WB_QUICK");
    return;
  }
  const std::size_t n = (1ull << 32) + 3;
  std::size_t free_bytes = 0, total_bytes = 0;
  WB_CUDA(cudaMemGetInfo(&free_bytes, &total_bytes));
  const std::size_t needed = 2 * n * sizeof(float) + (2ull << 30);
  if (free_bytes < needed) {
    wb::testing::mark_skipped("skipped: the 2^32-element case needs " + std::to_string((needed >> 30) + 1) +
                              " GB of free device memory, this GPU has " + std::to_string(free_bytes >> 30) + " GB");
    return;
  }
  check_large(Impl::Fused, n, 0, 0,
              "rule: cover every element, however large n: n is a size_t, here 2^32 + 3, so the float4 "
              "body and the scalar tail (the last n % 4 = 3 elements) lie past 2^32.\nhint: keep every "
              "index and count derived from n in size_t, the tail's too: size_t tail = 4 * (n / 4) + "
              "threadIdx.x. In a 32-bit unsigned it wraps past 2^32 to threadIdx.x, so the tail's threads "
              "store to y[0 ..] and the last elements are never written.");
}

// The unfused chain past 2^31 and 2^32 elements: x, y and a scratch of 2n floats (32 GiB at
// 2^31 + 3, 64 GiB at 2^32 + 3). The case above 2^30 stops at 2^30 + 4099, where an int index
// still holds every element, and the fused cases do not run gelu_unfused's kernels. With n % 4
// = 3, t1 = scratch + n is not 16-byte aligned, so every op that touches t1 takes the scalar
// path even with x and y aligned (and with x + 1, every op does); at 2^32 + 3 the float4 ops'
// tail (the last 3 elements) lies past 2^32. An int index (blockIdx.x * blockDim.x +
// threadIdx.x, one thread per element) turns negative at 2^31, converts to a huge size_t and
// fails i < n; a tail index kept in 32 bits wraps to threadIdx.x at 2^32: elements never
// written in one op leave their poison in every op after it, and in y.
TEST_CASE("unfused GELU past 2^31 and 2^32 elements (an int index, a 32-bit tail)") {
  WB_REQUIRE_GPU();
  if (wb::coverage::quick()) {
    wb::testing::mark_skipped("skipped: the 2^31- and 2^32-element cases are left out under compute-sanitizer / WB_QUICK");
    return;
  }
  const std::size_t past_2_31 = (1ull << 31) + 3, past_2_32 = (1ull << 32) + 3;
  // x, y and 2n of scratch: 4n floats, and room for the guard bands and the check's windows.
  const auto needed = [](std::size_t n) { return 4 * n * sizeof(float) + (2ull << 30); };
  std::size_t free_bytes = 0, total_bytes = 0;
  WB_CUDA(cudaMemGetInfo(&free_bytes, &total_bytes));
  if (free_bytes < needed(past_2_31)) {
    wb::testing::mark_skipped("skipped: the unfused 2^31-element case needs " +
                              std::to_string((needed(past_2_31) >> 30) + 1) + " GB of free device memory, this GPU has " +
                              std::to_string(free_bytes >> 30) + " GB");
    return;
  }
  const std::string int_rule =
      "rule: cover every element, however large n, in every op of the unfused chain: n is a size_t, "
      "here past 2^31, and t1 = scratch + n is not 16-byte aligned (n % 4 = 3), so the ops that touch "
      "it run their scalar path.\nhint: index with size_t in every kernel, the scalar path's too: "
      "size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x. An int i = blockIdx.x * blockDim.x "
      "+ threadIdx.x turns negative at 2^31, converts to a huge size_t and fails i < n, so those "
      "elements are never written, in that op and in y.";
  for (const auto [x_offset, y_offset] : {std::pair<std::size_t, std::size_t>{0, 0}, {1, 0}})
    check_large(Impl::Unfused, past_2_31, x_offset, y_offset, int_rule);
  WB_CUDA(cudaMemGetInfo(&free_bytes, &total_bytes));
  if (free_bytes < needed(past_2_32)) {
    wb::testing::record_note("the unfused 2^32-element case was left out: it needs " +
                             std::to_string((needed(past_2_32) >> 30) + 1) + " GB of free device memory, this GPU has " +
                             std::to_string(free_bytes >> 30) + " GB");
    return;
  }
  check_large(Impl::Unfused, past_2_32, 0, 0,
              "rule: cover every element, however large n, in every op of the unfused chain: n is a "
              "size_t, here 2^32 + 3, so the float4 ops' body and their scalar tail (the last n % 4 = 3 "
              "elements) lie past 2^32.\nhint: keep every index and count derived from n in size_t, the "
              "tail's too: size_t tail = 4 * (n / 4) + threadIdx.x. In a 32-bit unsigned it wraps past "
              "2^32 to threadIdx.x, so the tail's threads store to out[0 ..], the last elements of that "
              "op are never written, and their poison flows through every op after it into y.");
}

// Last: every kernel of the reference (solution and fast builds) must have run above.
TEST_CASE("kernel coverage: every kernel of the reference ran in this suite") {
  WB_REQUIRE_GPU();
  kernel_coverage_test::check_reference("_ZN4ch05", "05");
}

}  // namespace
