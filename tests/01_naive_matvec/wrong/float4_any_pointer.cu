// Known-wrong chapter 01 (fixture "float4_any_pointer"): vectorizes whenever n % 4 == 0,
// trusting that W and x start on 16-byte boundaries as cudaMalloc's do. A caller's pointer
// into the middle of an array breaks it (misaligned address).
#include <cstddef>
#include <cstdint>

#include "matvec.hpp"
#include "wb/check.hpp"

namespace ch01 {
namespace {
constexpr int kThreads = 256;

// Block-wide sum through shared memory (kThreads a power of two).
__device__ float block_sum(float v) {
  __shared__ float partial[kThreads];
  partial[threadIdx.x] = v;
  __syncthreads();
  for (int s = kThreads / 2; s > 0; s /= 2) {
    if (threadIdx.x < s) partial[threadIdx.x] += partial[threadIdx.x + s];
    __syncthreads();
  }
  return partial[0];
}

__device__ float dot4(float4 a, float4 b) { return a.x * b.x + a.y * b.y + a.z * b.z + a.w * b.w; }

// float4 loads for the first 4*(n/4) columns, scalar ones for the rest of the row.
__global__ void matvec_float4(float* y, const float* x, const float* W, int n, int d) {
  const int row = blockIdx.x;
  const float* w = W + std::size_t(row) * std::size_t(n);
  const int n4 = n / 4;
  float sum = 0.0f;
  for (int j = threadIdx.x; j < n4; j += kThreads)
    sum += dot4(reinterpret_cast<const float4*>(w)[j], reinterpret_cast<const float4*>(x)[j]);
  for (int j = 4 * n4 + threadIdx.x; j < n; j += kThreads) sum += w[j] * x[j];
  sum = block_sum(sum);
  if (threadIdx.x == 0) y[row] = sum;
}

__global__ void matvec_scalar(float* y, const float* x, const float* W, int n, int d) {
  const int row = blockIdx.x;
  const float* w = W + std::size_t(row) * std::size_t(n);
  float sum = 0.0f;
  for (int j = threadIdx.x; j < n; j += kThreads) sum += w[j] * x[j];
  sum = block_sum(sum);
  if (threadIdx.x == 0) y[row] = sum;
}
}  // namespace

void launch_matvec(float* y, const float* x, const float* W, int n, int d, cudaStream_t stream) {
  if (n % 4 == 0)  // BUG: W and x themselves may be unaligned
    matvec_float4<<<d, kThreads, 0, stream>>>(y, x, W, n, d);
  else
    matvec_scalar<<<d, kThreads, 0, stream>>>(y, x, W, n, d);
  WB_CHECK_LAUNCH("matvec");
}

void matvec_naive(float* out, const float* x, const float* W, int n, int d) {
  const std::size_t w_bytes = std::size_t(n) * std::size_t(d) * sizeof(float);
  float *d_W = nullptr, *d_x = nullptr, *d_y = nullptr;
  WB_CUDA(cudaMalloc(&d_W, w_bytes));
  WB_CUDA(cudaMalloc(&d_x, std::size_t(n) * sizeof(float)));
  WB_CUDA(cudaMalloc(&d_y, std::size_t(d) * sizeof(float)));
  WB_CUDA(cudaMemcpy(d_W, W, w_bytes, cudaMemcpyHostToDevice));
  WB_CUDA(cudaMemcpy(d_x, x, std::size_t(n) * sizeof(float), cudaMemcpyHostToDevice));
  launch_matvec(d_y, d_x, d_W, n, d, nullptr);
  WB_CUDA(cudaMemcpy(out, d_y, std::size_t(d) * sizeof(float), cudaMemcpyDeviceToHost));
  WB_CUDA(cudaFree(d_W));
  WB_CUDA(cudaFree(d_x));
  WB_CUDA(cudaFree(d_y));
}

}  // namespace ch01
