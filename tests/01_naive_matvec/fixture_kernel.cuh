#pragma once
// A plain, correct matvec for the known-wrong fixtures of chapters 02 and 03. Those fixtures
// get the memory policy wrong (allocating per call, never growing, re-uploading weights), not
// the kernel, and they are checked against the correctness tests only, so this kernel is kept
// short rather than fast: one warp per row, coalesced single-float loads, any n.
#include <cuda_runtime.h>

#include <cstddef>

#include "wb/check.hpp"

namespace fixture_kernel {
namespace {

constexpr int kRowsPerBlock = 4;

__global__ void matvec_warp_per_row(float* __restrict__ y, const float* __restrict__ x,
                                    const float* __restrict__ W, int n, int d) {
  const int row = blockIdx.x * kRowsPerBlock + threadIdx.x / 32;
  if (row >= d) return;
  const float* w = W + std::size_t(row) * std::size_t(n);
  float sum = 0.0f;
  for (unsigned j = threadIdx.x % 32; j < unsigned(n); j += 32) sum += w[j] * x[j];  // no wrap near 2^31
  for (int offset = 16; offset > 0; offset /= 2) sum += __shfl_xor_sync(0xffffffffu, sum, offset);
  if (threadIdx.x % 32 == 0) y[row] = sum;
}

inline void launch(float* y, const float* x, const float* W, int n, int d, cudaStream_t stream) {
  matvec_warp_per_row<<<(d + kRowsPerBlock - 1) / kRowsPerBlock, kRowsPerBlock * 32, 0, stream>>>(
      y, x, W, n, d);
  WB_CHECK_LAUNCH("fixture matvec_warp_per_row");
}

}  // namespace
}  // namespace fixture_kernel
