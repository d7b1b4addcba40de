// Must-pass variant (ch01 "warp_rows_async"): another block shape and summation order. One
// warp per row, 8 rows per 256-thread block, scalar coalesced loads into four independent
// partial sums (added at the end). The wrapper allocates and frees with the stream-ordered
// allocator (cudaMallocAsync / cudaFreeAsync) and copies with cudaMemcpyAsync.
#include <cstddef>

#include "matvec.hpp"
#include "wb/check.hpp"

namespace ch01 {
namespace {

constexpr int kRowsPerBlock = 8;
constexpr int kUnroll = 4;

__global__ void matvec_warp_rows(float* y, const float* x, const float* W, int n, int d) {
  const std::size_t row = std::size_t(blockIdx.x) * kRowsPerBlock + threadIdx.x / 32;
  if (row >= std::size_t(d)) return;
  const int lane = threadIdx.x % 32;
  const float* w = W + row * std::size_t(n);
  float partial[kUnroll] = {0.0f, 0.0f, 0.0f, 0.0f};
  unsigned j = lane;  // unsigned: j + 3 * 32 and j += 128 pass INT_MAX on a row of nearly 2^31
  for (; j + (kUnroll - 1) * 32 < unsigned(n); j += kUnroll * 32) {
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) partial[u] += w[j + u * 32] * x[j + u * 32];
  }
  for (; j < unsigned(n); j += 32) partial[0] += w[j] * x[j];
  float sum = (partial[0] + partial[1]) + (partial[2] + partial[3]);
  for (int offset = 16; offset > 0; offset /= 2) sum += __shfl_down_sync(0xffffffffu, sum, offset);
  if (lane == 0) y[row] = sum;
}

}  // namespace

void launch_matvec(float* y, const float* x, const float* W, int n, int d, cudaStream_t stream) {
  const unsigned blocks = unsigned((std::size_t(d) + kRowsPerBlock - 1) / kRowsPerBlock);
  matvec_warp_rows<<<blocks, kRowsPerBlock * 32, 0, stream>>>(y, x, W, n, d);
  WB_CHECK_LAUNCH("matvec_warp_rows");
}

void matvec_naive(float* out, const float* x, const float* W, int n, int d) {
  const std::size_t w_bytes = std::size_t(n) * std::size_t(d) * sizeof(float);
  const cudaStream_t stream = nullptr;
  float *d_W = nullptr, *d_x = nullptr, *d_y = nullptr;
  WB_CUDA(cudaMallocAsync(&d_W, w_bytes, stream));
  WB_CUDA(cudaMallocAsync(&d_x, std::size_t(n) * sizeof(float), stream));
  WB_CUDA(cudaMallocAsync(&d_y, std::size_t(d) * sizeof(float), stream));
  WB_CUDA(cudaMemcpyAsync(d_W, W, w_bytes, cudaMemcpyHostToDevice, stream));
  WB_CUDA(cudaMemcpyAsync(d_x, x, std::size_t(n) * sizeof(float), cudaMemcpyHostToDevice, stream));
  launch_matvec(d_y, d_x, d_W, n, d, stream);
  WB_CUDA(cudaMemcpyAsync(out, d_y, std::size_t(d) * sizeof(float), cudaMemcpyDeviceToHost, stream));
  WB_CUDA(cudaFreeAsync(d_W, stream));
  WB_CUDA(cudaFreeAsync(d_x, stream));
  WB_CUDA(cudaFreeAsync(d_y, stream));
  WB_CUDA(cudaStreamSynchronize(stream));
}

}  // namespace ch01
