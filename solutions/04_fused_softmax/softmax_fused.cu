// Chapter 04, reference: the fused softmax. Each row is read from device memory once and
// written once: 2 * rows * cols * 4 bytes in total, the least any softmax can move.
//
// The work per row is tiny (a max, a sum, a scale), so the whole game is keeping enough
// loads in flight on every SM. Which shape of parallelism does that depends on the row:
//
//   row length              who owns a row                      where the row waits
//   cols <= 1024            a group of 1..32 lanes of a warp    registers
//   cols <= 16384, many     one block (64 to 512 threads)       registers
//   rows
//   long rows, or few       a cluster of 1..16 blocks, each     registers (streamed past
//   medium rows             with a slice of the row             196608 columns)
//
// The last case is what an LLM's last layer needs: 1 or 16 rows of 151936 logits would
// leave all but 1 or 16 of the GPU's 132 SMs idle with a block per row. Each block of a
// cluster computes the max and the sum of exponentials of its slice (the "online softmax"
// pair), the blocks exchange these pairs through distributed shared memory (a Hopper
// feature: a block can read the shared memory of the other blocks of its cluster), each
// combines them into the row's max and sum, and writes its slice: one launch, one read,
// one write. GPUs before Hopper (no clusters) get the same kernel with one block per row.
//
// Vector width: 16-byte loads and stores (W = 4 floats) when every row starts on a 16-byte
// boundary, i.e. x and y are 16-byte aligned and cols % 4 == 0; otherwise W = 1. Rows that
// are not a multiple of 4 therefore take the scalar path: correct, coalesced, a bit slower.
#include <cooperative_groups.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstdint>

#include "softmax.cuh"
#include "wb/check.hpp"

namespace cg = cooperative_groups;

namespace ch04 {
namespace {

// Clusters (and distributed shared memory) exist from compute capability 9.0 (Hopper).
#if !defined(__CUDA_ARCH__) || __CUDA_ARCH__ >= 900
#define CH04_HAS_CLUSTERS 1
#else
#define CH04_HAS_CLUSTERS 0
#endif

// ------------------------------------------------------------------------------------------
// Packs: W consecutive floats moved by one instruction (W = 4: one 16-byte access).

template <int W>
struct Pack {
  float v[W];
};

template <int W>
__device__ __forceinline__ Pack<W> load_pack(const float* p) {
  Pack<W> pack;
  if constexpr (W == 4) {
    const float4 f = *reinterpret_cast<const float4*>(p);
    pack.v[0] = f.x, pack.v[1] = f.y, pack.v[2] = f.z, pack.v[3] = f.w;
  } else {
    pack.v[0] = *p;
  }
  return pack;
}

template <int W>
__device__ __forceinline__ void store_pack(float* p, const Pack<W>& pack) {
  if constexpr (W == 4) {
    *reinterpret_cast<float4*>(p) = make_float4(pack.v[0], pack.v[1], pack.v[2], pack.v[3]);
  } else {
    *p = pack.v[0];
  }
}

template <int W>
__device__ __forceinline__ Pack<W> neg_inf_pack() {
  Pack<W> pack;
#pragma unroll
  for (int j = 0; j < W; ++j) pack.v[j] = -INFINITY;
  return pack;
}

// ------------------------------------------------------------------------------------------
// Reductions. xor-shuffles with offsets below kLanes stay inside aligned groups of kLanes
// lanes, so the same code reduces a whole warp (32) or each part of one (1, 2, ..., 16).

template <int kLanes>
__device__ __forceinline__ float group_max(float v) {
#pragma unroll
  for (int offset = kLanes / 2; offset > 0; offset /= 2)
    v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, offset));
  return v;
}

template <int kLanes>
__device__ __forceinline__ float group_sum(float v) {
#pragma unroll
  for (int offset = kLanes / 2; offset > 0; offset /= 2)
    v += __shfl_xor_sync(0xffffffffu, v, offset);
  return v;
}

