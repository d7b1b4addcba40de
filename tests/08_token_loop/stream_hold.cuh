#pragma once
// A kernel that holds a stream until the host lets it go (nvbench's blocking kernel), for the
// chapter's tests: work enqueued behind it waits on the GPU, so the timing test can queue many
// calls and time them back to back, and the correctness test can see whether a call returns
// while its stream is still busy (it must: no synchronize, no wait of any kind).
#include <cuda_runtime.h>

#include "wb/check.hpp"
#include "wb/global_timer.cuh"

namespace ch08::testing {
namespace {

// Spins until the host sets *open (mapped memory), or gives up after limit_ns (then *gave_up).
__global__ void hold_stream(const volatile int* open, volatile int* gave_up, unsigned long long limit_ns) {
  const unsigned long long t0 = wb::global_timer_ns();
  while (*open == 0) {
    if (wb::global_timer_ns() - t0 > limit_ns) {
      *gave_up = 1;
      return;
    }
  }
}

}  // namespace

// Two ints of pinned, mapped host memory: [0] opens the hold, [1] says it gave up.
class StreamHold {
 public:
  StreamHold() {
    WB_CUDA(cudaHostAlloc(&host_, 2 * sizeof(int), cudaHostAllocMapped));
    WB_CUDA(cudaHostGetDevicePointer(&device_, host_, 0));
  }
  ~StreamHold() { cudaFreeHost(host_); }
  StreamHold(const StreamHold&) = delete;
  StreamHold& operator=(const StreamHold&) = delete;
  // Holds `s` until open(), or for limit_ns at most.
  void hold(cudaStream_t s, unsigned long long limit_ns) {
    flag(0) = 0;
    flag(1) = 0;
    hold_stream<<<1, 1, 0, s>>>(device_, device_ + 1, limit_ns);
    WB_CHECK_LAUNCH("hold_stream");
  }
  void open() { flag(0) = 1; }
  bool gave_up() { return flag(1) != 0; }

 private:
  volatile int& flag(int i) { return static_cast<volatile int*>(host_)[i]; }
  int* host_ = nullptr;
  int* device_ = nullptr;
};

}  // namespace ch08::testing
