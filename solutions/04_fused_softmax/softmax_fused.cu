// Chapter 04, reference for step 4: the fused softmax, one kernel, one block per row.
//
// Each row is read from device memory once and written once: 2 * rows * cols * 4 bytes, the
// least any softmax can move (the unfused version moves 5 times the matrix). The arithmetic
// per element is a handful of instructions, so the kernel's whole job is to keep enough
// loads in flight; at the graded 4096x4096 it runs at about the speed of a device copy of
// the same bytes. Where one block per row leaves the GPU underused, it is slower than that:
// short rows (a 256-thread block with one float per thread and a barrier per row) and a few
// long rows (one SM per row while the others idle).
//
//   cols <= 8192   softmax_in_registers: the row waits in registers (each thread holds
//                  kPerThread of its elements) between the max, the sum and the store.
//   longer rows    softmax_streaming: too long for registers, so the row is read twice:
//                  once for its max and its sum of exponentials together (the "online
//                  softmax"), once to write y. The second read mostly hits L2.
//
// Going further (the lesson's step 5: 16-byte loads, a warp per short row, long rows split
// across many blocks) is solutions/04_fused_softmax/fast/softmax_fused.cu.
#include <cuda_runtime.h>

#include <cmath>
#include <cstddef>

#include "softmax.cuh"
#include "wb/check.hpp"

namespace ch04 {
namespace {

constexpr int kWarpSize = 32;

__device__ __forceinline__ float warp_max(float v) {
#pragma unroll
  for (int offset = kWarpSize / 2; offset > 0; offset /= 2)
    v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, offset));
  return v;
}

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
  for (int offset = kWarpSize / 2; offset > 0; offset /= 2)
    v += __shfl_xor_sync(0xffffffffu, v, offset);
  return v;
}

// Every thread of the block gets the block's max (or sum): each warp reduces with shuffles,
// writes one slot per warp, one barrier, then every warp reduces the slots. The two functions
// use separate shared arrays, so the sum cannot overwrite slots that a slow warp is still
// reading for the max (one shared array would need a second barrier between the two).
// Every thread of the block must call them (the barrier): no thread may return early.
__device__ __forceinline__ float block_max(float v) {
  __shared__ float per_warp[kWarpSize];  // up to 1024 threads
  const int warps = blockDim.x / kWarpSize, lane = threadIdx.x % kWarpSize;
  v = warp_max(v);
  if (lane == 0) per_warp[threadIdx.x / kWarpSize] = v;
  __syncthreads();
  return warp_max(lane < warps ? per_warp[lane] : -INFINITY);
}

__device__ __forceinline__ float block_sum(float v) {
  __shared__ float per_warp[kWarpSize];
  const int warps = blockDim.x / kWarpSize, lane = threadIdx.x % kWarpSize;
  v = warp_sum(v);
  if (lane == 0) per_warp[threadIdx.x / kWarpSize] = v;
  __syncthreads();
  return warp_sum(lane < warps ? per_warp[lane] : 0.0f);
}

// ---- Rows that fit in registers (step 4) ------------------------------------------------

constexpr int kThreads = 256;
constexpr int kMaxPerThread = 32;  // 32 floats x 256 threads: rows up to 8192 columns

// Block `blockIdx.x` owns one row; thread t holds columns t, t + 256, t + 512, ... in v[]
// (neighbouring threads, neighbouring columns: every load is coalesced). kPerThread is a
// template parameter because a register array needs its size at compile time; the host
// picks the smallest one that covers the row.
template <int kPerThread>
__global__ void __launch_bounds__(kThreads)
    softmax_in_registers(const float* __restrict__ x, float* __restrict__ y, int cols) {
  const std::size_t offset = std::size_t(blockIdx.x) * std::size_t(cols);  // rows*cols > 2^31
  const float* row_in = x + offset;
  float* row_out = y + offset;

  // 1. Load the whole row: all kPerThread loads go out before any is used, so their
  //    latencies overlap. Columns past the end are -inf: exp(-inf - max) = 0, they add nothing.
  float v[kPerThread];
#pragma unroll
  for (int k = 0; k < kPerThread; ++k) {
    const int c = k * kThreads + threadIdx.x;
    v[k] = c < cols ? row_in[c] : -INFINITY;
  }

  // 2. The row's max. Subtracting it keeps every exp in (0, 1]: no overflow for logits of 1e4.
  float m = -INFINITY;
#pragma unroll
  for (int k = 0; k < kPerThread; ++k) m = fmaxf(m, v[k]);
  m = block_max(m);

  // 3. The exponentials, in place, and their sum. A row that is all -inf has m = -inf and
  //    -inf - (-inf) = NaN: every output of that row is NaN, as the API asks.
  float s = 0.0f;
#pragma unroll
  for (int k = 0; k < kPerThread; ++k) {
    v[k] = __expf(v[k] - m);
    s += v[k];
  }
  s = block_sum(s);

  // 4. Scale and store: y is written once.
  const float inv_sum = 1.0f / s;
#pragma unroll
  for (int k = 0; k < kPerThread; ++k) {
    const int c = k * kThreads + threadIdx.x;
    if (c < cols) row_out[c] = v[k] * inv_sum;
  }
}