// Every thread of the block gets the result. Separate shared arrays for max and sum, so the
// second reduction does not need a barrier to protect the first one's array.
template <int kThreads>
__device__ __forceinline__ float block_max(float v) {
  __shared__ float per_warp[kThreads / 32];
  v = group_max<32>(v);
  if (threadIdx.x % 32 == 0) per_warp[threadIdx.x / 32] = v;
  __syncthreads();
  const int lane = threadIdx.x % 32;
  return group_max<32>(lane < kThreads / 32 ? per_warp[lane] : -INFINITY);
}

template <int kThreads>
__device__ __forceinline__ float block_sum(float v) {
  __shared__ float per_warp[kThreads / 32];
  v = group_sum<32>(v);
  if (threadIdx.x % 32 == 0) per_warp[threadIdx.x / 32] = v;
  __syncthreads();
  const int lane = threadIdx.x % 32;
  return group_sum<32>(lane < kThreads / 32 ? per_warp[lane] : 0.0f);
}

// ------------------------------------------------------------------------------------------
// Short rows (cols <= 1024): a group of kLanes lanes per row, kPacks packs per lane.
// Lanes of a group read adjacent packs, and the groups of a warp read adjacent rows, so a
// warp's loads stay coalesced even for rows of 3 columns.

constexpr int kGroupKernelThreads = 256;

template <int kLanes, int kPacks, int W>
__global__ void __launch_bounds__(kGroupKernelThreads)
    softmax_group_per_row(const float* __restrict__ x, float* __restrict__ y, int rows, int cols) {
  constexpr int kRowsPerBlock = kGroupKernelThreads / kLanes;
  const int lane = threadIdx.x % kLanes;
  const long long row = static_cast<long long>(blockIdx.x) * kRowsPerBlock + threadIdx.x / kLanes;
  // No early return for rows past the end: every lane must take part in the shuffles.
  const bool live = row < rows;
  const size_t offset = live ? static_cast<size_t>(row) * cols : 0;

  Pack<W> v[kPacks];
  float m = -INFINITY;
#pragma unroll
  for (int k = 0; k < kPacks; ++k) {
    const int c = (k * kLanes + lane) * W;  // with W = 4, cols % 4 == 0: the whole pack is in
    v[k] = (live && c < cols) ? load_pack<W>(x + offset + c) : neg_inf_pack<W>();
#pragma unroll
    for (int j = 0; j < W; ++j) m = fmaxf(m, v[k].v[j]);
  }
  m = group_max<kLanes>(m);  // the row's max: subtracting it keeps exp <= 1 (no overflow)

  float s = 0.0f;
#pragma unroll
  for (int k = 0; k < kPacks; ++k)
#pragma unroll
    for (int j = 0; j < W; ++j) {
      v[k].v[j] = __expf(v[k].v[j] - m);  // -inf entries (and padding) become 0
      s += v[k].v[j];
    }
  const float inv_sum = 1.0f / group_sum<kLanes>(s);

#pragma unroll
  for (int k = 0; k < kPacks; ++k) {
    const int c = (k * kLanes + lane) * W;
    if (live && c < cols) {
#pragma unroll
      for (int j = 0; j < W; ++j) v[k].v[j] *= inv_sum;
      store_pack<W>(y + offset + c, v[k]);
    }
  }
}

// ------------------------------------------------------------------------------------------
// Medium rows (cols <= 16384): one block per row, 32 floats per thread in registers: all
// of a thread's loads go out before any is used (at 4096 columns, 128 threads of 32 floats
// matched a device copy of the same bytes on an H200; 256 x 16 was 2% slower, 1024 x 4 30%).

constexpr int kFloatsPerThread = 32;

