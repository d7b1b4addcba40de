// Given: the uniform numbers of rule 4 for the steps that draw on the CPU (steps 1 to 3).
// One thread per row computes draw_uniform(seed, step, row), the very function a GPU sampler
// calls in its kernel, so every step draws with the same numbers.
#include <cuda_runtime.h>

#include <cstdint>

#include "sampler.cuh"
#include "wb/check.hpp"

namespace ch07 {

namespace {

__global__ void fill_draw_uniforms_kernel(float* uniforms, int rows, std::uint64_t seed,
                                          std::uint64_t step) {
  const int row = blockIdx.x * blockDim.x + threadIdx.x;
  if (row < rows) uniforms[row] = draw_uniform(seed, step, row);
}

}  // namespace

void fill_draw_uniforms(float* uniforms, int rows, std::uint64_t seed, std::uint64_t step,
                        cudaStream_t stream) {
  if (rows <= 0) return;
  constexpr int kThreads = 256;
  fill_draw_uniforms_kernel<<<(rows + kThreads - 1) / kThreads, kThreads, 0, stream>>>(
      uniforms, rows, seed, step);
  WB_CHECK_LAUNCH("fill_draw_uniforms_kernel");
}

}  // namespace ch07
