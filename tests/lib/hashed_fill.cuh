#pragma once
// Inputs of gigabytes made on the device: x[i] uniform in [lo, hi) from a hash of (seed, i)
// (splitmix64's finalizer), so a test of a 2^31-element matrix needs no host copy of it, and a
// seed gives the same values on every run. A test reads back the rows it checks.
#include <cuda_runtime.h>

#include <cstddef>

namespace wb::testing {
namespace {  // a kernel of each test binary's own

__global__ void fill_hashed_uniform(float* x, std::size_t count, unsigned long long seed, float lo, float hi) {
  for (std::size_t i = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x; i < count;
       i += static_cast<std::size_t>(gridDim.x) * blockDim.x) {
    unsigned long long h = seed + i * 0x9E3779B97F4A7C15ull;
    h = (h ^ (h >> 30)) * 0xBF58476D1CE4E5B9ull;
    h = (h ^ (h >> 27)) * 0x94D049BB133111EBull;
    h ^= h >> 31;
    x[i] = lo + static_cast<float>(h >> 40) * ((hi - lo) / 16777216.0f);  // 24 random bits
  }
}

}  // namespace
}  // namespace wb::testing
