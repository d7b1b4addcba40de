// Chapter 05, steps 1-2: GELU as a framework composes it, one kernel per elementary op.
// Read README.md first.
//
//   gelu(x) = 0.5 * x * (1 + tanh(sqrt(2/pi) * (x + 0.044715 * x^3)))
//
// Write it the way `0.5 * x * (1 + torch.tanh(...))` runs: each op is a kernel that reads its
// operand(s) from device memory and writes its result to a temporary, the next op reads that
// temporary back. Two temporaries are enough if you alternate between them:
//   t0 = x^3;  t1 = 0.044715 * t0;  t0 = x + t1;  t1 = sqrt(2/pi) * t0;
//   t0 = tanh(t1);  t1 = 1 + t0;  t0 = 0.5 * x;  y = t0 * t1
// Two generic kernels cover all eight: out[i] = op(a[i]) and out[i] = op(a[i], b[i]), with
// `op` a small struct with a __device__ operator() (a template parameter, so it inlines).
#include <cuda_runtime.h>

#include <cmath>

#include "gelu.cuh"
#include "wb/check.hpp"
#include "wb/not_implemented.hpp"

namespace ch05 {
namespace {

// TODO step 1: template <typename Op> __global__ void unary_kernel(const float* a, float* out,
//                                                                  std::size_t n, Op op)
// TODO step 1: template <typename Op> __global__ void binary_kernel(const float* a,
//                                                 const float* b, float* out, std::size_t n, Op op)

}  // namespace

void gelu_unfused(const float* x, float* y, float* scratch, std::size_t n, cudaStream_t stream) {
  wb::not_implemented("ch05 gelu_unfused (steps 1-2): one kernel per elementary op");
  check_gelu_args("gelu_unfused", x, y, n);  // keep: rejects bad arguments
  if (n == 0) return;
  // TODO step 2: t0 = scratch, t1 = scratch + n; launch the eight ops on `stream`, each
  // followed by WB_CHECK_LAUNCH("its name").
  (void)scratch, (void)stream;
}

}  // namespace ch05
