// Known-wrong chapter 01 (fixture "pinned_leak"): stages W through pinned host memory "for a
// faster copy", allocated on every call and never freed: each call pins another d*n floats
// of host memory until the machine runs out.
#include <cstddef>
#include <cstring>

#include "fixture_kernel.cuh"  // a plain correct kernel: the mistake here is elsewhere
#include "matvec.hpp"
#include "wb/check.hpp"

namespace ch01 {

void launch_matvec(float* y, const float* x, const float* W, int n, int d, cudaStream_t stream) {
  fixture_kernel::launch(y, x, W, n, d, stream);
}

void matvec_naive(float* out, const float* x, const float* W, int n, int d) {
  const std::size_t w_bytes = std::size_t(n) * std::size_t(d) * sizeof(float);
  float* staging = nullptr;
  WB_CUDA(cudaMallocHost(&staging, w_bytes));  // BUG: never cudaFreeHost'd
  std::memcpy(staging, W, w_bytes);
  float *d_W = nullptr, *d_x = nullptr, *d_y = nullptr;
  WB_CUDA(cudaMalloc(&d_W, w_bytes));
  WB_CUDA(cudaMalloc(&d_x, std::size_t(n) * sizeof(float)));
  WB_CUDA(cudaMalloc(&d_y, std::size_t(d) * sizeof(float)));
  WB_CUDA(cudaMemcpy(d_W, staging, w_bytes, cudaMemcpyHostToDevice));
  WB_CUDA(cudaMemcpy(d_x, x, std::size_t(n) * sizeof(float), cudaMemcpyHostToDevice));
  launch_matvec(d_y, d_x, d_W, n, d, nullptr);
  WB_CUDA(cudaMemcpy(out, d_y, std::size_t(d) * sizeof(float), cudaMemcpyDeviceToHost));
  WB_CUDA(cudaFree(d_W));
  WB_CUDA(cudaFree(d_x));
  WB_CUDA(cudaFree(d_y));
}

}  // namespace ch01
