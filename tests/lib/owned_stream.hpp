#pragma once
// A stream a test makes for one piece of work, destroyed (after its work is done) at scope exit.
// Non-blocking by default: nothing orders it after the legacy stream, so work that escapes it
// shows. A blocking one (cudaStreamDefault) is what a graph capture needs to turn a launch on
// the legacy stream into an error (captured_graph.hpp). A priority (cudaDeviceGetStreamPriorityRange:
// lower numbers are scheduled first) lets a test put one stream's kernels ahead of another's.
#include <cuda_runtime.h>

#include "wb/check.hpp"

namespace wb::testing {

struct OwnedStream {
  cudaStream_t s = nullptr;
  explicit OwnedStream(unsigned flags = cudaStreamNonBlocking, int priority = 0) {
    WB_CUDA(cudaStreamCreateWithPriority(&s, flags, priority));  // 0: the default priority
  }
  ~OwnedStream() {
    cudaStreamSynchronize(s);
    cudaStreamDestroy(s);
  }
  OwnedStream(const OwnedStream&) = delete;
  OwnedStream& operator=(const OwnedStream&) = delete;
};

}  // namespace wb::testing
