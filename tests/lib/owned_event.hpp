#pragma once
// A CUDA event a test makes for one piece of work (timing two points of a stream, or ordering
// one stream after another), destroyed at scope exit, also when the test throws.
#include <cuda_runtime.h>

#include "wb/check.hpp"

namespace wb::testing {

struct OwnedEvent {
  cudaEvent_t e = nullptr;
  explicit OwnedEvent(unsigned flags = cudaEventDefault) { WB_CUDA(cudaEventCreateWithFlags(&e, flags)); }
  ~OwnedEvent() { cudaEventDestroy(e); }
  OwnedEvent(const OwnedEvent&) = delete;
  OwnedEvent& operator=(const OwnedEvent&) = delete;
};

}  // namespace wb::testing
