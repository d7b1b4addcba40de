// Chapter 04, steps 1-3: the unfused softmax, three kernels. Read README.md first.
//
//   kernel 1  row max       row_max[r] = max over c of x[r, c]
//   kernel 2  exp and sum   y[r, c] = exp(x[r, c] - row_max[r]);
//                           row_sum[r] = sum over c of y[r, c]
//   kernel 3  normalize     y[r, c] = y[r, c] / row_sum[r]
//
// One block per row is the natural shape for kernels 1 and 2: each thread walks the row with
// a stride of blockDim.x, then the block combines the threads' results (warp shuffles, then
// shared memory). Kernel 3 is elementwise: any grid that covers every element works.
#include <cuda_runtime.h>

#include <cmath>

#include "softmax.cuh"
#include "wb/check.hpp"
#include "wb/not_implemented.hpp"

namespace ch04 {
namespace {

// TODO step 1: __global__ void row_max_kernel(const float* x, float* row_max, int cols)

// TODO step 2: __global__ void exp_sum_kernel(const float* x, const float* row_max, float* y,
//                                             float* row_sum, int cols)

// TODO step 3: __global__ void normalize_kernel(float* y, const float* row_sum, int cols)

}  // namespace

void softmax_unfused(const float* x, float* y, float* row_max, float* row_sum, int rows,
                     int cols, cudaStream_t stream) {
  wb::not_implemented(
      "ch04 softmax_unfused (steps 1-3): the row max, exp and sum, and normalize kernels");
  check_softmax_args("softmax_unfused", x, y, rows, cols);  // keep: rejects bad shapes
  if (rows == 0) return;
  // TODO: launch the three kernels on `stream`, each followed by WB_CHECK_LAUNCH("its name").
  (void)row_max, (void)row_sum, (void)stream;
}

}  // namespace ch04