template <int kThreads, int W>
__global__ void __launch_bounds__(kThreads)
    softmax_block_per_row(const float* __restrict__ x, float* __restrict__ y, int cols) {
  constexpr int kPacks = kFloatsPerThread / W;
  const size_t offset = static_cast<size_t>(blockIdx.x) * cols;

  Pack<W> v[kPacks];
  float m = -INFINITY;
#pragma unroll
  for (int k = 0; k < kPacks; ++k) {
    const int c = (k * kThreads + threadIdx.x) * W;
    v[k] = c < cols ? load_pack<W>(x + offset + c) : neg_inf_pack<W>();
#pragma unroll
    for (int j = 0; j < W; ++j) m = fmaxf(m, v[k].v[j]);
  }
  m = block_max<kThreads>(m);

  float s = 0.0f;
#pragma unroll
  for (int k = 0; k < kPacks; ++k)
#pragma unroll
    for (int j = 0; j < W; ++j) {
      v[k].v[j] = __expf(v[k].v[j] - m);
      s += v[k].v[j];
    }
  const float inv_sum = 1.0f / block_sum<kThreads>(s);

#pragma unroll
  for (int k = 0; k < kPacks; ++k) {
    const int c = (k * kThreads + threadIdx.x) * W;
    if (c < cols) {
#pragma unroll
      for (int j = 0; j < W; ++j) v[k].v[j] *= inv_sum;
      store_pack<W>(y + offset + c, v[k]);
    }
  }
}

// ------------------------------------------------------------------------------------------
// Long rows: a cluster of `parts` blocks per row, each block a slice of `chunk` columns held
// in registers (48 floats per thread: one batch of loads, as in the kernels above). A slice
// too long for that (rows beyond 16 * 12288 = 196608 columns) is streamed instead: one pass
// for the statistics, a second one, mostly from L2, for the output.
//
// Measured on an H200 (1x151936, 16x151936, 64x32000): 256-thread blocks with the slice in
// registers beat 1024-thread blocks with the slice in shared memory by 7-25%.

constexpr int kSplitThreads = 256;
constexpr int kSplitFloatsPerThread = 48;
constexpr int kSliceCapacity = kSplitThreads * kSplitFloatsPerThread;  // 12288 floats
constexpr int kUnroll = 4;  // packs each thread loads before using any, when streaming

// A partial softmax: the max of some entries and the sum of exp(entry - max) over them.
// Two partials combine exactly by rescaling both sums to the larger max (the "online
// softmax" of Milakov & Gimelshein, 2018).
struct MaxSum {
  float max;
  float sum;
};

__device__ __forceinline__ MaxSum combine(MaxSum a, MaxSum b) {
  const float m = fmaxf(a.max, b.max);
  if (m == -INFINITY) return {m, 0.0f};  // nothing but -inf so far: nothing to rescale
  return {m, a.sum * __expf(a.max - m) + b.sum * __expf(b.max - m)};
}

template <int W>
__device__ __forceinline__ MaxSum pack_stats(const Pack<W>& p) {
  float m = p.v[0];
#pragma unroll
  for (int j = 1; j < W; ++j) m = fmaxf(m, p.v[j]);
  if (m == -INFINITY) return {m, 0.0f};
  float s = 0.0f;
#pragma unroll
  for (int j = 0; j < W; ++j) s += __expf(p.v[j] - m);
  return {m, s};
}

__device__ __forceinline__ MaxSum warp_combine(MaxSum t) {
#pragma unroll
  for (int offset = 16; offset > 0; offset /= 2) {
    const MaxSum other = {__shfl_xor_sync(0xffffffffu, t.max, offset),
                          __shfl_xor_sync(0xffffffffu, t.sum, offset)};
    t = combine(t, other);
  }
  return t;
}

