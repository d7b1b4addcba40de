// Chapter 01 correctness: the matvec kernel on every kind of shape, the naive wrapper, and
// the whole model running on it.
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "../lib/matvec_edges.hpp"
#include "ch01_adapters.hpp"
#include "wb/api_counter.hpp"
#include "wb/model/backend_check.hpp"
#include "wb/model/data.hpp"
#include "wb/model/synthetic.hpp"
#include "wb/random.hpp"
#include "wb/kernel_coverage.hpp"
#include "wb/testing.hpp"

#include <sstream>

namespace {

// Count CUDA API calls from start-up, so that every allocation of this process is known with
// its size when a test checks what was freed (a free of memory allocated before counting
// began would have no size).
[[maybe_unused]] const bool kApiCountingFromStartUp = wb::ApiCounter::available();

struct Shape {
  int d, n;  // d rows of n columns: "d x n"
};

const std::string kKernelHint =
    "compare your loop bounds with n and d, and check that every thread's partial sum "
    "reaches the reduction.";

void check_kernel_shapes(const std::vector<Shape>& shapes, const std::string& extra_hint = "") {
  for (const Shape& s : shapes) {
    CAPTURE(s.d);
    CAPTURE(s.n);
    WB_CHECK_RESULT(wb::model::check_device_matvec(
        ch01_adapters::kLaunch, s.n, s.d, {"01", "launch_matvec", extra_hint.empty() ? kKernelHint : extra_hint}));
  }
}

}  // namespace

// ---- The edges of the contract first: a kernel that faults there poisons the CUDA context
// for every later test, so the first failure a student sees names the rule it broke.
TEST_CASE("launch_matvec: any n and any alignment of W, x and y (every column counts; any alignment)") {
  WB_REQUIRE_GPU();
  WB_CHECK_RESULT(matvec_edges::check_all_layouts(ch01_adapters::kLaunch, "01"));
}

TEST_CASE("launch_matvec: inputs that end (or start) exactly where memory does (read only your own elements)") {
  WB_REQUIRE_GPU();
  WB_CHECK_RESULT(matvec_edges::check_all_fenced(ch01_adapters::kLaunch, "01"));
}

TEST_CASE("launch_matvec: more than 65535 rows (a 151936-row classifier)") {
  WB_REQUIRE_GPU();
  WB_CHECK_RESULT(matvec_edges::check_all_tall(ch01_adapters::kLaunch, "01"));
}

// The contract's "enqueued on `stream`, no synchronization", which every other test lets
// pass (matvec_edges::check_captured says why).
TEST_CASE("launch_matvec: all work on the given stream, no synchronization (captured into a CUDA graph)") {
  WB_REQUIRE_GPU();
  if (wb::debug_sync_enabled()) {
    wb::testing::mark_skipped("skipped: WB_DEBUG_SYNC=1 synchronizes after every launch, which a graph capture forbids");
    return;
  }
  WB_CHECK_RESULT(matvec_edges::check_captured(ch01_adapters::kLaunch, "01"));
}

TEST_CASE("launch_matvec: d*n past 2^31 floats (64-bit index arithmetic)") {
  WB_REQUIRE_GPU();
  const auto r = matvec_edges::check_huge(ch01_adapters::kLaunch, matvec_edges::kHugeCols, matvec_edges::kHugeRows, "01");
  if (!r.skipped.empty()) {
    wb::testing::mark_skipped(r.skipped);
    return;
  }
  WB_CHECK_RESULT(r.result);
}

// The case above catches int offsets; an UNSIGNED 32-bit offset (blockIdx.x * n) passes it and
// wraps only at 2^32 floats. 17.2 GB of W made on the device (nothing crosses PCIe), skipped
// on a GPU without the memory; the host's threads check all rows in about a second.
TEST_CASE("launch_matvec: d*n past 2^32 floats (no 32-bit unsigned wrap either)") {
  WB_REQUIRE_GPU();
  if (wb::coverage::quick()) {  // 17 GB under compute-sanitizer: the 2^31 case above stays
    wb::testing::mark_skipped("skipped under compute-sanitizer / WB_QUICK: the 2^32-float matrix");
    return;
  }
  const auto r = matvec_edges::check_huge(ch01_adapters::kLaunch, matvec_edges::kHuge32Cols,
                                          matvec_edges::kHuge32Rows, "01", matvec_edges::kWrapRule,
                                          matvec_edges::kWrapHint);
  if (!r.skipped.empty()) {
    wb::testing::mark_skipped(r.skipped);
    return;
  }
  WB_CHECK_RESULT(r.result);
}

