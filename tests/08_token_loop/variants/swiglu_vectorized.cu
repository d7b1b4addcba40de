// Chapter 08 must-pass variant: SwiGLU with 16-byte accesses (chapter 05's step 4): one float4
// of gate, up and out per thread when all three pointers are 16-byte aligned, the last n % 4
// elements by block 0, one per thread; any other alignment takes a scalar grid-stride loop.
// In place (out == gate) works on both paths: a thread reads its float4 before writing it.
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>

#include "token_loop.cuh"
#include "wb/check.hpp"

namespace ch08 {
namespace {

constexpr int kThreads = 256;

__device__ __forceinline__ float silu_times(float g, float u) {
  const float silu = g == -INFINITY ? 0.0f : g / (1.0f + expf(-g));  // -g huge: g / inf = -0
  return silu * u;
}

__global__ void __launch_bounds__(kThreads)
    swiglu_vec4_kernel(float* out, const float* gate, const float* up, std::size_t n) {
  const std::size_t n4 = n / 4;
  const std::size_t stride = std::size_t(gridDim.x) * kThreads;
  for (std::size_t i = std::size_t(blockIdx.x) * kThreads + threadIdx.x; i < n4; i += stride) {
    const float4 g = reinterpret_cast<const float4*>(gate)[i];
    const float4 u = reinterpret_cast<const float4*>(up)[i];
    reinterpret_cast<float4*>(out)[i] =
        make_float4(silu_times(g.x, u.x), silu_times(g.y, u.y), silu_times(g.z, u.z), silu_times(g.w, u.w));
  }
  const std::size_t tail = 4 * n4 + threadIdx.x;
  if (blockIdx.x == 0 && tail < n) out[tail] = silu_times(gate[tail], up[tail]);
}

__global__ void __launch_bounds__(kThreads)
    swiglu_scalar_kernel(float* out, const float* gate, const float* up, std::size_t n) {
  const std::size_t stride = std::size_t(gridDim.x) * kThreads;
  for (std::size_t i = std::size_t(blockIdx.x) * kThreads + threadIdx.x; i < n; i += stride)
    out[i] = silu_times(gate[i], up[i]);
}

bool aligned16(const void* p) { return reinterpret_cast<std::uintptr_t>(p) % 16 == 0; }

unsigned grid_for(std::size_t items) {
  return unsigned(std::clamp<std::size_t>((items + kThreads - 1) / kThreads, 1, std::size_t(1) << 16));
}

}  // namespace

void swiglu(float* out, const float* gate, const float* up, int n, cudaStream_t stream) {
  check_swiglu_args(out, gate, up, n);
  if (n == 0) return;
  const std::size_t count = std::size_t(n);
  if (aligned16(out) && aligned16(gate) && aligned16(up)) {
    swiglu_vec4_kernel<<<grid_for(count / 4), kThreads, 0, stream>>>(out, gate, up, count);
    WB_CHECK_LAUNCH("swiglu_vec4_kernel");
  } else {
    swiglu_scalar_kernel<<<grid_for(count), kThreads, 0, stream>>>(out, gate, up, count);
    WB_CHECK_LAUNCH("swiglu_scalar_kernel");
  }
}

}  // namespace ch08
