// Chapter 08 must-pass variant: RoPE + append with one thread per head (of q, and of k and v),
// each looping over its head's pairs, and the angle computed in DOUBLE precision
// (pos * 10000^(-(i % head_size) / head_size) exactly, then sincos): a more accurate angle
// than llama2.c's float one, which the tests' tolerance must admit (kernel_reference.hpp:
// at large positions the float angle's own rounding is the dominant difference).
#include <cuda_runtime.h>

#include <cstddef>

#include "token_loop.cuh"
#include "wb/check.hpp"

namespace ch08 {
namespace {

constexpr int kThreads = 64;

__device__ void rotate_head(const float* in, float* out, int head_size, int p) {
  for (int j = 0; j < head_size; j += 2) {
    const double angle = double(p) * pow(10000.0, -double(j) / double(head_size));
    double s, c;
    sincos(angle, &s, &c);
    const float sf = float(s), cf = float(c);
    const float a = in[j], b = in[j + 1];
    out[j] = a * cf - b * sf;
    out[j + 1] = a * sf + b * cf;
  }
}

// Threads 0 .. n_heads - 1: q's heads, in place; threads n_heads .. n_heads + n_kv_heads - 1:
// k's heads into the key cache row, and v's head copied into the value cache row.
__global__ void __launch_bounds__(kThreads)
    rope_per_head_kernel(float* q, const float* k, const float* v, float* key_cache,
                         float* value_cache, int n_heads, int n_kv_heads, int head_size,
                         int kv_dim, const int* pos) {
  const int idx = blockIdx.x * kThreads + threadIdx.x;
  if (idx >= n_heads + n_kv_heads) return;
  const int p = *pos;
  if (idx < n_heads) {
    float* qh = q + std::size_t(idx) * head_size;
    rotate_head(qh, qh, head_size, p);
    return;
  }
  const std::size_t off = std::size_t(idx - n_heads) * head_size;
  const std::size_t row = std::size_t(p) * std::size_t(kv_dim);
  rotate_head(k + off, key_cache + row + off, head_size, p);
  for (int j = 0; j < head_size; ++j) value_cache[row + off + j] = v[off + j];
}

}  // namespace

void rope_and_append(float* q, const float* k, const float* v, float* key_cache,
                     float* value_cache, int dim, int kv_dim, int head_size, const int* pos,
                     cudaStream_t stream) {
  check_rope_args(q, k, v, key_cache, value_cache, dim, kv_dim, head_size, pos);
  const int n_heads = dim / head_size, n_kv_heads = kv_dim / head_size;
  const int blocks = (n_heads + n_kv_heads + kThreads - 1) / kThreads;
  rope_per_head_kernel<<<blocks, kThreads, 0, stream>>>(q, k, v, key_cache, value_cache, n_heads,
                                                        n_kv_heads, head_size, kv_dim, pos);
  WB_CHECK_LAUNCH("rope_per_head_kernel");
}

}  // namespace ch08