// A row offset counted in float4s (reinterpret_cast<const float4*>(W) + blockIdx.x * (n / 4)) is a
// quarter of the float offset, so it passes both cases above, but blockIdx.x * (n / 4) is still a
// 32-bit unsigned product: it wraps to row 0 at 2^32 float4s, 2^34 floats. 524416 rows of 32768
// floats, 128 rows past that wrap: 68.7 GB of W made on the device, skipped on a GPU without the
// memory (an H200 has it); the host's threads check every row in a few seconds.
TEST_CASE("launch_matvec: d*n past 2^34 floats (no 32-bit wrap of a float4 offset either)") {
  WB_REQUIRE_GPU();
  if (wb::coverage::quick()) {  // 69 GB under compute-sanitizer: the 2^31 case stays
    wb::testing::mark_skipped("skipped under compute-sanitizer / WB_QUICK: the 2^34-float matrix");
    return;
  }
  const int n = 32768, d = 524288 + 128;  // 2^34 / n = 524288 rows, then 128 more
  const auto r = matvec_edges::check_huge(
      ch01_adapters::kLaunch, n, d, "01",
      "rule: 64-bit index arithmetic (d*n may exceed 2^34, where a float4 offset in unsigned int wraps)",
      "hint: counting the row offset in float4s divides it by 4, it does not make it fit: blockIdx.x * (n / 4) "
      "is still a 32-bit unsigned product and wraps to 0 at 2^32 float4s = 2^34 floats (here from row 524288 "
      "on, which reads row 0 again). Compute the row's start in floats, W + std::size_t(row) * std::size_t(n), "
      "then reinterpret_cast it to const float4*; or widen before you multiply: "
      "std::size_t(blockIdx.x) * std::size_t(n / 4).");
  if (!r.skipped.empty()) {
    wb::testing::mark_skipped(r.skipped);
    return;
  }
  WB_CHECK_RESULT(r.result);
}

TEST_CASE("launch_matvec: the model's shapes (multiples of 32 columns)") {
  WB_REQUIRE_GPU();
  check_kernel_shapes({{288, 288}, {2048, 768}, {768, 2048}, {32000, 288}, {512, 64}});
}

// 11009x4096 and 32001x4096: one row more than the timed shapes (test_timing.cu), so that a
// launch tuned for the timed row length cannot drop the rows past a multiple of its rows per
// block unseen: no shape is special.
TEST_CASE("launch_matvec: the tail (n and d that are not multiples of the block size)") {
  WB_REQUIRE_GPU();
  check_kernel_shapes(
      {{1, 1}, {7, 13}, {5, 1}, {1, 5000}, {3, 1023}, {33, 1025}, {172, 64}, {64, 172}, {4099, 4097},
       {11009, 4096}, {32001, 4096}},
      "rule: every column counts. When n is not a multiple of your block size (or of 4 with "
      "float4 loads), the last columns of each row (the tail) still have to be added; when d "
      "is not a multiple of your rows per block, round the grid up and guard the extra rows, on "
      "every launch path (one tuned for some shapes too).");
}

TEST_CASE("launch_matvec: random shapes from the seed") {
  WB_REQUIRE_GPU();
  auto rng = wb::rng_for("ch01/matvec/random-shapes");
  std::uniform_int_distribution<int> size(1, 4500);
  std::vector<Shape> shapes;
  for (int i = 0; i < 4; ++i) shapes.push_back({size(rng), size(rng)});
  check_kernel_shapes(shapes);
}

