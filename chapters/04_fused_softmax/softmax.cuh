#pragma once
// Chapter 04: softmax over the rows of a matrix. The API the tests call; do not edit.
//
//   y[r, c] = exp(x[r, c] - max_r) / sum_c' exp(x[r, c'] - max_r)
//
// x and y are device pointers to `rows` x `cols` row-major float matrices. Both entry points
// enqueue all their work on `stream` and return without waiting: no synchronization, no
// allocation, no host<->device copies inside.
//
// What every implementation must do (the tests check each point):
//   - any shape: 1 column, 1 row, column counts that are not a multiple of 4 or of the block
//     size, rows of 151936 columns (an LLM vocabulary); x and y may be any float pointers
//     (a view that starts mid-row is not 16-byte aligned);
//   - no finite logit may overflow, from +-1e4 up to +-FLT_MAX: subtract the row max before
//     exp, and scale only the difference ((x - max) * log2(e), never max * log2(e), which is
//     +inf above 2.36e38);
//   - an entry of -inf (a masked logit) gets probability exactly 0;
//   - a row whose entries are all -inf has no distribution to return: every output of that
//     row is NaN. This is what torch.softmax and jax.nn.softmax return, and it is what the
//     formula gives (max = -inf, x - max = -inf - (-inf) = NaN); a NaN is loud, whereas a row
//     of zeros would look like a distribution that silently fails to sum to 1.
//   - y must not overlap x.
#include <cuda_runtime.h>

#include <stdexcept>
#include <string>

namespace ch04 {

// Steps 1-3. The unfused softmax: three kernels, with the intermediates in device memory.
//   kernel 1: row_max[r] = max_c x[r, c]
//   kernel 2: y[r, c] = exp(x[r, c] - row_max[r]);  row_sum[r] = sum_c y[r, c]
//   kernel 3: y[r, c] = y[r, c] / row_sum[r]
// row_max and row_sum are device buffers of `rows` floats each, owned by the caller; their
// contents on entry are garbage (the tests fill them with NaN).
void softmax_unfused(const float* x, float* y, float* row_max, float* row_sum, int rows,
                     int cols, cudaStream_t stream);

// Step 4. The fused softmax: each row of x is read from device memory once and each row of y
// written once, in as few launches as the shape allows (one, in the reference).
void softmax_fused(const float* x, float* y, int rows, int cols, cudaStream_t stream);

// Bad arguments throw std::invalid_argument naming the function and the argument. Both
// entry points call this first; rows == 0 is an empty matrix (nothing to do).
inline void check_softmax_args(const char* function, const float* x, const float* y, int rows,
                               int cols) {
  const std::string where = std::string("ch04 ") + function + ": ";
  if (rows < 0)
    throw std::invalid_argument(where + "rows must be >= 0, got " + std::to_string(rows));
  if (cols < 1)
    throw std::invalid_argument(where + "cols must be >= 1, got " + std::to_string(cols));
  if (rows > 0 && (x == nullptr || y == nullptr))
    throw std::invalid_argument(where + "x and y must be device pointers, got a null pointer");
}

}  // namespace ch04
