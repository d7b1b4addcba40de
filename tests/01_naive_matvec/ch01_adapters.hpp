#pragma once
// Chapter 01 plugged into the test helpers and the model (tests and benches).
#include "matvec.hpp"
#include "wb/model/matmul.hpp"
#include "wb/model/matvec_check.hpp"

namespace ch01_build {
// "solution", "student" or "fixture" (build_info.cpp, compiled into the chapter library).
const char* name();
}  // namespace ch01_build

namespace ch01_adapters {

inline const wb::model::DeviceMatvec kLaunch = [](float* y, const float* x, const float* W, int n,
                                                  int d, cudaStream_t stream) {
  ch01::launch_matvec(y, x, W, n, d, stream);
};

inline const wb::model::HostMatvec kNaive = [](float* out, const float* x, const float* W, int n, int d) {
  ch01::matvec_naive(out, x, W, n, d);
};

// The naive wrapper as the model's matmul backend.
inline wb::model::FunctionMatmul naive_backend() { return {"01_naive", kNaive}; }

}  // namespace ch01_adapters
