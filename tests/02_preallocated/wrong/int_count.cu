// Known-wrong chapter 02 (fixture "int_count"): counts W's floats as n * d in int: right for
// every matrix below 2^31 floats, garbage past it (a 151936 x 16384 classifier).
#include <cstddef>

#include "../../01_naive_matvec/fixture_kernel.cuh"  // a plain correct kernel: the mistake here is elsewhere

#include "preallocated.hpp"
#include "wb/check.hpp"

namespace ch02 {

void launch_matvec(float* y, const float* x, const float* W, int n, int d, cudaStream_t stream) {
  fixture_kernel::launch(y, x, W, n, d, stream);
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
  const std::size_t w_count = n * d;  // BUG: n * d overflows int first
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
