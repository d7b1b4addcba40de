// Chapter 02 correctness: the kernel, the preallocated wrapper over shapes that grow and
// shrink, the allocation rule (enforced by counting CUDA API calls), and the whole model.
#include <algorithm>
#include <array>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <limits>
#include <optional>
#include <random>
#include <sstream>
#include <string>
#include <unordered_map>
#include <vector>

#include <sys/mman.h>
#include <sys/wait.h>

#include "../lib/matvec_edges.hpp"
#include "ch02_adapters.hpp"
#include "wb/api_counter.hpp"
#include "wb/kernel_coverage.hpp"
#include "wb/model/backend_check.hpp"
#include "wb/model/data.hpp"
#include "wb/model/synthetic.hpp"
#include "wb/model/transformer.hpp"
#include "wb/not_implemented.hpp"
#include "wb/random.hpp"
#include "wb/testing.hpp"

namespace {

// Count CUDA API calls from start-up, so that every allocation of this process is known with
// its size when a test checks what was freed (a free of memory allocated before counting
// began would have no size).
[[maybe_unused]] const bool kApiCountingFromStartUp = wb::ApiCounter::available();

struct Shape {
  int d, n;
};

bool api_counting_or_skip() {
  if (wb::ApiCounter::available()) return true;
  wb::testing::mark_skipped("skipped: CUDA API counting is unavailable (" + wb::ApiCounter::unavailable_reason() + ")");
  return false;
}

// Free bytes the CUDA API saw, as a message fragment.
std::string bytes(std::uint64_t b) { return std::to_string(b) + " B"; }

// The cudaMalloc (M) and cudaFree (X) calls of a trace, in order, leaving out the buffers that
// were both allocated and freed within it.
std::string lasting_allocations(const std::vector<wb::ApiTraceEntry>& trace) {
  std::vector<bool> keep(trace.size(), false);
  std::unordered_map<const void*, std::size_t> allocated;  // pointer -> its cudaMalloc's entry
  for (std::size_t i = 0; i < trace.size(); ++i) {
    if (trace[i].call == wb::ApiCall::Malloc) {
      allocated[trace[i].handle] = i;
      keep[i] = true;
    } else if (trace[i].call == wb::ApiCall::Free) {
      const auto it = allocated.find(trace[i].handle);
      if (it == allocated.end()) {
        keep[i] = true;  // a buffer from before the trace
      } else {
        keep[it->second] = false;  // allocated and freed within it
        allocated.erase(it);
      }
    }
  }
  std::string calls;
  for (std::size_t i = 0; i < trace.size(); ++i)
    if (keep[i]) calls += trace[i].code();
  return calls;
}

// True when, part way through `calls` (M allocates, X frees), more allocations are held than
// before them and than after them.
bool holds_more_than_before_and_after(const std::string& calls) {
  int held = 0, most = 0;
  for (const char c : calls) {
    held += c == 'M' ? 1 : -1;
    most = std::max(most, held);
  }
  return most > std::max(held, 0);
}

}  // namespace

// ---- The kernel's edges first (chapter 01's contract): a fault poisons the CUDA context for
// every later test, so the first failure a student sees names the rule it broke.
TEST_CASE("launch_matvec: any n and any alignment of W, x and y (every column counts; any alignment)") {
  WB_REQUIRE_GPU();
  WB_CHECK_RESULT(matvec_edges::check_all_layouts(ch02_adapters::kLaunch, "02"));
}

TEST_CASE("launch_matvec: inputs that end (or start) exactly where memory does (read only your own elements)") {
  WB_REQUIRE_GPU();
  WB_CHECK_RESULT(matvec_edges::check_all_fenced(ch02_adapters::kLaunch, "02"));
}

TEST_CASE("launch_matvec: more than 65535 rows (a 151936-row classifier)") {
  WB_REQUIRE_GPU();
  WB_CHECK_RESULT(matvec_edges::check_all_tall(ch02_adapters::kLaunch, "02"));
}

TEST_CASE("launch_matvec: d*n past 2^31 floats (64-bit index arithmetic)") {
  WB_REQUIRE_GPU();
  const auto r = matvec_edges::check_huge(ch02_adapters::kLaunch, matvec_edges::kHugeCols, matvec_edges::kHugeRows, "02");
  if (!r.skipped.empty()) {
    wb::testing::mark_skipped(r.skipped);
    return;
  }
  WB_CHECK_RESULT(r.result);
}

