// Chapter 02, reference: device buffers allocated once, grown when needed, reused. The
// kernel is chapter 01's, pasted unchanged: this chapter is about memory, not the kernel.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>

#include "preallocated.hpp"
#include "wb/check.hpp"

namespace ch02 {
namespace {

// ==== BEGIN matvec kernel (chapter 01; chapters 02 and 03 paste it unchanged) ====
// y = W x, one block per row of W. Keep the copies in solutions/01, 02 and 03 identical:
// tests/lib/test_kernel_copies.cpp compares the text between these two marker lines.
//
// A matvec reads every weight exactly once and does 2 flops per 4-byte weight: it is bound
// by memory bandwidth, so the kernel's one job is to keep enough loads in flight to cover
// DRAM latency (several hundred nanoseconds), with every load coalesced.

constexpr int kWarpSize = 32;
constexpr int kMaxThreads = 512;    // threads per block for long rows
constexpr int kLoadsPerThread = 2;  // loads each thread issues before it uses any of them

__device__ __forceinline__ float dot(float w, float x) { return w * x; }
__device__ __forceinline__ float dot(float4 w, float4 x) {
  return w.x * x.x + w.y * x.y + w.z * x.z + w.w * x.w;
}

// One thread's share of a row: elements t, t + blockDim.x, t + 2 blockDim.x, ... (neighbouring
// threads read neighbouring elements: one warp's loads are one contiguous stretch of memory).
// T is float, or float4 when the row and x start on 16-byte boundaries (a quarter of the
// load instructions for the same bytes). The main loop issues kLoadsPerThread loads of W
// before the first multiply, so their latencies overlap instead of adding up.
// W is read once: __ldcs ("cache streaming") keeps it from pushing x out of the caches;
// x is read by every block, __ldg takes it through the read-only cache.
// The indices are std::size_t: j steps up to kLoadsPerThread * stride past count before the
// loops stop, beyond the largest int when a row of single floats is nearly 2^31 long.
template <typename T>
__device__ __forceinline__ float row_partial(const T* __restrict__ w, const T* __restrict__ x,
                                             std::size_t count) {
  const std::size_t stride = blockDim.x;
  float sum = 0.0f;
  std::size_t j = threadIdx.x;
  for (; j + (kLoadsPerThread - 1) * stride < count; j += kLoadsPerThread * stride) {
    T wv[kLoadsPerThread];
#pragma unroll
    for (int u = 0; u < kLoadsPerThread; ++u) wv[u] = __ldcs(w + j + u * stride);
#pragma unroll
    for (int u = 0; u < kLoadsPerThread; ++u) sum += dot(wv[u], __ldg(x + j + u * stride));
  }
  for (; j < count; j += stride) sum += dot(__ldcs(w + j), __ldg(x + j));  // every column counts
  return sum;
}

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
  for (int offset = kWarpSize / 2; offset > 0; offset /= 2)
    v += __shfl_xor_sync(0xffffffffu, v, offset);
  return v;
}

// The sum of every thread's v, valid in thread 0. Each warp adds its 32 values with shuffles
// (no shared memory, no barrier); one shared slot per warp; one barrier; warp 0 adds the slots.
// Every thread of the block must call it (the barrier), so no thread may return early.
__device__ __forceinline__ float block_sum(float v) {
  __shared__ float warp_sums[kMaxThreads / kWarpSize];
  const int warp = threadIdx.x / kWarpSize, lane = threadIdx.x % kWarpSize;
  const int warps = blockDim.x / kWarpSize;  // blockDim.x is a multiple of 32
  v = warp_sum(v);
  if (lane == 0) warp_sums[warp] = v;
  __syncthreads();
  v = 0.0f;
  if (warp == 0) v = warp_sum(lane < warps ? warp_sums[lane] : 0.0f);
  return v;
}

// Block `blockIdx.x` computes y[row]. The grid is exactly d blocks along x (up to 2^31 - 1;
// gridDim.y would stop at 65535, fewer than a 151936-word classifier's rows), so no block is
// spare and every block writes its row. The row's offset is a size_t: row * n passes 2^31
// elements for large models.
__global__ void matvec_kernel(float* __restrict__ y, const float* __restrict__ x,
                              const float* __restrict__ W, int n, bool rows_16B_aligned) {
  const std::size_t row = blockIdx.x;
  const float* w = W + row * std::size_t(n);
  float partial;
  if (rows_16B_aligned)  // the same for every block: no divergence
    partial = row_partial(reinterpret_cast<const float4*>(w), reinterpret_cast<const float4*>(x), n / 4);
  else
    partial = row_partial(w, x, n);
  const float sum = block_sum(partial);
  if (threadIdx.x == 0) y[row] = sum;
}

inline bool aligned16(const void* p) { return reinterpret_cast<std::uintptr_t>(p) % 16 == 0; }

// Launches matvec_kernel on `stream`. float4 loads need every row and x on a 16-byte
// boundary: n % 4 == 0 and W, x aligned (a view into a bigger array may start anywhere);
// otherwise single floats, still coalesced. The block is sized to the row so that each
// thread has about kLoadsPerThread loads: for n = 4096, 512 threads x 2 float4 = the whole
// row in flight at once; a 768-float row gets 96 threads instead of leaving most of 512 idle.
inline void enqueue_matvec(float* y, const float* x, const float* W, int n, int d,
                           cudaStream_t stream) {
  const bool rows_16B_aligned = n % 4 == 0 && aligned16(W) && aligned16(x);
  const int loads = rows_16B_aligned ? n / 4 : n;
  // ceil(loads / 64) without computing loads + 63, which overflows an int when n is near 2^31.
  const int warps = (loads - 1) / (kLoadsPerThread * kWarpSize) + 1;
  const int threads = kWarpSize * std::min(warps, kMaxThreads / kWarpSize);
  matvec_kernel<<<d, threads, 0, stream>>>(y, x, W, n, rows_16B_aligned);
  WB_CHECK_LAUNCH("matvec_kernel");
}
// ==== END matvec kernel ====

}  // namespace

