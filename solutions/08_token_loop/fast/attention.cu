// Chapter 08, step 2, the FAST build (solutions/08_token_loop/fast/, see NOTES.md): attention
// in one kernel per step, one block per query head, every stage parallel over the positions.
//
// The reference (../attention.cu) is three kernels, and its weighted sum gives each thread one
// output element and walks t = 0 .. *pos in a loop: at position 255 that is 256 dependent
// trips through L2 per thread, per layer. Here the block's 8 warps split the positions
// between them (warp w takes t = w, w + 8, ...), each lane keeps up to 4 output elements in
// registers, and the 8 partial sums meet in shared memory at the end. Same arithmetic as the
// reference (max first, exp(s - max), one division by the sum), another summation order.
#include <cuda_runtime.h>

#include <cmath>
#include <cstddef>

#include "token_loop.cuh"
#include "wb/check.hpp"

namespace ch08 {
namespace {

constexpr int kWarp = 32;
constexpr int kWarps = 8;
constexpr int kThreads = kWarps * kWarp;
constexpr int kPerLane = 4;                    // output elements a lane keeps in registers
constexpr int kChunk = kWarp * kPerLane;       // output elements per pass (head_size > 128: more passes)

__device__ __forceinline__ float warp_sum(float v) {
  for (int o = kWarp / 2; o > 0; o /= 2) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}
__device__ __forceinline__ float warp_max(float v) {
  for (int o = kWarp / 2; o > 0; o /= 2) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

// Every thread gets the block's max / sum; the trailing barrier frees `slots` for reuse.
__device__ float block_max(float v, float* slots) {
  v = warp_max(v);
  if (threadIdx.x % kWarp == 0) slots[threadIdx.x / kWarp] = v;
  __syncthreads();
  float r = slots[0];
  for (int w = 1; w < kWarps; ++w) r = fmaxf(r, slots[w]);
  __syncthreads();
  return r;
}
__device__ float block_sum(float v, float* slots) {
  v = warp_sum(v);
  if (threadIdx.x % kWarp == 0) slots[threadIdx.x / kWarp] = v;
  __syncthreads();
  float r = 0.0f;
  for (int w = 0; w < kWarps; ++w) r += slots[w];
  __syncthreads();
  return r;
}

}  // namespace

// In ch08::kernels, like the reference's kernels: the coverage check looks there.
namespace kernels {

__global__ void __launch_bounds__(kThreads)
    attention_fast_kernel(float* out, const float* q, const float* key_cache,
                          const float* value_cache, float* scores, int n_heads, int n_kv_heads,
                          int head_size, int seq_len, const int* pos) {
  __shared__ float slots[kWarps];
  __shared__ float partial[kWarps][kChunk];
  const int h = blockIdx.x, p = *pos;
  const int warp = threadIdx.x / kWarp, lane = threadIdx.x % kWarp;
  const std::size_t kv_dim = std::size_t(n_kv_heads) * head_size;
  const std::size_t g_off = std::size_t(h / (n_heads / n_kv_heads)) * head_size;
  const float* qh = q + std::size_t(h) * head_size;
  float* s = scores + std::size_t(h) * seq_len;
  const float scale = 1.0f / sqrtf(float(head_size));

  // 1. Scores: a warp per position, lanes over the head's elements (coalesced key reads).
  for (int t = warp; t <= p; t += kWarps) {
    const float* key = key_cache + std::size_t(t) * kv_dim + g_off;
    float dot = 0.0f;
    for (int i = lane; i < head_size; i += kWarp) dot += qh[i] * key[i];
    dot = warp_sum(dot);
    if (lane == 0) s[t] = dot * scale;
  }
  __syncthreads();  // every warp's scores, visible to the block

  // 2. Max, exp(s - max) in place, and the sum (>= 1: the max's own term is 1).
  float m = -INFINITY;
  for (int t = threadIdx.x; t <= p; t += kThreads) m = fmaxf(m, s[t]);
  m = block_max(m, slots);
  float sum = 0.0f;
  for (int t = threadIdx.x; t <= p; t += kThreads) {
    const float e = expf(s[t] - m);
    s[t] = e;
    sum += e;
  }
  sum = block_sum(sum, slots);  // its barriers also publish the exp values to every warp
  const float inv_sum = 1.0f / sum;

  // 3. out_h = sum_t e_t V[t, g] / sum: warps split t, lanes hold kPerLane elements each.
  for (int i0 = 0; i0 < head_size; i0 += kChunk) {
    float acc[kPerLane] = {};
    for (int t = warp; t <= p; t += kWarps) {
      const float e = s[t];
      const float* value = value_cache + std::size_t(t) * kv_dim + g_off;
#pragma unroll
      for (int k = 0; k < kPerLane; ++k) {
        const int i = i0 + lane + k * kWarp;
        if (i < head_size) acc[k] = fmaf(e, value[i], acc[k]);
      }
    }
#pragma unroll
    for (int k = 0; k < kPerLane; ++k) partial[warp][lane + k * kWarp] = acc[k];
    __syncthreads();
    for (int j = threadIdx.x; j < kChunk && i0 + j < head_size; j += kThreads) {
      float total = 0.0f;
      for (int w = 0; w < kWarps; ++w) total += partial[w][j];
      out[std::size_t(h) * head_size + i0 + j] = total * inv_sum;
    }
    __syncthreads();  // `partial` is rewritten by the next chunk
  }
}

}  // namespace kernels

void attention(float* out, const float* q, const float* key_cache, const float* value_cache,
               float* scores, int n_heads, int n_kv_heads, int head_size, int seq_len,
               const int* pos, cudaStream_t stream) {
  check_attention_args(out, q, key_cache, value_cache, scores, n_heads, n_kv_heads, head_size,
                       seq_len, pos);
  kernels::attention_fast_kernel<<<n_heads, kThreads, 0, stream>>>(out, q, key_cache, value_cache, scores,
                                                          n_heads, n_kv_heads, head_size, seq_len, pos);
  WB_CHECK_LAUNCH("attention_fast_kernel");
}

}  // namespace ch08
