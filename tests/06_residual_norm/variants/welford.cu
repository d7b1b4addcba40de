// Must-pass variant (chapter 06): the solution with the row statistics computed by Welford's
// online algorithm and Chan's parallel merge instead of two passes over the registers. A
// different, equally stable method: the tests must not be tuned to the reference's.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include "add_norm.cuh"
#include "wb/check.hpp"

namespace ch06 {
namespace {

constexpr int kMaxPerThread = 16;  // registers per thread for the row: 16 x 1024 = 16384
constexpr int kMaxThreads = 1024;

__device__ inline float to_float(float v) { return v; }
__device__ inline float to_float(__half v) { return __half2float(v); }
__device__ inline float to_float(__nv_bfloat16 v) { return __bfloat162float(v); }
template <typename T> __device__ inline T from_float(float v);
template <> __device__ inline float from_float<float>(float v) { return v; }
template <> __device__ inline __half from_float<__half>(float v) { return __float2half_rn(v); }
template <> __device__ inline __nv_bfloat16 from_float<__nv_bfloat16>(float v) {
  return __float2bfloat16_rn(v);
}

// The sum of v over the block, returned to every thread. Every thread adds the per-warp
// partials in the same order, so all threads get the same bits.
__device__ float block_sum(float v, float* warp_partials) {
  for (int offset = 16; offset > 0; offset /= 2) v += __shfl_xor_sync(0xffffffffu, v, offset);
  __syncthreads();  // the previous call's readers are done with warp_partials
  if (threadIdx.x % 32 == 0) warp_partials[threadIdx.x / 32] = v;
  __syncthreads();
  float total = 0.0f;
  for (int w = 0; w < static_cast<int>(blockDim.x / 32); ++w) total += warp_partials[w];
  return total;
}

// The scale and shift that turn a deviation d = r - pivot into h = (d - center) * scale,
// then h * weight (+ bias). LayerNorm centers on the mean; RMSNorm does not center at all
// (its "deviation" is r itself, pivot 0).
struct RowStats {
  float center;  // (mean - pivot) for LayerNorm, 0 for RMSNorm
  float scale;   // 1 / sqrt(var + eps) or 1 / sqrt(mean(r^2) + eps)
};

// Welford's algorithm (a must-pass variant: another stable way to the same statistics).
// Each thread folds its values into (count, mean, M2); the partial triples are merged with
// Chan's formula, across the warp by shuffles and across warps in shared memory.
struct Moments {
  float count, mean, m2;
};

__device__ Moments merge(Moments a, Moments b) {
  const float count = a.count + b.count;
  if (count == 0.0f) return a;
  const float delta = b.mean - a.mean;
  const float mean = a.mean + delta * (b.count / count);
  const float m2 = a.m2 + b.m2 + delta * delta * (a.count * b.count / count);
  return {count, mean, m2};
}

__device__ Moments block_moments(Moments m, Moments* shared) {
  for (int offset = 16; offset > 0; offset /= 2) {
    const Moments other{__shfl_xor_sync(0xffffffffu, m.count, offset),
                        __shfl_xor_sync(0xffffffffu, m.mean, offset),
                        __shfl_xor_sync(0xffffffffu, m.m2, offset)};
    m = merge(m, other);
  }
  __syncthreads();
  if (threadIdx.x % 32 == 0) shared[threadIdx.x / 32] = m;
  __syncthreads();
  Moments total{0.0f, 0.0f, 0.0f};
  for (int w = 0; w < static_cast<int>(blockDim.x / 32); ++w) total = merge(total, shared[w]);
  return total;
}

template <int N>
__device__ RowStats row_stats(const float (&d)[N], int dim, Norm norm, float eps,
                              float* /*warp_partials*/) {
  __shared__ Moments shared[kMaxThreads / 32];
  Moments m{0.0f, 0.0f, 0.0f};
#pragma unroll
  for (int k = 0; k < N; ++k) {
    const int i = threadIdx.x + k * blockDim.x;
    if (i >= dim) continue;
    const float value = norm == Norm::LayerNorm ? d[k] : d[k] * d[k];
    m.count += 1.0f;
    const float delta = value - m.mean;
    m.mean += __fdividef(delta, m.count);  // counts are small integers: the fast division is exact enough
    m.m2 += delta * (value - m.mean);
  }
  const Moments total = block_moments(m, shared);
  if (norm == Norm::RMSNorm) return {0.0f, rsqrtf(total.mean + eps)};
  return {total.mean, rsqrtf(total.m2 / dim + eps)};
}

// Rows of up to blockDim.x * kMaxPerThread values: the row stays in registers.
// __restrict__: x, delta, r and h never overlap (the API says so), which lets the compiler
// keep every load in flight instead of ordering each one after the store before it.
template <typename T>
__global__ void __launch_bounds__(kMaxThreads)
    add_norm_kernel(const float* __restrict__ x, const T* __restrict__ delta,
                    float* __restrict__ r, T* __restrict__ h, int dim, NormParams params) {
  __shared__ float warp_partials[kMaxThreads / 32];
  const std::size_t row_start = static_cast<std::size_t>(blockIdx.x) * dim;
  x += row_start;
  delta += row_start;
  r += row_start;
  h += row_start;

  // Pass 1: r = x + delta. Every load of the thread is issued before any store, so all of
  // them are in flight at once (memory latency is paid once, not once per value); r is
  // stored once and kept in registers relative to the pivot.
  const float pivot = params.norm == Norm::LayerNorm ? x[0] + to_float(delta[0]) : 0.0f;
  float d[kMaxPerThread];
#pragma unroll
  for (int k = 0; k < kMaxPerThread; ++k) {
    const int i = threadIdx.x + k * blockDim.x;
    if (i < dim) d[k] = x[i] + to_float(delta[i]);
  }
#pragma unroll
  for (int k = 0; k < kMaxPerThread; ++k) {
    const int i = threadIdx.x + k * blockDim.x;
    if (i < dim) {
      r[i] = d[k];
      d[k] -= pivot;
    }
  }
  const RowStats stats = row_stats(d, dim, params.norm, params.eps, warp_partials);

  // Pass 2: h from the registers.
#pragma unroll
  for (int k = 0; k < kMaxPerThread; ++k) {
    const int i = threadIdx.x + k * blockDim.x;
    if (i < dim) {
      float out = (d[k] - stats.center) * stats.scale * params.weight[i];
      if (params.norm == Norm::LayerNorm) out += params.bias[i];
      h[i] = from_float<T>(out);
    }
  }
}

// Rows too long for registers: the same three steps, each a loop over the row in device
// memory (r is written in the first loop and re-read, mostly from L2, by the others).
template <typename T>
__global__ void add_norm_long_row_kernel(const float* x, const T* delta, float* r, T* h,
                                         int dim, NormParams params) {
  __shared__ float warp_partials[kMaxThreads / 32];
  const std::size_t row_start = static_cast<std::size_t>(blockIdx.x) * dim;
  x += row_start;
  delta += row_start;
  r += row_start;
  h += row_start;
  const bool layer_norm = params.norm == Norm::LayerNorm;
  const float pivot = layer_norm ? x[0] + to_float(delta[0]) : 0.0f;

  float sum = 0.0f;
  for (int i = threadIdx.x; i < dim; i += blockDim.x) {
    const float value = x[i] + to_float(delta[i]);
    r[i] = value;
    sum += layer_norm ? value - pivot : value * value;
  }
  // Each thread re-reads only the elements it wrote itself, so no barrier is needed
  // between the store of r and the loads below.
  const float mean = block_sum(sum, warp_partials) / dim;
  float center = 0.0f, scale = rsqrtf(mean + params.eps);
  if (layer_norm) {
    float squares = 0.0f;
    for (int i = threadIdx.x; i < dim; i += blockDim.x) {
      const float dev = (r[i] - pivot) - mean;
      squares += dev * dev;
    }
    center = mean;
    scale = rsqrtf(block_sum(squares, warp_partials) / dim + params.eps);
  }
  for (int i = threadIdx.x; i < dim; i += blockDim.x) {
    float out = ((r[i] - pivot) - center) * scale * params.weight[i];
    if (layer_norm) out += params.bias[i];
    h[i] = from_float<T>(out);
  }
}

// Enough warps that kMaxPerThread values each cover the row.
int threads_for(int dim) {
  const int needed = (dim + kMaxPerThread - 1) / kMaxPerThread;
  const int warps = (needed + 31) / 32;
  return warps * 32 > kMaxThreads ? kMaxThreads : warps * 32;
}

template <typename T>
void launch_add_norm(const float* x, const T* delta, float* r, T* h, int rows, int dim,
                     const NormParams& params, cudaStream_t stream) {
  check_norm_args("add_norm_fused", x, h, rows, dim, params);
  check_add_args("add_norm_fused", x, delta, r, static_cast<std::size_t>(rows) * dim);
  if (rows == 0) return;
  // One block per row in grid.x (up to 2^31 - 1 rows; grid.y would stop at 65535).
  if (dim <= kMaxThreads * kMaxPerThread) {
    add_norm_kernel<T><<<rows, threads_for(dim), 0, stream>>>(x, delta, r, h, dim, params);
    WB_CHECK_LAUNCH("add_norm_kernel");
  } else {
    add_norm_long_row_kernel<T><<<rows, kMaxThreads, 0, stream>>>(x, delta, r, h, dim, params);
    WB_CHECK_LAUNCH("add_norm_long_row_kernel");
  }
}

}  // namespace

void add_norm_fused(const float* x, const float* delta, float* r, float* h, int rows, int dim,
                    const NormParams& params, cudaStream_t stream) {
  launch_add_norm(x, delta, r, h, rows, dim, params, stream);
}
void add_norm_fused(const float* x, const __half* delta, float* r, __half* h, int rows,
                    int dim, const NormParams& params, cudaStream_t stream) {
  launch_add_norm(x, delta, r, h, rows, dim, params, stream);
}
void add_norm_fused(const float* x, const __nv_bfloat16* delta, float* r, __nv_bfloat16* h,
                    int rows, int dim, const NormParams& params, cudaStream_t stream) {
  launch_add_norm(x, delta, r, h, rows, dim, params, stream);
}

}  // namespace ch06
