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
//   long rows, few of them  up to one block per SM, each with   registers
//                           a slice of the row (launches of
//                           as many rows as fit, below a row
//                           per SM)
//   long rows, many         one block                           streamed twice (L2)
//
// The long-row case is what an LLM's last layer needs: 1 or 16 rows of 151936 logits would
// leave all but 1 or 16 of the GPU's 132 SMs idle with a block per row. Each block of a row
// computes the max and the sum of exponentials of its slice (the "online softmax" pair),
// publishes the pair in global memory, waits for the pairs of the row's other blocks,
// combines them into the row's max and sum, and writes its slice: one launch, one read, one
// write. (Hopper's thread-block clusters could exchange the pairs through distributed shared
// memory instead, but a cluster has at most 16 blocks: 16 SMs of 132 for a whole row, which
// was slower at both 1x151936 and 16x151936 in the development runs on an H200. Nor do 16
// rows fit a cluster each: an H200 holds 15 clusters of 8 SMs or 14 of 16 at once, per
// cudaOccupancyMaxActiveClusters, and the rows left over wait for a second wave.)
//
// Each exponential is computed once. A thread keeps exp(x - m) against its own max m in
// registers while it sums them, and after the exchange multiplies by exp(m - row_max) / sum:
// the second pass is a multiply, not another exp. On an H200 the exps alone keep an SM's
// special-function units busy for about 0.6 us at 16x151936 (16 per clock per SM), so a
// second round of them sat on the critical path after the exchange.
//
// Vector width: 16-byte loads and stores (W = 4 floats) when every row starts on a 16-byte
// boundary, i.e. x and y are 16-byte aligned and cols % 4 == 0; otherwise W = 1. Rows that
// are not a multiple of 4 therefore take the scalar path: correct, coalesced, a bit slower.
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <map>
#include <mutex>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "softmax.cuh"
#include "wb/check.hpp"

