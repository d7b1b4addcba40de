#pragma once
// Chapter 02 plugged into the test helpers and the model (tests and benches).
#include "preallocated.hpp"
#include "wb/check.hpp"
#include "wb/model/matmul.hpp"
#include "wb/model/matvec_check.hpp"

namespace ch02_build {
// "solution", "student" or "fixture" (build_info.cpp, compiled into the chapter library).
const char* name();
}  // namespace ch02_build

namespace ch02_adapters {

inline const wb::model::DeviceMatvec kLaunch = [](float* y, const float* x, const float* W, int n,
                                                  int d, cudaStream_t stream) {
  ch02::launch_matvec(y, x, W, n, d, stream);
};

// A PreallocatedMatvec as the model's matmul backend (it must outlive the backend).
inline wb::model::FunctionMatmul preallocated_backend(ch02::PreallocatedMatvec& p) {
  return {"02_preallocated", [&p](float* out, const float* x, const float* W, int n, int d) {
            p.matvec(out, x, W, n, d);
          }};
}

// Chapter 01's protocol around chapter 02's kernel: the baseline the timing test beats.
inline void allocate_every_call(float* out, const float* x, const float* W, int n, int d) {
  const std::size_t w_bytes = std::size_t(n) * std::size_t(d) * sizeof(float);
  float *d_W = nullptr, *d_x = nullptr, *d_y = nullptr;
  WB_CUDA(cudaMalloc(&d_W, w_bytes));
  WB_CUDA(cudaMalloc(&d_x, std::size_t(n) * sizeof(float)));
  WB_CUDA(cudaMalloc(&d_y, std::size_t(d) * sizeof(float)));
  WB_CUDA(cudaMemcpy(d_W, W, w_bytes, cudaMemcpyHostToDevice));
  WB_CUDA(cudaMemcpy(d_x, x, std::size_t(n) * sizeof(float), cudaMemcpyHostToDevice));
  ch02::launch_matvec(d_y, d_x, d_W, n, d, nullptr);
  WB_CUDA(cudaMemcpy(out, d_y, std::size_t(d) * sizeof(float), cudaMemcpyDeviceToHost));
  WB_CUDA(cudaFree(d_W));
  WB_CUDA(cudaFree(d_x));
  WB_CUDA(cudaFree(d_y));
}

}  // namespace ch02_adapters
