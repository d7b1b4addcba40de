#pragma once
// Shared memory that holds garbage before a kernel runs, as poisoned outputs do for global
// memory. A kernel that reads a shared variable it never wrote in that launch (a histogram not
// cleared, a running mass set only on some paths) gets whatever the last kernel on that SM left
// there: often the right value by luck, when the last kernel was the same one on the same row.
// Filling every SM's shared memory with 0xFF bytes first makes that read deterministic, and
// plainly wrong: NaN as a float, -1 as an int, 2^64 - 1 as a count or a fixed-point mass.
// (compute-sanitizer's initcheck does not track shared memory.)
#include <cuda_runtime.h>

#include "wb/check.hpp"
#include "wb/kernel_coverage.hpp"

namespace wb::testing {
namespace {  // a kernel of each test binary's own

__global__ void fill_shared_memory(unsigned words, unsigned pattern) {
  extern __shared__ unsigned shared_words[];
  volatile unsigned* words_out = shared_words;  // volatile: stores nobody reads are kept
  for (unsigned i = threadIdx.x; i < words; i += blockDim.x) words_out[i] = pattern;
}

struct SharedMemoryFill {
  int bytes = 0;    // the most dynamic shared memory one block may have (opt-in)
  int blocks = 0;   // enough blocks that every SM holds one (one fits per SM at `bytes`)
  bool cooperative = false;
};

inline SharedMemoryFill plan_shared_memory_fill() {
  int device = 0;
  WB_CUDA(cudaGetDevice(&device));
  cudaDeviceProp prop{};
  WB_CUDA(cudaGetDeviceProperties(&prop, device));
  SharedMemoryFill plan;
  plan.bytes = static_cast<int>(prop.sharedMemPerBlockOptin);
  WB_CUDA(cudaFuncSetAttribute(fill_shared_memory, cudaFuncAttributeMaxDynamicSharedMemorySize,
                               plan.bytes));
  WB_CUDA(cudaFuncSetAttribute(fill_shared_memory, cudaFuncAttributePreferredSharedMemoryCarveout,
                               cudaSharedmemCarveoutMaxShared));
  int per_sm = 0;
  WB_CUDA(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, fill_shared_memory, 1024,
                                                        plan.bytes));
  // A cooperative launch puts all its blocks on the GPU at once, so with one block per SM each
  // SM gets exactly one; a plain launch of four times as many blocks only very likely does.
  plan.cooperative = prop.cooperativeLaunch != 0 && per_sm >= 1;
  plan.blocks = plan.cooperative ? per_sm * prop.multiProcessorCount : 4 * prop.multiProcessorCount;
  return plan;
}

// Enqueues on `stream` a kernel that sets every byte of every SM's shared memory to 0xFF.
// Not under racecheck: it follows every shared-memory access, and 58,000 stores per SM (227 KiB) before
// every call only slow it down (what it checks, races inside a kernel, needs no poison).
inline void poison_shared_memory(cudaStream_t stream) {
  if (wb::coverage::racecheck()) return;
  static const SharedMemoryFill plan = plan_shared_memory_fill();
  unsigned words = static_cast<unsigned>(plan.bytes) / 4;
  unsigned pattern = 0xFFFFFFFFu;
  if (plan.cooperative) {
    void* args[] = {&words, &pattern};
    WB_CUDA(cudaLaunchCooperativeKernel(reinterpret_cast<const void*>(fill_shared_memory),
                                        dim3(plan.blocks), dim3(1024), args,
                                        static_cast<std::size_t>(plan.bytes), stream));
  } else {
    fill_shared_memory<<<plan.blocks, 1024, plan.bytes, stream>>>(words, pattern);
  }
  WB_CHECK_LAUNCH("fill_shared_memory");
}

}  // namespace
}  // namespace wb::testing
