// Known-wrong chapter 03 (fixture "cache_x_by_pointer"), a cheat: skips x's upload when the
// caller passes the same x pointer and size as on the previous call ("the activations are
// already there"). The caller writes a new activation behind the same pointer every token.
#include <cstddef>

#include "../../01_naive_matvec/fixture_kernel.cuh"  // a plain correct kernel: the mistake here is elsewhere

#include "persistent.hpp"
#include "wb/check.hpp"

namespace ch03 {
namespace {
// Grow-only device buffer for the activations (as in chapter 02).
void ensure_capacity(float** buffer, std::size_t* capacity, std::size_t count) {
  if (*capacity >= count) return;
  WB_CUDA(cudaFree(*buffer));
  *buffer = nullptr;
  *capacity = 0;
  WB_CUDA(cudaMalloc(buffer, count * sizeof(float)));
  *capacity = count;
}
}  // namespace

void launch_matvec(float* y, const float* x, const float* W, int n, int d, cudaStream_t stream) {
  fixture_kernel::launch(y, x, W, n, d, stream);
}

void PersistentMatvec::load(const float* host_weights, std::size_t count) {
  WB_CUDA(cudaFree(d_weights_));
  d_weights_ = nullptr;
  host_weights_ = nullptr;
  weight_count_ = 0;
  // One allocation and one copy for the whole model (440 MB for the 110M model): paid
  // once, at start-up, instead of on every token.
  WB_CUDA(cudaMalloc(&d_weights_, count * sizeof(float)));
  WB_CUDA(cudaMemcpy(d_weights_, host_weights, count * sizeof(float), cudaMemcpyHostToDevice));
  host_weights_ = host_weights;
  weight_count_ = count;
}

namespace {
const float* last_x = nullptr;  // BUG: a host pointer is not a value
int last_n = 0;
}  // namespace

void PersistentMatvec::matvec(float* out, const float* x, const float* W, int n, int d) {
  // The model hands us host pointers into its weight array; the device copy has the same
  // layout, so the same offset finds the same matrix there.
  const std::size_t offset = offset_inside(W, std::size_t(n) * std::size_t(d), host_weights_, weight_count_);
  float* d_W = d_weights_ + offset;
  ensure_capacity(&d_x_, &x_capacity_, std::size_t(n));
  ensure_capacity(&d_y_, &y_capacity_, std::size_t(d));
  if (x != last_x || n != last_n) {
    WB_CUDA(cudaMemcpy(d_x_, x, std::size_t(n) * sizeof(float), cudaMemcpyHostToDevice));  // n floats
    last_x = x;
    last_n = n;
  }
  launch_matvec(d_y_, d_x_, d_W, n, d, nullptr);
  WB_CUDA(cudaMemcpy(out, d_y_, std::size_t(d) * sizeof(float), cudaMemcpyDeviceToHost));  // d floats
}

void PersistentMatvec::release() noexcept {
  // No WB_CUDA here: release() runs in a destructor, which must not throw.
  cudaFree(d_weights_);
  cudaFree(d_x_);
  cudaFree(d_y_);
  d_weights_ = d_x_ = d_y_ = nullptr;
  x_capacity_ = y_capacity_ = 0;
  host_weights_ = nullptr;
  weight_count_ = 0;
}

}  // namespace ch03