namespace ch04 {
namespace {

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
// Long rows: `parts` blocks per row, each holding a slice of `chunk` columns in registers
// (kFloats per thread, all loaded before any is used). The blocks of a row exchange their
// partial (max, sum) through global memory and wait for each other (see RowExchange below),
// then each writes its slice: one launch, one read, one write.
//
// Rows too long for the slices to fit (or launches that cannot use the exchange) take
// softmax_row_streamed: a block per row, one pass for the statistics and a second one,
// mostly from L2, for the output.

constexpr int kSoloSplitThreads = 256;    // a split block alone on its SM
constexpr int kSharedSplitThreads = 128;  // split blocks sharing an SM (several rows)
constexpr int kSharedSplitFloats = 40;    // per thread, at most, in those blocks
constexpr int kSplitBlocksPerSM = 4;      // what launch_split_rows aims for over all the rows
constexpr int kMaxSplitFloats = 48;  // per thread: the largest slice is 256 x 48 = 12288 floats
constexpr int kStreamThreads = 256;  // softmax_row_streamed's block
constexpr int kUnroll = 4;           // packs each thread loads before using any, when streaming

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
__device__ __forceinline__ float pack_max(const Pack<W>& p) {
  if constexpr (W == 4) return fmaxf(fmaxf(p.v[0], p.v[1]), fmaxf(p.v[2], p.v[3]));
  else return p.v[0];
}

template <int W>
__device__ __forceinline__ float pack_sum(const Pack<W>& p) {
  if constexpr (W == 4) return (p.v[0] + p.v[1]) + (p.v[2] + p.v[3]);
  else return p.v[0];
}

template <int W>
__device__ __forceinline__ MaxSum pack_stats(const Pack<W>& p) {
  const float m = pack_max<W>(p);
  if (m == -INFINITY) return {m, 0.0f};
  float s = 0.0f;
#pragma unroll
  for (int j = 0; j < W; ++j) s += __expf(p.v[j] - m);
  return {m, s};
}

// Every lane gets the combination of the warp's 32 partials.
__device__ __forceinline__ MaxSum warp_combine(MaxSum t) {
#pragma unroll
  for (int offset = 16; offset > 0; offset /= 2) {
    const MaxSum other = {__shfl_xor_sync(0xffffffffu, t.max, offset),
                          __shfl_xor_sync(0xffffffffu, t.sum, offset)};
    t = combine(t, other);
  }
  return t;
}

// A block's combination of every thread's partial, in two steps. First each warp combines its
// 32 partials with shuffles and puts the result in per_warp[warp] (shared, one entry per
// warp); a barrier. Then each warp that needs the block's result reads all the entries, lane
// l taking entry l % kWarps, and reduces them across its lanes: the max first, then the sums
// rescaled to it (one exp per lane, not one per entry in a chain). Nothing writes per_warp
// again, so no second barrier is needed.
//
// The usual second step, warp 0 reducing the entries and a barrier to hand its result to the
// block, sits on the critical path twice per long-row block (its slice's partial, then its
// row's). Without it, 16x151936 went from 10.0-10.3 to 9.5-9.8 us and 64x32000 from 9.7-9.9
// to 9.0-9.3 (development runs on an H200, before and after in the same run).
__device__ __forceinline__ void warp_partials_to_shared(MaxSum t, MaxSum* per_warp) {
  t = warp_combine(t);
  if (threadIdx.x % 32 == 0) per_warp[threadIdx.x / 32] = t;
  __syncthreads();
}

// Call with every lane of the warp. xor-shuffles with offsets below kWarps stay inside aligned
// groups of kWarps lanes, and each group holds every entry once.
template <int kThreads>
__device__ __forceinline__ MaxSum fold_warp_partials(const MaxSum* per_warp) {
  constexpr int kWarps = kThreads / 32;
  static_assert(kWarps >= 1 && kWarps <= 32 && (kWarps & (kWarps - 1)) == 0,
                "a power-of-two number of warps");
  const MaxSum entry = per_warp[threadIdx.x % kWarps];
  const float m = group_max<kWarps>(entry.max);
  const float s = m == -INFINITY ? 0.0f : entry.sum * __expf(entry.max - m);
  return {m, group_sum<kWarps>(s)};
}

// Every thread of the block gets the combination of every thread's partial.
template <int kThreads>
__device__ __forceinline__ MaxSum block_combine(MaxSum t) {
  __shared__ MaxSum per_warp[kThreads / 32];
  warp_partials_to_shared(t, per_warp);
  return fold_warp_partials<kThreads>(per_warp);
}

// RowExchange: how the blocks of one row meet, without a second kernel.
//
// Each block owns one slot. It publishes its partial there, then reads every slot of its
// row until all of them hold this launch's partials. Each 64-bit word of a slot carries a
// value in its low half and the launch's `epoch` (a number the host never repeats on this
// stream) in its high half: a reader that sees the right epoch sees the right value, with
// no fence and no flag to reset between launches.
//
// The two words of a slot travel as one 16-byte store and are polled as one 16-byte load:
// one request per poll instead of two. Every block of the row polls every slot, so the slot's
// line is the hottest address of the kernel; halving the requests made 1x151936 (132 blocks
// polling each line) 0.2 us faster on an H200. Nothing relies on the 16 bytes arriving
// together: each word carries its own epoch, and a reader that catches one new word and one
// old word simply polls again.
//
// Waiting on other blocks is only safe when they all run at once: the launch is cooperative
// (the runtime refuses it rather than let some blocks wait for blocks that cannot start).
//
// Each slot has a 128-byte line of its own. Measured on an H200 at 1x151936 (132 blocks,
// each polling 132 slots): 16-byte slots, 8 to a line, took 7.9 us; a line each, 7.1 us.
struct alignas(128) Slot {
  unsigned long long max_word, sum_word;
  unsigned long long padding[14];
};
static_assert(sizeof(Slot) == 128, "one slot per 128-byte line");

__device__ __forceinline__ unsigned long long tagged(float value, unsigned epoch) {
  return static_cast<unsigned long long>(epoch) << 32 | __float_as_uint(value);
}

// .relaxed.gpu: the access goes to L2, where every SM sees the same copy (plain loads could
// be served from this SM's L1 forever). CUDA C++ has no 16-byte atomic_ref, hence the PTX.
__device__ __forceinline__ void publish(Slot& slot, MaxSum partial, unsigned epoch) {
  asm volatile("st.relaxed.gpu.global.v2.b64 [%0], {%1, %2};" ::"l"(&slot.max_word),
               "l"(tagged(partial.max, epoch)), "l"(tagged(partial.sum, epoch))
               : "memory");
}

// Polls the slot until both words carry `epoch`; then returns its partial.
__device__ __forceinline__ MaxSum wait_for(const Slot& slot, unsigned epoch) {
  unsigned long long max_word, sum_word;
  do {
    asm volatile("ld.relaxed.gpu.global.v2.b64 {%0, %1}, [%2];"
                 : "=l"(max_word), "=l"(sum_word)
                 : "l"(&slot.max_word)
                 : "memory");
  } while (static_cast<unsigned>(max_word >> 32) != epoch ||
           static_cast<unsigned>(sum_word >> 32) != epoch);
  return {__uint_as_float(static_cast<unsigned>(max_word)),
          __uint_as_float(static_cast<unsigned>(sum_word))};
}

// Thread q waits for slot q (and q + kThreads, ...) of the row; then the block combines them.
template <int kThreads>
__device__ __forceinline__ MaxSum gather_row(const Slot* row_slots, int parts, unsigned epoch) {
  MaxSum t = {-INFINITY, 0.0f};
  for (int q = threadIdx.x; q < parts; q += kThreads) t = combine(t, wait_for(row_slots[q], epoch));
  return block_combine<kThreads>(t);
}

template <int kThreads, int kFloats, int W>
__global__ void __launch_bounds__(kThreads)
    softmax_split_row(const float* __restrict__ x, float* __restrict__ y, int cols, int chunk,
                      int parts, Slot* __restrict__ slots, unsigned epoch) {
  constexpr int kPacks = kFloats / W;
  constexpr int kStride = kThreads * W;  // floats between one thread's packs
  const int row = blockIdx.x / parts, part = blockIdx.x % parts;
  const int begin = part * chunk;
  const int n = max(0, min(cols, begin + chunk) - begin);  // this slice's floats
  const float* x_slice = x + static_cast<size_t>(row) * cols + begin;
  float* y_slice = y + static_cast<size_t>(row) * cols + begin;

  // This thread's packs, all loads in flight at once, and their max m.
  Pack<W> v[kPacks];
  float m = -INFINITY;
#pragma unroll
  for (int k = 0; k < kPacks; ++k) {
    const int i = threadIdx.x * W + k * kStride;
    v[k] = i < n ? load_pack<W>(x_slice + i) : neg_inf_pack<W>();
    m = fmaxf(m, pack_max<W>(v[k]));
  }
  // v becomes exp(v - m), kept for the output, and s their sum. A thread with no finite
  // entry (all -inf, or past the end) shifts by 0 instead, so its exps are exp(-inf) = 0.
  // One shift for all packs, not a test per entry, and the sums in pairs rather than one long
  // chain: this loop is the SM's busiest stretch (measured on an H200 at 16x151936, the
  // per-entry test and the chain of adds cost about 0.5 us of the kernel's 7).
  const float shift = m == -INFINITY ? 0.0f : m;
  float s = 0.0f;
#pragma unroll
  for (int k = 0; k < kPacks; ++k) {
#pragma unroll
    for (int j = 0; j < W; ++j) v[k].v[j] = __expf(v[k].v[j] - shift);
    s += pack_sum<W>(v[k]);
  }

  // The slice's partial, folded and published by thread 0 alone (no other thread needs it);
  // then the row's, from every slice's.
  __shared__ MaxSum slice_per_warp[kThreads / 32];
  warp_partials_to_shared({m, s}, slice_per_warp);
  Slot* row_slots = slots + static_cast<size_t>(row) * parts;
  if (threadIdx.x < 32) {
    const MaxSum slice = fold_warp_partials<kThreads>(slice_per_warp);
    if (threadIdx.x == 0) publish(row_slots[part], slice, epoch);
  }
  const MaxSum row_stats = gather_row<kThreads>(row_slots, parts, epoch);

  // y = exp(x - m) * exp(m - row_max) / row_sum. A thread without a finite entry gets
  // exp(-inf) = 0 here; an all -inf row has row_max -inf and row_sum 0, so the scale is
  // exp(-inf - (-inf)) / 0 = NaN, the documented result.
  const float scale = __expf(m - row_stats.max) / row_stats.sum;
#pragma unroll
  for (int k = 0; k < kPacks; ++k) {
    const int i = threadIdx.x * W + k * kStride;
    if (i < n) {
#pragma unroll
      for (int j = 0; j < W; ++j) v[k].v[j] *= scale;
      store_pack<W>(y_slice + i, v[k]);
    }
  }
}

// A block per row, any length: the online (max, sum) over the row, kUnroll packs in flight
// per thread; then y = exp(x - max) / sum, reading x again (from L2 when the rows are few).
template <int W>
__global__ void __launch_bounds__(kStreamThreads)
    softmax_row_streamed(const float* __restrict__ x, float* __restrict__ y, int cols) {
  constexpr int kStride = kStreamThreads * W;
  const float* x_row = x + static_cast<size_t>(blockIdx.x) * cols;
  float* y_row = y + static_cast<size_t>(blockIdx.x) * cols;

  // Column counters are unsigned: they step up to kUnroll * kStride past cols, beyond the
  // largest int when a row is nearly 2^31 long, and stay below 2^32.
  MaxSum t = {-INFINITY, 0.0f};
  for (unsigned base = threadIdx.x * W; base < unsigned(cols); base += kUnroll * kStride) {
    Pack<W> p[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u)  // all loads first: kUnroll of them in flight at once
      p[u] = base + u * kStride < unsigned(cols) ? load_pack<W>(x_row + base + u * kStride)
                                                 : neg_inf_pack<W>();
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) t = combine(t, pack_stats<W>(p[u]));
  }
  const MaxSum row_stats = block_combine<kStreamThreads>(t);

