// Chapter 01, reference: a matvec kernel that reads W at close to the GPU's copy bandwidth
// (matvec_kernels.cuh), and the naive wrapper that throws that speed away on every call.
#include <cstddef>

#include "matvec.hpp"
#include "matvec_kernels.cuh"
#include "wb/check.hpp"

namespace ch01 {

void launch_matvec(float* y, const float* x, const float* W, int n, int d, cudaStream_t stream) {
  matvec_reference::launch(y, x, W, n, d, stream);
}

void matvec_naive(float* out, const float* x, const float* W, int n, int d) {
  const std::size_t w_bytes = std::size_t(n) * std::size_t(d) * sizeof(float);
  const std::size_t x_bytes = std::size_t(n) * sizeof(float);
  const std::size_t y_bytes = std::size_t(d) * sizeof(float);
  float *d_W = nullptr, *d_x = nullptr, *d_y = nullptr;
  WB_CUDA(cudaMalloc(&d_W, w_bytes));
  WB_CUDA(cudaMalloc(&d_x, x_bytes));
  WB_CUDA(cudaMalloc(&d_y, y_bytes));
  // cudaMemcpy from pageable host memory: the driver stages it through a pinned buffer and
  // returns when the copy is done. Every call moves all of W over PCIe again.
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
