// Known wrong: float4 loads and stores whenever x and y are 16-byte aligned, forgetting that
// row r starts at r * cols floats: with cols % 4 != 0 the second row is already off the
// 16-byte grid. Must fail with a misaligned address on the first such shape, 5x7.
#include "common.cuh"
#include "softmax.cuh"
#include "wb/check.hpp"

#include <cstdint>

namespace ch04 {
namespace {

__global__ void softmax_vec4_kernel(const float* x, float* y, int cols) {
  const size_t offset = static_cast<size_t>(blockIdx.x) * cols;
  const float4* x4 = reinterpret_cast<const float4*>(x + offset);  // BUG: aligned only if cols % 4 == 0
  float4* y4 = reinterpret_cast<float4*>(y + offset);
  const int packs = cols / 4;
  float m = -INFINITY;
  for (int p = threadIdx.x; p < packs; p += fixture::kThreads) {
    const float4 v = x4[p];
    m = fmaxf(m, fmaxf(fmaxf(v.x, v.y), fmaxf(v.z, v.w)));
  }
  for (int c = 4 * packs + threadIdx.x; c < cols; c += fixture::kThreads) m = fmaxf(m, x[offset + c]);
  m = fixture::block_max(m);
  float s = 0.0f;
  for (int c = threadIdx.x; c < cols; c += fixture::kThreads) s += __expf(x[offset + c] - m);
  const float inv = 1.0f / fixture::block_sum(s);
  for (int p = threadIdx.x; p < packs; p += fixture::kThreads) {
    const float4 v = x4[p];
    y4[p] = make_float4(__expf(v.x - m) * inv, __expf(v.y - m) * inv, __expf(v.z - m) * inv,
                        __expf(v.w - m) * inv);
  }
  for (int c = 4 * packs + threadIdx.x; c < cols; c += fixture::kThreads)
    y[offset + c] = __expf(x[offset + c] - m) * inv;
}

__global__ void softmax_scalar_kernel(const float* x, float* y, int cols) {
  const size_t offset = static_cast<size_t>(blockIdx.x) * cols;
  float m = -INFINITY;
  for (int c = threadIdx.x; c < cols; c += fixture::kThreads) m = fmaxf(m, x[offset + c]);
  m = fixture::block_max(m);
  float s = 0.0f;
  for (int c = threadIdx.x; c < cols; c += fixture::kThreads) s += __expf(x[offset + c] - m);
  const float inv = 1.0f / fixture::block_sum(s);
  for (int c = threadIdx.x; c < cols; c += fixture::kThreads) y[offset + c] = __expf(x[offset + c] - m) * inv;
}

bool aligned16(const void* p) { return reinterpret_cast<std::uintptr_t>(p) % 16 == 0; }

}  // namespace

void softmax_fused(const float* x, float* y, int rows, int cols, cudaStream_t stream) {
  check_softmax_args("softmax_fused", x, y, rows, cols);
  if (rows == 0) return;
  if (aligned16(x) && aligned16(y))  // BUG: and cols % 4 == 0
    softmax_vec4_kernel<<<rows, fixture::kThreads, 0, stream>>>(x, y, cols);
  else
    softmax_scalar_kernel<<<rows, fixture::kThreads, 0, stream>>>(x, y, cols);
  WB_CHECK_LAUNCH("softmax_vec4_kernel");
}

}  // namespace ch04
