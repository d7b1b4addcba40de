// Chapter 01: the naive GPU matmul. Your file: write the kernel, its launcher and the
// naive wrapper. README.md walks through it; `./workbook check 01` tests it.
#include <cstddef>

#include "matvec.hpp"
#include "wb/check.hpp"
#include "wb/not_implemented.hpp"

namespace ch01 {
namespace {

// TODO(step 1): the kernel. One block computes one output row:
//   y[row] = sum over j of W[row * n + j] * x[j]
// - each thread adds up a strided part of the row: j = threadIdx.x, threadIdx.x + blockDim.x, ...
//   (neighbouring threads read neighbouring floats: coalesced loads);
// - the block then adds its threads' partial sums (shared memory, or warp shuffles
//   __shfl_down_sync and one shared slot per warp) and one thread writes y[row].
// Make it correct for ANY n and d: n = 1, n = 13, n = 4097 (not a multiple of your block),
// d beyond 65535 (one block per row along grid.x: gridDim.y stops at 65535), and W larger
// than 2^31 floats (index it with size_t: row * n overflows an int).
//
// __global__ void matvec_kernel(float* y, const float* x, const float* W, int n, int d) { ... }
//
// TODO(step 3): make it fast (the timing tests grade it; README step 3): keep several
// independent loads in flight per thread (an unrolled loop that loads into a small array
// before it multiplies), 16-byte float4 loads when every row and x start on a 16-byte
// boundary (n % 4 == 0 and aligned pointers; single floats otherwise: a view may start
// anywhere), and a block sized to the row.

}  // namespace

void launch_matvec(float* y, const float* x, const float* W, int n, int d, cudaStream_t stream) {
  // TODO(step 1): launch one block per row on `stream`, then check the launch:
  //   matvec_kernel<<<d, threads, shared_bytes, stream>>>(y, x, W, n, d);
  //   WB_CHECK_LAUNCH("matvec_kernel");
  (void)y, (void)x, (void)W, (void)n, (void)d, (void)stream;
  wb::not_implemented("ch01::launch_matvec (step 1: the matvec kernel)");
}

void matvec_naive(float* out, const float* x, const float* W, int n, int d) {
  // TODO(step 2): the naive wrapper, every call: cudaMalloc W, x and y; cudaMemcpy W and x
  // host-to-device; launch_matvec(..., nullptr); cudaMemcpy y device-to-host into out;
  // cudaFree all three. Wrap every call in WB_CUDA(...) so an error says where it happened.
  (void)out, (void)x, (void)W, (void)n, (void)d;
  wb::not_implemented("ch01::matvec_naive (step 2: allocate, copy, launch, copy back, free)");
}

}  // namespace ch01
