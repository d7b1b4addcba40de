#pragma once
// The rule of chapters 04-06's headers, "enqueue all the work on `stream` and return without
// waiting: no synchronization, no allocation, no copies", counted with CUPTI (wb::ApiCounter)
// around one call. The values a call computes are other tests' business; these calls are
// counted, not checked. What the counts catch and nothing else does: a cudaMallocAsync per
// call (a graph capture accepts it), a small input done on the CPU (copied out, waited for,
// copied back: right values), a synchronize "to be safe".
#include <functional>
#include <string>

#include "wb/api_counter.hpp"
#include "wb/check.hpp"
#include "wb/testing.hpp"

namespace wb::testing {

// "" when `call` kept the rule, else what it did and the counts. `call` runs twice and both
// calls are counted: a shortcut taken only on the first call with given pointers (done on the
// CPU, then on the GPU once "warm") would pass a count of the second alone. Without CUPTI
// (another profiler holds it) a note says so and nothing is checked.
inline std::string enqueue_only_violation(const std::function<void()>& call) {
  if (wb::debug_sync_enabled()) {  // WB_CHECK_LAUNCH then synchronizes after every launch itself
    record_note("WB_DEBUG_SYNC=1 synchronizes after every launch: the enqueue-only rule was not counted");
    return "";
  }
  if (!wb::ApiCounter::available()) {
    record_note("CUPTI unavailable, the enqueue-only rule was not counted: " + wb::ApiCounter::unavailable_reason());
    return "";
  }
  wb::ApiCounter counter;
  call();
  call();
  const wb::ApiCounts c = counter.counts();
  std::string broke;
  const auto add = [&broke](const char* what) { broke += (broke.empty() ? "" : ", ") + std::string(what); };
  if (c.mallocs > 0 || c.frees > 0 || c.host_allocs > 0 || c.host_frees > 0) add("allocated or freed memory");
  if (c.syncs > 0) add("synchronized");
  if (c.bytes_h2d > 0 || c.bytes_d2h > 0) add("copied between host and device");
  return broke.empty() ? "" : broke + " (" + c.summary() + ")";
}

inline constexpr const char* kEnqueueOnlyHint =
    "hint: a call enqueues kernels on `stream` and returns: scratch memory is the caller's "
    "(an argument) or a static __device__ array, never a cudaMalloc / cudaMallocAsync per call; "
    "the caller waits, not the call; every size is already on the device or in the kernel's "
    "arguments, so nothing needs copying (and no input is small enough to do on the CPU).";

}  // namespace wb::testing
