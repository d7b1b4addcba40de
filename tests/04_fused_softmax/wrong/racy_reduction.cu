// Known wrong: a block reduction with one shared array for the max and then the sum, and no
// barrier between the last read of the max's partials and the first write of the sum's. A
// fast warp can overwrite a partial another warp is still reading. It passes whenever the
// schedule is kind (nearly always), so only racecheck catches it, in test_sanitize.cu. Must
// fail with "racecheck found [0-9]+ hazard".
#include <cmath>

#include "softmax.cuh"
#include "wb/check.hpp"

namespace ch04 {
namespace {

constexpr int kThreads = 256;

__device__ float warp_max(float v) {
  for (int o = 16; o > 0; o /= 2) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}
__device__ float warp_sum(float v) {
  for (int o = 16; o > 0; o /= 2) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

__global__ void softmax_racy_kernel(const float* x, float* y, int cols) {
  __shared__ float partial[kThreads / 32];  // one array for both reductions
  const size_t offset = static_cast<size_t>(blockIdx.x) * cols;
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  float m = -INFINITY;
  for (int c = threadIdx.x; c < cols; c += kThreads) m = fmaxf(m, x[offset + c]);
  m = warp_max(m);
  if (lane == 0) partial[warp] = m;
  __syncthreads();
  m = warp_max(lane < kThreads / 32 ? partial[lane] : -INFINITY);
  // BUG: no __syncthreads() here: the sum's partials below overwrite partial[] while slower
  // warps may still be reading the max's.
  float s = 0.0f;
  for (int c = threadIdx.x; c < cols; c += kThreads) s += __expf(x[offset + c] - m);
  s = warp_sum(s);
  if (lane == 0) partial[warp] = s;
  __syncthreads();
  const float inv_sum = 1.0f / warp_sum(lane < kThreads / 32 ? partial[lane] : 0.0f);
  for (int c = threadIdx.x; c < cols; c += kThreads) y[offset + c] = __expf(x[offset + c] - m) * inv_sum;
}

}  // namespace

void softmax_fused(const float* x, float* y, int rows, int cols, cudaStream_t stream) {
  check_softmax_args("softmax_fused", x, y, rows, cols);
  if (rows == 0) return;
  softmax_racy_kernel<<<rows, kThreads, 0, stream>>>(x, y, cols);
  WB_CHECK_LAUNCH("softmax_racy_kernel");
}

}  // namespace ch04
