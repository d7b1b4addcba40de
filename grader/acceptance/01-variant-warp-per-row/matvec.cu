// Chapter 01, reference: the matvec kernel of steps 1 and 3 (it reads W at close to the
// GPU's copy bandwidth), and the naive wrapper of step 2 (which throws that speed away on
// every call).
#include <cuda_runtime.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>

#include "matvec.hpp"
#include "wb/check.hpp"

namespace ch01 {
namespace {

// ==== BEGIN matvec kernel (chapter 01; chapters 02 and 03 paste it unchanged) ====
// y = W x, one WARP per row, kWarpsPerBlock rows per block (the README's other design).
// No shared memory and no block barrier: each warp adds its 32 partial sums with shuffles,
// and a warp whose row is past the end of y leaves as a whole (every lane of a warp that
// stays takes part in the shuffles). Rows are indexed with size_t.

constexpr int kWarpSize = 32;
constexpr int kWarpsPerBlock = 8;
constexpr int kUnroll = 4;  // independent loads in flight per lane

__device__ __forceinline__ float dot(float w, float x) { return w * x; }
__device__ __forceinline__ float dot(float4 w, float4 x) {
  return w.x * x.x + w.y * x.y + w.z * x.z + w.w * x.w;
}

// Lane `lane` adds elements lane, lane + 32, lane + 64, ... of the row (count elements of T).
template <typename T>
__device__ __forceinline__ float lane_partial(const T* __restrict__ w, const T* __restrict__ x,
                                              int count, int lane) {
  float sum = 0.0f;
  unsigned j = lane;  // unsigned: j + 3 * 32 and j += 128 pass INT_MAX on a row of nearly 2^31
  for (; j + (kUnroll - 1) * kWarpSize < unsigned(count); j += kUnroll * kWarpSize) {
    T wv[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) wv[u] = __ldcs(w + j + u * kWarpSize);
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) sum += dot(wv[u], __ldg(x + j + u * kWarpSize));
  }
  for (; j < unsigned(count); j += kWarpSize) sum += dot(__ldcs(w + j), __ldg(x + j));
  return sum;
}

__global__ void __launch_bounds__(kWarpsPerBlock * kWarpSize)
matvec_warp_kernel(float* __restrict__ y, const float* __restrict__ x, const float* __restrict__ W,
                   int n, int d, bool rows_16B_aligned) {
  const int lane = threadIdx.x % kWarpSize;
  const std::size_t row = std::size_t(blockIdx.x) * kWarpsPerBlock + threadIdx.x / kWarpSize;
  if (row >= std::size_t(d)) return;  // the whole warp: row is the same for all its lanes
  const float* w = W + row * std::size_t(n);
  float sum = rows_16B_aligned
                  ? lane_partial(reinterpret_cast<const float4*>(w), reinterpret_cast<const float4*>(x), n / 4, lane)
                  : lane_partial(w, x, n, lane);
#pragma unroll
  for (int offset = kWarpSize / 2; offset > 0; offset /= 2)
    sum += __shfl_down_sync(0xffffffffu, sum, offset);
  if (lane == 0) y[row] = sum;
}

inline bool aligned16(const void* p) { return reinterpret_cast<std::uintptr_t>(p) % 16 == 0; }

inline void enqueue_matvec(float* y, const float* x, const float* W, int n, int d,
                           cudaStream_t stream) {
  const bool rows_16B_aligned = n % 4 == 0 && aligned16(W) && aligned16(x);
  const unsigned blocks = unsigned((std::size_t(d) + kWarpsPerBlock - 1) / kWarpsPerBlock);
  matvec_warp_kernel<<<blocks, kWarpsPerBlock * kWarpSize, 0, stream>>>(y, x, W, n, d, rows_16B_aligned);
  WB_CHECK_LAUNCH("matvec_warp_kernel");
}
// ==== END matvec kernel ====

}  // namespace

void launch_matvec(float* y, const float* x, const float* W, int n, int d, cudaStream_t stream) {
  enqueue_matvec(y, x, W, n, d, stream);
}

void matvec_naive(float* out, const float* x, const float* W, int n, int d) {
  const std::size_t w_bytes = std::size_t(n) * std::size_t(d) * sizeof(float);
  const std::size_t x_bytes = std::size_t(n) * sizeof(float);
  const std::size_t y_bytes = std::size_t(d) * sizeof(float);
  float *d_W = nullptr, *d_x = nullptr, *d_y = nullptr;
  WB_CUDA(cudaMalloc(&d_W, w_bytes));
  WB_CUDA(cudaMalloc(&d_x, x_bytes));
  WB_CUDA(cudaMalloc(&d_y, y_bytes));
  // cudaMemcpy from pageable host memory: the driver copies it into a pinned staging buffer
  // on the CPU and DMAs it from there, returning once the last of it is staged (later work
  // on the stream waits for the DMA). Every call moves all of W over PCIe again.
  WB_CUDA(cudaMemcpy(d_W, W, w_bytes, cudaMemcpyHostToDevice));
  WB_CUDA(cudaMemcpy(d_x, x, x_bytes, cudaMemcpyHostToDevice));
  launch_matvec(d_y, d_x, d_W, n, d, nullptr);
  WB_CUDA(cudaMemcpy(out, d_y, y_bytes, cudaMemcpyDeviceToHost));  // waits for the kernel
  // cudaFree of memory a kernel may still use waits for the device: another synchronization.
  WB_CUDA(cudaFree(d_W));
  WB_CUDA(cudaFree(d_x));
  WB_CUDA(cudaFree(d_y));
}

}  // namespace ch01
