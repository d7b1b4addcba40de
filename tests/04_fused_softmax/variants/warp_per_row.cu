// Must-pass variant: a warp per row (the design of many framework softmaxes for short rows),
// for every row length. Rows of up to 4096 columns stay in registers (128 floats per lane,
// loaded before any is used); longer rows are streamed twice by their warp, an online
// (max, sum) pass and a pass that writes. No shared memory, no block-wide barrier; the sums
// run in another order than the reference's (per lane, then a butterfly across the warp).
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>

#include "softmax.cuh"
#include "wb/check.hpp"

namespace ch04 {
namespace {

constexpr int kWarpsPerBlock = 4;
constexpr int kCachedFloats = 128;  // per lane: rows of up to 32 * 128 = 4096 columns

__device__ float warp_max(float v) {
  for (int o = 16; o > 0; o /= 2) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}
__device__ float warp_sum(float v) {
  for (int o = 16; o > 0; o /= 2) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

// W = 4: 16-byte accesses (x, y aligned and cols % 4 == 0); W = 1: scalars.
template <int W>
__global__ void __launch_bounds__(32 * kWarpsPerBlock)
    softmax_warp_cached(const float* __restrict__ x, float* __restrict__ y, int rows, int cols) {
  constexpr int kPacks = kCachedFloats / W;
  const long long row = static_cast<long long>(blockIdx.x) * kWarpsPerBlock + threadIdx.x / 32;
  if (row >= rows) return;  // the whole warp leaves together
  const int lane = threadIdx.x % 32;
  const float* x_row = x + static_cast<size_t>(row) * cols;
  float* y_row = y + static_cast<size_t>(row) * cols;
  float v[kCachedFloats];
  float m = -INFINITY;
#pragma unroll
  for (int k = 0; k < kPacks; ++k) {
    const int c = (k * 32 + lane) * W;
    if constexpr (W == 4) {
      float4 p = make_float4(-INFINITY, -INFINITY, -INFINITY, -INFINITY);
      if (c < cols) p = *reinterpret_cast<const float4*>(x_row + c);
      v[4 * k] = p.x, v[4 * k + 1] = p.y, v[4 * k + 2] = p.z, v[4 * k + 3] = p.w;
    } else {
      v[k] = c < cols ? x_row[c] : -INFINITY;
    }
  }
#pragma unroll
  for (int i = 0; i < kCachedFloats; ++i) m = fmaxf(m, v[i]);
  m = warp_max(m);
  float s = 0.0f;
#pragma unroll
  for (int i = 0; i < kCachedFloats; ++i) s += v[i] = __expf(v[i] - m);
  const float inv = 1.0f / warp_sum(s);
#pragma unroll
  for (int k = 0; k < kPacks; ++k) {
    const int c = (k * 32 + lane) * W;
    if (c >= cols) continue;
    if constexpr (W == 4)
      *reinterpret_cast<float4*>(y_row + c) = make_float4(v[4 * k] * inv, v[4 * k + 1] * inv,
                                                          v[4 * k + 2] * inv, v[4 * k + 3] * inv);
    else
      y_row[c] = v[k] * inv;
  }
}

// Longer rows: each lane keeps an online (max, sum) of its columns; the warp combines them.
__global__ void __launch_bounds__(32 * kWarpsPerBlock)
    softmax_warp_streamed(const float* __restrict__ x, float* __restrict__ y, int rows, int cols) {
  const long long row = static_cast<long long>(blockIdx.x) * kWarpsPerBlock + threadIdx.x / 32;
  if (row >= rows) return;
  const int lane = threadIdx.x % 32;
  const float* x_row = x + static_cast<size_t>(row) * cols;
  float* y_row = y + static_cast<size_t>(row) * cols;
  // A lane sums up to cols / 32 terms (21875 for a row of 700000): in one float chain the
  // rounding grows past the tests' 2e-5, so the sum is compensated (Kahan): c carries what
  // each addition lost.
  float m = -INFINITY, s = 0.0f, c = 0.0f;
  for (unsigned col = lane; col < unsigned(cols); col += 32) {  // unsigned: no overflow near 2^31
    const float v = x_row[col];
    if (v > m) {
      const float scale = m == -INFINITY ? 0.0f : __expf(m - v);
      s = s * scale + 1.0f;
      c *= scale;
      m = v;
    } else if (v > -INFINITY) {
      const float term = __expf(v - m) - c;
      const float t = s + term;
      c = (t - s) - term;
      s = t;
    }
  }
  const float row_max = warp_max(m);
  const float scaled = m == -INFINITY ? 0.0f : s * __expf(m - row_max);
  const float inv = 1.0f / warp_sum(scaled);  // an all -inf row: 1 / 0, and exp(NaN) below
  for (unsigned c = lane; c < unsigned(cols); c += 32) y_row[c] = __expf(x_row[c] - row_max) * inv;
}

bool aligned16(const void* p) { return reinterpret_cast<std::uintptr_t>(p) % 16 == 0; }

}  // namespace

void softmax_fused(const float* x, float* y, int rows, int cols, cudaStream_t stream) {
  check_softmax_args("softmax_fused", x, y, rows, cols);
  if (rows == 0) return;
  const unsigned blocks = static_cast<unsigned>((rows + kWarpsPerBlock - 1) / kWarpsPerBlock);
  const int threads = 32 * kWarpsPerBlock;
  if (cols > 32 * kCachedFloats)
    softmax_warp_streamed<<<blocks, threads, 0, stream>>>(x, y, rows, cols);
  else if (aligned16(x) && aligned16(y) && cols % 4 == 0)
    softmax_warp_cached<4><<<blocks, threads, 0, stream>>>(x, y, rows, cols);
  else
    softmax_warp_cached<1><<<blocks, threads, 0, stream>>>(x, y, rows, cols);
  WB_CHECK_LAUNCH("softmax_warp_per_row");
}

}  // namespace ch04
