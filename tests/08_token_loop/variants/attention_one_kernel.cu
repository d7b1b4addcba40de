// Chapter 08 must-pass variant: attention in ONE kernel, one block per query head, without
// chapter 04. The block scores t = 0 .. *pos into its own row of the scratch (a warp per
// position), takes the row's max and the sum of exp(s - max) with block reductions, and
// then every thread accumulates its elements of out_h = sum_t exp(s_t - max) V[t, g] / sum.
// Summation orders differ from the reference's (the division comes last): the tests must
// accept any honest fp32 order.
#include <cuda_runtime.h>

#include <cmath>
#include <cstddef>

#include "token_loop.cuh"
#include "wb/check.hpp"

namespace ch08 {
namespace {

constexpr int kThreads = 128;
constexpr int kWarps = kThreads / 32;

__device__ float reduce_max(float v, float* shared) {
  for (int o = 16; o > 0; o /= 2) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  if (threadIdx.x % 32 == 0) shared[threadIdx.x / 32] = v;
  __syncthreads();
  float r = shared[0];
  for (int w = 1; w < kWarps; ++w) r = fmaxf(r, shared[w]);
  __syncthreads();
  return r;
}

__device__ float reduce_sum(float v, float* shared) {
  for (int o = 16; o > 0; o /= 2) v += __shfl_xor_sync(0xffffffffu, v, o);
  if (threadIdx.x % 32 == 0) shared[threadIdx.x / 32] = v;
  __syncthreads();
  float r = 0.0f;
  for (int w = 0; w < kWarps; ++w) r += shared[w];
  __syncthreads();
  return r;
}

__global__ void __launch_bounds__(kThreads)
    attention_head_kernel(float* out, const float* q, const float* key_cache,
                          const float* value_cache, float* scores, int n_heads, int n_kv_heads,
                          int head_size, int seq_len, const int* pos) {
  __shared__ float shared[kWarps];
  const int h = blockIdx.x, p = *pos;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const std::size_t kv_dim = std::size_t(n_kv_heads) * head_size;
  const std::size_t g_off = std::size_t(h / (n_heads / n_kv_heads)) * head_size;
  const float* qh = q + std::size_t(h) * head_size;
  float* s = scores + std::size_t(h) * seq_len;
  const float scale = 1.0f / sqrtf(float(head_size));
  // 1. scores, a warp per position.
  for (int t = warp; t <= p; t += kWarps) {
    const float* key = key_cache + std::size_t(t) * kv_dim + g_off;
    float dot = 0.0f;
    for (int i = lane; i < head_size; i += 32) dot += qh[i] * key[i];
    for (int o = 16; o > 0; o /= 2) dot += __shfl_xor_sync(0xffffffffu, dot, o);
    if (lane == 0) s[t] = dot * scale;
  }
  __syncthreads();  // the scores of every warp, visible to the whole block
  // 2. max, then exp(s - max) in place and its sum.
  float m = -INFINITY;
  for (int t = threadIdx.x; t <= p; t += kThreads) m = fmaxf(m, s[t]);
  m = reduce_max(m, shared);
  float sum = 0.0f;
  for (int t = threadIdx.x; t <= p; t += kThreads) {
    const float e = expf(s[t] - m);
    s[t] = e;
    sum += e;
  }
  sum = reduce_sum(sum, shared);  // its barriers also publish the exp values written above
  // 3. weighted sum of the values, divided once at the end.
  for (int i = threadIdx.x; i < head_size; i += kThreads) {
    float acc = 0.0f;
    for (int t = 0; t <= p; ++t) acc = fmaf(s[t], value_cache[std::size_t(t) * kv_dim + g_off + i], acc);
    out[std::size_t(h) * head_size + i] = acc / sum;
  }
}

}  // namespace

void attention(float* out, const float* q, const float* key_cache, const float* value_cache,
               float* scores, int n_heads, int n_kv_heads, int head_size, int seq_len,
               const int* pos, cudaStream_t stream) {
  check_attention_args(out, q, key_cache, value_cache, scores, n_heads, n_kv_heads, head_size,
                       seq_len, pos);
  attention_head_kernel<<<n_heads, kThreads, 0, stream>>>(out, q, key_cache, value_cache, scores,
                                                          n_heads, n_kv_heads, head_size, seq_len, pos);
  WB_CHECK_LAUNCH("attention_head_kernel");
}

}  // namespace ch08
