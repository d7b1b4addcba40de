// Chapter 06, steps 1-2: the residual add and the norm as two kernels. Read README.md first.
//
// Step 1: residual_add, r[i] = x[i] + delta[i] over all n = rows * dim elements (convert
//         delta to float first: it may be half or bf16; r is always fp32).
// Step 2: norm_rows, h = norm(r) row by row: one block per row, a block-wide sum for the
//         statistics, then h = (r - mean) * rsqrt(var + eps) * weight + bias (LayerNorm) or
//         h = r * rsqrt(mean(r^2) + eps) * weight (RMSNorm).
// Write each kernel once as a template on the type of delta / h, and call it from the three
// overloads at the bottom.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include "add_norm.cuh"
#include "wb/check.hpp"
#include "wb/not_implemented.hpp"

namespace ch06 {
namespace {

// Conversions you will need inside the kernels (the intrinsics convert half and bf16).
__device__ inline float to_float(float v) { return v; }
__device__ inline float to_float(__half v) { return __half2float(v); }
__device__ inline float to_float(__nv_bfloat16 v) { return __bfloat162float(v); }
template <typename T> __device__ inline T from_float(float v);
template <> __device__ inline float from_float<float>(float v) { return v; }
template <> __device__ inline __half from_float<__half>(float v) { return __float2half_rn(v); }
template <> __device__ inline __nv_bfloat16 from_float<__nv_bfloat16>(float v) {
  return __float2bfloat16_rn(v);
}

// TODO step 1: template <typename T>
//   __global__ void residual_add_kernel(const float* x, const T* delta, float* r, std::size_t n)
// TODO step 2: template <typename T>
//   __global__ void norm_rows_kernel(const float* r, T* h, int dim, NormParams params)

template <typename T>
void launch_residual_add(const float* x, const T* delta, float* r, std::size_t n,
                         cudaStream_t stream) {
  wb::not_implemented("ch06 residual_add (step 1): r = x + delta, one kernel");
  check_add_args("residual_add", x, delta, r, n);  // keep: rejects bad arguments
  if (n == 0) return;
  // TODO: launch residual_add_kernel<T> on `stream`, then WB_CHECK_LAUNCH("residual_add_kernel").
  (void)stream;
}

template <typename T>
void launch_norm_rows(const float* r, T* h, int rows, int dim, const NormParams& params,
                      cudaStream_t stream) {
  wb::not_implemented("ch06 norm_rows (step 2): h = norm(r), one block per row");
  check_norm_args("norm_rows", r, h, rows, dim, params);  // keep
  if (rows == 0) return;
  // TODO: launch norm_rows_kernel<T> with one block per row (rows in grid.x), then
  // WB_CHECK_LAUNCH("norm_rows_kernel").
  (void)stream;
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
