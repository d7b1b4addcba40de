#pragma once
// Chapter 06: residual add + norm, in pre-LN order. The API the tests call; do not edit.
//
// A pre-LN transformer block computes  x = x + sublayer(norm(x))  twice per layer. Between
// two sublayers, the add that ENDS one sublayer and the norm that BEGINS the next touch the
// same row back to back:
//
//     r = x + delta          (delta: the sublayer's output; r: the new residual stream)
//     h = norm(r)            (h: the next sublayer's input)
//
// That pair is the fusion that fits the model: one pass per row that reads x and delta and
// writes both r and h. (LN(x) + residual, the "post-LN" order, is a different function: it
// cannot replace this pair, however fast it is.)
//
// Two norms, over each row of `dim` values, with fp32 weight (and bias):
//   LayerNorm (GPT-2, GPT-NeoX):  h = (r - mean) / sqrt(var + eps) * weight + bias
//                                 mean and var over the row; var is the biased variance
//                                 (divide by dim), as torch.nn.LayerNorm computes it.
//   RMSNorm (llama):              h = r / sqrt(mean(r^2) + eps) * weight   (no bias)
//
// Precision: the residual stream (x, r) is always fp32; delta and h are fp32, fp16 or bf16
// (the overloads below); every sum is accumulated in fp32 or better, so a row's squares must
// stay finite in fp32: r (RMSNorm) and its deviations from the mean (LayerNorm) below about
// 1.8e19 = sqrt(FLT_MAX) in magnitude (a row past that is out of contract). Across 32 layers of
// adds, a residual stream kept in half precision drifts away from the fp32 one (the
// numerics test measures it): that is why r is fp32 here.
//
// What every implementation must do (the tests check each point):
//   - r is x + delta rounded once to fp32, bit for bit (delta converted to fp32 first);
//   - the variance by a stable method: a row with mean 1e4 and standard deviation 1 must
//     come out right (E[r^2] - E[r]^2 in fp32 loses every digit there);
//   - a constant row (variance 0) gives h = bias exactly, never NaN (eps is inside sqrt);
//   - any rows >= 0 and dim >= 1: 1, odd dims, 768, 2560, 4096, 16384 and beyond;
//   - any float pointers: a view that starts mid-row is not 16-byte aligned;
//   - inputs are read-only, outputs do not overlap inputs or each other;
//   - all work enqueued on `stream`: no synchronization, no allocation, no copies.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <stdexcept>
#include <string>

namespace ch06 {

enum class Norm { LayerNorm, RMSNorm };

struct NormParams {
  Norm norm = Norm::LayerNorm;
  const float* weight = nullptr;  // dim floats, device memory
  const float* bias = nullptr;    // dim floats for LayerNorm; for RMSNorm never read (null or anything)
  float eps = 1e-5f;              // > 0
};

// Steps 1-2, unfused: two kernels, with r written to device memory and read back.
//   residual_add: r[i] = x[i] + delta[i] for i < n (n = rows * dim);
//   norm_rows:    h = norm(r), row by row.
void residual_add(const float* x, const float* delta, float* r, std::size_t n,
                  cudaStream_t stream);
void residual_add(const float* x, const __half* delta, float* r, std::size_t n,
                  cudaStream_t stream);
void residual_add(const float* x, const __nv_bfloat16* delta, float* r, std::size_t n,
                  cudaStream_t stream);

void norm_rows(const float* r, float* h, int rows, int dim, const NormParams& params,
               cudaStream_t stream);
void norm_rows(const float* r, __half* h, int rows, int dim, const NormParams& params,
               cudaStream_t stream);
void norm_rows(const float* r, __nv_bfloat16* h, int rows, int dim, const NormParams& params,
               cudaStream_t stream);

// Step 3, fused: one pass per row reads x and delta once and writes r and h once.
void add_norm_fused(const float* x, const float* delta, float* r, float* h, int rows, int dim,
                    const NormParams& params, cudaStream_t stream);
void add_norm_fused(const float* x, const __half* delta, float* r, __half* h, int rows,
                    int dim, const NormParams& params, cudaStream_t stream);
void add_norm_fused(const float* x, const __nv_bfloat16* delta, float* r, __nv_bfloat16* h,
                    int rows, int dim, const NormParams& params, cudaStream_t stream);

// Bad arguments throw std::invalid_argument naming the function and the argument. Every
// row-wise entry point calls this first; rows == 0 is nothing to do.
inline void check_norm_args(const char* function, const void* in, const void* out, int rows,
                            int dim, const NormParams& p) {
  const std::string where = std::string("ch06 ") + function + ": ";
  if (rows < 0)
    throw std::invalid_argument(where + "rows must be >= 0, got " + std::to_string(rows));
  if (dim < 1) throw std::invalid_argument(where + "dim must be >= 1, got " + std::to_string(dim));
  if (!(p.eps > 0.0f))
    throw std::invalid_argument(where + "eps must be > 0 (it keeps a constant row finite), got " +
                                std::to_string(p.eps));
  if (rows == 0) return;
  if (in == nullptr || out == nullptr)
    throw std::invalid_argument(where + "inputs and outputs must be device pointers, got null");
  if (p.weight == nullptr) throw std::invalid_argument(where + "weight must not be null");
  if (p.norm == Norm::LayerNorm && p.bias == nullptr)
    throw std::invalid_argument(where + "LayerNorm needs a bias (RMSNorm has none)");
}

inline void check_add_args(const char* function, const void* x, const void* delta,
                           const void* r, std::size_t n) {
  if (n > 0 && (x == nullptr || delta == nullptr || r == nullptr))
    throw std::invalid_argument(std::string("ch06 ") + function +
                                ": x, delta and r must be device pointers, got null (n = " +
                                std::to_string(n) + ")");
}

}  // namespace ch06
