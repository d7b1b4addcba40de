#pragma once
// A host-to-device copy that has landed when it returns.
//
// cudaMemcpy from pageable host memory returns once the bytes are staged for DMA, "but the DMA
// to final destination may not have completed" (CUDA Runtime API, "API synchronization
// behavior"). Work on the legacy default stream is ordered after that DMA. Work on a stream
// created with cudaStreamNonBlocking is not: it may read what the memory held before. The
// tests and the timing harness launch on such streams (so that work escaping the stream it
// was given is caught), so every upload of theirs waits here until the bytes are on the
// device. Seen for real: chapter 06's test, on an H100 under `ctest -j6`, had the reference
// kernel read the NaN poison where the uploaded delta should have been.
#include <cuda_runtime.h>

#include <cstddef>

#include "wb/check.hpp"

namespace wb {

inline void upload_bytes(void* device, const void* host, std::size_t bytes) {
  if (bytes == 0) return;
  WB_CUDA(cudaMemcpy(device, host, bytes, cudaMemcpyHostToDevice));
  WB_CUDA(cudaDeviceSynchronize());  // the DMA is done: any stream may read the bytes now
}

}  // namespace wb