TEST_CASE("matvec_naive: out = W x from host memory") {
  WB_REQUIRE_GPU();
  for (const Shape s : {Shape{1, 1}, Shape{7, 13}, Shape{2048, 768}, Shape{4099, 4097}}) {
    CAPTURE(s.d);
    CAPTURE(s.n);
    WB_CHECK_RESULT(wb::model::check_host_matvec(
        ch01_adapters::kNaive, s.n, s.d,
        {"01", "matvec_naive", "the kernel passes on its own, so look at the copies: W is d*n "
                               "floats, x is n floats, out is d floats."}));
  }
}

// The tests above use pageable std::vectors, where even a cudaMemcpyAsync back waits for the
// copy; with pinned memory only a synchronizing wrapper has out ready when it returns.
TEST_CASE("matvec_naive: W, x and out in pinned host memory (out is ready when it returns)") {
  WB_REQUIRE_GPU();
  WB_CHECK_RESULT(matvec_edges::check_pinned_host(ch01_adapters::kNaive, 768, 32000, "01", "matvec_naive"));
}

namespace {

bool api_counting_or_skip() {
  if (wb::ApiCounter::available()) return true;
  wb::testing::mark_skipped("skipped: CUDA API counting is unavailable (" + wb::ApiCounter::unavailable_reason() + ")");
  return false;
}

// What one call of matvec_naive must do, by the CUDA API's own accounting: W and x up (all
// of them, every call: the naive wrapper keeps nothing), out down, and every device and
// pinned host allocation it made freed before it returns. Empty when it did.
std::string naive_call_problem(const wb::ApiCounts& c, int n, int d) {
  const std::size_t w_bytes = std::size_t(n) * std::size_t(d) * sizeof(float);
  const std::size_t x_bytes = std::size_t(n) * sizeof(float), y_bytes = std::size_t(d) * sizeof(float);
  std::ostringstream m;
  const std::string shape = "W " + std::to_string(d) + "x" + std::to_string(n);
  if (c.bytes_h2d < w_bytes + x_bytes)
    m << "chapter 01, matvec_naive, " << shape << ": rule: W crosses on every call. This call moved "
      << c.bytes_h2d << " bytes host-to-device; W and x are " << w_bytes + x_bytes << " bytes ("
      << c.summary() << ").\nhint: the naive wrapper keeps nothing between calls: cudaMemcpy all of W "
      << "(d*n floats) and x (n floats) to the device on every call, even when the pointers are the "
      << "same as last time (the values behind them may not be).";
  else if (c.bytes_d2h < y_bytes)
    m << "chapter 01, matvec_naive, " << shape << ": this call moved " << c.bytes_d2h
      << " bytes device-to-host; out is " << y_bytes << " bytes.\nhint: copy out (d floats) back.";
  else if (c.host_allocs != c.host_frees || c.live_host_bytes() != 0 || c.host_registers != c.host_unregisters)
    m << "chapter 01, matvec_naive, " << shape << ": rule: free what you allocate (pinned host memory too). "
      << "One call left pinned host memory behind: " << c.resources()
      << ".\nhint: every cudaMallocHost/cudaHostAlloc needs its cudaFreeHost and every cudaHostRegister its "
         "cudaHostUnregister before the call returns (pageable cudaMemcpy needs neither).";
  else if (c.mallocs != c.frees || c.live_device_bytes() != 0)
    m << "chapter 01, matvec_naive, " << shape << ": rule: free what you allocate. One call made "
      << c.resources() << ": " << c.live_device_bytes()
      << " device bytes were still allocated when it returned.\nhint: every call allocates W, x and out "
         "and must cudaFree all three (the pointers cudaMalloc returned, not null ones) before returning, "
         "or each token leaks the size of the model.";
  return m.str();
}

}  // namespace

