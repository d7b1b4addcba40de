// Must-pass variant of the unfused softmax: rows split across blocks (a tile of columns per
// block, gridDim.y tiles, striding past 65535), the row max and row sum reduced with global
// atomics. Another summation order (tiles in whatever order they finish) and another grid
// shape than the reference's block per row; the tolerance allows any order.
//   kernel 1: row_max[r] = max over tiles (atomicMax on an order-preserving integer encoding)
//   kernel 2: y = exp(x - max); row_sum[r] += each tile's sum (atomicAdd)
//   kernel 3: y /= row_sum
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>

#include "softmax.cuh"
#include "wb/check.hpp"

namespace ch04 {
namespace {

constexpr int kThreads = 256;
constexpr int kTile = 4096;  // columns per block

// Floats as unsigned integers in the same order (-inf and every negative below every
// positive); 0 is below the encoding of every float, so a zeroed buffer starts the max.
__device__ unsigned encode(float f) {
  const unsigned b = __float_as_uint(f);
  return (b & 0x80000000u) ? ~b : b | 0x80000000u;
}
__device__ float decode(unsigned e) {
  return __uint_as_float((e & 0x80000000u) ? e & 0x7FFFFFFFu : ~e);
}

__device__ float block_reduce(float v, bool is_max) {
  __shared__ float per_warp[kThreads / 32];
  for (int o = 16; o > 0; o /= 2) {
    const float other = __shfl_xor_sync(0xffffffffu, v, o);
    v = is_max ? fmaxf(v, other) : v + other;
  }
  if (threadIdx.x % 32 == 0) per_warp[threadIdx.x / 32] = v;
  __syncthreads();
  float r = is_max ? -INFINITY : 0.0f;
  for (int w = 0; w < kThreads / 32; ++w) r = is_max ? fmaxf(r, per_warp[w]) : r + per_warp[w];
  return r;
}

__global__ void tile_max_kernel(const float* __restrict__ x, unsigned* __restrict__ row_max, int cols) {
  const size_t offset = static_cast<size_t>(blockIdx.x) * cols;
  for (unsigned tile = blockIdx.y * kTile; tile < unsigned(cols); tile += gridDim.y * kTile) {
    float m = -INFINITY;
    for (unsigned c = tile + threadIdx.x; c < min(unsigned(cols), tile + kTile); c += kThreads) m = fmaxf(m, x[offset + c]);
    m = block_reduce(m, true);
    if (threadIdx.x == 0) atomicMax(row_max + blockIdx.x, encode(m));
    __syncthreads();  // per_warp is reused by the next tile
  }
}

__global__ void tile_exp_sum_kernel(const float* __restrict__ x, const unsigned* __restrict__ row_max,
                                    float* __restrict__ y, float* __restrict__ row_sum, int cols) {
  const size_t offset = static_cast<size_t>(blockIdx.x) * cols;
  const float m = decode(row_max[blockIdx.x]);
  for (unsigned tile = blockIdx.y * kTile; tile < unsigned(cols); tile += gridDim.y * kTile) {
    float s = 0.0f;
    for (unsigned c = tile + threadIdx.x; c < min(unsigned(cols), tile + kTile); c += kThreads) {
      const float e = __expf(x[offset + c] - m);
      y[offset + c] = e;
      s += e;
    }
    s = block_reduce(s, false);
    if (threadIdx.x == 0) atomicAdd(row_sum + blockIdx.x, s);
    __syncthreads();
  }
}

__global__ void tile_normalize_kernel(float* __restrict__ y, const float* __restrict__ row_sum, int cols) {
  const size_t offset = static_cast<size_t>(blockIdx.x) * cols;
  const float inv = 1.0f / row_sum[blockIdx.x];
  for (unsigned tile = blockIdx.y * kTile; tile < unsigned(cols); tile += gridDim.y * kTile)
    for (unsigned c = tile + threadIdx.x; c < min(unsigned(cols), tile + kTile); c += kThreads) y[offset + c] *= inv;
}

}  // namespace

void softmax_unfused(const float* x, float* y, float* row_max, float* row_sum, int rows, int cols,
                     cudaStream_t stream) {
  check_softmax_args("softmax_unfused", x, y, rows, cols);
  if (row_max == nullptr || row_sum == nullptr)
    throw std::invalid_argument(
        "ch04 softmax_unfused: row_max and row_sum must be device buffers of rows floats");
  if (rows == 0) return;
  // The atomics need a start: the encoded max's 0 (below every float) and a sum of 0.
  WB_CUDA(cudaMemsetAsync(row_max, 0, rows * sizeof(float), stream));
  WB_CUDA(cudaMemsetAsync(row_sum, 0, rows * sizeof(float), stream));
  auto* encoded_max = reinterpret_cast<unsigned*>(row_max);
  // Counters in the kernels are unsigned and the tile count avoids cols + kTile - 1: near
  // 2^31 columns both would pass the largest int.
  const dim3 grid(rows, std::min((cols - 1) / kTile + 1, 65535));
  tile_max_kernel<<<grid, kThreads, 0, stream>>>(x, encoded_max, cols);
  WB_CHECK_LAUNCH("tile_max_kernel");
  tile_exp_sum_kernel<<<grid, kThreads, 0, stream>>>(x, encoded_max, y, row_sum, cols);
  WB_CHECK_LAUNCH("tile_exp_sum_kernel");
  tile_normalize_kernel<<<grid, kThreads, 0, stream>>>(y, row_sum, cols);
  WB_CHECK_LAUNCH("tile_normalize_kernel");
}

}  // namespace ch04