void launch_matvec(float* y, const float* x, const float* W, int n, int d, cudaStream_t stream) {
  enqueue_matvec(y, x, W, n, d, stream);
}

void PreallocatedMatvec::ensure_capacity(float** buffer, std::size_t* capacity, std::size_t count) {
  if (*capacity >= count) return;  // the common case after the first token: nothing to do
  // Too small: replace it. The old contents do not matter (every call copies its inputs).
  WB_CUDA(cudaFree(*buffer));      // cudaFree(nullptr) is a no-op
  *buffer = nullptr;
  *capacity = 0;
  WB_CUDA(cudaMalloc(buffer, count * sizeof(float)));
  *capacity = count;
}

void PreallocatedMatvec::matvec(float* out, const float* x, const float* W, int n, int d) {
  const std::size_t w_count = std::size_t(n) * std::size_t(d);
  ensure_capacity(&d_w_, &w_capacity_, w_count);
  ensure_capacity(&d_x_, &x_capacity_, std::size_t(n));
  ensure_capacity(&d_y_, &y_capacity_, std::size_t(d));
  // The weights still cross PCIe on every call: that is chapter 03's problem.
  WB_CUDA(cudaMemcpy(d_w_, W, w_count * sizeof(float), cudaMemcpyHostToDevice));
  WB_CUDA(cudaMemcpy(d_x_, x, std::size_t(n) * sizeof(float), cudaMemcpyHostToDevice));
  launch_matvec(d_y_, d_x_, d_w_, n, d, nullptr);
  WB_CUDA(cudaMemcpy(out, d_y_, std::size_t(d) * sizeof(float), cudaMemcpyDeviceToHost));
}

void PreallocatedMatvec::release() noexcept {
  // No WB_CUDA here: release() runs in a destructor, which must not throw.
  cudaFree(d_w_);
  cudaFree(d_x_);
  cudaFree(d_y_);
  d_w_ = d_x_ = d_y_ = nullptr;
  w_capacity_ = x_capacity_ = y_capacity_ = 0;
}

}  // namespace ch02
