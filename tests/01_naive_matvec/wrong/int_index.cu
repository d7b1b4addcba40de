// Known-wrong chapter 01 (fixture "int_index"): the row offset row * n in int. Right for every
// matrix below 2^31 floats; past it (a 151936 x 16384 classifier) the offset overflows.
#include <cstddef>

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

__global__ void matvec_kernel(float* y, const float* x, const float* W, int n, int d) {
  const int row = blockIdx.x;
  const float* w = W + row * n;  // BUG: int * int overflows past 2^31
  float sum = 0.0f;
  for (int j = threadIdx.x; j < n; j += kThreads) sum += w[j] * x[j];
  sum = block_sum(sum);
  if (threadIdx.x == 0) y[row] = sum;
}
}  // namespace

void launch_matvec(float* y, const float* x, const float* W, int n, int d, cudaStream_t stream) {
  matvec_kernel<<<d, kThreads, 0, stream>>>(y, x, W, n, d);
  WB_CHECK_LAUNCH("matvec_kernel");
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
