// Known wrong: one element per thread with an int index, blockIdx.x * blockDim.x + threadIdx.x.
// The grid covers n, but past 2^31 threads the index wraps around to a negative int, which
// converts to a huge size_t and fails i < n: elements from 2^31 on are never written. (Aligned
// pointers take a float4 kernel whose index counts packs and stays below 2^31.) Must fail the
// 2^31 case on unaligned views with the first unwritten element "y[2^31 + 0]".
#include <cstdint>

#include "gelu.cuh"
#include "wb/check.hpp"

namespace ch05 {
namespace {

__device__ float gelu(float x) {
  return 0.5f * x * (1.0f + tanhf(0.7978845608f * (x + 0.044715f * x * x * x)));
}

__global__ void gelu_vec4(const float* x, float* y, std::size_t n) {
  const std::size_t i = static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n / 4) {
    const float4 v = reinterpret_cast<const float4*>(x)[i];
    reinterpret_cast<float4*>(y)[i] = make_float4(gelu(v.x), gelu(v.y), gelu(v.z), gelu(v.w));
  }
  const std::size_t tail = n / 4 * 4 + threadIdx.x;
  if (blockIdx.x == 0 && tail < n) y[tail] = gelu(x[tail]);
}

__global__ void gelu_scalar_int(const float* x, float* y, std::size_t n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;  // BUG: wraps past 2^31
  if (i < n) y[i] = gelu(x[i]);
}

bool aligned16(const void* p) { return reinterpret_cast<std::uintptr_t>(p) % 16 == 0; }

}  // namespace

void gelu_fused(const float* x, float* y, std::size_t n, cudaStream_t stream) {
  check_gelu_args("gelu_fused", x, y, n);
  if (n == 0) return;
  if (aligned16(x) && aligned16(y))
    gelu_vec4<<<static_cast<unsigned>((n / 4 + 255) / 256 + 1), 256, 0, stream>>>(x, y, n);
  else
    gelu_scalar_int<<<static_cast<unsigned>((n + 255) / 256), 256, 0, stream>>>(x, y, n);
  WB_CHECK_LAUNCH("gelu_int_index");
}

}  // namespace ch05