TEST_CASE("matvec_naive: same pointers, new values, every call (nothing kept between calls)") {
  WB_REQUIRE_GPU();
  const bool counting = api_counting_or_skip();
  // One W, x and out for every round; between rounds the values change in place.
  const int n = 517, d = 300;
  std::vector<float> W(std::size_t(n) * d), x(static_cast<std::size_t>(n)), out(static_cast<std::size_t>(d));
  // The results of every round first (a stale answer is the worse mistake), then the accounting.
  std::string accounting_problem;
  for (int round = 0; round < 4; ++round) {
    CAPTURE(round);
    matvec_edges::refill(W, "ch01/same-pointer/W" + std::to_string(round));
    matvec_edges::refill(x, "ch01/same-pointer/x" + std::to_string(round));
    std::fill(out.begin(), out.end(), std::numeric_limits<float>::quiet_NaN());
    wb::ApiCounter counter;
    ch01::matvec_naive(out.data(), x.data(), W.data(), n, d);
    const wb::ApiCounts c = counter.counts();
    const auto expected = wb::model::matvec_reference(W, x, n, d);
    const wb::CompareResult r = wb::compare(
        out, expected,
        {.chapter = "01",
         .what = "matvec_naive, call " + std::to_string(round + 1) + " with the same W, x and out pointers as "
                 "the call before and new values behind them (W 300x517)",
         .shape = {std::size_t(d)},
         .tol = wb::model::matvec_tolerance(n),
         .hint = "rule: same pointer, new values. A host pointer names memory, not a value: the caller may "
                 "have written new weights or activations there since the last call. Copy W and x on every "
                 "call; never key a cache on a host pointer."});
    if (!r.ok) FAIL("rule: same pointer, new values: " << r.message);
    if (counting && accounting_problem.empty()) accounting_problem = naive_call_problem(c, n, d);
  }
  if (!accounting_problem.empty()) FAIL(accounting_problem);
}

TEST_CASE("matvec_naive frees every buffer it allocates (24 calls, 4 shapes, sizes counted)") {
  WB_REQUIRE_GPU();
  if (!api_counting_or_skip()) return;
  struct Shape { int d, n; };
  const Shape shapes[] = {{2048, 768}, {7, 13}, {1, 1}, {300, 517}};
  std::vector<std::vector<float>> Ws, xs;
  for (const Shape& s : shapes) {
    Ws.push_back(matvec_edges::signed_values(std::size_t(s.d) * s.n, "ch01/leaks/W" + std::to_string(s.d)));
    xs.push_back(matvec_edges::signed_values(std::size_t(s.n), "ch01/leaks/x" + std::to_string(s.d)));
  }
  std::vector<float> out(2048);
  ch01::matvec_naive(out.data(), xs[0].data(), Ws[0].data(), 768, 2048);  // warm up: CUDA context
  wb::ApiCounter counter;
  for (int call = 0; call < 24; ++call) {
    const std::size_t i = std::size_t(call) % 4;
    ch01::matvec_naive(out.data(), xs[i].data(), Ws[i].data(), shapes[i].n, shapes[i].d);
  }
  const wb::ApiCounts c = counter.counts();
  wb::testing::record_metric("mallocs_per_call", double(c.mallocs) / 24);
  wb::testing::record_metric("frees_per_call", double(c.frees) / 24);
  wb::testing::record_metric("device_bytes_leaked", double(c.live_device_bytes()));
  CHECK_MESSAGE((c.frees == c.mallocs && c.live_device_bytes() == 0),
                "chapter 01: rule: free what you allocate. 24 calls of matvec_naive made " << c.resources()
                    << ": " << c.live_device_bytes() << " device bytes are still allocated (" << c.summary()
                    << ")\nhint: every call allocates W, x and out and must cudaFree all three before "
                       "returning, or each token leaks the size of the model. cudaFree(nullptr) frees nothing.");
  CHECK_MESSAGE((c.host_allocs == c.host_frees && c.live_host_bytes() == 0 && c.host_registers == c.host_unregisters),
                "chapter 01: rule: free what you allocate (pinned host memory too). 24 calls of matvec_naive made "
                    << c.resources() << "\nhint: cudaFreeHost what you cudaMallocHost, cudaHostUnregister what "
                                        "you cudaHostRegister.");
  std::size_t w_bytes = 0;
  for (int call = 0; call < 24; ++call) w_bytes += Ws[std::size_t(call) % 4].size() * sizeof(float);
  CHECK_MESSAGE(c.bytes_h2d >= w_bytes,
                "chapter 01: rule: W crosses on every call. 24 calls moved only "
                    << c.bytes_h2d << " bytes host-to-device, their W alone are " << w_bytes
                    << " bytes\nhint: cudaMemcpy W (d*n floats) and x (n floats) to the device on every call.");
}