TEST_CASE("launch_matvec: your chapter 01 kernel, on every kind of shape") {
  WB_REQUIRE_GPU();
  auto rng = wb::rng_for("ch02/matvec/random-shapes");
  std::uniform_int_distribution<int> size(1, 4500);
  std::vector<Shape> shapes = {{1, 1}, {7, 13}, {288, 288}, {2048, 768}, {32000, 288}, {4099, 4097}, {172, 64}};
  shapes.push_back({size(rng), size(rng)});
  for (const Shape& s : shapes) {
    CAPTURE(s.d);
    CAPTURE(s.n);
    WB_CHECK_RESULT(wb::model::check_device_matvec(
        ch02_adapters::kLaunch, s.n, s.d,
        {"02", "launch_matvec", "this is chapter 01's kernel: run chapter 01's tests on it first."}));
  }
}

// The contract's "enqueued on `stream`, no synchronization", which every other test lets
// pass (matvec_edges::check_captured says why).
TEST_CASE("launch_matvec: all work on the given stream, no synchronization (captured into a CUDA graph)") {
  WB_REQUIRE_GPU();
  if (wb::debug_sync_enabled()) {
    wb::testing::mark_skipped("skipped: WB_DEBUG_SYNC=1 synchronizes after every launch, which a graph capture forbids");
    return;
  }
  WB_CHECK_RESULT(matvec_edges::check_captured(ch02_adapters::kLaunch, "02"));
}

// First among the wrapper tests: a buffer that never grows can break the CUDA context for
// the tests after it, and this one names the rule.
TEST_CASE("rule: grow the buffers when a larger call comes, keep them for smaller ones") {
  WB_REQUIRE_GPU();
  const std::string rule = "chapter 02: rule: grow the buffers when a larger call comes";
  const bool counting = wb::ApiCounter::available();  // before the first allocation: sizes known
  ch02::PreallocatedMatvec p;
  const wb::model::HostMatvec call = [&p](float* out, const float* x, const float* W, int n, int d) {
    p.matvec(out, x, W, n, d);
  };
  const wb::model::MatvecCheck check{"02", "PreallocatedMatvec::matvec",
                                     "the call before this one was smaller: did the buffers grow?"};
  WB_CHECK_RESULT(wb::model::check_host_matvec(call, 768, 2048, check));
  const std::size_t w1 = p.w_capacity(), x1 = p.x_capacity(), y1 = p.y_capacity();
  CHECK_MESSAGE((w1 >= 768u * 2048u && x1 >= 768u && y1 >= 2048u),
                rule << ": after a 2048x768 call the capacities are W " << w1 << ", x " << x1 << ", y "
                     << y1 << " floats\nhint: ensure_capacity must record the capacity it allocated.");
  WB_CHECK_RESULT(wb::model::check_host_matvec(call, 288, 288, check));
  CHECK_MESSAGE((p.w_capacity() == w1 && p.x_capacity() == x1 && p.y_capacity() == y1),
                "chapter 02: a smaller call must reuse the buffers, but the capacities changed from W "
                    << w1 << ", x " << x1 << ", y " << y1 << " to W " << p.w_capacity() << ", x "
                    << p.x_capacity() << ", y " << p.y_capacity()
                    << "\nhint: ensure_capacity does nothing when the buffer is already big enough.");
  wb::ApiCounter growth;
  try {
    std::vector<wb::ApiTraceEntry> order;  // the growth's cudaMalloc and cudaFree calls, in order
    {
      std::optional<wb::ApiTrace> trace;
      if (counting) trace.emplace();
      WB_CHECK_RESULT(wb::model::check_host_matvec(call, 4097, 4099, check));
      if (trace) order = trace->entries();
    }
    const wb::ApiCounts g = growth.counts();
    // All three buffers grew: the old ones (w1 + x1 + y1 floats) must have been freed.
    const std::uint64_t old_bytes = 4 * (std::uint64_t(w1) + x1 + y1);
    if (counting && g.free_bytes < old_bytes)
      FAIL_CHECK("chapter 02: rule: free the old buffer when you grow. A 4099x4097 call after a 2048x768 one "
                 "grew all three buffers, which held "
                 << bytes(old_bytes) << "; it freed " << bytes(g.free_bytes) << " (" << g.resources()
                 << ")\nhint: in ensure_capacity, cudaFree(*buffer) before cudaMalloc'ing the bigger one, or every "
                    "growth leaks the old buffer.");
    // Freed, but when? Allocating the new buffer while the old one is still held needs old + new
    // bytes at once: a growth that fits the device on its own (a 48 GB W after a 36 GB one on an
    // 80 GB GPU) then fails. Counted in allocations: the call never holds more of them than before
    // it or after it. (A buffer allocated and freed within the call is left out: allocating per
    // call is another rule's failure.)
    const std::string calls = lasting_allocations(order);
    if (holds_more_than_before_and_after(calls))
      FAIL_CHECK("chapter 02: rule: free the old buffer before you allocate the bigger one. A 4099x4097 call after "
                 "a 2048x768 one grew the buffers; during it your wrapper held more device allocations than before "
                 "or after it (its calls in order, M cudaMalloc, X cudaFree: "
                 << calls << "): a new buffer was allocated while the one it replaces was still held. For that "
                    "moment a growth needs the old and the new buffer at once, so one that fits the device on its "
                    "own (a 48 GB W after a 36 GB one on an 80 GB GPU) fails in cudaMalloc.\nhint: in "
                    "ensure_capacity: cudaFree(*buffer); *buffer = nullptr; *capacity = 0; only then cudaMalloc "
                    "the bigger one (preallocated.hpp: free the old buffer and allocate a new one).");
  } catch (const wb::NotImplemented&) {
    throw;
  } catch (const std::exception& e) {
    FAIL_CHECK(rule << ": a 4099x4097 call after smaller ones failed: " << e.what()
                    << "\nhint: when *capacity < count, free the old buffer and allocate count floats.");
  }
  CHECK_MESSAGE((p.w_capacity() >= 4097u * 4099u && p.x_capacity() >= 4097u && p.y_capacity() >= 4099u),
                rule << ": after a 4099x4097 call the capacities are W " << p.w_capacity() << ", x "
                     << p.x_capacity() << ", y " << p.y_capacity()
                     << " floats\nhint: when *capacity < count, free the old buffer and allocate count floats.");
  // d alone grows: W (4160x64) and x (64) fit the buffers of the 4099x4097 call, out does not.
  // A y buffer left at 4099 floats would be written past its end (by less than the allocation's
  // rounding, so nothing faults and the values look right): the capacity tells.
  WB_CHECK_RESULT(wb::model::check_host_matvec(call, 64, 4160, check));
  CHECK_MESSAGE(p.y_capacity() >= 4160u,
                rule << ": a 4160x64 call after a 4099x4097 one: W and x fit their buffers, but out needs 4160 "
                        "floats and y_capacity() says y holds "
                     << p.y_capacity()
                     << ": either y was not grown (the kernel wrote past its end) or y_capacity() does not say "
                        "what y holds now (preallocated.hpp: the floats each buffer holds now).\nhint: check "
                        "every buffer against its own need on every call (W: n*d, x: n, y: d): W and x fitting "
                        "does not mean y fits.");
}

