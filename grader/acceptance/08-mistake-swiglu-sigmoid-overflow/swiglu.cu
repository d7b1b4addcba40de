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
// Written as e^g / (1 + e^g) so that a very negative g never computes exp(-g) (which would
// overflow); the two infinities the header names are handled explicitly.
__device__ __forceinline__ float silu(float g) {
  if (g == -INFINITY) return 0.0f;      // silu(-inf) = 0
  if (g == INFINITY) return INFINITY;   // silu(+inf) = +inf
  const float e = expf(g);              // NaN stays NaN
  return g * (e / (1.0f + e));
}

}  // namespace

namespace kernels {

constexpr int kSwigluThreads = 256;

__global__ void __launch_bounds__(kSwigluThreads)
    swiglu_kernel(float* out, const float* gate, const float* up, int n) {
  const std::size_t stride = static_cast<std::size_t>(gridDim.x) * kSwigluThreads;
  for (std::size_t i = static_cast<std::size_t>(blockIdx.x) * kSwigluThreads + threadIdx.x;
       i < static_cast<std::size_t>(n); i += stride)
    out[i] = silu(gate[i]) * up[i];
}

}  // namespace kernels

void swiglu(float* out, const float* gate, const float* up, int n, cudaStream_t stream) {
  check_swiglu_args(out, gate, up, n);
  if (n == 0) return;
  constexpr int kMaxBlocks = 1 << 16;  // beyond that, threads take a second turn
  const int blocks = std::min((n - 1) / kernels::kSwigluThreads + 1, kMaxBlocks);
  kernels::swiglu_kernel<<<blocks, kernels::kSwigluThreads, 0, stream>>>(out, gate, up, n);
  WB_CHECK_LAUNCH("swiglu_kernel");
}

}  // namespace ch08