template <int W>
__global__ void __launch_bounds__(kSplitThreads)
    softmax_split_row(const float* __restrict__ x, float* __restrict__ y, int cols, int chunk) {
  constexpr int kPacks = kSplitFloatsPerThread / W;
  constexpr int kStride = kSplitThreads * W;  // floats between one thread's packs
  __shared__ MaxSum per_warp[kSplitThreads / 32];
  __shared__ MaxSum slice_stats;  // read by the other blocks of the cluster

#if CH04_HAS_CLUSTERS
  cg::cluster_group cluster = cg::this_cluster();
  const int parts = static_cast<int>(cluster.num_blocks());
  const int part = static_cast<int>(cluster.block_rank());
#else
  const int parts = 1, part = 0;
#endif
  const size_t row = blockIdx.x / parts;
  const int begin = part * chunk;
  const int n = max(0, min(cols, begin + chunk) - begin);  // this slice's floats, a multiple of W
  const float* x_slice = x + row * cols + begin;
  float* y_slice = y + row * cols + begin;
  const int lane = threadIdx.x % 32;
  const bool in_registers = chunk <= kSliceCapacity;  // the same for every block of the launch

  // Pass 1: this thread's partial (max, sum).
  Pack<W> v[kPacks];
  MaxSum t = {-INFINITY, 0.0f};
  if (in_registers) {
    float m = -INFINITY;
#pragma unroll
    for (int k = 0; k < kPacks; ++k) {
      const int i = threadIdx.x * W + k * kStride;
      v[k] = i < n ? load_pack<W>(x_slice + i) : neg_inf_pack<W>();
#pragma unroll
      for (int j = 0; j < W; ++j) m = fmaxf(m, v[k].v[j]);
    }
    float s = 0.0f;
    if (m != -INFINITY)
#pragma unroll
      for (int k = 0; k < kPacks; ++k)
#pragma unroll
        for (int j = 0; j < W; ++j) s += __expf(v[k].v[j] - m);
    t = {m, s};
  } else {
    for (int base = threadIdx.x * W; base < n; base += kUnroll * kStride) {
      Pack<W> p[kUnroll];
#pragma unroll
      for (int u = 0; u < kUnroll; ++u)  // all loads first: kUnroll of them in flight at once
        p[u] = base + u * kStride < n ? load_pack<W>(x_slice + base + u * kStride)
                                      : neg_inf_pack<W>();
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) t = combine(t, pack_stats<W>(p[u]));
    }
  }
  // The slice's partial: combine within each warp, then across the block's warps.
  t = warp_combine(t);
  if (lane == 0) per_warp[threadIdx.x / 32] = t;
  __syncthreads();
  t = warp_combine(lane < kSplitThreads / 32 ? per_warp[lane] : MaxSum{-INFINITY, 0.0f});
  if (threadIdx.x == 0) slice_stats = t;

  // The row's (max, sum): lane q of every warp reads the partial of block q of the cluster
  // through distributed shared memory, and the warp combines them.
#if CH04_HAS_CLUSTERS
  cluster.sync();  // every block's slice_stats written and visible to the cluster
  const MaxSum row_stats = warp_combine(
      lane < parts ? *cluster.map_shared_rank(&slice_stats, lane) : MaxSum{-INFINITY, 0.0f});
#else
  const MaxSum row_stats = t;
#endif
  // An all -inf row has max -inf and sum 0: exp(-inf - (-inf)) = NaN, the documented result.
  const float inv_sum = 1.0f / row_stats.sum;

  // Pass 2: y = exp(x - max) / sum, from registers (or from x again, mostly in L2).
  if (in_registers) {
#pragma unroll
    for (int k = 0; k < kPacks; ++k) {
      const int i = threadIdx.x * W + k * kStride;
      if (i < n) {
#pragma unroll
        for (int j = 0; j < W; ++j) v[k].v[j] = __expf(v[k].v[j] - row_stats.max) * inv_sum;
        store_pack<W>(y_slice + i, v[k]);
      }
    }
  } else {
    for (int i = threadIdx.x * W; i < n; i += kStride) {
      Pack<W> p = load_pack<W>(x_slice + i);
#pragma unroll
      for (int j = 0; j < W; ++j) p.v[j] = __expf(p.v[j] - row_stats.max) * inv_sum;
      store_pack<W>(y_slice + i, p);
    }
  }
#if CH04_HAS_CLUSTERS
  cluster.sync();  // keep slice_stats alive until every block of the cluster has read it
#endif
}

// ------------------------------------------------------------------------------------------
// Host side: pick the kernel and its launch shape.

