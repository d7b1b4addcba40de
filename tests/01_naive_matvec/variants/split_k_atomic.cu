// Must-pass variant (ch01 "split_k_atomic"): another summation order. Each row is split into
// chunks of 1024 columns; one warp sums one chunk of one row and adds it to y[row] with
// atomicAdd (y is zeroed first, on the same stream). The order in which chunks land varies
// from run to run: the tolerance allows any order. The wrapper makes one allocation (a slab
// holding W, x and y) per call instead of three.
#include <algorithm>
#include <cstddef>

#include "matvec.hpp"
#include "wb/check.hpp"

namespace ch01 {
namespace {

constexpr int kWarpsPerBlock = 8;  // rows per block
constexpr int kChunk = 1024;       // columns per warp
constexpr int kUnroll = 8;

__device__ float warp_sum(float v) {
  for (int offset = 16; offset > 0; offset /= 2) v += __shfl_xor_sync(0xffffffffu, v, offset);
  return v;
}

__global__ void matvec_split_k(float* y, const float* x, const float* W, int n, int d) {
  const std::size_t row = std::size_t(blockIdx.x) * kWarpsPerBlock + threadIdx.x / 32;
  if (row >= std::size_t(d)) return;
  const int lane = threadIdx.x % 32;
  const float* w = W + row * std::size_t(n);
  // Columns in std::size_t: the last chunk of a row of nearly 2^31 floats ends past INT_MAX.
  const int chunks = (n - 1) / kChunk + 1;
  for (int chunk = blockIdx.y; chunk < chunks; chunk += gridDim.y) {
    const std::size_t begin = std::size_t(chunk) * kChunk, end = min(std::size_t(n), begin + kChunk);
    float sum = 0.0f;
    std::size_t j = begin + lane;
    for (; j + (kUnroll - 1) * 32 < end; j += kUnroll * 32) {
      float wv[kUnroll];
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) wv[u] = w[j + u * 32];
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) sum += wv[u] * x[j + u * 32];
    }
    for (; j < end; j += 32) sum += w[j] * x[j];
    sum = warp_sum(sum);
    if (lane == 0) atomicAdd(y + row, sum);
  }
}

}  // namespace

void launch_matvec(float* y, const float* x, const float* W, int n, int d, cudaStream_t stream) {
  WB_CUDA(cudaMemsetAsync(y, 0, std::size_t(d) * sizeof(float), stream));
  const unsigned row_blocks = unsigned((std::size_t(d) + kWarpsPerBlock - 1) / kWarpsPerBlock);
  const unsigned chunks = unsigned(std::min((n - 1) / kChunk + 1, 65535));  // n + kChunk - 1 overflows near 2^31
  matvec_split_k<<<dim3(row_blocks, chunks), kWarpsPerBlock * 32, 0, stream>>>(y, x, W, n, d);
  WB_CHECK_LAUNCH("matvec_split_k");
}

void matvec_naive(float* out, const float* x, const float* W, int n, int d) {
  // One slab: W, then x and y each starting on a 256-byte boundary.
  const std::size_t w_count = std::size_t(n) * std::size_t(d);
  const std::size_t x_at = (w_count + 63) / 64 * 64, y_at = x_at + (std::size_t(n) + 63) / 64 * 64;
  float* slab = nullptr;
  WB_CUDA(cudaMalloc(&slab, (y_at + std::size_t(d)) * sizeof(float)));
  WB_CUDA(cudaMemcpy(slab, W, w_count * sizeof(float), cudaMemcpyHostToDevice));
  WB_CUDA(cudaMemcpy(slab + x_at, x, std::size_t(n) * sizeof(float), cudaMemcpyHostToDevice));
  launch_matvec(slab + y_at, slab + x_at, slab, n, d, nullptr);
  WB_CUDA(cudaMemcpy(out, slab + y_at, std::size_t(d) * sizeof(float), cudaMemcpyDeviceToHost));
  WB_CUDA(cudaFree(slab));
}

}  // namespace ch01