  const float inv_sum = 1.0f / row_stats.sum;
  for (unsigned i = threadIdx.x * W; i < unsigned(cols); i += kStride) {
    Pack<W> p = load_pack<W>(x_row + i);
#pragma unroll
    for (int j = 0; j < W; ++j) p.v[j] = __expf(p.v[j] - row_stats.max) * inv_sum;
    store_pack<W>(y_row + i, p);
  }
}

// ------------------------------------------------------------------------------------------
// Host side: pick the kernel and its launch shape.

int ceil_div(int a, int b) { return a / b + (a % b != 0); }  // a + b - 1 overflows near 2^31

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

// Where the slots live. The API allows no allocation inside a call, so they are a static
// device array (zero at module load, 2 MiB), cut into kRegions regions. Launches on one
// stream run one after the other and can share a region; launches on different streams may
// run at the same time, so a region belongs to one stream while that stream has launches in
// flight on it. An event recorded after each launch says when that is over; then another
// stream may take the region. When all are busy, the launch takes the streamed kernel.
constexpr int kRegions = 16;
constexpr int kSlotsPerRegion = 1024;  // blocks per launch at most: 4 per SM up to 256 SMs
__device__ Slot g_slots[kRegions * kSlotsPerRegion];

struct Region {
  Slot* slots = nullptr;
  cudaStream_t stream = nullptr;   // the stream that used it last
  cudaEvent_t last_use = nullptr;  // recorded on that stream after its last launch
  unsigned epoch = 0;              // the last epoch handed out; a fresh slot holds 0
};

class RegionTable {
 public:
  // A region for one launch on `stream` and the launch's epoch, or nullptr when every
  // region is in use on other streams. Call done(region, stream) after the launch.
  Region* acquire(cudaStream_t stream) {
    const std::lock_guard<std::mutex> lock(mutex_);
    std::vector<Region>& regions = regions_for_current_device();
    Region* pick = nullptr;
    for (Region& r : regions)
      if (r.last_use != nullptr && r.stream == stream) pick = &r;  // this stream's own
    for (Region& r : regions)
      if (pick == nullptr && (r.last_use == nullptr || cudaEventQuery(r.last_use) == cudaSuccess))
        pick = &r;  // never used, or its last launch is over
    (void)cudaGetLastError();  // cudaEventQuery's "not ready" is an answer, not an error
    if (pick == nullptr) return nullptr;
    if (pick->last_use == nullptr)
      WB_CUDA(cudaEventCreateWithFlags(&pick->last_use, cudaEventDisableTiming));
    pick->stream = stream;
    if (++pick->epoch == 0) pick->epoch = 1;  // after 2^32 launches: never a fresh slot's 0
    return pick;
  }

