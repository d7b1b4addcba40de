// Chapter 06, step 3 (reference): residual add + norm fused, one pass per row.
//
// A block (or, for short rows, a warp) per row. Each thread keeps its share of the row in
// registers, so the row crosses device memory once on the way in (x, delta) and once on the
// way out (r, h): 16 bytes per element in fp32, where the unfused pair moves 20 (r is
// written by the add and read again by the norm) and pays a second launch.
//
// The statistics are the numerically careful part:
//   - every value is taken relative to a pivot (the row's first value), so a row with mean
//     1e4 and spread 1 is summed as numbers near 0, not near 1e4 (where a float's last bit is
//     worth 1e-3 and the sum of 16384 of them loses the spread entirely);
//   - the variance is the mean of squared deviations from the mean (two passes over the
//     registers), never E[r^2] - E[r]^2;
//   - the mean is never added back to the pivot: h needs only r - mean, which is
//     (r - pivot) - (mean - pivot), two small numbers.
// Four kernels, by the row's shape (every one is the same algorithm):
//   - add_norm_warp_kernel, short packed rows (dim a multiple of 4 up to 1024, arrays
//     16-byte aligned, as model widths and cudaMalloc'd tensors are): one warp per row,
//     several rows per block. Each lane moves packs of 4 consecutive values with one 16-byte
//     load or store (8 bytes for fp16/bf16), as in chapter 05, issues every load of its share
//     (x, delta, weight, bias) before any arithmetic, and the row's two sums are warp
//     shuffles: no shared memory, no __syncthreads, so no warp waits for another;
//   - add_norm_packed_kernel, longer packed rows (up to 8192 values): the same code with a
//     block per row, whose sums need shared memory and barriers, which a row this long
//     spreads over enough bytes;
//   - add_norm_kernel, any other row of up to 1024 x kMaxPerThread values, one value at a
//     time;
//   - add_norm_long_row_kernel, longer rows, which do not fit in one block's registers: r
//     stays in device memory (written once, re-read from L2).
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "add_norm.cuh"
#include "wb/check.hpp"

