// Must-pass variant: a block per row, in two passes over x: an online softmax pass that keeps
// a running (max, sum of exp(x - max)) per thread (Milakov & Gimelshein, 2018) and combines
// them across the block, then a pass that reads the row again (from L2: the block read it
// a moment ago) and writes y. Any row length with the same kernel, nothing held in
// registers between the passes.
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>

#include "softmax.cuh"
#include "wb/check.hpp"

namespace ch04 {
namespace {

constexpr int kThreads = 256;

struct MaxSum {
  float max, sum;
};

__device__ MaxSum combine(MaxSum a, MaxSum b) {
  const float m = fmaxf(a.max, b.max);
  if (m == -INFINITY) return {m, 0.0f};
  return {m, a.sum * __expf(a.max - m) + b.sum * __expf(b.max - m)};
}

__device__ MaxSum block_combine(MaxSum t) {
  __shared__ MaxSum per_warp[kThreads / 32];
  __shared__ MaxSum result;
  for (int o = 16; o > 0; o /= 2)
    t = combine(t, {__shfl_xor_sync(0xffffffffu, t.max, o), __shfl_xor_sync(0xffffffffu, t.sum, o)});
  if (threadIdx.x % 32 == 0) per_warp[threadIdx.x / 32] = t;
  __syncthreads();
  if (threadIdx.x == 0) {  // one thread folds the 8 warps' partials, in order
    MaxSum r = per_warp[0];
    for (int w = 1; w < kThreads / 32; ++w) r = combine(r, per_warp[w]);
    result = r;
  }
  __syncthreads();
  return result;
}

// Adds one entry to a running (max, sum): one exp per entry, a second only when the max
// grows. -inf entries (masked) add nothing.
__device__ void push(MaxSum& t, float v) {
  if (v > t.max) {
    t.sum = (t.max == -INFINITY ? 0.0f : t.sum * __expf(t.max - v)) + 1.0f;
    t.max = v;
  } else if (v > -INFINITY) {
    t.sum += __expf(v - t.max);
  }
}

template <int W>
__global__ void __launch_bounds__(kThreads)
    softmax_two_pass(const float* __restrict__ x, float* __restrict__ y, int cols) {
  const float* x_row = x + static_cast<size_t>(blockIdx.x) * cols;
  float* y_row = y + static_cast<size_t>(blockIdx.x) * cols;
  MaxSum t = {-INFINITY, 0.0f};
  // unsigned: c + kThreads * W passes the largest int for rows near 2^31 columns (< 2^32).
  for (unsigned c = threadIdx.x * W; c < unsigned(cols); c += kThreads * W) {
    float v[W];
    if constexpr (W == 4) {
      const float4 p = *reinterpret_cast<const float4*>(x_row + c);
      v[0] = p.x, v[1] = p.y, v[2] = p.z, v[3] = p.w;
    } else {
      v[0] = x_row[c];
    }
#pragma unroll
    for (int j = 0; j < W; ++j) push(t, v[j]);
  }
  const MaxSum row = block_combine(t);
  const float inv = 1.0f / row.sum;
  for (unsigned c = threadIdx.x * W; c < unsigned(cols); c += kThreads * W) {
    if constexpr (W == 4) {
      const float4 p = *reinterpret_cast<const float4*>(x_row + c);
      *reinterpret_cast<float4*>(y_row + c) =
          make_float4(__expf(p.x - row.max) * inv, __expf(p.y - row.max) * inv,
                      __expf(p.z - row.max) * inv, __expf(p.w - row.max) * inv);
    } else {
      y_row[c] = __expf(x_row[c] - row.max) * inv;
    }
  }
}

bool aligned16(const void* p) { return reinterpret_cast<std::uintptr_t>(p) % 16 == 0; }

}  // namespace

void softmax_fused(const float* x, float* y, int rows, int cols, cudaStream_t stream) {
  check_softmax_args("softmax_fused", x, y, rows, cols);
  if (rows == 0) return;
  if (aligned16(x) && aligned16(y) && cols % 4 == 0)
    softmax_two_pass<4><<<rows, kThreads, 0, stream>>>(x, y, cols);
  else
    softmax_two_pass<1><<<rows, kThreads, 0, stream>>>(x, y, cols);
  WB_CHECK_LAUNCH("softmax_two_pass");
}

}  // namespace ch04