int ceil_div(int a, int b) { return (a + b - 1) / b; }

int next_pow2(int v) {
  int p = 1;
  while (p < v) p *= 2;
  return p;
}

int sm_count() {
  int device = 0, count = 0;
  WB_CUDA(cudaGetDevice(&device));
  WB_CUDA(cudaDeviceGetAttribute(&count, cudaDevAttrMultiProcessorCount, device));
  return count;
}

template <int kLanes, int kPacks, int W>
void launch_group_per_row(const float* x, float* y, int rows, int cols, cudaStream_t stream) {
  constexpr int kRowsPerBlock = kGroupKernelThreads / kLanes;
  const int blocks = ceil_div(rows, kRowsPerBlock);
  softmax_group_per_row<kLanes, kPacks, W>
      <<<blocks, kGroupKernelThreads, 0, stream>>>(x, y, rows, cols);
  WB_CHECK_LAUNCH("softmax_group_per_row");
}

// cols <= 1024. The row's packs are spread over the fewest lanes (a power of two) that
// hold them with one pack per lane, up to a full warp; past 32 packs, lanes hold several.
template <int W>
void launch_short_rows(const float* x, float* y, int rows, int cols, cudaStream_t stream) {
  switch (next_pow2(ceil_div(cols, W))) {
    case 1: return launch_group_per_row<1, 1, W>(x, y, rows, cols, stream);
    case 2: return launch_group_per_row<2, 1, W>(x, y, rows, cols, stream);
    case 4: return launch_group_per_row<4, 1, W>(x, y, rows, cols, stream);
    case 8: return launch_group_per_row<8, 1, W>(x, y, rows, cols, stream);
    case 16: return launch_group_per_row<16, 1, W>(x, y, rows, cols, stream);
    case 32: return launch_group_per_row<32, 1, W>(x, y, rows, cols, stream);
    case 64: return launch_group_per_row<32, 2, W>(x, y, rows, cols, stream);
    case 128: return launch_group_per_row<32, 4, W>(x, y, rows, cols, stream);
    case 256: return launch_group_per_row<32, 8, W>(x, y, rows, cols, stream);
    case 512:
      if constexpr (W == 1) return launch_group_per_row<32, 16, W>(x, y, rows, cols, stream);
      break;
    case 1024:
      if constexpr (W == 1) return launch_group_per_row<32, 32, W>(x, y, rows, cols, stream);
      break;
  }
  throw std::logic_error("ch04 softmax_fused: no short-row kernel for cols = " +
                         std::to_string(cols));
}

template <int kThreads, int W>
void launch_block_per_row(const float* x, float* y, int rows, int cols, cudaStream_t stream) {
  softmax_block_per_row<kThreads, W><<<rows, kThreads, 0, stream>>>(x, y, cols);
  WB_CHECK_LAUNCH("softmax_block_per_row");
}

// cols <= 16384: the fewest threads (64 to 512) that hold the row at 32 floats each.
template <int W>
void launch_medium_rows(const float* x, float* y, int rows, int cols, cudaStream_t stream) {
  switch (std::max(64, next_pow2(ceil_div(cols, kFloatsPerThread)))) {
    case 64: return launch_block_per_row<64, W>(x, y, rows, cols, stream);
    case 128: return launch_block_per_row<128, W>(x, y, rows, cols, stream);
    case 256: return launch_block_per_row<256, W>(x, y, rows, cols, stream);
    case 512: return launch_block_per_row<512, W>(x, y, rows, cols, stream);
  }
  throw std::logic_error("ch04 softmax_fused: no block-per-row kernel for cols = " +
                         std::to_string(cols));
}

cudaLaunchConfig_t split_config(int rows, int parts, cudaStream_t stream,
                                cudaLaunchAttribute* cluster_attr) {
  cudaLaunchConfig_t config = {};
  config.gridDim = dim3(static_cast<unsigned>(rows) * parts);
  config.blockDim = dim3(kSplitThreads);
  config.stream = stream;
  cluster_attr->id = cudaLaunchAttributeClusterDimension;
  cluster_attr->val.clusterDim.x = parts;
  cluster_attr->val.clusterDim.y = 1;
  cluster_attr->val.clusterDim.z = 1;
  config.attrs = cluster_attr;
  config.numAttrs = 1;
  return config;
}