// ---- Rows too long for registers ----------------------------------------------------------

constexpr int kStreamThreads = 1024;  // a long row has work for a big block
constexpr int kChunk = 16;            // loads each thread issues before it uses any

// Pass 1 keeps, per thread, a running max m and the sum s of exp(x - m) over the elements
// seen so far. When a chunk raises the max to m', the sum so far is rescaled to it:
// s * exp(m - m'). The block then combines the threads' pairs the same way, and pass 2
// reads the row again to write exp(x - max) / sum.
__global__ void __launch_bounds__(kStreamThreads)
    softmax_streaming(const float* __restrict__ x, float* __restrict__ y, int cols) {
  const std::size_t offset = std::size_t(blockIdx.x) * std::size_t(cols);
  const float* row_in = x + offset;
  float* row_out = y + offset;

  // Column counters are unsigned: they end up to a chunk past cols, beyond the largest int
  // when a row is nearly 2^31 long, and stay below 2^32 (an int would overflow there).
  float m = -INFINITY, s = 0.0f;
  for (unsigned base = 0; base < unsigned(cols); base += kChunk * kStreamThreads) {
    float v[kChunk];
#pragma unroll
    for (int k = 0; k < kChunk; ++k) {
      const unsigned c = base + k * kStreamThreads + threadIdx.x;
      v[k] = c < unsigned(cols) ? row_in[c] : -INFINITY;
    }
    float new_max = m;
#pragma unroll
    for (int k = 0; k < kChunk; ++k) new_max = fmaxf(new_max, v[k]);
    if (new_max == -INFINITY) continue;  // only -inf so far: (m, s) stays (-inf, 0)
    s *= __expf(m - new_max);            // 0 while m is still -inf
#pragma unroll
    for (int k = 0; k < kChunk; ++k) s += __expf(v[k] - new_max);
    m = new_max;
  }

  // The row's pair: a thread that saw only -inf has s = 0 and adds 0 (unless the whole row
  // is -inf: then row_max = -inf, exp(NaN) = NaN, and the row's outputs are NaN, as asked).
  const float row_max = block_max(m);
  const float row_sum = block_sum(s * __expf(m - row_max));
  const float inv_sum = 1.0f / row_sum;

#pragma unroll 4
  for (unsigned c = threadIdx.x; c < unsigned(cols); c += kStreamThreads)
    row_out[c] = __expf(row_in[c] - row_max) * inv_sum;
}

template <int kPerThread>
void launch_in_registers(const float* x, float* y, int rows, int cols, cudaStream_t stream) {
  softmax_in_registers<kPerThread><<<rows, kThreads, 0, stream>>>(x, y, cols);
  WB_CHECK_LAUNCH("softmax_in_registers");
}

}  // namespace

void softmax_fused(const float* x, float* y, int rows, int cols, cudaStream_t stream) {
  check_softmax_args("softmax_fused", x, y, rows, cols);
  if (rows == 0) return;
  // One block per row: grid.x holds up to 2^31 - 1 rows (grid.y would stop at 65535).
  if (cols <= 1 * kThreads) return launch_in_registers<1>(x, y, rows, cols, stream);
  if (cols <= 2 * kThreads) return launch_in_registers<2>(x, y, rows, cols, stream);
  if (cols <= 4 * kThreads) return launch_in_registers<4>(x, y, rows, cols, stream);
  if (cols <= 8 * kThreads) return launch_in_registers<8>(x, y, rows, cols, stream);
  if (cols <= 16 * kThreads) return launch_in_registers<16>(x, y, rows, cols, stream);
  if (cols <= kMaxPerThread * kThreads) return launch_in_registers<kMaxPerThread>(x, y, rows, cols, stream);
  softmax_streaming<<<rows, kStreamThreads, 0, stream>>>(x, y, cols);
  WB_CHECK_LAUNCH("softmax_streaming");
}

}  // namespace ch04
