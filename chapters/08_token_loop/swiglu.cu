// Chapter 08, step 3: SwiGLU, out[i] = silu(gate[i]) * up[i]. Read README.md first; the
// contract is in token_loop.cuh.
//
// One elementwise pass (chapter 05): each thread reads gate[i] and up[i] and writes out[i].
//   - silu(g) = g * (1 / (1 + expf(-g))), as llama2.c; but g = -inf must give 0, not
//     -inf * 0 = NaN;
//   - out may be gate itself (in place): do not mark out and gate __restrict__;
//   - n == 0 is valid (nothing to launch), and n need not be a multiple of anything.
#include <cuda_runtime.h>

#include "token_loop.cuh"
#include "wb/check.hpp"
#include "wb/not_implemented.hpp"

namespace ch08 {

// TODO step 3: __global__ void swiglu_kernel(float* out, const float* gate, const float* up, int n)

void swiglu(float* out, const float* gate, const float* up, int n, cudaStream_t stream) {
  wb::not_implemented("ch08 swiglu (step 3): out = silu(gate) * up in one pass");
  check_swiglu_args(out, gate, up, n);  // keep: rejects bad arguments
  // TODO: if n > 0, launch swiglu_kernel on `stream`, then WB_CHECK_LAUNCH("swiglu_kernel").
  (void)stream;
}

}  // namespace ch08
