#pragma once
// Chapter 00 test support: an instrumented flush_l2 and probe work whose duration is known
// per call, so a test can tell exactly which rule a timer broke.
#include <cuda_runtime.h>

#include <functional>
#include <string>
#include <vector>

#include "timer.cuh"

namespace ch00::support {

// Everything the timer did, in order: 'F' for flush_l2, 'W' for a call of the work.
struct CallLog {
  std::string order;
  int flushes_on_other_streams = 0;
  cudaStream_t expected_stream = nullptr;
};
CallLog& call_log();
void reset_log(cudaStream_t expected_stream);

// Work that spins on the GPU for duration_us(call index) microseconds, then optionally
// runs `extra` (e.g. a memory-bound kernel). It logs every call and the stream it got.
struct Probe {
  explicit Probe(cudaStream_t stream, std::function<double(int)> duration_us);
  Work work();
  int calls = 0;
  int calls_on_other_streams = 0;
  cudaStream_t stream;
  std::function<double(int)> duration_us;
};

// A non-blocking stream (so work or events on the legacy default stream are not silently
// ordered with it) that destroys itself.
struct TestStream {
  TestStream();
  ~TestStream();
  cudaStream_t get() const { return s; }
  cudaStream_t s = nullptr;
};

}  // namespace ch00::support