TEST_CASE("matvec_naive: d*n past 2^31 floats (the wrapper's sizes in 64 bits)") {
  WB_REQUIRE_GPU();
  const std::size_t w_bytes = std::size_t(matvec_edges::kHugeRows) * matvec_edges::kHugeCols * sizeof(float);
  const auto r = matvec_edges::check_huge_host(
      ch01_adapters::kNaive, matvec_edges::kHugeCols, matvec_edges::kHugeRows, "01", "matvec_naive",
      w_bytes + (std::size_t(1) << 30));
  if (!r.skipped.empty()) {
    wb::testing::mark_skipped(r.skipped);
    return;
  }
  WB_CHECK_RESULT(r.result);
}

TEST_CASE("end to end: stories260K generates llama2.c's text through matvec_naive") {
  WB_REQUIRE_GPU();
  std::string why;
  const auto files = wb::model::tiny_stories_from_env(&why);
  if (!files) {
    wb::testing::mark_skipped(why);
    return;
  }
  auto backend = ch01_adapters::naive_backend();
  const wb::model::TextCheck r = wb::model::check_tiny_stories_text(backend, *files, "01");
  CHECK_MESSAGE(r.ok, r.message);
}

TEST_CASE("end to end: the synthetic model's logits through matvec_naive match the CPU's") {
  WB_REQUIRE_GPU();
  const wb::model::Model model = wb::model::make_synthetic(wb::model::synthetic_small());
  auto backend = ch01_adapters::naive_backend();
  WB_CHECK_RESULT(wb::model::compare_logits_with_cpu(backend, model, 4, "01"));
}

// ---- One row of nearly 2^31 floats: the column index, not the row offset, passes INT_MAX.
// Last in this file: a kernel that gets it wrong reads 8 GB before the row and faults, which
// spoils the CUDA context for any test after it.
namespace {

// +1 or -1 from the sign bit of the hash (the same on the host and the device): every product
// and every partial sum of a correct kernel, in any order that does not sum one sign first, is
// an integer far below 2^24, so the answer is exact.
__host__ __device__ inline float unit_sign(std::uint64_t seed, std::uint64_t i) {
  return matvec_edges::hashed_value(seed, i) < 0.0f ? -1.0f : 1.0f;
}

__global__ void fill_unit_signs(float* out, std::size_t count, std::uint64_t seed) {
  for (std::size_t i = blockIdx.x * std::size_t(blockDim.x) + threadIdx.x; i < count;
       i += std::size_t(gridDim.x) * blockDim.x)
    out[i] = unit_sign(seed, i);
}

}  // namespace

