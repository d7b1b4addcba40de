// Known-wrong chapter 01 (fixture "cache_by_pointer"), a cheat: keeps the device copy of the
// last W it saw and skips the upload when the next call passes the same host pointer and
// size ("the weights never change"). Fast, right on every test that allocates fresh inputs,
// and wrong as soon as the caller writes new values behind the same pointer.
#include <cstddef>

#include "fixture_kernel.cuh"  // a plain correct kernel: the mistake here is elsewhere
#include "matvec.hpp"
#include "wb/check.hpp"

namespace ch01 {
namespace {
struct CachedW {
  const float* host = nullptr;
  std::size_t bytes = 0;
  float* device = nullptr;
};
CachedW cache;
}  // namespace

void launch_matvec(float* y, const float* x, const float* W, int n, int d, cudaStream_t stream) {
  fixture_kernel::launch(y, x, W, n, d, stream);
}

void matvec_naive(float* out, const float* x, const float* W, int n, int d) {
  const std::size_t w_bytes = std::size_t(n) * std::size_t(d) * sizeof(float);
  if (cache.host != W || cache.bytes != w_bytes) {  // BUG: a host pointer is not a value
    WB_CUDA(cudaFree(cache.device));
    WB_CUDA(cudaMalloc(&cache.device, w_bytes));
    WB_CUDA(cudaMemcpy(cache.device, W, w_bytes, cudaMemcpyHostToDevice));
    cache.host = W;
    cache.bytes = w_bytes;
  }
  float *d_x = nullptr, *d_y = nullptr;
  WB_CUDA(cudaMalloc(&d_x, std::size_t(n) * sizeof(float)));
  WB_CUDA(cudaMalloc(&d_y, std::size_t(d) * sizeof(float)));
  WB_CUDA(cudaMemcpy(d_x, x, std::size_t(n) * sizeof(float), cudaMemcpyHostToDevice));
  launch_matvec(d_y, d_x, cache.device, n, d, nullptr);
  WB_CUDA(cudaMemcpy(out, d_y, std::size_t(d) * sizeof(float), cudaMemcpyDeviceToHost));
  WB_CUDA(cudaFree(d_x));
  WB_CUDA(cudaFree(d_y));
}

}  // namespace ch01
