// Chapter 08, step 2, the FAST build (solutions/08_token_loop/fast/, see NOTES.md): attention
// in one kernel per step, one block per query head, and no chain of dependent loads.
//
// At batch 1 a head's attention is a few kilobytes of the cache, read from L2: the time is
// not bytes, it is how many L2 round trips happen one after another. The reference
// (../attention.cu) pays them in series: three kernels, a warp sum per score, and a weighted
// sum in which each thread walks t = 0 .. *pos. Here every stage issues its loads together:
//   1. scores: a thread per position (t = tid, tid + 256, ...) computes the whole dot product
//      of q_h with its key row, 16-byte loads, all independent;
//   2. the max and the sum of exp(s - max): two block reductions;
//   3. the weighted sum: the threads form `groups` x `cols` (cols = the head's 16-byte
//      columns), each group accumulates its share of the positions (t = group, group +
//      groups, ...) for one column, and the groups' partial sums meet in shared memory.
// Same arithmetic as the reference (max first, exp(s - max), one division by the sum at the
// end), another summation order.
#include <cuda_runtime.h>

#include <cmath>
#include <cstddef>
#include <cstdint>

#include "token_loop.cuh"
#include "wb/check.hpp"

namespace ch08 {
namespace {

constexpr int kWarp = 32;
constexpr int kThreads = 256;
constexpr int kWarps = kThreads / kWarp;
constexpr int kMaxGroups = 32;  // step 3: at most this many partial sums per column

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

// T is float4 (the head's rows on 16-byte boundaries) or float (any head_size).
__device__ __forceinline__ float dot(float a, float b) { return a * b; }
__device__ __forceinline__ float dot(float4 a, float4 b) { return a.x * b.x + a.y * b.y + a.z * b.z + a.w * b.w; }
__device__ __forceinline__ void fma_into(float& acc, float e, float v) { acc = fmaf(e, v, acc); }
__device__ __forceinline__ void fma_into(float4& acc, float e, float4 v) {
  acc.x = fmaf(e, v.x, acc.x);
  acc.y = fmaf(e, v.y, acc.y);
  acc.z = fmaf(e, v.z, acc.z);
  acc.w = fmaf(e, v.w, acc.w);
}
__device__ __forceinline__ void add_into(float& a, float b) { a += b; }
__device__ __forceinline__ void add_into(float4& a, float4 b) {
  a.x += b.x;
  a.y += b.y;
  a.z += b.z;
  a.w += b.w;
}
__device__ __forceinline__ float scaled(float a, float s) { return a * s; }
__device__ __forceinline__ float4 scaled(float4 a, float s) { return make_float4(a.x * s, a.y * s, a.z * s, a.w * s); }
template <typename T> __device__ __forceinline__ T zero();
template <> __device__ __forceinline__ float zero<float>() { return 0.0f; }
template <> __device__ __forceinline__ float4 zero<float4>() { return make_float4(0.0f, 0.0f, 0.0f, 0.0f); }

}  // namespace

// In ch08::kernels, like the reference's kernels: the coverage check looks there.
namespace kernels {

// grid n_heads, kThreads threads. T-columns: head_size / (floats per T).
template <typename T>
__global__ void __launch_bounds__(kThreads)
    attention_fast_kernel(float* out, const float* q, const float* key_cache, const float* value_cache,
                          float* scores, int n_heads, int n_kv_heads, int head_size, int seq_len,
                          const int* pos) {
  __shared__ T partial[kThreads];
  __shared__ float slots[kWarps];
  const int h = blockIdx.x, p = *pos;
  const int width = int(sizeof(T) / sizeof(float));
  const int cols = head_size / width;  // T-columns of a head row
  const std::size_t row_stride = std::size_t(n_kv_heads) * head_size / width;  // in T
  const std::size_t g_off = std::size_t(h / (n_heads / n_kv_heads)) * cols;     // in T
  const T* qh = reinterpret_cast<const T*>(q) + std::size_t(h) * cols;  // every thread reads all of it: L1
  const T* keys = reinterpret_cast<const T*>(key_cache) + g_off;
  const T* values = reinterpret_cast<const T*>(value_cache) + g_off;
  float* s = scores + std::size_t(h) * seq_len;
  const float scale = 1.0f / sqrtf(float(head_size));

  // 1. Scores, a thread per position; the row's loads do not wait for each other.
  float m = -INFINITY;
  for (int t = threadIdx.x; t <= p; t += kThreads) {
    const T* key = keys + std::size_t(t) * row_stride;
    float d = 0.0f;
#pragma unroll 8
    for (int c = 0; c < cols; ++c) d += dot(qh[c], key[c]);
    s[t] = d * scale;
    m = fmaxf(m, d * scale);
  }
  // 2. Max, exp(s - max) in place (each thread its own positions), the sum (>= 1).
  m = block_max(m, slots);
  float sum = 0.0f;
  for (int t = threadIdx.x; t <= p; t += kThreads) {
    const float e = expf(s[t] - m);
    s[t] = e;
    sum += e;
  }
  sum = block_sum(sum, slots);  // its barriers also publish every thread's exp values
  const float inv_sum = 1.0f / sum;

  // 3. out_h = sum_t e_t V[t] / sum: groups x chunk threads, a group per share of positions.
  for (int c0 = 0; c0 < cols; c0 += kThreads) {
    const int chunk = min(cols - c0, kThreads);
    const int groups = min(kThreads / chunk, kMaxGroups);
    const int col = threadIdx.x % chunk, group = threadIdx.x / chunk;
    if (group < groups) {
      T acc = zero<T>();
#pragma unroll 4
      for (int t = group; t <= p; t += groups) fma_into(acc, s[t], values[std::size_t(t) * row_stride + c0 + col]);
      partial[group * chunk + col] = acc;
    }
    __syncthreads();
    if (threadIdx.x < chunk) {
      T total = partial[threadIdx.x];
      for (int g = 1; g < groups; ++g) add_into(total, partial[g * chunk + threadIdx.x]);
      reinterpret_cast<T*>(out)[std::size_t(h) * cols + c0 + threadIdx.x] = scaled(total, inv_sum);
    }
    __syncthreads();  // `partial` is rewritten by the next chunk
  }
}

}  // namespace kernels

namespace {
bool aligned16(const void* p) { return reinterpret_cast<std::uintptr_t>(p) % 16 == 0; }

template <typename T>
void launch(float* out, const float* q, const float* key_cache, const float* value_cache, float* scores,
            int n_heads, int n_kv_heads, int head_size, int seq_len, const int* pos, cudaStream_t stream) {
  kernels::attention_fast_kernel<T><<<n_heads, kThreads, 0, stream>>>(
      out, q, key_cache, value_cache, scores, n_heads, n_kv_heads, head_size, seq_len, pos);
}
}  // namespace

void attention(float* out, const float* q, const float* key_cache, const float* value_cache,
               float* scores, int n_heads, int n_kv_heads, int head_size, int seq_len,
               const int* pos, cudaStream_t stream) {
  check_attention_args(out, q, key_cache, value_cache, scores, n_heads, n_kv_heads, head_size,
                       seq_len, pos);
  // 16-byte loads when every head row starts on a 16-byte boundary: head_size % 4 == 0 (so
  // kv_dim too) and the four pointers aligned. Otherwise single floats, the same kernel.
  if (head_size % 4 == 0 && aligned16(out) && aligned16(q) && aligned16(key_cache) && aligned16(value_cache))
    launch<float4>(out, q, key_cache, value_cache, scores, n_heads, n_kv_heads, head_size, seq_len, pos, stream);
  else
    launch<float>(out, q, key_cache, value_cache, scores, n_heads, n_kv_heads, head_size, seq_len, pos, stream);
  WB_CHECK_LAUNCH("attention_fast_kernel");
}

}  // namespace ch08
