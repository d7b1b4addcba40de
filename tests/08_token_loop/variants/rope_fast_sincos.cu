// Chapter 08 must-pass variant: RoPE + append as the reference does it, but with the fast
// intrinsic __sincosf (the SFU's approximate sine and cosine) instead of sincosf. At an angle
// of thousands of radians its error grows with the angle, like that of the float angle itself
// (pos * frequency, rounded to float before any sine is taken: one ulp of a float near 4095
// is 2^-12, 2.4e-4 rad), so the tests' tolerance, which admits a few ulp of the angle
// (kernel_reference.cpp, rope_tolerance), must admit it too. A fast intrinsic is not by
// itself a wrong answer: what the tests reject is an error larger than the float angle's.
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
  __sincosf(angle, &s, &c);  // the SFU approximation, see the top of the file
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
