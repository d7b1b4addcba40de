// Chapter 04, reference: the unfused softmax, written the way a framework composes it.
//
// Three kernels, each simple and each reasonably fast on its own; what makes the whole slow is
// that the matrix crosses device memory five times instead of twice:
//
//   kernel            reads            writes
//   1 row max         x                row_max (rows floats)
//   2 exp and sum     x, row_max       y (the exponentials), row_sum
//   3 normalize       y, row_sum       y
//   total             3 matrices       2 matrices        = 5 * rows * cols * 4 bytes
//
// and that three launches are paid where one would do.
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>

#include "softmax.cuh"
#include "wb/check.hpp"

namespace ch04 {
namespace {

constexpr int kThreads = 256;  // threads per block in every kernel of this file

__device__ float warp_max(float v) {
  for (int offset = 16; offset > 0; offset /= 2)
    v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, offset));
  return v;
}

__device__ float warp_sum(float v) {
  for (int offset = 16; offset > 0; offset /= 2) v += __shfl_xor_sync(0xffffffffu, v, offset);
  return v;
}

// Every thread of the block gets the block's maximum (or sum): reduce in each warp, pass the
// warp results through shared memory, and reduce those in every warp.
__device__ float block_max(float v) {
  __shared__ float per_warp[kThreads / 32];
  v = warp_max(v);
  if (threadIdx.x % 32 == 0) per_warp[threadIdx.x / 32] = v;
  __syncthreads();
  const int lane = threadIdx.x % 32;
  return warp_max(lane < kThreads / 32 ? per_warp[lane] : -INFINITY);
}

__device__ float block_sum(float v) {
  __shared__ float per_warp[kThreads / 32];
  v = warp_sum(v);
  if (threadIdx.x % 32 == 0) per_warp[threadIdx.x / 32] = v;
  __syncthreads();
  const int lane = threadIdx.x % 32;
  return warp_sum(lane < kThreads / 32 ? per_warp[lane] : 0.0f);
}

// Kernel 1: one block per row.
__global__ void row_max_kernel(const float* __restrict__ x, float* __restrict__ row_max,
                               int cols) {
  const float* row = x + static_cast<size_t>(blockIdx.x) * cols;
  float m = -INFINITY;
  // Column counters here are unsigned: c + kThreads passes the largest int when a row is
  // nearly 2^31 long (an int would overflow), and stays below 2^32.
#pragma unroll 4
  for (unsigned c = threadIdx.x; c < unsigned(cols); c += kThreads) m = fmaxf(m, row[c]);
  m = block_max(m);
  if (threadIdx.x == 0) row_max[blockIdx.x] = m;
}

// Kernel 2: one block per row; the exponentials go to y, their sum to row_sum.
__global__ void exp_sum_kernel(const float* __restrict__ x, const float* __restrict__ row_max,
                               float* __restrict__ y, float* __restrict__ row_sum, int cols) {
  const size_t offset = static_cast<size_t>(blockIdx.x) * cols;
  const float m = row_max[blockIdx.x];
  float s = 0.0f;
#pragma unroll 4
  for (unsigned c = threadIdx.x; c < unsigned(cols); c += kThreads) {
    const float e = __expf(x[offset + c] - m);  // x - max <= 0: no overflow
    y[offset + c] = e;
    s += e;
  }
  s = block_sum(s);
  if (threadIdx.x == 0) row_sum[blockIdx.x] = s;
}

// Kernel 3: elementwise, so any grid shape works: blockIdx.x picks the row, blockIdx.y a tile
// of kTile columns (striding by gridDim.y tiles, as gridDim.y is at most 65535).
constexpr int kTile = kThreads * 4;

__global__ void normalize_kernel(float* __restrict__ y, const float* __restrict__ row_sum,
                                 int cols) {
  const size_t offset = static_cast<size_t>(blockIdx.x) * cols;
  const float inv_sum = 1.0f / row_sum[blockIdx.x];
  for (unsigned tile_start = blockIdx.y * kTile; tile_start < unsigned(cols);
       tile_start += gridDim.y * kTile) {
    const unsigned end = min(unsigned(cols), tile_start + kTile);  // unsigned, as above
#pragma unroll
    for (unsigned c = tile_start + threadIdx.x; c < end; c += kThreads) y[offset + c] *= inv_sum;
  }
}

}  // namespace

void softmax_unfused(const float* x, float* y, float* row_max, float* row_sum, int rows,
                     int cols, cudaStream_t stream) {
  check_softmax_args("softmax_unfused", x, y, rows, cols);
  if (row_max == nullptr || row_sum == nullptr)
    throw std::invalid_argument(
        "ch04 softmax_unfused: row_max and row_sum must be device buffers of rows floats");
  if (rows == 0) return;

  row_max_kernel<<<rows, kThreads, 0, stream>>>(x, row_max, cols);
  WB_CHECK_LAUNCH("row_max_kernel");
  exp_sum_kernel<<<rows, kThreads, 0, stream>>>(x, row_max, y, row_sum, cols);
  WB_CHECK_LAUNCH("exp_sum_kernel");
  const dim3 grid(rows, std::min((cols - 1) / kTile + 1, 65535));  // cols + kTile - 1 may overflow
  normalize_kernel<<<grid, kThreads, 0, stream>>>(y, row_sum, cols);
  WB_CHECK_LAUNCH("normalize_kernel");
}

}  // namespace ch04
