#pragma once
// Chapter 03 plugged into the test helpers and the model (tests and benches).
#include "persistent.hpp"
#include "wb/model/matmul.hpp"
#include "wb/model/matvec_check.hpp"

namespace ch03_build {
// "solution", "student" or "fixture" (build_info.cpp, compiled into the chapter library).
const char* name();
}  // namespace ch03_build

namespace ch03_adapters {

inline const wb::model::DeviceMatvec kLaunch = [](float* y, const float* x, const float* W, int n,
                                                  int d, cudaStream_t stream) {
  ch03::launch_matvec(y, x, W, n, d, stream);
};

// A PersistentMatvec as the model's matmul backend: the Transformer hands it the weights
// once (load), then every matmul (it must outlive the backend).
inline wb::model::FunctionMatmul persistent_backend(ch03::PersistentMatvec& p) {
  return {"03_persistent",
          [&p](float* out, const float* x, const float* W, int n, int d) { p.matvec(out, x, W, n, d); },
          [&p](std::span<const float> weights) { p.load(weights.data(), weights.size()); }};
}

}  // namespace ch03_adapters