// A call too big for the device: its cudaMalloc fails and matvec throws, in the reference too.
// The object must come out of it telling the truth: a capacity recorded before the allocation
// succeeded makes the next call that fits skip the allocation and copy into a freed buffer.
TEST_CASE("rule: record the new capacity only after the allocation succeeded (a call too big for the device)") {
  WB_REQUIRE_GPU();
  if (wb::coverage::quick()) {  // compute-sanitizer counts the failing cudaMalloc as an API error
    wb::testing::mark_skipped("skipped under compute-sanitizer / WB_QUICK: the cudaMalloc this case makes fail on "
                              "purpose would be reported as an API error");
    return;
  }
  std::size_t free_bytes = 0, total_bytes = 0;
  WB_CUDA(cudaMemGetInfo(&free_bytes, &total_bytes));
  const int n = 1 << 16;  // W: over twice the device's memory, d rows of n floats
  int d = int(2 * total_bytes / (sizeof(float) * std::size_t(n))) + 1;
  // With d % 65536 >= 32768, n * d computed in 32-bit int is negative: a wrapper that counts
  // in int then fails to allocate too, instead of launching over a small buffer (a fault that
  // would spoil the later tests, one of which names that bug).
  if (d % 65536 < 32768) d += 32768 - d % 65536;
  const std::size_t w_count = std::size_t(n) * std::size_t(d);
  // W is never read (the allocation fails before any copy), but the arguments stay valid: an
  // untouched read-only mapping of the right size costs no memory.
  void* const w_map = mmap(nullptr, w_count * sizeof(float), PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (w_map == MAP_FAILED) {
    wb::testing::mark_skipped("skipped: cannot map " + std::to_string(w_count * sizeof(float)) + " B of address space for W");
    return;
  }
  const std::vector<float> x(static_cast<std::size_t>(n), 1.0f);
  std::vector<float> out(static_cast<std::size_t>(d));
  const wb::model::MatvecCheck check{"02", "PreallocatedMatvec::matvec after a call whose cudaMalloc failed",
                                     "rule: record the new capacity only after the allocation succeeded; after "
                                     "cudaFree, set the pointer to nullptr and the capacity to 0."};
  {
    // What the object holds on the device, counted with CUPTI from before its first call (a failed
    // cudaMalloc is not counted: it allocated nothing).
    std::optional<wb::ApiCounter> held;
    if (wb::ApiCounter::available()) held.emplace();
    ch02::PreallocatedMatvec p;
    const wb::model::HostMatvec call = [&p](float* o, const float* xv, const float* W, int nn, int dd) {
      p.matvec(o, xv, W, nn, dd);
    };
    WB_CHECK_RESULT(wb::model::check_host_matvec(call, 288, 288, check));
    try {
      p.matvec(out.data(), x.data(), static_cast<const float*>(w_map), n, d);
    } catch (const wb::NotImplemented&) {
      throw;
    } catch (const std::exception&) {
      // Expected: cudaMalloc could not find the memory.
    }
    cudaGetLastError();  // the failed cudaMalloc's error stays as the "last error": clear it
    munmap(w_map, w_count * sizeof(float));
    if (p.w_capacity() >= w_count) {
      FAIL_CHECK("chapter 02: rule: record the new capacity only after the allocation succeeded. A call with W "
           << d << "x" << n << " (" << bytes(4 * w_count) << ", over twice this device's memory) failed in cudaMalloc, "
           << "as it must, but w_capacity() now says " << p.w_capacity()
           << " floats: the object claims a buffer it does not have, and the next call that fits that capacity "
              "copies W into freed memory.\nhint: in ensure_capacity: cudaFree the old buffer, *buffer = nullptr, "
              "*capacity = 0, WB_CUDA(cudaMalloc(...)), and only then *capacity = count.");
    } else if (const std::uint64_t claimed = 4 * (std::uint64_t(p.w_capacity()) + p.x_capacity() + p.y_capacity());
               held && held->counts().live_device_bytes() < std::int64_t(claimed)) {
      // The growth freed the old W buffer before its cudaMalloc failed: a capacity still claiming
      // it (the old one, not the new one) makes the next call that fits skip the allocation and
      // copy W into freed memory (or a null pointer). Counted, not run: that copy could land in
      // memory that now belongs to someone else.
      FAIL_CHECK("chapter 02: rule: a capacity describes a buffer you still hold, also after a failed growth. A "
                 "288x288 call, then a call with W "
                 << d << "x" << n << " (over twice this device's memory) whose cudaMalloc failed, as it must: "
                 << "the capacities now say W " << p.w_capacity() << ", x " << p.x_capacity() << ", y "
                 << p.y_capacity() << " floats (" << bytes(claimed) << "), but the object holds "
                 << bytes(std::uint64_t(std::max<std::int64_t>(held->counts().live_device_bytes(), 0)))
                 << " of device memory (" << held->counts().resources()
                 << "): the old W buffer was freed and its capacity kept, so the next call that fits it (a 300x200 "
                    "W) would skip the allocation and copy W into freed memory.\nhint: in ensure_capacity, right "
                    "after cudaFree(*buffer): *buffer = nullptr; *capacity = 0; only then cudaMalloc, and "
                    "*capacity = count once it succeeded. A failed cudaMalloc then leaves capacity 0, and the next "
                    "call allocates again.");
    } else {  // the next call that fits the device must allocate again and be right
      WB_CHECK_RESULT(wb::model::check_host_matvec(call, 200, 300, check));
    }
  }  // (FAIL_CHECK, not FAIL: the line below must run)
  cudaGetLastError();  // a failed release (a stale pointer freed twice) must not fail the next test
}

TEST_CASE("PreallocatedMatvec: one object, shapes that grow and shrink") {
  WB_REQUIRE_GPU();
  ch02::PreallocatedMatvec p;
  const wb::model::HostMatvec call = [&p](float* out, const float* x, const float* W, int n, int d) {
    p.matvec(out, x, W, n, d);
  };
  for (const Shape s : {Shape{7, 13}, Shape{2048, 768}, Shape{1, 1}, Shape{288, 288}, Shape{4099, 4097}, Shape{5, 3}}) {
    CAPTURE(s.d);
    CAPTURE(s.n);
    WB_CHECK_RESULT(wb::model::check_host_matvec(
        call, s.n, s.d,
        {"02", "PreallocatedMatvec::matvec after other shapes",
         "the buffers are reused across calls: a wrong size passed to ensure_capacity, or a "
         "capacity recorded before the allocation succeeded, shows up only after a change of shape."}));
  }
}

// Every other wrapper test uses pageable std::vectors, where even a cudaMemcpyAsync back waits
// for the copy; with pinned memory only a synchronizing matvec has out ready when it returns.
TEST_CASE("PreallocatedMatvec: W, x and out in pinned host memory (out is ready when matvec returns)") {
  WB_REQUIRE_GPU();
  ch02::PreallocatedMatvec p;
  WB_CHECK_RESULT(matvec_edges::check_pinned_host(
      [&p](float* out, const float* x, const float* W, int n, int d) { p.matvec(out, x, W, n, d); }, 768, 32000,
      "02", "PreallocatedMatvec::matvec"));
}

TEST_CASE("rule: no cudaMalloc/cudaFree per call after warmup") {
  WB_REQUIRE_GPU();
  if (!api_counting_or_skip()) return;
  const wb::model::Model model = wb::model::make_synthetic(wb::model::synthetic_small());
  ch02::PreallocatedMatvec p;
  auto backend = ch02_adapters::preallocated_backend(p);
  wb::model::Transformer t(model, backend);
  t.forward(1, 0);  // warmup: the first token sizes the buffers
  wb::ApiCounter counter;
  t.forward(2, 1);
  t.forward(3, 2);
  const wb::ApiCounts c = counter.counts();
  const long long calls = 2 * (7 * model.config().n_layers + 1);
  wb::testing::record_metric("mallocs_per_token", double(c.mallocs) / 2);
  wb::testing::record_metric("frees_per_token", double(c.frees) / 2);
  CHECK_MESSAGE((c.mallocs == 0 && c.frees == 0),
                "chapter 02: rule: no cudaMalloc/cudaFree per call after warmup. After one warmup "
                "token, 2 more tokens ("
                    << calls << " matmuls) made " << c.mallocs << " cudaMalloc and " << c.frees
                    << " cudaFree calls (" << c.summary()
                    << ")\nhint: allocate in ensure_capacity only when the buffer is too small; every "
                       "later call of the same size or smaller must reuse it.");
}

TEST_CASE("release frees every buffer, and twice is harmless (sizes counted, 30 calls, growth and shrinking)") {
  WB_REQUIRE_GPU();
  if (!api_counting_or_skip()) return;
  struct Shape { int d, n; };
  const Shape shapes[] = {{2048, 768}, {7, 13}, {172, 64}, {4099, 4097}, {1, 1}, {288, 288}};
  std::vector<float> W = matvec_edges::signed_values(4099u * 4097u, "ch02/release/W");
  const std::vector<float> x = matvec_edges::signed_values(4097, "ch02/release/x");
  std::vector<float> out(4099);
  for (const bool explicit_release : {true, false}) {
    CAPTURE(explicit_release);
    wb::ApiCounter counter;
    {
      ch02::PreallocatedMatvec p;
      for (int call = 0; call < 30; ++call) {
        const Shape s = shapes[std::size_t(call) % 6];
        p.matvec(out.data(), x.data(), W.data(), s.n, s.d);
      }
      if (explicit_release) {
        p.release();
        // release() gives the buffers back: each capacity ("the floats each buffer holds now")
        // must say 0, or the next call that fits a stale capacity skips its allocation and copies
        // into a null pointer. All three: W's alone being reset proves nothing about x and y.
        CHECK_MESSAGE((p.w_capacity() == 0 && p.x_capacity() == 0 && p.y_capacity() == 0),
                      "chapter 02: rule: release() resets every capacity to 0. After 30 calls of one "
                      "PreallocatedMatvec (the largest 4099x4097) and release(), the capacities say W "
                          << p.w_capacity() << ", x " << p.x_capacity() << ", y " << p.y_capacity()
                          << " floats, but the object holds no buffer any more (preallocated.hpp: the floats "
                             "each buffer holds now): the next call that fits a stale capacity skips "
                             "ensure_capacity's allocation and copies into a null pointer.\nhint: in release(), "
                             "after the three cudaFree calls: d_w_ = d_x_ = d_y_ = nullptr; "
                             "w_capacity_ = x_capacity_ = y_capacity_ = 0; (every capacity, not only W's).");
        p.release();
        // Released is not dead: the object is still there (the destructor has not run), so a next
        // call must allocate afresh and be right. Its buffers are freed by the destructor below,
        // so the accounting after this block stays balanced.
        try {
          WB_CHECK_RESULT(wb::model::check_host_matvec(
              [&p](float* o, const float* xv, const float* Wv, int nn, int dd) { p.matvec(o, xv, Wv, nn, dd); }, 13, 7,
              {"02", "PreallocatedMatvec::matvec(7x13) after release() twice",
               "rule: release() leaves an empty object that can be used again: pointers nullptr and every "
               "capacity 0, so the next call allocates what it needs."}));
        } catch (const wb::NotImplemented&) {
          throw;
        } catch (const std::exception& e) {
          (void)cudaGetLastError();  // the failed copy's error must not surface at a later launch check
          FAIL_CHECK("chapter 02: rule: release() resets every capacity to 0 (the object can be used again). "
                     "After 30 calls and release() twice, a 7x13 matvec on the same object failed: "
                     << e.what() << "\n  after it the capacities say W " << p.w_capacity() << ", x " << p.x_capacity()
                     << ", y " << p.y_capacity()
                     << " floats\nhint: a capacity left non-zero by release() makes ensure_capacity "
                        "skip the allocation, and the copy goes to the nullptr release() left: reset "
                        "w_capacity_, x_capacity_ and y_capacity_ to 0 in release().");
        }
      }
    }  // the destructor releases too
    const wb::ApiCounts c = counter.counts();
    wb::testing::record_metric(explicit_release ? "device_bytes_left_after_release" : "device_bytes_left_after_destructor",
                               double(c.live_device_bytes()));
    CHECK_MESSAGE((c.frees == c.mallocs && c.live_device_bytes() == 0),
                  "chapter 02: rule: free what you allocate. 30 calls of one PreallocatedMatvec (growing and shrinking), then "
                      << (explicit_release ? "release() twice" : "its destructor") << ": " << c.resources() << "; "
                      << c.live_device_bytes()
                      << " device bytes are still allocated\nhint: release() frees all three buffers, with the pointers "
                         "cudaMalloc returned (set them to nullptr after cudaFree, not before: cudaFree(nullptr) frees "
                         "nothing), and ensure_capacity frees the old buffer before it allocates a bigger one.");
    CHECK_MESSAGE((c.host_allocs == c.host_frees && c.live_host_bytes() == 0 && c.host_registers == c.host_unregisters),
                  "chapter 02: rule: free what you allocate (pinned host memory too): " << c.resources()
                      << "\nhint: cudaFreeHost what you cudaMallocHost, cudaHostUnregister what you cudaHostRegister, in "
                         "release().");
  }
}

TEST_CASE("PreallocatedMatvec: same pointers, new values, every call (W crosses every call)") {
  WB_REQUIRE_GPU();
  const bool counting = api_counting_or_skip();
  ch02::PreallocatedMatvec p;
  // One W, x and out for every round; between rounds the values change in place. The last
  // round reads the same W as 517 rows of 300 instead of 300 rows of 517: same pointer, same
  // byte count, another matrix.
  struct Shape { int d, n; };
  const Shape rounds[] = {{300, 517}, {300, 517}, {300, 517}, {517, 300}};
  std::vector<float> W(300u * 517u), x(517u), out(517u);
  for (int round = 0; round < 4; ++round) {
    CAPTURE(round);
    const Shape s = rounds[round];
    matvec_edges::refill(W, "ch02/same-pointer/W" + std::to_string(round));
    matvec_edges::refill(x, "ch02/same-pointer/x" + std::to_string(round));
    std::fill(out.begin(), out.end(), std::numeric_limits<float>::quiet_NaN());
    wb::ApiCounter counter;
    p.matvec(out.data(), x.data(), W.data(), s.n, s.d);
    const wb::ApiCounts c = counter.counts();
    const auto expected = wb::model::matvec_reference({W.data(), std::size_t(s.d) * s.n}, {x.data(), std::size_t(s.n)}, s.n, s.d);
    const wb::CompareResult r = wb::compare(
        std::span<const float>(out.data(), std::size_t(s.d)), expected,
        {.chapter = "02",
         .what = "PreallocatedMatvec::matvec, call " + std::to_string(round + 1) +
                 " with the same W, x and out pointers as the call before and new values behind them (W " +
                 std::to_string(s.d) + "x" + std::to_string(s.n) + ")",
         .shape = {std::size_t(s.d)},
         .tol = wb::model::matvec_tolerance(s.n),
         .hint = "rule: same pointer, new values. Chapter 02 keeps buffers, not values: W and x are copied on "
                 "every call, because the caller may have written new ones behind the same pointers. Never "
                 "skip a copy because a pointer (or a size) is the same as last time."});
    if (!r.ok) FAIL("rule: same pointer, new values: " << r.message);
    if (!counting) continue;
    const std::uint64_t w_bytes = 4ull * s.d * s.n, x_bytes = 4ull * s.n;
    if (c.bytes_h2d < w_bytes + x_bytes)
      FAIL("chapter 02: rule: W crosses on every call (chapter 03 keeps weights, not chapter 02). Call "
           << round + 1 << " (W " << s.d << "x" << s.n << ") moved " << bytes(c.bytes_h2d)
           << " host-to-device; W and x are " << bytes(w_bytes + x_bytes) << " (" << c.summary()
           << ")\nhint: cudaMemcpy all of W and x into the preallocated buffers on every call.");
    if (c.bytes_d2h < 4ull * s.d)
      FAIL("chapter 02: call " << round + 1 << " moved " << bytes(c.bytes_d2h) << " device-to-host; out is "
                               << bytes(4ull * s.d) << "\nhint: copy out (d floats) back on every call.");
    if ((round == 1 || round == 2) && (c.mallocs != 0 || c.frees != 0))  // same shape as call 1
      FAIL("chapter 02: rule: no cudaMalloc/cudaFree per call after warmup. Call " << round + 1
           << " had the shape of call 1 and needed no bigger buffers but made " << c.resources()
           << "\nhint: ensure_capacity allocates only when the buffer is too small.");
  }
}

TEST_CASE("PreallocatedMatvec: d*n past 2^31 floats (the sizes in 64 bits)") {
  WB_REQUIRE_GPU();
  const std::size_t w_bytes = std::size_t(matvec_edges::kHugeRows) * matvec_edges::kHugeCols * sizeof(float);
  ch02::PreallocatedMatvec p;
  const auto r = matvec_edges::check_huge_host(
      [&p](float* out, const float* x, const float* W, int n, int d) { p.matvec(out, x, W, n, d); },
      matvec_edges::kHugeCols, matvec_edges::kHugeRows, "02", "PreallocatedMatvec::matvec",
      w_bytes + (std::size_t(1) << 30));
  if (!r.skipped.empty()) {
    wb::testing::mark_skipped(r.skipped);
    return;
  }
  WB_CHECK_RESULT(r.result);
}

TEST_CASE("end to end: stories260K generates llama2.c's text through PreallocatedMatvec") {
  WB_REQUIRE_GPU();
  std::string why;
  const auto files = wb::model::tiny_stories_from_env(&why);
  if (!files) {
    wb::testing::mark_skipped(why);
    return;
  }
  ch02::PreallocatedMatvec p;
  auto backend = ch02_adapters::preallocated_backend(p);
  const wb::model::TextCheck r = wb::model::check_tiny_stories_text(backend, *files, "02");
  CHECK_MESSAGE(r.ok, r.message);
}

TEST_CASE("end to end: the synthetic model's logits through PreallocatedMatvec match the CPU's") {
  WB_REQUIRE_GPU();
  const wb::model::Model model = wb::model::make_synthetic(wb::model::synthetic_small());
  ch02::PreallocatedMatvec p;
  auto backend = ch02_adapters::preallocated_backend(p);
  WB_CHECK_RESULT(wb::model::compare_logits_with_cpu(backend, model, 4, "02"));
}

// ---- release() is noexcept and the destructor calls it: it must not throw, even when cudaFree
// fails (after a sticky error from another kernel, or at exit once the CUDA runtime is being
// unloaded). An exception out of a noexcept function ends the process (std::terminate), so the
// check runs in a child process: this binary again, running only the case below.
namespace {

constexpr const char* kReleaseChildVar = "WB_CH02_RELEASE_CHILD";
constexpr const char* kReleaseChildCase = "release() after its buffers were freed behind its back (child process)";
constexpr const char* kReleaseReturned = "[release child] release() returned";

std::string shell_quoted(const std::string& s) {
  std::string out = "'";
  for (char c : s) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

}  // namespace

// Left out of every ordinary run (doctest::skip); the test below runs it with --no-skip.
TEST_CASE("release() after its buffers were freed behind its back (child process)" * doctest::skip()) {
  if (std::getenv(kReleaseChildVar) == nullptr) return;  // only in the child the test below starts
  WB_REQUIRE_GPU();
  if (!wb::ApiCounter::available()) {
    std::cout << "[release child] no CUDA API tracing" << std::endl;
    return;
  }
  ch02::PreallocatedMatvec p;
  const std::vector<float> W(7u * 13u, 0.5f), x(13u, 1.0f);
  std::vector<float> out(7u);
  std::vector<wb::ApiTraceEntry> calls;
  {
    wb::ApiTrace trace;
    p.matvec(out.data(), x.data(), W.data(), 13, 7);
    calls = trace.entries();
  }
  // Free the object's device buffers behind its back: each cudaFree in its release() then fails
  // (cudaErrorInvalidValue), as every cudaFree does after a sticky error.
  int freed = 0;
  for (const wb::ApiTraceEntry& e : calls)
    if (e.call == wb::ApiCall::Malloc && e.handle != nullptr && cudaFree(const_cast<void*>(e.handle)) == cudaSuccess)
      ++freed;
  (void)cudaGetLastError();
  std::cout << "[release child] freed " << freed << " device buffer(s) behind the object's back; calling release()"
            << std::endl;
  p.release();
  std::cout << kReleaseReturned << std::endl;
  (void)cudaGetLastError();
}  // the destructor calls release() again

TEST_CASE("release() never throws, even when cudaFree fails (it is noexcept: the destructor calls it)") {
  WB_REQUIRE_GPU();
  if (wb::coverage::quick()) {  // the child's failing cudaFree calls would be reported as API errors
    wb::testing::mark_skipped("skipped under compute-sanitizer / WB_QUICK: the cudaFree calls this case makes fail "
                              "on purpose would be reported as API errors");
    return;
  }
  if (!api_counting_or_skip()) return;
  {  // a starter stops here ("to do"), before any child process
    ch02::PreallocatedMatvec p;
    const std::vector<float> W(7u * 13u, 0.5f), x(13u, 1.0f);
    std::vector<float> out(7u);
    p.matvec(out.data(), x.data(), W.data(), 13, 7);
  }
  std::error_code ec;
  const std::string self = std::filesystem::read_symlink("/proc/self/exe", ec).string();
  if (ec || self.empty()) {
    wb::testing::mark_skipped("skipped: cannot find this test binary (/proc/self/exe) to run the child process");
    return;
  }
  const std::string command = std::string(kReleaseChildVar) + "=1 " + shell_quoted(self) + " --no-skip " +
                              shell_quoted(std::string("-tc=") + kReleaseChildCase) + " 2>&1";
  FILE* pipe = popen(command.c_str(), "r");
  if (pipe == nullptr) {
    wb::testing::mark_skipped("skipped: could not start the child process (popen)");
    return;
  }
  std::string output;
  std::array<char, 4096> chunk;
  while (std::fgets(chunk.data(), int(chunk.size()), pipe)) output += chunk.data();
  const int status = pclose(pipe);
  if (output.find("[release child] no CUDA API tracing") != std::string::npos) {
    wb::testing::mark_skipped("skipped: CUDA API tracing is unavailable in the child process");
    return;
  }
  const bool exited = status != -1 && WIFEXITED(status);
  const int code = exited ? WEXITSTATUS(status) : -1;
  if (exited && code == 77) {  // the child saw no CUDA device (a GPU in exclusive-process mode)
    wb::testing::mark_skipped("skipped: the child process could not use the GPU");
    return;
  }
  const bool returned = output.find(kReleaseReturned) != std::string::npos;
  if (exited && code == 0 && returned) return;
  // What the child said about it: its own lines and the terminate/crash lines, not doctest's summary.
  std::string excerpt;
  int lines = 0;
  std::istringstream in(output);
  for (std::string line; std::getline(in, line) && lines < 8;)
    if (line.rfind("[doctest]", 0) != 0 &&
        (line.find("[release child]") != std::string::npos || line.find("terminate") != std::string::npos ||
         line.find("what()") != std::string::npos || line.find("CRASHED") != std::string::npos ||
         line.find("THREW") != std::string::npos)) {
      excerpt += "\n    " + line;
      ++lines;
    }
  std::string ended;
  if (status == -1) ended = "could not be waited for";
  else if (WIFSIGNALED(status)) ended = "was killed by signal " + std::to_string(WTERMSIG(status)) + (WTERMSIG(status) == SIGABRT ? " (SIGABRT)" : "");
  else if (code == 128 + SIGABRT) ended = "was killed by SIGABRT (exit code 134)";
  else ended = "ended with exit code " + std::to_string(code);
  FAIL("chapter 02: rule: release() must not throw (preallocated.hpp declares it noexcept, and the destructor calls "
       "it). In a child process, a PreallocatedMatvec made one 7x13 call; its device buffers were then freed behind "
       "its back, so each cudaFree in release() fails (as every cudaFree does after a sticky error from another "
       "kernel, or at exit once the CUDA runtime is being unloaded), and release() was called. "
       << (returned ? "release() returned, but the process then " : "Instead of returning, the process ") << ended
       << ". An exception thrown out of a noexcept function calls std::terminate: the program dies, and an error "
          "that was being reported is lost. The child's output:"
       << (excerpt.empty() ? std::string("\n    (nothing about release)") : excerpt)
       << "\nhint: in release(), call plain cudaFree and ignore its result (no WB_CUDA there: a destructor must not "
          "throw), then set each pointer to nullptr and each capacity to 0.");
}
