// Chapter 08, step 2 reference: attention of this step's queries over the KV cache, in the
// three steps of llama2.c's loop, one kernel each:
//   1. scores_kernel:   scores[h, t] = dot(q_h, K[t, g]) / sqrt(head_size) for t <= *pos,
//                       -inf for *pos < t < seq_len (a masked score: probability exactly 0);
//   2. softmax_kernel:  each head's row of scores becomes its softmax over t = 0 .. *pos;
//   3. weighted_sum_kernel: out_h = sum_{t <= *pos} a[h, t] * V[t, g].
// g = h / (n_heads / n_kv_heads): with grouped-query attention, consecutive query heads share
// one KV head.
//
// Why not chapter 04's softmax_fused for step 2? Its contract says y must not overlap x, and
// `scores` is the only scratch we are given (n_heads * seq_len floats): the softmax has to run
// in place, so it is done here, the same way (subtract the row's max before exp, then divide
// by the sum), over the first *pos + 1 entries of each row only.
//
// The position is read from device memory in every kernel (token_loop.cuh: a graph replays
// frozen arguments). Rows of the caches past *pos are never read: they hold stale positions
// or garbage, and even a NaN there must not reach the output.
#include <cuda_runtime.h>

#include <cmath>
#include <cstddef>

#include "token_loop.cuh"
#include "wb/check.hpp"

namespace ch08 {
namespace {

constexpr int kWarp = 32;

__device__ __forceinline__ float warp_sum(float v) {
  for (int offset = kWarp / 2; offset > 0; offset /= 2) v += __shfl_xor_sync(0xffffffffu, v, offset);
  return v;
}
__device__ __forceinline__ float warp_max(float v) {
  for (int offset = kWarp / 2; offset > 0; offset /= 2)
    v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, offset));
  return v;
}

// Block-wide reductions (blockDim.x a multiple of 32, at most 1024). Every thread gets the
// result. The trailing __syncthreads lets the caller reuse `shared` right away.
__device__ float block_max(float v, float* shared) {
  const int lane = threadIdx.x % kWarp, warp = threadIdx.x / kWarp;
  v = warp_max(v);
  if (lane == 0) shared[warp] = v;
  __syncthreads();
  v = lane < blockDim.x / kWarp ? shared[lane] : -INFINITY;
  v = warp_max(v);
  __syncthreads();
  return v;
}
__device__ float block_sum(float v, float* shared) {
  const int lane = threadIdx.x % kWarp, warp = threadIdx.x / kWarp;
  v = warp_sum(v);
  if (lane == 0) shared[warp] = v;
  __syncthreads();
  v = lane < blockDim.x / kWarp ? shared[lane] : 0.0f;
  v = warp_sum(v);
  __syncthreads();
  return v;
}

}  // namespace