// The largest cluster the split kernel can launch with on this GPU (1: no clusters), asked
// once: Hopper allows 8 blocks portably and 16 on request, where the GPCs have room.
template <int W>
int max_cluster_blocks() {
  static const int value = [] {
    const auto kernel = softmax_split_row<W>;
    int device = 0, major = 0;
    WB_CUDA(cudaGetDevice(&device));
    WB_CUDA(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device));
    cudaFuncAttributes attributes;
    WB_CUDA(cudaFuncGetAttributes(&attributes, kernel));
    // Clusters need a Hopper-or-newer GPU running code compiled for one.
    if (major < 9 || attributes.binaryVersion < 90) return 1;
    WB_CUDA(cudaFuncSetAttribute(kernel, cudaFuncAttributeNonPortableClusterSizeAllowed, 1));
    for (int parts = 16; parts > 1; --parts) {
      cudaLaunchAttribute attr;
      const cudaLaunchConfig_t config = split_config(1, parts, nullptr, &attr);
      int active = 0;
      if (cudaOccupancyMaxActiveClusters(&active, kernel, &config) == cudaSuccess && active > 0)
        return parts;
      (void)cudaGetLastError();  // this size is not supported here: try a smaller one
    }
    return 1;
  }();
  return value;
}

template <int W>
void launch_split_rows(const float* x, float* y, int rows, int cols, cudaStream_t stream) {
  const int max_parts = max_cluster_blocks<W>();
  // Enough blocks per row for a slice to fit in registers, and when rows are few, enough to
  // spread them over every SM.
  const int parts = std::clamp(std::max(ceil_div(cols, kSliceCapacity), sm_count() / rows), 1,
                               max_parts);
  if (static_cast<long long>(rows) * parts > INT_MAX)
    throw std::invalid_argument("ch04 softmax_fused: rows * blocks per row exceeds the grid");
  const int chunk = ceil_div(ceil_div(cols, parts), 4) * 4;  // a multiple of any pack width

  cudaLaunchAttribute attr;
  cudaLaunchConfig_t config = split_config(rows, parts, stream, &attr);
  if (max_parts == 1) config.numAttrs = 0;  // no clusters here: a plain launch, a block per row
  WB_CUDA(cudaLaunchKernelEx(&config, softmax_split_row<W>, x, y, cols, chunk));
  WB_CHECK_LAUNCH("softmax_split_row");
}

template <int W>
void launch_fused(const float* x, float* y, int rows, int cols, cudaStream_t stream) {
  if (cols <= 1024) return launch_short_rows<W>(x, y, rows, cols, stream);
  // Medium rows: a block per row, as long as there are rows enough to fill the GPU (or the
  // row is too short to be worth splitting).
  if (cols <= 16 * 1024 && (cols <= 4096 || rows >= sm_count()))
    return launch_medium_rows<W>(x, y, rows, cols, stream);
  return launch_split_rows<W>(x, y, rows, cols, stream);
}

bool aligned16(const void* p) { return reinterpret_cast<std::uintptr_t>(p) % 16 == 0; }

}  // namespace

void softmax_fused(const float* x, float* y, int rows, int cols, cudaStream_t stream) {
  check_softmax_args("softmax_fused", x, y, rows, cols);
  if (rows == 0) return;
  if (cols > INT_MAX - 4)
    throw std::invalid_argument("ch04 softmax_fused: cols must be < INT_MAX - 4");
  // 16-byte accesses need every row to start on a 16-byte boundary.
  if (aligned16(x) && aligned16(y) && cols % 4 == 0)
    launch_fused<4>(x, y, rows, cols, stream);
  else
    launch_fused<1>(x, y, rows, cols, stream);
}

}  // namespace ch04
