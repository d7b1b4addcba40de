// Must-pass variant (ch02 "single_slab"): one device allocation holds W, x and y (x and y
// start right after W's capacity, so they are often not 16-byte aligned: the kernel copes).
// It grows as a whole when any part is too small, keeping each part's capacity.
#include <algorithm>
#include <cstddef>

#include "../../01_naive_matvec/fixture_kernel.cuh"  // a plain correct kernel (scalar loads)

#include "preallocated.hpp"
#include "wb/check.hpp"

namespace ch02 {

void launch_matvec(float* y, const float* x, const float* W, int n, int d, cudaStream_t stream) {
  fixture_kernel::launch(y, x, W, n, d, stream);
}

void PreallocatedMatvec::matvec(float* out, const float* x, const float* W, int n, int d) {
  const std::size_t w_count = std::size_t(n) * std::size_t(d);
  if (w_capacity_ < w_count || x_capacity_ < std::size_t(n) || y_capacity_ < std::size_t(d)) {
    const std::size_t wc = std::max(w_capacity_, w_count), xc = std::max(x_capacity_, std::size_t(n)),
                      yc = std::max(y_capacity_, std::size_t(d));
    release();
    float* slab = nullptr;
    WB_CUDA(cudaMalloc(&slab, (wc + xc + yc) * sizeof(float)));
    d_w_ = slab;
    d_x_ = slab + wc;
    d_y_ = slab + wc + xc;
    w_capacity_ = wc;
    x_capacity_ = xc;
    y_capacity_ = yc;
  }
  WB_CUDA(cudaMemcpy(d_w_, W, w_count * sizeof(float), cudaMemcpyHostToDevice));
  WB_CUDA(cudaMemcpy(d_x_, x, std::size_t(n) * sizeof(float), cudaMemcpyHostToDevice));
  launch_matvec(d_y_, d_x_, d_w_, n, d, nullptr);
  WB_CUDA(cudaMemcpy(out, d_y_, std::size_t(d) * sizeof(float), cudaMemcpyDeviceToHost));
}

void PreallocatedMatvec::release() noexcept {
  cudaFree(d_w_);  // the slab; x and y live inside it
  d_w_ = d_x_ = d_y_ = nullptr;
  w_capacity_ = x_capacity_ = y_capacity_ = 0;
}

}  // namespace ch02