namespace kernels {

constexpr int kScoreWarps = 8;       // scores: one warp per (head, position), 8 per block
constexpr int kSoftmaxThreads = 1024;  // softmax: one block per head, a thread per position
constexpr int kSumThreads = 128;      // weighted sum: one block per head, a thread per element

// grid (ceil(seq_len / 8), n_heads). Each warp computes one score: its lanes read
// consecutive floats of q_h and of the key row (coalesced), then a warp sum.
__global__ void __launch_bounds__(kScoreWarps * kWarp)
    scores_kernel(float* scores, const float* q, const float* key_cache, int n_heads,
                  int n_kv_heads, int head_size, int seq_len, const int* pos) {
  const int h = blockIdx.y;
  const int t = blockIdx.x * kScoreWarps + threadIdx.x / kWarp;
  const int lane = threadIdx.x % kWarp;
  if (t >= seq_len) return;  // the whole warp leaves together (t is the warp's)
  const int p = *pos;
  float* row = scores + static_cast<std::size_t>(h) * seq_len;
  if (t > p) {  // masked: the row of the cache is never read
    if (lane == 0) row[t] = -INFINITY;
    return;
  }
  const int kv_dim = n_kv_heads * head_size;
  const int g = h / (n_heads / n_kv_heads);
  const float* qh = q + static_cast<std::size_t>(h) * head_size;
  const float* key = key_cache + static_cast<std::size_t>(t) * kv_dim +
                     static_cast<std::size_t>(g) * head_size;
  float dot = 0.0f;
  for (int i = lane; i < head_size; i += kWarp) dot += qh[i] * key[i];
  dot = warp_sum(dot);
  if (lane == 0) row[t] = dot / sqrtf(float(head_size));
}

// grid n_heads. In place over row[0 .. *pos]: max, exp(s - max) and its sum, divide. One
// thread per position (a block of 1024 covers the context), so each thread keeps its own
// score in a register between the passes: one read and one write of the row.
__global__ void __launch_bounds__(kSoftmaxThreads)
    softmax_kernel(float* scores, int seq_len, const int* pos) {
  __shared__ float shared[kSoftmaxThreads / kWarp];
  const int p = *pos;
  float* row = scores + static_cast<std::size_t>(blockIdx.x) * seq_len;
  const int t = threadIdx.x;
  const bool mine = t <= p;
  const float s = mine ? row[t] : -INFINITY;
  const float m = block_max(s, shared);  // exp(s - max) <= 1: no overflow, however large the scores
  const float e = mine ? expf(s - m) : 0.0f;
  const float sum = block_sum(e, shared);  // >= 1 (the max's own term is exp(0))
  if (mine) row[t] = e / sum;
}

// grid n_heads. Thread i owns out_h[i] (and i + 128, ... for larger heads): it walks t = 0 ..
// *pos; the weight a[h, t] is the same for every thread (a broadcast read), the value rows
// are read coalesced.
__global__ void __launch_bounds__(kSumThreads)
    weighted_sum_kernel(float* out, const float* scores, const float* value_cache, int n_heads,
                        int n_kv_heads, int head_size, int seq_len, const int* pos) {
  const int h = blockIdx.x;
  const int p = *pos;
  const int kv_dim = n_kv_heads * head_size;
  const int g = h / (n_heads / n_kv_heads);
  const float* a = scores + static_cast<std::size_t>(h) * seq_len;
  const float* values = value_cache + static_cast<std::size_t>(g) * head_size;
  for (int i = threadIdx.x; i < head_size; i += kSumThreads) {
    float acc = 0.0f;
    for (int t = 0; t <= p; ++t) acc += a[t] * values[static_cast<std::size_t>(t) * kv_dim + i];
    out[static_cast<std::size_t>(h) * head_size + i] = acc;
  }
}

}  // namespace kernels

void attention(float* out, const float* q, const float* key_cache, const float* value_cache,
               float* scores, int n_heads, int n_kv_heads, int head_size, int seq_len,
               const int* pos, cudaStream_t stream) {
  check_attention_args(out, q, key_cache, value_cache, scores, n_heads, n_kv_heads, head_size,
                       seq_len, pos);
  const dim3 score_grid((seq_len + kernels::kScoreWarps - 1) / kernels::kScoreWarps, n_heads);
  kernels::scores_kernel<<<score_grid, kernels::kScoreWarps * kWarp, 0, stream>>>(
      scores, q, key_cache, n_heads, n_kv_heads, head_size, seq_len, pos);
  WB_CHECK_LAUNCH("scores_kernel");
  kernels::softmax_kernel<<<n_heads, kernels::kSoftmaxThreads, 0, stream>>>(scores, seq_len, pos);
  WB_CHECK_LAUNCH("softmax_kernel");
  kernels::weighted_sum_kernel<<<n_heads, kernels::kSumThreads, 0, stream>>>(
      out, scores, value_cache, n_heads, n_kv_heads, head_size, seq_len, pos);
  WB_CHECK_LAUNCH("weighted_sum_kernel");
}

}  // namespace ch08
