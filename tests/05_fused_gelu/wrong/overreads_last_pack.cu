// Known wrong: float4 loads over ceil(n / 4) packs when x and y are aligned, storing only the
// elements below n. Every output is right and no store strays, but the last partial pack's
// load reads up to 12 bytes past the end of x: only memcheck sees it, in test_sanitize.cu.
// Must fail with "memcheck found [0-9]+ error".
#include <cstdint>

#include "gelu.cuh"
#include "wb/check.hpp"

namespace ch05 {
namespace {

__device__ float gelu(float x) {
  return 0.5f * x * (1.0f + tanhf(0.7978845608f * (x + 0.044715f * x * x * x)));
}

__global__ void gelu_vec4_whole_packs(const float* x, float* y, std::size_t n) {
  const std::size_t stride = static_cast<std::size_t>(gridDim.x) * blockDim.x;
  for (std::size_t p = static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x; p < (n + 3) / 4; p += stride) {
    const float4 v = reinterpret_cast<const float4*>(x)[p];  // BUG: the last pack may be partial
    const float r[4] = {gelu(v.x), gelu(v.y), gelu(v.z), gelu(v.w)};
    for (int j = 0; j < 4; ++j)
      if (4 * p + j < n) y[4 * p + j] = r[j];
  }
}

__global__ void gelu_scalar(const float* x, float* y, std::size_t n) {
  const std::size_t stride = static_cast<std::size_t>(gridDim.x) * blockDim.x;
  for (std::size_t i = static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride)
    y[i] = gelu(x[i]);
}

bool aligned16(const void* p) { return reinterpret_cast<std::uintptr_t>(p) % 16 == 0; }

}  // namespace

void gelu_fused(const float* x, float* y, std::size_t n, cudaStream_t stream) {
  check_gelu_args("gelu_fused", x, y, n);
  if (n == 0) return;
  if (aligned16(x) && aligned16(y))
    gelu_vec4_whole_packs<<<4096, 256, 0, stream>>>(x, y, n);
  else
    gelu_scalar<<<4096, 256, 0, stream>>>(x, y, n);
  WB_CHECK_LAUNCH("gelu_overreads_last_pack");
}

}  // namespace ch05
