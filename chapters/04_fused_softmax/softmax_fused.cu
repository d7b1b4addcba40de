// Chapter 04, step 4: the fused softmax, one kernel. Read README.md first.
//
// One pass over each row: load it once, keep it on chip (registers or shared memory) while
// you take its max and its sum of exp(x - max), then write y once. The matrix crosses device
// memory twice (x in, y out) instead of five times.
//
// Start with one block per row, the row in registers (it is what the timing tests grade, at
// 4096x4096). Rows longer than your largest register array (the tests go up to 1000000
// columns) still need a correct answer: read such a row twice, once for its max and its sum
// of exponentials (keep a running max per thread and rescale the running sum when it grows:
// sum * exp(old_max - new_max), the "online softmax"), once to write y. Then, if you want
// to go further (README, step 5): a warp per row for short rows, 16-byte loads, and
// splitting each of a few very long rows across many blocks.
#include <cuda_runtime.h>

#include <cmath>

#include "softmax.cuh"
#include "wb/check.hpp"
#include "wb/not_implemented.hpp"

namespace ch04 {
namespace {

// TODO step 4: __global__ void softmax_fused_kernel(const float* x, float* y, int cols)

}  // namespace

void softmax_fused(const float* x, float* y, int rows, int cols, cudaStream_t stream) {
  wb::not_implemented("ch04 softmax_fused (step 4): one kernel, one read and one write per row");
  check_softmax_args("softmax_fused", x, y, rows, cols);  // keep: rejects bad shapes
  if (rows == 0) return;
  // TODO: launch your kernel on `stream`, then WB_CHECK_LAUNCH("softmax_fused_kernel").
  (void)stream;
}

}  // namespace ch04