  void done(Region* region, cudaStream_t stream) {
    const std::lock_guard<std::mutex> lock(mutex_);
    WB_CUDA(cudaEventRecord(region->last_use, stream));
  }

 private:
  std::vector<Region>& regions_for_current_device() {
    int device = 0;
    WB_CUDA(cudaGetDevice(&device));
    std::vector<Region>& regions = by_device_[device];  // g_slots exists once per device
    if (regions.empty()) {
      void* base = nullptr;
      WB_CUDA(cudaGetSymbolAddress(&base, g_slots));
      regions.resize(kRegions);
      for (int i = 0; i < kRegions; ++i)
        regions[i].slots = static_cast<Slot*>(base) + i * kSlotsPerRegion;
    }
    return regions;
  }

  std::mutex mutex_;
  std::map<int, std::vector<Region>> by_device_;
};

RegionTable& region_table() {
  static RegionTable table;  // lives until exit, like a library handle's workspace
  return table;
}

template <int kThreads, int kFloats, int W>
int resident_split_blocks() {  // how many blocks of this kernel fit on the GPU at once
  static const int value = [] {
    int per_sm = 0;
    WB_CUDA(cudaOccupancyMaxActiveBlocksPerMultiprocessor(
        &per_sm, softmax_split_row<kThreads, kFloats, W>, kThreads, 0));
    return per_sm * sm_count();
  }();
  return value;
}

bool cooperative_launch_supported() {
  static const bool value = [] {
    int device = 0, supported = 0;
    WB_CUDA(cudaGetDevice(&device));
    WB_CUDA(cudaDeviceGetAttribute(&supported, cudaDevAttrCooperativeLaunch, device));
    return supported != 0;
  }();
  return value;
}

// A graph captured from the stream would replay one epoch forever, and the slots would
// then hold that epoch already: the split kernel must not be captured. (Nor could it be as
// written: the region table's cudaEventQuery is not allowed while a stream captures in the
// global mode, and the capture then fails with cudaErrorStreamCaptureInvalidated.)
bool capturing(cudaStream_t stream) {
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  WB_CUDA(cudaStreamIsCapturing(stream, &status));
  return status != cudaStreamCaptureStatusNone;
}

template <int W>
void launch_streamed_rows(const float* x, float* y, int rows, int cols, cudaStream_t stream) {
  softmax_row_streamed<W><<<rows, kStreamThreads, 0, stream>>>(x, y, cols);
  WB_CHECK_LAUNCH("softmax_row_streamed");
}

// Launches softmax_split_row<kThreads, kFloats, W> with `parts` blocks per row, or returns
// false when they cannot all be resident at once.
template <int kThreads, int kFloats, int W>
bool try_split(const float* x, float* y, int rows, int cols, int parts, cudaStream_t stream) {
  const int resident = resident_split_blocks<kThreads, kFloats, W>();
  parts = std::min(parts, resident / rows);  // a cooperative launch must fit all at once
  if (parts < 1 || rows * parts > kSlotsPerRegion) return false;
  const int chunk = ceil_div(ceil_div(cols, parts), 4) * 4;  // a multiple of any pack width
  if (chunk > kThreads * kFloats) return false;
  const int blocks = rows * parts;
  Region* region = region_table().acquire(stream);
  if (region == nullptr) return false;

  cudaLaunchAttribute cooperative = {};
  cooperative.id = cudaLaunchAttributeCooperative;
  cooperative.val.cooperative = 1;
  cudaLaunchConfig_t config = {};
  config.gridDim = dim3(static_cast<unsigned>(blocks));
  config.blockDim = dim3(kThreads);
  config.stream = stream;
  config.attrs = &cooperative;
  config.numAttrs = 1;
  WB_CUDA(cudaLaunchKernelEx(&config, softmax_split_row<kThreads, kFloats, W>, x, y, cols, chunk,
                             parts, region->slots, region->epoch));
  region_table().done(region, stream);
  WB_CHECK_LAUNCH("softmax_split_row");
  return true;
}

// How many rows of `cols` columns one launch of the split kernel takes when there are too
// many for one (0: not even one): the rows that still get slices of at most
// kSharedSplitThreads x kSharedSplitFloats at kSplitBlocksPerSM blocks per SM.
// Measured on an H200 (development runs), against the streamed kernel's block per row:
// 32x151936 took 18.6-18.8 us in launches of 17 and 15 rows, 65-67 us streamed; 132x151936
// 77-80 and 94 us. From about 2 rows per SM the streamed kernel wins (264x151936: 158 batched,
// 135 streamed; 256x32768: 34 and 27), hence batches only up to one row per SM.
int split_rows_per_launch(int cols, int sms) {
  return kSplitBlocksPerSM * sms / ceil_div(cols, kSharedSplitThreads * kSharedSplitFloats);
}

// Few long rows. Blocks per row: about 4 blocks per SM over all the rows, and at most one
// block per SM for a single row (each block polls every slot of its row, so the exchange
// costs grow with the square of the blocks). Measured on an H200 (development runs): 132
// blocks took 7.1 us at 1x151936 and 264 took 8.9; 16x151936 was fastest at about 32
// blocks per row and 64x32000 at 8. One block per SM works best with 256 threads; four per
// SM with 128 threads each (16x151936: 128 threads of 40 floats were about 0.3 us faster
// than 256 of 20). Each thread then holds the fewest registers that fit its slice.
template <int W>
void launch_split_rows(const float* x, float* y, int rows, int cols, cudaStream_t stream) {
  const int sms = sm_count();
  const int parts = std::min(sms, ceil_div(kSplitBlocksPerSM * sms, rows));
  const int chunk = ceil_div(cols, parts);
  const bool split_ok = cooperative_launch_supported() && !capturing(stream);
  if (split_ok) {
    if (parts == sms) {  // one block per SM and row
      constexpr int T = kSoloSplitThreads;
      const int floats = ceil_div(chunk, T);
      if (floats <= 8 && try_split<T, 8, W>(x, y, rows, cols, parts, stream)) return;
      if (floats <= 16 && try_split<T, 16, W>(x, y, rows, cols, parts, stream)) return;
      if (floats <= 32 && try_split<T, 32, W>(x, y, rows, cols, parts, stream)) return;
    } else {  // several blocks per SM
      constexpr int T = kSharedSplitThreads;
      const int floats = ceil_div(chunk, T);
      if (floats <= 16 && try_split<T, 16, W>(x, y, rows, cols, parts, stream)) return;
      if (floats <= 32 && try_split<T, 32, W>(x, y, rows, cols, parts, stream)) return;
      constexpr int kMost = kSharedSplitFloats;
      if (floats <= kMost && try_split<T, kMost, W>(x, y, rows, cols, parts, stream)) return;
    }
    // Longer slices: as many blocks as fit, each with the most registers.
    constexpr int T = kSoloSplitThreads;
    const int parts_needed = ceil_div(cols, T * kMaxSplitFloats);
    if (try_split<T, kMaxSplitFloats, W>(x, y, rows, cols, std::max(parts, parts_needed), stream))
      return;
    // More long rows than one launch can hold, but no more than SMs: the streamed kernel's
    // block per row would leave SMs idle, so take the rows a batch at a time instead.
    const int batch = split_rows_per_launch(cols, sms);
    if (rows <= sms && batch >= 1 && batch < rows) {
      for (int first = 0; first < rows; first += batch) {
        const size_t offset = static_cast<size_t>(first) * cols;
        launch_split_rows<W>(x + offset, y + offset, std::min(batch, rows - first), cols, stream);
      }
      return;
    }
  }
  launch_streamed_rows<W>(x, y, rows, cols, stream);
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
  // 16-byte accesses need every row to start on a 16-byte boundary.
  if (aligned16(x) && aligned16(y) && cols % 4 == 0)
    launch_fused<4>(x, y, rows, cols, stream);
  else
    launch_fused<1>(x, y, rows, cols, stream);
}

}  // namespace ch04
