// Chapter 06, steps 1-2 (reference): the residual add and the norm as two kernels.
//
// This is what a framework runs when it does not fuse: residual_add writes r to device
// memory, and norm_rows reads it back. Per element (fp32): the add moves 12 bytes (x, delta
// in; r out) and the norm 8 more (r in, h out, plus weight and bias, which stay in L2),
// against 16 for the fused pass; and it is two launches instead of one.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include "add_norm.cuh"
#include "wb/check.hpp"
#include "wb/device.hpp"

namespace ch06 {
namespace {

__device__ inline float to_float(float v) { return v; }
__device__ inline float to_float(__half v) { return __half2float(v); }
__device__ inline float to_float(__nv_bfloat16 v) { return __bfloat162float(v); }
template <typename T> __device__ inline T from_float(float v);
template <> __device__ inline float from_float<float>(float v) { return v; }
template <> __device__ inline __half from_float<__half>(float v) { return __float2half_rn(v); }
template <> __device__ inline __nv_bfloat16 from_float<__nv_bfloat16>(float v) {
  return __float2bfloat16_rn(v);
}

// Step 1. r = x + delta. Each block adds tiles of kAddUnroll x blockDim consecutive
// elements: every thread loads its kAddUnroll values (coalesced: neighbours read neighbours)
// before it stores any, so that many loads are in flight; a grid-stride loop over the tiles
// covers any n (past 2^31 too) with a grid of a few blocks per SM.
constexpr int kAddUnroll = 4;

template <typename T>
__global__ void residual_add_kernel(const float* __restrict__ x, const T* __restrict__ delta,
                                    float* __restrict__ r, std::size_t n) {
  const std::size_t tile = static_cast<std::size_t>(kAddUnroll) * blockDim.x;
  for (std::size_t start = blockIdx.x * tile; start < n; start += gridDim.x * tile) {
    float sum[kAddUnroll];
    for (int k = 0; k < kAddUnroll; ++k) {
      const std::size_t i = start + k * blockDim.x + threadIdx.x;
      if (i < n) sum[k] = x[i] + to_float(delta[i]);
    }
    for (int k = 0; k < kAddUnroll; ++k) {
      const std::size_t i = start + k * blockDim.x + threadIdx.x;
      if (i < n) r[i] = sum[k];
    }
  }
}

// The sum of v over the block, returned to every thread (same bits in every thread).
__device__ float block_sum(float v, float* warp_partials) {
  for (int offset = 16; offset > 0; offset /= 2) v += __shfl_xor_sync(0xffffffffu, v, offset);
  __syncthreads();  // the previous call's readers are done with warp_partials
  if (threadIdx.x % 32 == 0) warp_partials[threadIdx.x / 32] = v;
  __syncthreads();
  float total = 0.0f;
  for (int w = 0; w < static_cast<int>(blockDim.x / 32); ++w) total += warp_partials[w];
  return total;
}

constexpr int kNormThreads = 256;

// Step 2. h = norm(r), one block per row, three loops over the row (its second and third
// reads come from L2). Values are summed relative to the row's first value (the pivot) and
// the variance is the mean squared deviation: both stay exact for a row with mean 1e4 and
// spread 1 (see add_norm_fused.cu).
template <typename T>
__global__ void norm_rows_kernel(const float* __restrict__ r, T* __restrict__ h, int dim,
                                 NormParams params) {
  __shared__ float warp_partials[kNormThreads / 32];
  const std::size_t row_start = static_cast<std::size_t>(blockIdx.x) * dim;
  r += row_start;
  h += row_start;
  const bool layer_norm = params.norm == Norm::LayerNorm;
  const float pivot = layer_norm ? r[0] : 0.0f;

  float sum = 0.0f;
  for (int i = threadIdx.x; i < dim; i += blockDim.x)
    sum += layer_norm ? r[i] - pivot : r[i] * r[i];
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

template <typename T>
void launch_residual_add(const float* x, const T* delta, float* r, std::size_t n,
                         cudaStream_t stream) {
  check_add_args("residual_add", x, delta, r, n);
  if (n == 0) return;
  constexpr int kThreads = 256;
  const std::size_t tile = static_cast<std::size_t>(kAddUnroll) * kThreads;
  const std::size_t blocks_needed = (n + tile - 1) / tile;
  // Enough blocks to fill every SM many times over; the loop covers the rest.
  const std::size_t blocks_resident = static_cast<std::size_t>(wb::device_info().sm_count) * 32;
  const int blocks = static_cast<int>(blocks_needed < blocks_resident ? blocks_needed
                                                                      : blocks_resident);
  residual_add_kernel<T><<<blocks, kThreads, 0, stream>>>(x, delta, r, n);
  WB_CHECK_LAUNCH("residual_add_kernel");
}

template <typename T>
void launch_norm_rows(const float* r, T* h, int rows, int dim, const NormParams& params,
                      cudaStream_t stream) {
  check_norm_args("norm_rows", r, h, rows, dim, params);
  if (rows == 0) return;
  norm_rows_kernel<T><<<rows, kNormThreads, 0, stream>>>(r, h, dim, params);
  WB_CHECK_LAUNCH("norm_rows_kernel");
}

}  // namespace

void residual_add(const float* x, const float* delta, float* r, std::size_t n,
                  cudaStream_t stream) {
  launch_residual_add(x, delta, r, n, stream);
}
void residual_add(const float* x, const __half* delta, float* r, std::size_t n,
                  cudaStream_t stream) {
  launch_residual_add(x, delta, r, n, stream);
}
void residual_add(const float* x, const __nv_bfloat16* delta, float* r, std::size_t n,
                  cudaStream_t stream) {
  launch_residual_add(x, delta, r, n, stream);
}

void norm_rows(const float* r, float* h, int rows, int dim, const NormParams& params,
               cudaStream_t stream) {
  launch_norm_rows(r, h, rows, dim, params, stream);
}
void norm_rows(const float* r, __half* h, int rows, int dim, const NormParams& params,
               cudaStream_t stream) {
  launch_norm_rows(r, h, rows, dim, params, stream);
}
void norm_rows(const float* r, __nv_bfloat16* h, int rows, int dim, const NormParams& params,
               cudaStream_t stream) {
  launch_norm_rows(r, h, rows, dim, params, stream);
}

}  // namespace ch06
