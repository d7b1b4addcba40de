// Known-wrong chapter 01 (fixture "int_bytes"): the wrapper's byte count n * d * sizeof(float)
// multiplies n * d in int first: right for every matrix below 2^31 floats, garbage past it.
#include <cstddef>

#include "fixture_kernel.cuh"  // a plain correct kernel: the mistake here is elsewhere
#include "matvec.hpp"
#include "wb/check.hpp"

namespace ch01 {

void launch_matvec(float* y, const float* x, const float* W, int n, int d, cudaStream_t stream) {
  fixture_kernel::launch(y, x, W, n, d, stream);
}

void matvec_naive(float* out, const float* x, const float* W, int n, int d) {
  const std::size_t w_bytes = n * d * sizeof(float);  // BUG: n * d overflows int first
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
