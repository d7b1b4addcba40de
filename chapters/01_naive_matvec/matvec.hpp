#pragma once
// Chapter 01: the naive GPU matmul. (API header: shared by the starter and the reference;
// do not edit it, the grader uses its own copy.)
//
// A llama2 forward pass spends almost all of its arithmetic in matrix-vector products
// out = W x, where W is one of the model's weight matrices. This chapter moves that
// product to the GPU in the most direct way, and measures what that costs.
#include <cuda_runtime.h>

namespace ch01 {

// y = W x on the device.
//   W: d rows of n floats, row-major (row i starts at W + i * n), device memory
//   x: n floats, device memory;  y: d floats, device memory (every element is written)
// Works for any n >= 1 and d >= 1, including 1 and sizes that are not multiples of your
// block size. Enqueue the work on `stream` and return; do not synchronize.
void launch_matvec(float* y, const float* x, const float* W, int n, int d, cudaStream_t stream);

// out = W x with W, x and out in HOST memory, the naive way. On every call:
//   1. allocate device buffers for W, x and out   (cudaMalloc)
//   2. copy W and x to the device                 (cudaMemcpy host-to-device)
//   3. launch_matvec
//   4. copy out back to the host                  (cudaMemcpy device-to-host)
//   5. free the three buffers                     (cudaFree)
// When it returns, out holds the result.
void matvec_naive(float* out, const float* x, const float* W, int n, int d);

}  // namespace ch01
