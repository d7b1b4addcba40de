#pragma once
// Counts CUDA runtime API calls inside a region, through CUPTI's callback API: the chapters
// whose lesson is the copies check that their rules hold (no cudaMalloc per call after
// warmup; no weight bytes host-to-device per token; every allocation freed, with its size),
// and chapter 00 checks what a timer did, in order (ApiTrace).
//
//   wb::ApiCounter counter;            // starts counting
//   forward(...);
//   wb::ApiCounts c = counter.counts();   // calls and bytes since construction
//   CHECK(c.mallocs == 0);
//   CHECK(c.live_device_bytes() == 0);    // everything allocated in the region was freed
//
// Only calls that succeed are counted, and a call that does nothing is not a resource
// operation: cudaFree(nullptr) is counted in null_frees, never in frees. A free's size is
// the size of the allocation it frees (recorded when that allocation was made).
#include <cuda_runtime.h>

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace wb {

struct ApiCounts {
  std::uint64_t mallocs = 0;        // cudaMalloc, cudaMallocAsync, cudaMallocManaged, pitch, from pool
  std::uint64_t frees = 0;          // cudaFree, cudaFreeAsync of a non-null pointer
  std::uint64_t null_frees = 0;     // cudaFree(nullptr): a no-op, not counted as a free
  std::uint64_t malloc_bytes = 0;   // bytes those allocations hold
  std::uint64_t free_bytes = 0;     // bytes of the allocations freed (0 for one made before counting began)
  std::uint64_t host_allocs = 0;    // cudaMallocHost, cudaHostAlloc (pinned host memory)
  std::uint64_t host_frees = 0;     // cudaFreeHost of a non-null pointer
  std::uint64_t host_alloc_bytes = 0, host_free_bytes = 0;
  std::uint64_t host_registers = 0, host_unregisters = 0;  // cudaHostRegister / cudaHostUnregister
  std::uint64_t host_register_bytes = 0, host_unregister_bytes = 0;
  std::uint64_t memcpys = 0;        // every cudaMemcpy* call
  std::uint64_t memsets = 0;
  std::uint64_t syncs = 0;          // all three kinds below
  std::uint64_t device_syncs = 0, stream_syncs = 0, event_syncs = 0;
  std::uint64_t launches = 0;       // cudaLaunchKernel(ExC), cudaLaunchCooperativeKernel
  std::uint64_t graph_launches = 0; // cudaGraphLaunch (the graph's kernels are not in launches)
  std::uint64_t event_creates = 0, event_destroys = 0;  // cudaEventCreate(WithFlags) / cudaEventDestroy
  std::uint64_t event_records = 0;  // cudaEventRecord(WithFlags)
  std::uint64_t elapsed_reads = 0;  // cudaEventElapsedTime
  std::uint64_t bytes_h2d = 0, bytes_d2h = 0, bytes_d2d = 0, bytes_h2h = 0;
  std::uint64_t graphs_created = 0;         // cudaStreamEndCapture (a graph came out), cudaGraphCreate
  std::uint64_t graphs_destroyed = 0;       // cudaGraphDestroy
  std::uint64_t graph_execs_created = 0;    // cudaGraphInstantiate (any form)
  std::uint64_t graph_execs_destroyed = 0;  // cudaGraphExecDestroy

  // Device bytes allocated and not freed in the region (negative: more freed than allocated).
  std::int64_t live_device_bytes() const { return std::int64_t(malloc_bytes) - std::int64_t(free_bytes); }
  std::int64_t live_host_bytes() const {
    return std::int64_t(host_alloc_bytes) - std::int64_t(host_free_bytes);
  }
  // Every allocation, pinned allocation, registration and event made in the region is gone.
  bool balanced() const {
    return mallocs == frees && live_device_bytes() == 0 && host_allocs == host_frees &&
           live_host_bytes() == 0 && host_registers == host_unregisters &&
           event_creates == event_destroys;
  }
  // Every graph and executable graph made in the region was destroyed in it.
  bool graphs_balanced() const {
    return graphs_created == graphs_destroyed && graph_execs_created == graph_execs_destroyed;
  }
  std::string summary() const;      // one line, for messages
  std::string resources() const;    // allocations and frees with their sizes, for messages
};

class ApiCounter {
 public:
  // False when CUPTI is missing or another tool (a profiler) already subscribed.
  static bool available();
  static std::string unavailable_reason();

  ApiCounter();
  ApiCounts counts() const;  // since construction (or the last reset)
  void reset();

 private:
  ApiCounts start_;
};

// Totals since the subscription started (all threads).
ApiCounts api_totals();

// An ordered log of the calls that matter to timing, for tests that check a sequence
// (chapter 00: what did the timer do between its start and stop records?). The test adds
// its own marks in the same order (note('W') when the work is called, note('F') for a flush).
enum class ApiCall : char {
  EventCreate = 'C',
  EventDestroy = 'D',
  EventRecord = 'R',
  ElapsedTime = 'E',
  EventSync = 'e',
  StreamSync = 'S',
  DeviceSync = 'Y',
  Launch = 'L',
  Malloc = 'M',
  Free = 'X',
  Memcpy = 'c',
  Note = 'N',
};

struct ApiTraceEntry {
  ApiCall call;
  char note = 0;                 // for ApiCall::Note: the test's mark
  const void* handle = nullptr;  // the event (create, destroy, record, sync; elapsed: start)
  const void* handle2 = nullptr; // elapsed: the end event
  cudaStream_t stream = nullptr; // record, stream sync, launch
  // One letter per entry: the note itself for notes, else the ApiCall letter.
  char code() const { return call == ApiCall::Note ? note : static_cast<char>(call); }
};

class ApiTrace {
 public:
  ApiTrace();   // starts recording (one trace at a time; a second one throws)
  ~ApiTrace();  // stops recording
  ApiTrace(const ApiTrace&) = delete;
  ApiTrace& operator=(const ApiTrace&) = delete;

  std::vector<ApiTraceEntry> entries() const;
  std::string codes() const;  // e.g. "WWWCCRWREERWRE..DD"
  // Adds a mark to the running trace, if any (from test code, on any thread).
  static void note(char mark);
};

// For tests of a timer (chapter 00): while one lives, every cudaEventElapsedTime that succeeds
// hands its caller replace(n, reading) instead of its reading, n = 0, 1, ... counting the
// calls since construction. It makes readings a GPU gives only now and then (two events
// stamped in the same tick: 0 ms) happen on demand. Needs CUPTI (ApiCounter::available());
// one at a time.
class ElapsedTimeOverride {
 public:
  explicit ElapsedTimeOverride(std::function<float(long long call, float reading)> replace);
  ~ElapsedTimeOverride();
  ElapsedTimeOverride(const ElapsedTimeOverride&) = delete;
  ElapsedTimeOverride& operator=(const ElapsedTimeOverride&) = delete;

  long long calls() const;  // how many readings it replaced
};

}  // namespace wb