TEST_CASE("launch_matvec: one row of 2^31 - 1 floats (the column index in 64 bits too)") {
  WB_REQUIRE_GPU();
  if (wb::coverage::quick()) {  // 17 GB read under compute-sanitizer: the row offsets stay checked above
    wb::testing::mark_skipped("skipped under compute-sanitizer / WB_QUICK: the 2^31-float row");
    return;
  }
  // n is odd, so every kernel takes its scalar path, where j counts single floats up to n. A
  // loop `for (int j = threadIdx.x; j < n; j += stride)` (or with j + stride in its bound)
  // steps past INT_MAX here for any stride of 2 or more (a warp's 32 too) and wraps to -2^31.
  const int n = 2147483647, d = 1;  // INT_MAX, the longest row the header allows
  const std::size_t need = 2 * std::size_t(n) * sizeof(float) + (std::size_t(512) << 20);
  std::size_t free_bytes = 0, total_bytes = 0;
  WB_CUDA(cudaMemGetInfo(&free_bytes, &total_bytes));
  const std::string shape = "W 1x" + std::to_string(n) + " (d=1 row of n=" + std::to_string(n) + " floats)";
  if (free_bytes < need) {
    wb::testing::mark_skipped("skipped: " + shape + " with x needs " + std::to_string(need >> 20) +
                              " MiB of device memory, this GPU has " + std::to_string(free_bytes >> 20) + " MiB free");
    return;
  }
  std::optional<wb::DeviceBuffer<float>> W, x;
  try {
    W.emplace(std::size_t(n));
    x.emplace(std::size_t(n));
  } catch (const wb::CudaError& e) {
    if (e.code() != cudaErrorMemoryAllocation) throw;
    (void)cudaGetLastError();
    wb::testing::mark_skipped("skipped: " + shape + ": another process took the device memory this check needs");
    return;
  }
  const std::string label = "ch01/edges/long-row/" + std::to_string(n);
  const std::uint64_t w_seed = matvec_edges::seed_for(label + "/W"), x_seed = matvec_edges::seed_for(label + "/x");
  fill_unit_signs<<<1024, 256>>>(W->data(), W->size(), w_seed);
  fill_unit_signs<<<1024, 256>>>(x->data(), x->size(), x_seed);
  WB_CHECK_LAUNCH("fill_unit_signs");
  WB_CUDA(cudaDeviceSynchronize());
  // The exact answer, on the host's threads: sum of (+-1) * (+-1).
  long long want = 0;
  {
    const unsigned threads = std::max(1u, std::min(32u, std::thread::hardware_concurrency()));
    std::vector<long long> part(threads, 0);
    std::vector<std::thread> pool;
    for (unsigned t = 0; t < threads; ++t)
      pool.emplace_back([&, t] {
        const std::size_t begin = std::size_t(n) / threads * t, end = t + 1 == threads ? std::size_t(n) : std::size_t(n) / threads * (t + 1);
        long long s = 0;
        for (std::size_t j = begin; j < end; ++j) s += unit_sign(w_seed, j) == unit_sign(x_seed, j) ? 1 : -1;
        part[t] = s;
      });
    for (auto& th : pool) th.join();
    for (long long s : part) want += s;
  }
  const std::string rule = "rule: 64-bit index arithmetic (one row may be nearly 2^31 floats long)";
  const std::string hint =
      "hint: here the row offset is 0 and the COLUMN index overflows: with n = 2147483647, a column index j "
      "that steps by blockDim.x (or by several strides at once) passes INT_MAX = 2147483647 on its last "
      "steps and, as an int, wraps to -2^31: the loads land 8 GB before the row. Keep j, its stride and its "
      "bound (j + stride < n) in std::size_t, as the row offset already is.";
  std::string problem;  // FAIL outside the try: doctest reports a failure by throwing
  try {
    wb::GuardedBuffer<float> y{std::size_t(d)};
    ch01_adapters::kLaunch(y.data(), x->data(), W->data(), n, d, nullptr);
    WB_CUDA(cudaGetLastError());
    WB_CUDA(cudaDeviceSynchronize());
    if (const std::string overrun = y.overrun("y"); !overrun.empty()) {
      problem = "chapter 01, launch_matvec, " + shape + ": " + rule + ". The kernel " + overrun + ".\n" + hint;
    } else {
      const std::vector<double> expected = {double(want)};
      const wb::CompareResult r = wb::compare(
          y.download(), expected,
          {.chapter = "01",
           .what = "launch_matvec, " + shape + ", W and x of +-1 (the exact answer is the integer " +
                   std::to_string(want) + ")",
           .shape = {std::size_t(d)},
           .tol = {0.5, 0.0},
           .hint = hint});
      if (!r.ok) problem = rule + ": " + r.message;
    }
  } catch (const wb::NotImplemented&) {
    throw;  // a starter: the test reads "to do", not a failed launch
  } catch (const std::exception& e) {
    problem = "chapter 01, launch_matvec, " + shape + ": " + rule + ". The kernel failed: " + e.what() + "\n" + hint +
              "\n  reproduce with WB_SEED=" + std::to_string(wb::base_seed());
  }
  if (!problem.empty()) FAIL(problem);
}
