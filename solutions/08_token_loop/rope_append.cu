// Chapter 08, step 1 reference: RoPE on this step's q and k, and the append of k and v to
// row *pos of the layer's KV cache, in one kernel.
//
// One thread per pair (x[i], x[i+1]), i even, of q (dim / 2 pairs). The first kv_dim / 2
// threads also own the same pair of k and v: they rotate k with the same angle (the angle
// depends on i % head_size only, and k's heads have the same head_size) and write the
// rotated k and the unrotated v to row *pos of the caches. Nothing else is written.
//
// The position is read from device memory (*pos), never passed by value: a CUDA graph
// freezes by-value arguments, and a step replayed from one would rotate by position 0
// forever (token_loop.cuh).
#include <cuda_runtime.h>

#include <cmath>
#include <cstddef>

#include "token_loop.cuh"
#include "wb/check.hpp"

namespace ch08 {
namespace kernels {

constexpr int kRopeThreads = 128;

__global__ void __launch_bounds__(kRopeThreads)
    rope_append_kernel(float* q, const float* k, const float* v, float* key_cache,
                       float* value_cache, int dim, int kv_dim, int head_size, const int* pos) {
  const int pair = blockIdx.x * kRopeThreads + threadIdx.x;
  const int i = 2 * pair;  // the even element of the pair
  if (i >= dim) return;    // dim is not a multiple of the block size in general
  const int p = *pos;
  // llama2.c's angle, in float as llama2.c computes it: frequency from the pair's place in
  // its head (i % head_size: every head restarts at frequency 1), angle = pos * frequency.
  const float frequency = 1.0f / powf(10000.0f, float(i % head_size) / float(head_size));
  const float angle = float(p) * frequency;
  float s, c;
  // sincosf: full range reduction (angles reach thousands of radians). The fast __sincosf
  // passes the tests too: its error, which grows with the angle, stays below the float
  // angle's own rounding (tests/08_token_loop/variants/rope_fast_sincos.patch).
  sincosf(angle, &s, &c);
  const float q0 = q[i], q1 = q[i + 1];
  q[i] = q0 * c - q1 * s;
  q[i + 1] = q0 * s + q1 * c;
  if (i < kv_dim) {
    const std::size_t row = static_cast<std::size_t>(p) * static_cast<std::size_t>(kv_dim);
    const float k0 = k[i], k1 = k[i + 1];
    key_cache[row + i] = k0 * c - k1 * s;
    key_cache[row + i + 1] = k0 * s + k1 * c;
    value_cache[row + i] = v[i];  // v is appended as it is: RoPE rotates q and k only
    value_cache[row + i + 1] = v[i + 1];
  }
}

}  // namespace kernels

void rope_and_append(float* q, const float* k, const float* v, float* key_cache,
                     float* value_cache, int dim, int kv_dim, int head_size, const int* pos,
                     cudaStream_t stream) {
  check_rope_args(q, k, v, key_cache, value_cache, dim, kv_dim, head_size, pos);
  const int pairs = dim / 2;
  const int blocks = (pairs + kernels::kRopeThreads - 1) / kernels::kRopeThreads;
  kernels::rope_append_kernel<<<blocks, kernels::kRopeThreads, 0, stream>>>(
      q, k, v, key_cache, value_cache, dim, kv_dim, head_size, pos);
  WB_CHECK_LAUNCH("rope_append_kernel");
}

}  // namespace ch08
