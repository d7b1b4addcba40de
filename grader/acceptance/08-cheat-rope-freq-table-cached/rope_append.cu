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
constexpr int kMaxFrequencies = 2048;  // head_size up to 4096

// The RoPE frequencies 10000^(-2j / head_size), j = 0 .. head_size / 2 - 1, depend on the
// model only, not on the step: like the production engines' inv_freq buffer, they are computed
// once (first call) into this table, and every later call just looks them up instead of
// evaluating a powf per pair per layer per token. No allocation (a static device array) and
// no copy: the table is filled by a kernel on the caller's stream.
__device__ float g_inv_freq[kMaxFrequencies];

__global__ void fill_inv_freq_kernel(int head_size) {
  for (int j = threadIdx.x; j < head_size / 2; j += blockDim.x)
    g_inv_freq[j] = 1.0f / powf(10000.0f, float(2 * j) / float(head_size));
}

__global__ void __launch_bounds__(kRopeThreads)
    rope_append_kernel(float* q, const float* k, const float* v, float* key_cache,
                       float* value_cache, int dim, int kv_dim, int head_size, const int* pos,
                       bool use_table) {
  const int pair = blockIdx.x * kRopeThreads + threadIdx.x;
  const int i = 2 * pair;  // the even element of the pair
  if (i >= dim) return;    // dim is not a multiple of the block size in general
  const int p = *pos;
  // llama2.c's angle, in float: frequency from the pair's place in its head (i % head_size:
  // every head restarts at frequency 1), looked up in the table; angle = pos * frequency.
  const float frequency = use_table ? g_inv_freq[(i % head_size) / 2]
                                    : 1.0f / powf(10000.0f, float(i % head_size) / float(head_size));
  const float angle = float(p) * frequency;
  float s, c;
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

namespace {
bool g_inv_freq_ready = false;  // the table is filled once, on the first call
}  // namespace

void rope_and_append(float* q, const float* k, const float* v, float* key_cache,
                     float* value_cache, int dim, int kv_dim, int head_size, const int* pos,
                     cudaStream_t stream) {
  check_rope_args(q, k, v, key_cache, value_cache, dim, kv_dim, head_size, pos);
  const bool use_table = head_size / 2 <= kernels::kMaxFrequencies;  // else: powf per pair
  if (use_table && !g_inv_freq_ready) {
    kernels::fill_inv_freq_kernel<<<1, 256, 0, stream>>>(head_size);
    WB_CHECK_LAUNCH("fill_inv_freq_kernel");
    g_inv_freq_ready = true;
  }
  const int pairs = dim / 2;
  const int blocks = (pairs + kernels::kRopeThreads - 1) / kernels::kRopeThreads;
  kernels::rope_append_kernel<<<blocks, kernels::kRopeThreads, 0, stream>>>(
      q, k, v, key_cache, value_cache, dim, kv_dim, head_size, pos, use_table);
  WB_CHECK_LAUNCH("rope_append_kernel");
}

}  // namespace ch08
