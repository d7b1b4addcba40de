// Chapter 08, step 3 reference: SwiGLU, out[i] = silu(gate[i]) * up[i], one elementwise pass
// (chapter 05's lesson: each input read once, the output written once).
//
// One element per thread, in a grid-stride loop so that any n works with a capped grid. out
// may be gate itself (the decoder computes in place): each thread reads gate[i] and up[i]
// before it writes out[i], and no thread touches another's element, so no __restrict__ here
// (it would promise the compiler that out and gate do not alias).
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstddef>

#include "token_loop.cuh"
#include "wb/check.hpp"

namespace ch08 {
namespace {

// llama2.c: val *= 1 / (1 + exp(-val)). For a very negative g, exp(-g) overflows to +inf,
// the sigmoid is 0 and g * 0 = -0 (the right limit, no NaN). g = -inf itself would give
// -inf * 0 = NaN; its limit is 0 (token_loop.cuh), hence the one special case. A NaN gate
// propagates (exp(NaN) = NaN); +inf gives +inf * 1 = +inf.
__device__ __forceinline__ float silu(float g) {
  const float sigmoid = 1.0f / (1.0f + expf(-g));
  return g == -INFINITY ? 0.0f : g * sigmoid;
}

}  // namespace

namespace kernels {

constexpr int kSwigluThreads = 256;

// Vectorized: each thread handles four consecutive elements with one 16-byte load of gate, one
// of up and one 16-byte store (cudaMalloc'd buffers are 256-byte aligned), then the n % 4 tail
// elements one by one. out may be gate: every thread reads its own four elements before it
// writes them.
__global__ void __launch_bounds__(kSwigluThreads)
    swiglu_kernel(float* out, const float* gate, const float* up, int n) {
  const std::size_t stride = static_cast<std::size_t>(gridDim.x) * kSwigluThreads;
  const std::size_t tid = static_cast<std::size_t>(blockIdx.x) * kSwigluThreads + threadIdx.x;
  const std::size_t n4 = static_cast<std::size_t>(n) / 4;
  const float4* gate4 = reinterpret_cast<const float4*>(gate);
  const float4* up4 = reinterpret_cast<const float4*>(up);
  float4* out4 = reinterpret_cast<float4*>(out);
  for (std::size_t i = tid; i < n4; i += stride) {
    const float4 g = gate4[i];
    const float4 u = up4[i];
    float4 o;
    o.x = silu(g.x) * u.x;
    o.y = silu(g.y) * u.y;
    o.z = silu(g.z) * u.z;
    o.w = silu(g.w) * u.w;
    out4[i] = o;
  }
  for (std::size_t i = 4 * n4 + tid; i < static_cast<std::size_t>(n); i += stride)
    out[i] = silu(gate[i]) * up[i];
}

}  // namespace kernels

void swiglu(float* out, const float* gate, const float* up, int n, cudaStream_t stream) {
  check_swiglu_args(out, gate, up, n);
  if (n == 0) return;
  constexpr int kMaxBlocks = 1 << 16;  // beyond that, threads take a second turn
  const int vectors = (n - 1) / 4 + 1;
  const int blocks = std::min((vectors - 1) / kernels::kSwigluThreads + 1, kMaxBlocks);
  kernels::swiglu_kernel<<<blocks, kernels::kSwigluThreads, 0, stream>>>(out, gate, up, n);
  WB_CHECK_LAUNCH("swiglu_kernel");
}

}  // namespace ch08