namespace ch06 {
namespace {

constexpr int kMaxPerThread = 16;  // registers per thread for the row: 16 x 1024 = 16384
constexpr int kMaxThreads = 1024;
constexpr int kMaxPackedThreads = 512;  // up to 4 packs each: rows of up to 8192 values
// The warp kernel: up to 8 packs per lane, rows of up to 32 x 8 x 4 = 1024 values. At 8
// packs a lane of an fp32 LayerNorm holds 128 registers of loads (x, delta, weight, bias);
// more would crowd the 255 a thread may have and cut the warps each multiprocessor keeps
// in flight. Rows past 1024 values are long enough for the block kernel's barriers.
constexpr int kMaxWarpPacks = 8;
// Rows (= warps) per block of the warp kernel. Small blocks: a multiprocessor takes whole
// blocks while its 64K registers last, so the smaller the block, the closer it gets to that
// limit (at 8 packs, some 160 registers a thread, three blocks of 4 warps fit, but only one
// of 8), and a block's registers come back as soon as its few rows are done.
constexpr int kWarpRowsPerBlock = 4;

__device__ inline float to_float(float v) { return v; }
__device__ inline float to_float(__half v) { return __half2float(v); }
__device__ inline float to_float(__nv_bfloat16 v) { return __bfloat162float(v); }
template <typename T> __device__ inline T from_float(float v);
template <> __device__ inline float from_float<float>(float v) { return v; }
template <> __device__ inline __half from_float<__half>(float v) { return __float2half_rn(v); }
template <> __device__ inline __nv_bfloat16 from_float<__nv_bfloat16>(float v) {
  return __float2bfloat16_rn(v);
}

// The sum of v over the warp, returned to every lane. An xor butterfly: at each step lanes
// i and i ^ offset add the same two numbers (a + b and b + a are the same float), so every
// lane ends with the same bits.
__device__ float warp_sum(float v) {
  for (int offset = 16; offset > 0; offset /= 2) v += __shfl_xor_sync(0xffffffffu, v, offset);
  return v;
}

// The sum of v over the block, returned to every thread. Every thread adds the per-warp
// partials in the same order, so all threads get the same bits.
__device__ float block_sum(float v, float* warp_partials) {
  v = warp_sum(v);
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

// d[k] holds this thread's values minus the pivot (LayerNorm) or the values (RMSNorm).
template <int N>
__device__ RowStats row_stats(const float (&d)[N], int dim, Norm norm, float eps,
                              float* warp_partials) {
  float sum = 0.0f;
  for (int k = 0; k < N; ++k) {
    const int i = threadIdx.x + k * blockDim.x;
    if (i < dim) sum += (norm == Norm::LayerNorm) ? d[k] : d[k] * d[k];
  }
  const float mean = block_sum(sum, warp_partials) / dim;
  if (norm == Norm::RMSNorm) return {0.0f, rsqrtf(mean + eps)};
  float squares = 0.0f;  // second pass: squared deviations from the mean
  for (int k = 0; k < N; ++k) {
    const int i = threadIdx.x + k * blockDim.x;
    if (i < dim) squares += (d[k] - mean) * (d[k] - mean);
  }
  const float var = block_sum(squares, warp_partials) / dim;
  return {mean, rsqrtf(var + eps)};
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
  for (int k = 0; k < kMaxPerThread; ++k) {
    const int i = threadIdx.x + k * blockDim.x;
    if (i < dim) d[k] = x[i] + to_float(delta[i]);
  }
  for (int k = 0; k < kMaxPerThread; ++k) {
    const int i = threadIdx.x + k * blockDim.x;
    if (i < dim) {
      r[i] = d[k];
      d[k] -= pivot;
    }
  }
  const RowStats stats = row_stats(d, dim, params.norm, params.eps, warp_partials);

  // Pass 2: h from the registers.
  for (int k = 0; k < kMaxPerThread; ++k) {
    const int i = threadIdx.x + k * blockDim.x;
    if (i < dim) {
      float out = (d[k] - stats.center) * stats.scale * params.weight[i];
      if (params.norm == Norm::LayerNorm) out += params.bias[i];
      h[i] = from_float<T>(out);
    }
  }
}

// Four consecutive values of one array, moved as one access: 16 bytes of float, 8 of half.
template <typename T>
struct alignas(4 * sizeof(T)) Pack {
  T v[4];
};

// The threads that share one packed row, and how they sum over it: a whole block
// (add_norm_packed_kernel), through shared memory and two barriers per sum, or one warp
// (add_norm_warp_kernel), through shuffles alone.
struct BlockRow {
  float* warp_partials;
  __device__ int rank() const { return threadIdx.x; }
  __device__ int size() const { return blockDim.x; }
  __device__ float sum(float v) const { return block_sum(v, warp_partials); }
};
struct WarpRow {
  __device__ int rank() const { return threadIdx.x % 32; }
  __device__ int size() const { return 32; }
  __device__ float sum(float v) const { return warp_sum(v); }
};

// One packed row, kPacks packs per thread of the group: pack p of the row belongs to thread
// p % group.size(), so one load of a warp reads 32 consecutive packs (512 bytes of float),
// and a thread holds 4 x kPacks values of the row in registers.
template <typename T, int kPacks, typename Group>
__device__ void add_norm_packed_row(Group group, unsigned row, const float* __restrict__ x,
                                    const T* __restrict__ delta, float* __restrict__ r,
                                    T* __restrict__ h, int dim, const NormParams& params) {
  const int packs = dim / 4;
  const std::size_t row_pack = static_cast<std::size_t>(row) * packs;
  const auto* x4 = reinterpret_cast<const Pack<float>*>(x) + row_pack;
  const auto* delta4 = reinterpret_cast<const Pack<T>*>(delta) + row_pack;
  auto* r4 = reinterpret_cast<Pack<float>*>(r) + row_pack;
  auto* h4 = reinterpret_cast<Pack<T>*>(h) + row_pack;
  const auto* weight4 = reinterpret_cast<const Pack<float>*>(params.weight);
  const auto* bias4 = reinterpret_cast<const Pack<float>*>(params.bias);
  const bool layer_norm = params.norm == Norm::LayerNorm;
  const auto pack_of = [&](int k) { return group.rank() + k * group.size(); };

  // Every load first, so that all of them are in flight at once: the row's packs, weight
  // and bias (which sit in L2), and the row's first value, the pivot (one broadcast load per
  // warp). Then r.
  Pack<float> sum4[kPacks] = {}, weight[kPacks] = {}, bias[kPacks] = {};
  Pack<T> delta_in[kPacks] = {};
  for (int k = 0; k < kPacks; ++k) {
    const int p = pack_of(k);
    if (p < packs) {
      sum4[k] = x4[p];
      delta_in[k] = delta4[p];
      weight[k] = weight4[p];
      if (layer_norm) bias[k] = bias4[p];
    }
  }
  const float first_x = x4[0].v[0];
  const T first_delta = delta4[0].v[0];
  const float pivot = layer_norm ? first_x + to_float(first_delta) : 0.0f;
  float d[4 * kPacks];  // the thread's values of r, minus the pivot
  for (int k = 0; k < kPacks; ++k) {
    const int p = pack_of(k);
    for (int j = 0; j < 4; ++j) sum4[k].v[j] += to_float(delta_in[k].v[j]);
    if (p < packs) r4[p] = sum4[k];
    for (int j = 0; j < 4; ++j) d[4 * k + j] = p < packs ? sum4[k].v[j] - pivot : 0.0f;
  }
  // Values past the row's end are 0 in d, so they add nothing to the sums; the squared
  // deviations skip them explicitly (0 - mean is not 0).
  float sum = 0.0f;
  for (int i = 0; i < 4 * kPacks; ++i) sum += layer_norm ? d[i] : d[i] * d[i];
  const float mean = group.sum(sum) / dim;
  float center = 0.0f, scale = rsqrtf(mean + params.eps);
  if (layer_norm) {
    float squares = 0.0f;
    for (int k = 0; k < kPacks; ++k)
      if (pack_of(k) < packs)
        for (int j = 0; j < 4; ++j) squares += (d[4 * k + j] - mean) * (d[4 * k + j] - mean);
    center = mean;
    scale = rsqrtf(group.sum(squares) / dim + params.eps);
  }

  for (int k = 0; k < kPacks; ++k) {
    const int p = pack_of(k);
    if (p >= packs) continue;
    Pack<T> out;
    for (int j = 0; j < 4; ++j) {
      float value = (d[4 * k + j] - center) * scale * weight[k].v[j];
      if (layer_norm) value += bias[k].v[j];
      out.v[j] = from_float<T>(value);
    }
    h4[p] = out;
  }
}

// Packed rows of up to kMaxPackedThreads x 4 packs: one block per row.
template <typename T, int kPacks>
__global__ void __launch_bounds__(kMaxPackedThreads)
    add_norm_packed_kernel(const float* __restrict__ x, const T* __restrict__ delta,
                           float* __restrict__ r, T* __restrict__ h, int dim, NormParams params) {
  __shared__ float warp_partials[kMaxPackedThreads / 32];
  add_norm_packed_row<T, kPacks>(BlockRow{warp_partials}, blockIdx.x, x, delta, r, h, dim,
                                 params);
}

// Packed rows of up to 32 x kPacks packs: one warp per row, kWarpRowsPerBlock rows per
// block. With a block per row, every sum is a barrier at which the row's warps wait for the
// slowest of them, and a short row gives each thread one or two packs to keep in flight.
// Here each warp goes from its loads to its stores alone, with all of a lane's loads
// (kPacks packs each of x, delta, weight and bias) in flight together.
template <typename T, int kPacks>
__global__ void __launch_bounds__(32 * kWarpRowsPerBlock)
    add_norm_warp_kernel(const float* __restrict__ x, const T* __restrict__ delta,
                         float* __restrict__ r, T* __restrict__ h, int rows, int dim,
                         NormParams params) {
  // At most 2^31 - 1 rows, so gridDim.x * kWarpRowsPerBlock does not overflow.
  const unsigned row = blockIdx.x * kWarpRowsPerBlock + threadIdx.x / 32;
  // The last block's warps past the end leave whole (row is the same in all 32 lanes), so
  // every shuffle below has its full warp.
  if (row >= static_cast<unsigned>(rows)) return;
  add_norm_packed_row<T, kPacks>(WarpRow{}, row, x, delta, r, h, dim, params);
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

bool aligned(const void* p, std::size_t bytes) {
  return reinterpret_cast<std::uintptr_t>(p) % bytes == 0;
}

// The packed kernel needs whole packs in every row and every array aligned to its pack.
template <typename T>
bool packs_fit(const float* x, const T* delta, const float* r, const T* h, int dim,
               const NormParams& params) {
  return dim % 4 == 0 && dim / 4 <= kMaxPackedThreads * 4 && aligned(x, 16) && aligned(r, 16) &&
         aligned(delta, 4 * sizeof(T)) && aligned(h, 4 * sizeof(T)) &&
         aligned(params.weight, 16) &&
         (params.norm != Norm::LayerNorm || aligned(params.bias, 16));
}

// kWarpRowsPerBlock rows per block; blocks in grid.x (rows <= 2^31 - 1, so at most 2^29).
template <typename T, int kPacks>
void launch_warp_rows(const float* x, const T* delta, float* r, T* h, int rows, int dim,
                      const NormParams& params, cudaStream_t stream) {
  const int blocks = (rows - 1) / kWarpRowsPerBlock + 1;  // rows > 0; rows + 3 could overflow
  add_norm_warp_kernel<T, kPacks>
      <<<blocks, 32 * kWarpRowsPerBlock, 0, stream>>>(x, delta, r, h, rows, dim, params);
  WB_CHECK_LAUNCH("add_norm_warp_kernel");
}

// Rows of up to 32 x kMaxWarpPacks packs: a warp per row, with the fewest packs per lane of
// 2, 4, 6 or 8 that cover the row (registers are reserved for kPacks packs whether the row
// fills them or not; 6 is there for 768, the commonest short model width). Longer rows: a
// block per row, with the fewest packs per thread (1, 2 or 4) that cover the row with at most
// kMaxPackedThreads threads: registers stay few, so several rows are in flight on each
// multiprocessor.
template <typename T>
void launch_packed(const float* x, const T* delta, float* r, T* h, int rows, int dim,
                   const NormParams& params, cudaStream_t stream) {
  const int packs = dim / 4;
  if (packs <= 32 * kMaxWarpPacks) {
    if (packs <= 32 * 2) {
      launch_warp_rows<T, 2>(x, delta, r, h, rows, dim, params, stream);
    } else if (packs <= 32 * 4) {
      launch_warp_rows<T, 4>(x, delta, r, h, rows, dim, params, stream);
    } else if (packs <= 32 * 6) {
      launch_warp_rows<T, 6>(x, delta, r, h, rows, dim, params, stream);
    } else {
      launch_warp_rows<T, kMaxWarpPacks>(x, delta, r, h, rows, dim, params, stream);
    }
    return;
  }
  const auto threads = [&](int per_thread) {
    return ((packs + per_thread - 1) / per_thread + 31) / 32 * 32;
  };
  if (threads(1) <= kMaxPackedThreads) {
    add_norm_packed_kernel<T, 1><<<rows, threads(1), 0, stream>>>(x, delta, r, h, dim, params);
  } else if (threads(2) <= kMaxPackedThreads) {
    add_norm_packed_kernel<T, 2><<<rows, threads(2), 0, stream>>>(x, delta, r, h, dim, params);
  } else {
    add_norm_packed_kernel<T, 4><<<rows, threads(4), 0, stream>>>(x, delta, r, h, dim, params);
  }
  WB_CHECK_LAUNCH("add_norm_packed_kernel");
}

template <typename T>
void launch_add_norm(const float* x, const T* delta, float* r, T* h, int rows, int dim,
                     const NormParams& params, cudaStream_t stream) {
  check_norm_args("add_norm_fused", x, h, rows, dim, params);
  check_add_args("add_norm_fused", x, delta, r, static_cast<std::size_t>(rows) * dim);
  if (rows == 0) return;
  // Rows in grid.x (up to 2^31 - 1 blocks; grid.y would stop at 65535): one block per row,
  // or one per kWarpRowsPerBlock rows for the warp kernel.
  if (packs_fit(x, delta, r, h, dim, params)) {
    launch_packed(x, delta, r, h, rows, dim, params, stream);
  } else if (dim <= kMaxThreads * kMaxPerThread) {
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
