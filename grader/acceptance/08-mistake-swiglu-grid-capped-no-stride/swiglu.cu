// Chapter 08, step 3 reference: SwiGLU, out[i] = silu(gate[i]) * up[i], one elementwise pass
// (chapter 05's lesson: each input read once, the output written once).
//
// One element per thread, the grid capped at the largest grid dimension. out
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

__global__ void __launch_bounds__(kSwigluThreads)
    swiglu_kernel(float* out, const float* gate, const float* up, int n) {
  const int i = blockIdx.x * kSwigluThreads + threadIdx.x;
  if (i < n) out[i] = silu(gate[i]) * up[i];
}

}  // namespace kernels

void swiglu(float* out, const float* gate, const float* up, int n, cudaStream_t stream) {
  check_swiglu_args(out, gate, up, n);
  if (n == 0) return;
  constexpr int kMaxBlocks = 65535;  // the largest grid dimension a launch accepts
  const int blocks = std::min((n - 1) / kernels::kSwigluThreads + 1, kMaxBlocks);
  kernels::swiglu_kernel<<<blocks, kernels::kSwigluThreads, 0, stream>>>(out, gate, up, n);
  WB_CHECK_LAUNCH("swiglu_kernel");
}

}  // namespace ch08
