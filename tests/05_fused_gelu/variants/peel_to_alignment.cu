// Must-pass variant: when x and y share their misalignment (x + 1 and y + 1, say), peel the
// first elements one by one until both are 16-byte aligned, take float4s from there, and do
// the last n % 4 one by one; when they do not (x aligned, y + 2), scalars throughout. One
// float4 per thread over a grid that covers the array, striding past the grid's cap.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

#include "gelu.cuh"
#include "wb/check.hpp"

namespace ch05 {
namespace {

constexpr int kThreads = 256;
constexpr std::size_t kMaxBlocks = std::size_t(1) << 20;

__device__ __forceinline__ float gelu(float x) {
  return 0.5f * x * (1.0f + tanhf(0.7978845608028654f * (x + 0.044715f * x * x * x)));
}

// head: elements before the first 16-byte boundary (done by block 0); then n4 float4s; then
// the tail after them (block 0 again).
__global__ void __launch_bounds__(kThreads)
    gelu_peeled(const float* __restrict__ x, float* __restrict__ y, std::size_t n, int head) {
  const std::size_t n4 = (n - head) / 4;
  const float4* x4 = reinterpret_cast<const float4*>(x + head);
  float4* y4 = reinterpret_cast<float4*>(y + head);
  const std::size_t stride = static_cast<std::size_t>(gridDim.x) * kThreads;
  for (std::size_t i = static_cast<std::size_t>(blockIdx.x) * kThreads + threadIdx.x; i < n4; i += stride) {
    const float4 v = x4[i];
    y4[i] = make_float4(gelu(v.x), gelu(v.y), gelu(v.z), gelu(v.w));
  }
  if (blockIdx.x != 0) return;
  if (threadIdx.x < head) y[threadIdx.x] = gelu(x[threadIdx.x]);
  const std::size_t tail = head + 4 * n4 + threadIdx.x;
  if (tail < n) y[tail] = gelu(x[tail]);
}

__global__ void __launch_bounds__(kThreads)
    gelu_scalar(const float* __restrict__ x, float* __restrict__ y, std::size_t n) {
  const std::size_t stride = static_cast<std::size_t>(gridDim.x) * kThreads;
  for (std::size_t i = static_cast<std::size_t>(blockIdx.x) * kThreads + threadIdx.x; i < n; i += stride)
    y[i] = gelu(x[i]);
}

unsigned grid_for(std::size_t items) {
  return static_cast<unsigned>(std::clamp<std::size_t>((items + kThreads - 1) / kThreads, 1, kMaxBlocks));
}

}  // namespace

void gelu_fused(const float* x, float* y, std::size_t n, cudaStream_t stream) {
  check_gelu_args("gelu_fused", x, y, n);
  if (n == 0) return;
  const auto xa = reinterpret_cast<std::uintptr_t>(x), ya = reinterpret_cast<std::uintptr_t>(y);
  if (xa % 16 == ya % 16 && xa % 4 == 0) {
    const int head = static_cast<int>(std::min<std::size_t>((16 - xa % 16) % 16 / 4, n));
    gelu_peeled<<<grid_for((n - head) / 4), kThreads, 0, stream>>>(x, y, n, head);
  } else {
    gelu_scalar<<<grid_for(n), kThreads, 0, stream>>>(x, y, n);
  }
  WB_CHECK_LAUNCH("gelu_peeled");
}

}  // namespace ch05
