// Chapter 07, step 4, reference: the fused GPU sampler. No sort, a few bytes per row out.
// Two kernels, one launch per call: sampling (below) and greedy (its own section at the end).
//
// GREEDY (T == 0, or top_k == 1: rule 1) has nothing to select: the token is the row's
// argmax and its confidence 1 / Z, Z = sum exp((x - max) / T) (T = 1 when T == 0): the
// statistics of chapter 04's online softmax and nothing else. So greedy calls get their own
// kernel, greedy_kernel: ONE read pass over global memory (16-byte loads where the row's
// alignment allows), no copy of the row in shared memory, no histogram, and a fixed split of
// each row over a cluster of up to 8 blocks, so that 16 rows keep every SM busy (a block per
// row would use 16 SMs of 132). It must be no slower than chapter 04's softmax of the same
// shape, which reads the row and also writes it back (tests/07_gpu_sampler/test_timing.cu).
//
// SAMPLING, WHO DOES WHAT. One thread-block CLUSTER per row (kClusterSize blocks, Hopper's
// clusters): each block owns a contiguous slice of the row, keeps it in shared memory after
// the first read, and the blocks of a row talk through distributed shared memory (each reads
// the others' shared memory) with cluster.sync() as the barrier. The row is read from device
// memory once; every later pass reads shared memory, 16 bytes (4 entries) per load. 16 rows
// of 151936 are 128 blocks of 512 threads, two per SM (kBlocksPerSM: 64 registers a
// thread, all of the SM's shared memory as shared memory), so all 16 clusters run at once;
// a block per row would use 16 SMs of 132. (At one block per SM an H200 holds 15 clusters
// of 8: the 16th row waited for a second wave, which doubled the time in the development
// runs.)
//
// WHAT A ROW GOES THROUGH.
//   1. Statistics. While the slice is copied in: the max, whether the row has a NaN or
//      +inf, how many entries are not -inf (a compare per entry). Then, in stage 1's pass
//      (below), the softmax denominator Z = sum exp((x - max) / T): the max is known by then,
//      so Z needs no online rescaling (chapter 04), and each entry's exp serves both Z and
//      the histogram's mass.
//   2. Every later question is "which token sits at position n of the sorted order?"
//      (probability descending, ties by lower index) for some n defined by a running sum:
//        top-k:  the smallest n whose COUNT reaches k,
//        top-p:  the smallest n whose MASS reaches top_p x (mass kept by top-k),
//        draw:   the smallest n whose MASS exceeds u x (mass kept by top-p).
//      The draw is the inverse CDF taken in the sorted order, so one routine, select(),
//      answers all three without sorting: histograms narrow down the logit of the n-th
//      token until only one logit value is left (a radix select), and the position inside
//      a run of equal logits follows from the count (equal logits have equal probability;
//      the run is ordered by index).
//   3. The token: the j-th entry, in index order, whose logit has that value. Its
//      confidence: exp((x - max) / T) / Z.
//
// THE SHORT WAY (almost every row). Stage 1's histogram already says how many entries lie
// in the bins up to the one holding the last position any selection can reach (position k
// with top-k; the top-p cut without it). When they are few (at most kGatherCapacity: a top-k
// of 50 is a few hundred), every block sends those entries to the row's first block (the
// leader) through distributed shared memory, and the leader sorts them (each into its
// stage-1 bin's place, which the histogram gives, then ranked within the bin) and walks the
// sorted list once for top-k, top-p and the draw. Only when they are too many
// (a flat row, top-p 0.99, no filter at all) do the selections refine as described next.
//
// THE HISTOGRAMS. The first (stage 1) bins every entry by d = (max - x) / T, 8 bins per
// unit of d, the last bin holding everything from d = 31.875 on (probabilities below
// e^-31.875 of the top one). Equal-width bins in d spread a row's entries over many bins;
// bins on the float's top bits (the textbook radix select) would put most of the row in a
// handful (one exponent covers [8, 16)), and thousands of threads adding to the same
// shared-memory counter wait for each other. Entries of the last bin are counted in
// registers for the same reason. With top-k on, stage 1 holds counts only (the depth is a
// count, and the leader weighs what it gets); otherwise it also holds each bin's mass and
// serves all the selections. Inside the chosen bin a selection compacts the bin's entries (usually a few dozen) into a
// list and refines over their order keys (the float's bits, flipped so that unsigned order
// is float order), 8 bits a pass, from the smallest to the largest key in the bin.
//
// DETERMINISM. The tokens must not depend on timing or launch shape, so nothing is summed
// in an order that can change. Masses are fixed-point integers: an entry's weight
// exp((x - max) / T), at most 1, times 2^s (s such that the whole row's sum fits 62 bits).
// Integer sums are exact in any order, so shared-memory atomics may add them. The float Z
// (for the confidence) is reduced in a fixed tree: each block over its threads, then the
// blocks in rank order. The greedy kernel does the same (see there).
//
// DEVELOPMENT (runs on an H200, 16 x 151936, top-k 50 + top-p 0.9; greedy in brackets, when
// greedy still ran through this kernel and stopped after stage 1):
// every pass over global memory and a leader sort by cub's 64-bit block radix sort: 168 us
// (50); the slice copied to shared memory with all its loads in flight (memcpy_async), the
// entries that matter gathered to the leader, masses added as two 32-bit words: 79 us (27);
// two blocks per SM (one wave of clusters), a counting sort in the leader, count-only
// stage 1 under top-k: 42 us (21). Then each phase timed with clock64() in a row's leader
// (top-k 50 + top-p 0.9, 16 x 151936): the statistics pass, with an exp and a branch per
// entry for the online Z, 7.1 us; a loop in which every thread added up the 256 bins'
// masses, 2.8 us; and, under top-p alone, the leader's counting sort, n^2 / threads
// compares, most of a row's time once it gathered a few hundred entries. Now the max rides
// on the copy-in, Z on stage 1's exp, the total is one warp's sum, the slice is read 16
// bytes at a time and the entries are sorted by stage-1 bin: 26 us (top-p 0.9 alone at
// 256 x 151936: 244 us, from 510). 16-block clusters (non-portable) were tried: slower.
//
// BAD ROWS (the contract's rule 5): a NaN or +inf anywhere, or every entry -inf, gives
// token -1 and confidence NaN. -inf entries are masked: weight 0, never counted by top-k.
#include <cooperative_groups.h>
#include <cuda_runtime.h>

#include <cub/block/block_reduce.cuh>
#include <cub/block/block_scan.cuh>

#include <algorithm>
#include <cfloat>
#include <climits>
#include <cmath>
#include <cstdint>
#include <mutex>
#include <stdexcept>

#include "sampler.cuh"
#include "wb/check.hpp"

namespace ch07 {
namespace {

namespace cg = cooperative_groups;
using u64 = unsigned long long;

constexpr int kClusterSize = 8;             // blocks per row (8 is the portable maximum)
constexpr int kThreads = 512;               // threads per block
constexpr int kBlocksPerSM = 2;             // 2 x 8 x 132 / 8: 16 rows' clusters in one wave
constexpr int kBins = 256;                  // every histogram: 256 bins, 8 bits of a key
constexpr int kTailBin = kBins - 1;         // stage 1: d >= 31.875 (see above)
constexpr float kBinsPerUnit = 8.0f;        // stage 1: bins per unit of d = (max - x) / T
constexpr int kListCapacity = 2048;         // entries of the chosen bin one block lists
constexpr int kGatherCapacity = 2048;       // entries the leader sorts (the short way)
constexpr int kGatherPerThread = kGatherCapacity / kThreads;
constexpr int kCopyUnroll = 8;              // 16-byte loads in flight per thread (the copy-in)
constexpr int kMaxCachedSliceBytes = 80 * 1024;  // a slice larger than this is re-read
                                                 // (two blocks per SM: see kBlocksPerSM)

__device__ __forceinline__ u64 min64(u64 a, u64 b) { return a < b ? a : b; }
__device__ __forceinline__ u64 max64(u64 a, u64 b) { return a > b ? a : b; }

// ------------------------------------------------------------------------------------------
// Per-entry quantities. Every pass computes them with the same expressions, so an entry
// gets the same bin, key and weight every time, and equal logits get equal ones.

// Unsigned order key: a > b as floats  <=>  key(a) > key(b) as unsigned. -0 counts as +0.
__device__ __forceinline__ unsigned order_key(float x) {
  const unsigned bits = x == 0.0f ? 0u : __float_as_uint(x);
  return (bits & 0x80000000u) ? ~bits : (bits | 0x80000000u);
}

// The float whose order key is `key` (the inverse of order_key).
__device__ __forceinline__ float key_to_float(unsigned key) {
  return __uint_as_float((key & 0x80000000u) ? (key & 0x7fffffffu) : ~key);
}

struct RowScale {
  float max;         // the row's max logit
  float inv_t;       // 1 / T, capped so that 0 * inv_t is 0
  float log2e_inv_t; // log2(e) / T, for entry_weight
  float fixed_one;   // 2^s: the fixed-point value of weight 1
};

__device__ __forceinline__ bool is_masked(float x) { return !(x > -INFINITY); }

// Stage-1 bin: 8 bins per unit of (max - x) / T, the tail bin for everything past 31.875.
__device__ __forceinline__ int stage1_bin(float x, const RowScale& s) {
  const float d = (s.max - x) * s.inv_t;  // >= 0
  return static_cast<int>(fminf(d * kBinsPerUnit, static_cast<float>(kTailBin)));
}

// An entry's weight exp((x - max) / T) = 2^((x - max) log2(e) / T), at most 1: the term of Z
// and, in fixed point, of every mass. The hardware's exp2 (MUFU.EX2) alone, results below
// 2^-126 flushed to 0 (.ftz): exp2f() keeps them (denormals), at the cost of a compare and
// two predicated multiplies around MUFU.EX2 on every entry (its SASS for sm_90, nvcc 13.0),
// and they are 0 in fixed point anyway (2^-126 x 2^s rounds to 0) and add nothing to Z,
// which is at least 1 (the max's own term).
__device__ __forceinline__ float entry_weight(float x, const RowScale& s) {
  float w;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(w) : "f"((x - s.max) * s.log2e_inv_t));
  return w;
}

// The confidence of a token whose logit is x (rule 3): its probability under softmax(logits /
// T), with the same exp as Z's terms.
__device__ __forceinline__ float confidence_of(float x, const RowScale& s, float z) {
  return entry_weight(x, s) / z;
}

// Fixed-point weight exp((x - max) / T) * 2^s: at most 2^s, summed exactly as integers.
// Every pass computes it with these expressions, so an entry always gets the same weight.
__device__ __forceinline__ u64 fixed_weight_of(float weight, const RowScale& s) {
  return __float2ull_rn(weight * s.fixed_one);
}
__device__ __forceinline__ u64 fixed_weight(float x, const RowScale& s) {
  return fixed_weight_of(entry_weight(x, s), s);
}

// ------------------------------------------------------------------------------------------
// The block's shared memory.

// A block's own histogram. Masses are 64-bit, but shared-memory atomics are fast only on 32
// bits (a 64-bit add is a compare-and-swap loop), so each mass is two 32-bit words and an
// add carries into the high word by hand. Still exact, still order-independent.
struct BlockHistogram {
  unsigned count[kBins];
  unsigned mass_lo[kBins];
  unsigned mass_hi[kBins];
  float z;  // stage 1: sum exp((x - max) / T) over the block's slice (a fixed-order float sum)
};

__device__ __forceinline__ void add_to_bin(BlockHistogram& h, int bin, unsigned count, u64 mass) {
  atomicAdd(&h.count[bin], count);
  const unsigned lo = static_cast<unsigned>(mass);
  const unsigned old = atomicAdd(&h.mass_lo[bin], lo);
  const unsigned carry = old + lo < old ? 1u : 0u;
  const unsigned hi = static_cast<unsigned>(mass >> 32) + carry;
  if (hi != 0) atomicAdd(&h.mass_hi[bin], hi);
}

// A row's histogram: every block's added together.
struct Histogram {
  unsigned count[kBins];
  u64 mass[kBins];
  u64 total;  // stage 1: the row's whole mass (the sum of mass[])
  float z;    // stage 1: the softmax denominator Z, the blocks' z added in rank order
};

// What one block tells the others of its row at an exchange (only some fields are used at
// each exchange).
struct Summary {
  float max;          // statistics (Z comes later, with the stage-1 histogram)
  unsigned valid;     //   entries that are not -inf
  int bad;            //   a NaN or +inf seen
  unsigned min_key;   // the chosen bin's smallest and largest key
  unsigned max_key;
  unsigned matches;   // entries with the searched key
};

using BlockReduceSummary = cub::BlockReduce<Summary, kThreads>;
using BlockScanCount = cub::BlockScan<unsigned, kThreads>;
using BlockScanMass = cub::BlockScan<u64, kThreads>;

struct Shared {
  // Exchanges are double-buffered: a block writes buffer i % 2 before cluster.sync() i, and
  // the others read it after; they have all finished reading by cluster.sync() i + 1,
  // so buffer i % 2 can be written again for exchange i + 2.
  BlockHistogram published[2];
  Summary summary[2];
  Histogram stage1;        // the row's stage-1 histogram (all blocks combined)
  Histogram refined;       // the row's histogram of the current refinement pass
  Summary peers[kClusterSize];
  float warp_z[kThreads / 32];  // stage 1: each warp's part of the block's z
  union {
    unsigned list[kListCapacity];  // the long way: slice positions of the chosen bin's entries
    u64 gathered[kGatherCapacity]; // the short way, leader: (key << 32 | ~column) of entries
  } pool;
  unsigned list_size;
  unsigned gathered_count;   // leader: how many entries the blocks have sent
  unsigned bin_start[kBins]; // leader: where each stage-1 bin's gathered entries go
  unsigned bin_fill[kBins];  //   and how many have been placed there
  struct {
    int index;             // select_in_histogram's answer
    u64 count_before, mass_before;
  } pick;
  struct {
    u64 mass;              // the leader's walk: a running mass found
    int column;            //   and the column drawn
  } found;
  union {
    typename BlockReduceSummary::TempStorage reduce;
    typename BlockScanCount::TempStorage scan;
    typename BlockScanMass::TempStorage scan_mass;
  } cub;
};

// One row's view of its slice: where the block's entries are and who the block is.
struct Slice {
  const float* x;   // shared-memory copy, or the logits themselves when too long to copy
  int begin;        // column of x[0]
  int size;         // entries in this slice (0 for the last blocks of a very short row)
  bool cached;      // x is the shared-memory copy (16-byte aligned)
};

// The passes over a slice read it in groups of 4 consecutive entries, group g = entries
// 4g .. 4g+3, thread t taking groups t, t + kThreads, ...: from shared memory one 16-byte
// load per group (a quarter of the load instructions, and the 4 entries' arithmetic is
// independent, so it overlaps). Entries past the slice's end read as -inf: masked, so every
// pass ignores them. A slice read from device memory (too long to cache) is read one entry
// at a time: its alignment depends on the row.
__device__ __forceinline__ int slice_groups(const Slice& slice) { return (slice.size + 3) / 4; }

__device__ __forceinline__ void load_group(const Slice& slice, int g, float (&x)[4]) {
  const int first = 4 * g;
  if (slice.cached && first + 4 <= slice.size) {
    const float4 v = reinterpret_cast<const float4*>(slice.x)[g];
    x[0] = v.x, x[1] = v.y, x[2] = v.z, x[3] = v.w;
    return;
  }
  for (int j = 0; j < 4; ++j) x[j] = first + j < slice.size ? slice.x[first + j] : -INFINITY;
}

// ------------------------------------------------------------------------------------------
// Reductions and exchanges.

// The sum of v over lanes 0..lane of the warp (an inclusive scan).
__device__ __forceinline__ unsigned warp_inclusive_sum(unsigned v) {
  const int lane = threadIdx.x % 32;
  for (int offset = 1; offset < 32; offset *= 2) {
    const unsigned other = __shfl_up_sync(0xffffffffu, v, offset);
    if (lane >= offset) v += other;
  }
  return v;
}

__device__ Summary combine_stats(const Summary& a, const Summary& b) {
  Summary r = a;
  r.bad = a.bad | b.bad;
  r.valid = a.valid + b.valid;
  r.max = fmaxf(a.max, b.max);  // -inf where neither has seen a valid entry
  return r;
}

// Every block publishes `mine`; after the cluster barrier every block holds all of them in
// sh.peers[], in rank order (so every block combines them in the same order).
__device__ void exchange_summaries(cg::cluster_group& cluster, Shared& sh, const Summary& mine,
                                   int& parity) {
  if (threadIdx.x == 0) sh.summary[parity] = mine;
  cluster.sync();
  if (threadIdx.x < kClusterSize)
    sh.peers[threadIdx.x] = *cluster.map_shared_rank(&sh.summary[parity], threadIdx.x);
  __syncthreads();
  parity ^= 1;
}

// Adds every block's published histogram into `row`, bin by bin, in rank order (the
// masses only if the histogram has them: a remote read costs as much as a barrier's share).
// Stage 1 (with_totals) also adds the blocks' z in rank order and sums the row's mass.
__device__ void exchange_histograms(cg::cluster_group& cluster, Shared& sh, Histogram& row,
                                    bool with_mass, bool with_totals, int& parity) {
  cluster.sync();
  for (int bin = threadIdx.x; bin < kBins; bin += kThreads) {
    unsigned count = 0;
    u64 mass = 0;
    for (int r = 0; r < kClusterSize; ++r) {
      const BlockHistogram* peer = cluster.map_shared_rank(&sh.published[parity], r);
      count += peer->count[bin];
      if (with_mass) mass += (static_cast<u64>(peer->mass_hi[bin]) << 32) | peer->mass_lo[bin];
    }
    row.count[bin] = count;
    row.mass[bin] = mass;
  }
  if (with_totals && threadIdx.x == kThreads - 1) {  // a thread the bins above left idle
    float z = 0.0f;
    for (int r = 0; r < kClusterSize; ++r)
      z += cluster.map_shared_rank(&sh.published[parity], r)->z;
    row.z = z;
  }
  __syncthreads();
  if (with_totals && threadIdx.x < 32) {  // integer sums: any order gives the same total
    u64 total = 0;
    for (int bin = threadIdx.x; bin < kBins; bin += 32) total += row.mass[bin];
    for (int offset = 16; offset > 0; offset /= 2)
      total += __shfl_xor_sync(0xffffffffu, total, offset);
    if (threadIdx.x == 0) row.total = total;
  }
  if (with_totals) __syncthreads();
  parity ^= 1;
}

__device__ void clear_histogram(BlockHistogram& h) {
  for (int bin = threadIdx.x; bin < kBins; bin += kThreads)
    h.count[bin] = 0, h.mass_lo[bin] = 0, h.mass_hi[bin] = 0;
}

// ------------------------------------------------------------------------------------------
// Walking a histogram in sorted order. Bins are stored in sorted order (bin 0 holds the
// most probable entries). Finds the first bin at which the running count (by_count) or mass
// reaches `need`, and the count and mass of the bins before it. Warp 0 does it; the answer
// is left in sh.pick for the whole block.

__device__ void select_in_histogram(Shared& sh, const Histogram& h, bool by_count, u64 need) {
  constexpr int kPerLane = kBins / 32;
  // The last answer may still be being read (the main kernel reads sh.pick, then the long way
  // selects again at once): every warp is past it before warp 0 writes the next one.
  __syncthreads();
  if (threadIdx.x < 32) {
    const int lane = threadIdx.x;
    u64 lane_count = 0, lane_mass = 0;
    for (int i = 0; i < kPerLane; ++i) {
      lane_count += h.count[lane * kPerLane + i];
      lane_mass += h.mass[lane * kPerLane + i];
    }
    // Exclusive prefix sums over the lanes (a warp scan).
    u64 count_before = lane_count, mass_before = lane_mass;
    for (int offset = 1; offset < 32; offset *= 2) {
      const u64 c = __shfl_up_sync(0xffffffffu, count_before, offset);
      const u64 m = __shfl_up_sync(0xffffffffu, mass_before, offset);
      if (lane >= offset) count_before += c, mass_before += m;
    }
    count_before -= lane_count;
    mass_before -= lane_mass;
    const u64 reached = by_count ? count_before + lane_count : mass_before + lane_mass;
    const unsigned lanes_reaching = __ballot_sync(0xffffffffu, reached >= need);
    // The caller guarantees the total reaches `need`; the last bin answers if rounding lied.
    const int first = lanes_reaching ? __ffs(lanes_reaching) - 1 : 31;
    if (lane == first) {
      int index = lane * kPerLane + kPerLane - 1;
      for (int i = 0; i < kPerLane; ++i) {
        const int bin = lane * kPerLane + i;
        const u64 next = by_count ? count_before + h.count[bin] : mass_before + h.mass[bin];
        if (next >= need || i == kPerLane - 1) {
          index = bin;
          break;
        }
        count_before += h.count[bin];
        mass_before += h.mass[bin];
      }
      sh.pick.index = index;
      sh.pick.count_before = count_before;
      sh.pick.mass_before = mass_before;
    }
  }
  __syncthreads();
}

// ------------------------------------------------------------------------------------------
// select(): the entry at position n of the sorted order, n the smallest position whose
// running count (by_count) or mass reaches `need` (1 <= need <= the row's total).

struct Position {
  unsigned key;         // the entry's order key (its logit)
  unsigned rank;        // it is the rank-th (1-based) entry with that key, in index order
  u64 mass_through;     // the mass of positions 1..n
};

__device__ Position select_position(cg::cluster_group& cluster, Shared& sh, const Slice& slice,
                                    const RowScale& scale, bool by_count, u64 need,
                                    int& hist_parity, int& summary_parity) {
  // Stage 1 (already combined): which bin holds position n.
  select_in_histogram(sh, sh.stage1, by_count, need);
  const int bin = sh.pick.index;
  u64 count_before = sh.pick.count_before, mass_before = sh.pick.mass_before;
  u64 run_count = sh.stage1.count[bin], run_mass = sh.stage1.mass[bin];

  // List the bin's entries (their slice positions) and find its smallest and largest key.
  if (threadIdx.x == 0) sh.list_size = 0;
  __syncthreads();
  Summary mine{};
  mine.min_key = 0xffffffffu;
  mine.max_key = 0;
  for (int i = threadIdx.x; i < slice.size; i += kThreads) {
    const float x = slice.x[i];
    if (is_masked(x) || stage1_bin(x, scale) != bin) continue;
    const unsigned key = order_key(x);
    mine.min_key = min(mine.min_key, key);
    mine.max_key = max(mine.max_key, key);
    const unsigned at = atomicAdd(&sh.list_size, 1u);
    if (at < kListCapacity) sh.pool.list[at] = i;
  }
  mine = BlockReduceSummary(sh.cub.reduce).Reduce(mine, [](const Summary& a, const Summary& b) {
    Summary r = a;
    r.min_key = min(a.min_key, b.min_key);
    r.max_key = max(a.max_key, b.max_key);
    return r;
  });
  exchange_summaries(cluster, sh, mine, summary_parity);
  unsigned lo = 0xffffffffu, hi = 0;
  for (int r = 0; r < kClusterSize; ++r) {
    lo = min(lo, sh.peers[r].min_key);
    hi = max(hi, sh.peers[r].max_key);
  }
  const bool listed = sh.list_size <= kListCapacity;  // else: scan the whole slice

  // Refine: 8 bits of (key - lo) a pass, from the top, until one key is left. The keys of
  // the bin's entries are exactly the keys in [lo, hi] (bins and keys both follow x).
  while (lo != hi) {
    const unsigned span = hi - lo;
    const int shift = max(0, 32 - __clz(span) - 8);
    BlockHistogram& mine_h = sh.published[hist_parity];
    clear_histogram(mine_h);
    __syncthreads();
    const int n = listed ? static_cast<int>(sh.list_size) : slice.size;
    for (int i = threadIdx.x; i < n; i += kThreads) {
      const float x = slice.x[listed ? sh.pool.list[i] : i];
      if (is_masked(x)) continue;
      const unsigned key = order_key(x);
      if (key < lo || key > hi) continue;
      const int sorted_bin = kBins - 1 - static_cast<int>((key - lo) >> shift);  // high first
      add_to_bin(mine_h, sorted_bin, 1u, fixed_weight(x, scale));
    }
    __syncthreads();
    exchange_histograms(cluster, sh, sh.refined, /*with_mass=*/true, /*with_totals=*/false,
                        hist_parity);
    select_in_histogram(sh, sh.refined, by_count, need - (by_count ? count_before : mass_before));
    const int digit = kBins - 1 - sh.pick.index;
    count_before += sh.pick.count_before;
    mass_before += sh.pick.mass_before;
    run_count = sh.refined.count[sh.pick.index];
    run_mass = sh.refined.mass[sh.pick.index];
    const unsigned new_lo = lo + (static_cast<unsigned>(digit) << shift);
    const u64 new_hi = static_cast<u64>(new_lo) + (1ull << shift) - 1;  // 64 bits: no wrap
    hi = static_cast<unsigned>(min64(hi, new_hi));
    lo = new_lo;
  }

  // One key left: a run of run_count equal logits, each of weight run_mass / run_count.
  Position p;
  p.key = lo;
  const u64 weight = run_count > 0 ? run_mass / run_count : 0;
  const u64 still = need - (by_count ? count_before : mass_before);
  u64 rank = by_count ? still : (weight > 0 ? (still + weight - 1) / weight : 1);
  rank = max64(1, min64(rank, run_count));
  p.rank = static_cast<unsigned>(rank);
  p.mass_through = mass_before + rank * weight;
  return p;
}

// The column of the rank-th entry (in index order) whose key is `key`: each block counts
// its matches, the blocks before it in rank order tell it where its matches start, and the
// block holding the one wanted finds it with a scan over contiguous runs of its slice.
__device__ int find_column(cg::cluster_group& cluster, Shared& sh, const Slice& slice,
                           unsigned key, unsigned rank, int& summary_parity) {
  const int per_thread = (slice.size + kThreads - 1) / kThreads;
  const int first = min(slice.size, static_cast<int>(threadIdx.x) * per_thread);
  const int last = min(slice.size, first + per_thread);
  unsigned matches = 0;
  for (int i = first; i < last; ++i) matches += order_key(slice.x[i]) == key && !is_masked(slice.x[i]);

  unsigned before_me = 0, block_matches = 0;
  BlockScanCount(sh.cub.scan).ExclusiveSum(matches, before_me, block_matches);
  Summary mine{};
  mine.matches = block_matches;
  exchange_summaries(cluster, sh, mine, summary_parity);
  unsigned before_block = 0;
  for (int r = 0; r < static_cast<int>(cluster.block_rank()); ++r) before_block += sh.peers[r].matches;

  int column = -1;
  const unsigned start = before_block + before_me;  // matches before this thread's run
  if (start < rank && rank <= start + matches) {
    unsigned seen = start;
    for (int i = first; i < last; ++i) {
      if (order_key(slice.x[i]) == key && !is_masked(slice.x[i]) && ++seen == rank) {
        column = slice.begin + i;
        break;
      }
    }
  }
  return column;  // -1 except in the one thread that found it
}

// ------------------------------------------------------------------------------------------
// The short way: the leader sorts the few entries that matter and walks them once.

// Every block sends its entries of stage-1 bins [first_bin, last_bin] to the leader (block
// 0) as (key << 32 | ~column): sorting those descending gives the contract's order (logit
// descending, then column ascending). They are few (a top-k of 50 sends a few dozen of a
// row's 151936), so the common case must cost one load and one test per entry: a thread
// tests its group of 4, and only a warp in which some lane has something to send counts its
// entries (a warp scan), reserves room in the leader's pool with one remote atomic and
// writes them there. The order they land in does not matter, the leader sorts them.
__device__ void send_to_leader(cg::cluster_group& cluster, Shared& sh, const Slice& slice,
                               const RowScale& scale, int first_bin, int last_bin) {
  unsigned* leader_count = cluster.map_shared_rank(&sh.gathered_count, 0);
  u64* leader_pool = cluster.map_shared_rank(sh.pool.gathered, 0);
  const unsigned lane = threadIdx.x % 32;
  const int groups = slice_groups(slice);
  for (int base = 0; base < groups; base += kThreads) {  // whole warps, for the votes
    const int g = base + static_cast<int>(threadIdx.x);
    u64 entries[4];
    unsigned count = 0;
    if (g < groups) {
      float x[4];
      load_group(slice, g, x);
      for (int j = 0; j < 4; ++j) {
        if (is_masked(x[j])) continue;
        const int bin = stage1_bin(x[j], scale);
        if (bin < first_bin || bin > last_bin) continue;
        const unsigned column = static_cast<unsigned>(slice.begin + 4 * g + j);
        entries[count++] = (static_cast<u64>(order_key(x[j])) << 32) | ~column;
      }
    }
    if (!__any_sync(0xffffffffu, count > 0)) continue;
    const unsigned before = warp_inclusive_sum(count);  // this lane's entries included
    unsigned start = 0;
    if (lane == 31) start = atomicAdd(leader_count, before);  // the warp's total
    start = __shfl_sync(0xffffffffu, start, 31) + before - count;
    for (unsigned j = 0; j < count; ++j) leader_pool[start + j] = entries[j];
  }
}

// What the leader needs to finish a row the short way.
struct ShortWay {
  bool by_top_k;        // top-k cuts at k (else: top_k is off or keeps everything)
  u64 k;
  bool by_top_p;
  float top_p;
  u64 total;            // the row's whole mass (what top-p is relative to without top-k)
  u64 count_above;      // entries before the gathered ones in the sorted order (and their
  u64 mass_above;       //   mass): 0 unless only the draw's bin was gathered
  float u;              // the draw's uniform number
};

// Sorts the leader's gathered entries descending, in sh.pool.gathered. They are exactly the
// row's entries of stage-1 bins [first_bin, last_bin], and bins follow the order (bin 0
// holds the largest logits), so the stage-1 histogram already says where each bin's entries
// go: bin b starts after all gathered entries of the bins before it. So
//   1. warp 0 turns the bins' counts into their start positions (a warp scan);
//   2. every entry is placed in its bin's range (a counter per bin; any order inside it);
//   3. every entry is ranked among its own bin's entries only, and written to its place.
// A bin of d = (max - x) / T is 1/8 wide: it holds a few dozen of the hundreds to thousands
// a top-p gathers, so step 3 costs a few dozen compares per entry, where ranking each entry
// among all of them would cost n (n^2 / threads per thread: 8192 at 2048 entries). Only a
// row with thousands of equal logits fills one bin, and is then sorted that slowly.
__device__ void sort_gathered_descending(Shared& sh, const RowScale& scale, int first_bin,
                                         u64* scratch) {
  const unsigned n = sh.gathered_count;
  if (threadIdx.x < 32) {
    constexpr int kPerLane = kBins / 32;
    const int lane = threadIdx.x;
    unsigned lane_count = 0;
    for (int i = 0; i < kPerLane; ++i) {
      const int bin = lane * kPerLane + i;
      lane_count += bin >= first_bin ? sh.stage1.count[bin] : 0;
    }
    unsigned before = warp_inclusive_sum(lane_count) - lane_count;
    for (int i = 0; i < kPerLane; ++i) {
      const int bin = lane * kPerLane + i;
      sh.bin_start[bin] = before;
      sh.bin_fill[bin] = 0;
      before += bin >= first_bin ? sh.stage1.count[bin] : 0;
    }
  }
  __syncthreads();
  const auto bin_of = [&scale](u64 entry) {
    return stage1_bin(key_to_float(static_cast<unsigned>(entry >> 32)), scale);
  };
  for (unsigned e = threadIdx.x; e < n; e += kThreads) {
    const u64 entry = sh.pool.gathered[e];
    const int bin = bin_of(entry);
    scratch[sh.bin_start[bin] + atomicAdd(&sh.bin_fill[bin], 1u)] = entry;
  }
  __syncthreads();
  for (unsigned e = threadIdx.x; e < n; e += kThreads) {
    const u64 entry = scratch[e];
    const int bin = bin_of(entry);
    const unsigned begin = sh.bin_start[bin], end = begin + sh.bin_fill[bin];
    unsigned above = 0;  // entries all differ (their columns do)
    for (unsigned j = begin; j < end; ++j) above += scratch[j] > entry;
    sh.pool.gathered[begin + above] = entry;
  }
  __syncthreads();
}

// The leader: sort the gathered entries, then one walk down the sorted order finds the mass
// top-k keeps, where top-p cuts, and the drawn position. Returns the drawn column in every
// thread of the leader (-1 if rounding found none: never expected).
__device__ int finish_short_way(Shared& sh, u64* scratch, const RowScale& scale,
                                const ShortWay& w, int first_bin) {
  sort_gathered_descending(sh, scale, first_bin, scratch);
  const unsigned n = sh.gathered_count;
  const u64* sorted = sh.pool.gathered;
  u64 keys[kGatherPerThread];  // thread t: positions 4t .. 4t+3
  for (int i = 0; i < kGatherPerThread; ++i) {
    const unsigned at = threadIdx.x * kGatherPerThread + i;
    keys[i] = at < n ? sorted[at] : 0;  // 0: no entry (every real entry is larger)
  }

  // Each position's weight and running mass (inclusive), in sorted order.
  u64 weight[kGatherPerThread], running[kGatherPerThread];
  u64 mine = 0;
  for (int i = 0; i < kGatherPerThread; ++i) {
    weight[i] = keys[i] ? fixed_weight(key_to_float(static_cast<unsigned>(keys[i] >> 32)), scale) : 0;
    mine += weight[i];
  }
  u64 before = 0;
  BlockScanMass(sh.cub.scan_mass).ExclusiveSum(mine, before);
  for (int i = 0; i < kGatherPerThread; ++i) {
    before += weight[i];
    running[i] = w.mass_above + before;
  }
  const u64 first_position = w.count_above + threadIdx.x * kGatherPerThread + 1;  // 1-based

  // The position where the running mass first reaches `need`: exactly one position has
  // running >= need > running - weight. Its running mass (and column) go to sh.found.
  const auto find_mass = [&](u64 need) {
    for (int i = 0; i < kGatherPerThread; ++i)
      if (weight[i] > 0 && running[i] >= need && running[i] - weight[i] < need) {
        sh.found.mass = running[i];
        sh.found.column = static_cast<int>(~static_cast<unsigned>(keys[i]));
      }
    __syncthreads();
  };

  u64 kept = w.total;
  if (w.by_top_k) {  // the mass of positions 1..k
    for (int i = 0; i < kGatherPerThread; ++i)
      if (first_position + i == w.k) sh.found.mass = running[i];
    __syncthreads();
    kept = sh.found.mass;
    __syncthreads();
  }
  if (w.by_top_p) {
    const double want = ceil(static_cast<double>(w.top_p) * static_cast<double>(kept));
    find_mass(max64(1, min64(kept, static_cast<u64>(want))));
    kept = sh.found.mass;
    __syncthreads();
  }
  const double below = floor(static_cast<double>(w.u) * static_cast<double>(kept));
  if (threadIdx.x == 0) sh.found.column = -1;
  __syncthreads();
  find_mass(min64(kept, static_cast<u64>(below) + 1));
  return sh.found.column;
}

// ------------------------------------------------------------------------------------------
// The kernel.

struct Args {
  const float* logits;
  int vocab;
  int slice_len;     // columns per block
  bool cache_slice;  // copy the slice to shared memory (dynamic shared memory holds it)
  float temperature;
  int top_k;
  float top_p;
  std::uint64_t seed, step;
  int* tokens;
  float* confidence;
};

// 1. The row's max, how many entries are valid (not -inf), and whether any is bad (NaN or
// +inf), in the pass that copies the slice from device memory to shared memory (when it is
// cached): a compare per entry on the way in. Then one exchange, so that every block knows
// the row's max before stage 1, which bins by it and adds up Z in the same pass. Where the
// slice starts on a 16-byte boundary (vocab a multiple of 4, as model vocabularies are),
// each thread has kCopyUnroll 16-byte loads in flight before it uses any, so the row crosses
// memory at full speed; otherwise one entry at a time.
__device__ Summary row_extremes(cg::cluster_group& cluster, Shared& sh, const Slice& slice,
                                const float* source, float* copy, int& summary_parity) {
  Summary mine{};
  mine.max = -INFINITY;
  const auto see = [&mine](float x) {
    mine.bad |= !(x < INFINITY);  // NaN or +inf
    mine.valid += x > -INFINITY;
    mine.max = fmaxf(mine.max, x);
  };
  int done = 0;  // entries read as whole groups
  if (reinterpret_cast<std::uintptr_t>(source) % 16 == 0) {
    const int groups = slice.size / 4;
    const float4* source4 = reinterpret_cast<const float4*>(source);
    float4* copy4 = reinterpret_cast<float4*>(copy);
    for (int base = 0; base < groups; base += kThreads * kCopyUnroll) {
      float4 v[kCopyUnroll];
#pragma unroll
      for (int k = 0; k < kCopyUnroll; ++k) {
        const int g = base + static_cast<int>(threadIdx.x) + k * kThreads;
        if (g < groups) v[k] = source4[g];
      }
#pragma unroll
      for (int k = 0; k < kCopyUnroll; ++k) {
        const int g = base + static_cast<int>(threadIdx.x) + k * kThreads;
        if (g >= groups) break;
        if (copy4) copy4[g] = v[k];
        see(v[k].x), see(v[k].y), see(v[k].z), see(v[k].w);
      }
    }
    done = 4 * groups;
  }
  for (int i = done + static_cast<int>(threadIdx.x); i < slice.size; i += kThreads) {
    const float x = source[i];
    if (copy) copy[i] = x;
    see(x);
  }
  mine = BlockReduceSummary(sh.cub.reduce).Reduce(mine, [](const Summary& p, const Summary& q) {
    return combine_stats(p, q);
  });
  exchange_summaries(cluster, sh, mine, summary_parity);
  Summary stats = sh.peers[0];
  for (int r = 1; r < kClusterSize; ++r) stats = combine_stats(stats, sh.peers[r]);
  return stats;
}

// 2. Stage 1: the row's histogram over d = (max - x) / T, into sh.stage1, and with it the
// softmax denominator Z = sum exp((x - max) / T) (sh.stage1.z): each entry's exp is
// computed once and serves both. With `with_mass` false only the counts are made (top-k's
// depth is a count; the leader weighs the entries it gets itself), which saves the mass's
// atomics on every entry.
__device__ void stage1_histogram(cg::cluster_group& cluster, Shared& sh, const Slice& slice,
                                 const RowScale& scale, bool with_mass, int& hist_parity) {
  BlockHistogram& mine = sh.published[hist_parity];
  clear_histogram(mine);
  __syncthreads();
  unsigned tail_count = 0;
  u64 tail_mass = 0;
  float z = 0.0f;  // this thread's part of Z, added in the thread's own entry order
  for (int g = threadIdx.x; g < slice_groups(slice); g += kThreads) {
    float x[4];
    load_group(slice, g, x);
    for (int j = 0; j < 4; ++j) {
      if (is_masked(x[j])) continue;
      const float weight = entry_weight(x[j], scale);
      z += weight;
      const int bin = stage1_bin(x[j], scale);
      const u64 w = with_mass ? fixed_weight_of(weight, scale) : 0;
      if (bin == kTailBin) {
        ++tail_count, tail_mass += w;  // the crowded bin: counted in registers
      } else if (with_mass) {
        add_to_bin(mine, bin, 1u, w);
      } else {
        atomicAdd(&mine.count[bin], 1u);
      }
    }
  }
  for (int offset = 16; offset > 0; offset /= 2) {  // integer sums: any order, same total
    tail_count += __shfl_down_sync(0xffffffffu, tail_count, offset);
    tail_mass += __shfl_down_sync(0xffffffffu, tail_mass, offset);
    z += __shfl_down_sync(0xffffffffu, z, offset);  // a fixed tree: lane 0 gets the same bits
  }
  if (threadIdx.x % 32 == 0) {
    if (tail_count > 0) add_to_bin(mine, kTailBin, tail_count, tail_mass);
    sh.warp_z[threadIdx.x / 32] = z;
  }
  __syncthreads();
  if (threadIdx.x == 0) {  // the block's z: its warps in order
    float block_z = 0.0f;
    for (int w = 0; w < kThreads / 32; ++w) block_z += sh.warp_z[w];
    mine.z = block_z;
  }
  exchange_histograms(cluster, sh, sh.stage1, with_mass, /*with_totals=*/true, hist_parity);
}

__global__ void __launch_bounds__(kThreads, kBlocksPerSM) sample_fused_kernel(Args a) {
  cg::cluster_group cluster = cg::this_cluster();
  __shared__ Shared sh;
  extern __shared__ __align__(16) unsigned char dynamic_smem[];
  float* cached = reinterpret_cast<float*>(dynamic_smem);
  const int row = blockIdx.x / kClusterSize;
  const int rank = static_cast<int>(cluster.block_rank());
  const float* row_logits = a.logits + static_cast<std::size_t>(row) * a.vocab;
  if (threadIdx.x == 0) sh.gathered_count = 0;  // before the first cluster barrier

  Slice slice;
  slice.begin = min(a.vocab, rank * a.slice_len);
  slice.size = min(a.vocab, slice.begin + a.slice_len) - slice.begin;
  slice.x = a.cache_slice ? cached : row_logits + slice.begin;
  slice.cached = a.cache_slice;

  // Greedy calls (T == 0 or top_k == 1) never come here: sample_fused launches
  // greedy_kernel for them. So T > 0.
  RowScale scale;
  scale.inv_t = fminf(1.0f / a.temperature, FLT_MAX);
  scale.log2e_inv_t = fminf(1.4426950408889634f * scale.inv_t, FLT_MAX);
  int summary_parity = 0, hist_parity = 0;
  const Summary stats = row_extremes(cluster, sh, slice, row_logits + slice.begin,
                                     a.cache_slice ? cached : nullptr, summary_parity);
  scale.max = stats.max;
  const bool lead = rank == 0 && threadIdx.x == 0;

  if (stats.bad || stats.valid == 0) {  // rule 5: say so, pick nothing
    if (lead) a.tokens[row] = -1, a.confidence[row] = NAN;
  } else {
    // Fixed point: 2^s is the largest power of two for which vocab weights of at most 2^s
    // sum within 62 bits.
    int s = 62;
    while (s > 0 && (static_cast<u64>(a.vocab) > (1ull << (62 - s)))) --s;
    scale.fixed_one = ldexpf(1.0f, s);
    ShortWay w{};
    w.by_top_k = a.top_k > 0 && static_cast<unsigned>(a.top_k) < stats.valid;
    stage1_histogram(cluster, sh, slice, scale, /*with_mass=*/!w.by_top_k, hist_parity);
    u64 total = sh.stage1.total;  // 0 under top-k (counts only): only top-k's mass is used then
    const float u = draw_uniform(a.seed, a.step, row);  // (0, 1]

    // How deep into the sorted order can a selection go? Position k with top-k; the top-p
    // cut without it; the draw itself with neither.
    w.k = static_cast<u64>(a.top_k);
    w.by_top_p = a.top_p < 1.0f;
    w.top_p = a.top_p;
    w.total = total;
    w.u = u;
    if (w.by_top_k) {
      select_in_histogram(sh, sh.stage1, /*by_count=*/true, w.k);
    } else if (w.by_top_p) {
      const double want = ceil(static_cast<double>(a.top_p) * static_cast<double>(total));
      select_in_histogram(sh, sh.stage1, false, max64(1, min64(total, static_cast<u64>(want))));
    } else {
      const double below = floor(static_cast<double>(u) * static_cast<double>(total));
      select_in_histogram(sh, sh.stage1, false, min64(total, static_cast<u64>(below) + 1));
    }
    const int last_bin = sh.pick.index;
    const u64 through_last = sh.pick.count_before + sh.stage1.count[last_bin];
    const bool draw_only = !w.by_top_k && !w.by_top_p;
    int first_bin = -1;  // -1: the long way
    if (through_last <= kGatherCapacity) {
      first_bin = 0;  // everything down to the last position needed
    } else if (draw_only && sh.stage1.count[last_bin] <= kGatherCapacity) {
      first_bin = last_bin;  // the draw's bin alone; what precedes it is known from stage 1
      w.count_above = sh.pick.count_before;
      w.mass_above = sh.pick.mass_before;
    }

    if (first_bin >= 0) {
      send_to_leader(cluster, sh, slice, scale, first_bin, last_bin);
      cluster.sync();  // the leader has every entry it needs
      if (rank == 0) {
        const int column =
            finish_short_way(sh, reinterpret_cast<u64*>(dynamic_smem), scale, w, first_bin);
        if (threadIdx.x == 0) {
          a.tokens[row] = column;
          a.confidence[row] =
              column >= 0 ? confidence_of(row_logits[column], scale, sh.stage1.z) : NAN;
        }
      }
      return;  // nobody reads another block's shared memory after the barrier above
    }

    // The long way: three selections, each refining inside its stage-1 bin. They need the
    // masses of stage 1.
    if (w.by_top_k) {
      stage1_histogram(cluster, sh, slice, scale, /*with_mass=*/true, hist_parity);
      total = sh.stage1.total;
    }
    u64 kept = total;
    if (w.by_top_k)  // top-k: the mass of the first k entries (k counts unmasked ones only)
      kept = select_position(cluster, sh, slice, scale, /*by_count=*/true, w.k, hist_parity,
                             summary_parity)
                 .mass_through;
    if (w.by_top_p) {  // top-p: the shortest prefix whose mass reaches top_p of that
      const double want = ceil(static_cast<double>(a.top_p) * static_cast<double>(kept));
      const u64 need = max64(1, min64(kept, static_cast<u64>(want)));
      kept = select_position(cluster, sh, slice, scale, /*by_count=*/false, need, hist_parity,
                             summary_parity)
                 .mass_through;
    }
    // The draw: the first position whose running mass exceeds u * kept (inverse CDF in
    // sorted order). It can never pass the last kept position: need <= kept.
    const double below = floor(static_cast<double>(u) * static_cast<double>(kept));
    const u64 need = min64(kept, static_cast<u64>(below) + 1);
    const Position drawn = select_position(cluster, sh, slice, scale, /*by_count=*/false, need,
                                           hist_parity, summary_parity);
    const int column = find_column(cluster, sh, slice, drawn.key, drawn.rank, summary_parity);
    if (column >= 0) {
      a.tokens[row] = column;
      a.confidence[row] = confidence_of(row_logits[column], scale, sh.stage1.z);
    }
  }
  // No block may leave while another can still read its shared memory.
  cluster.sync();
}

// ------------------------------------------------------------------------------------------
// Greedy: its own kernel.
//
// WHY ITS OWN KERNEL. Greedy (rule 1) selects nothing: the token is the row's argmax (the
// lowest column on ties), and its confidence (rule 3) is exp((max - max) / T) / Z = 1 / Z,
// Z = sum exp((x - max) / T), T = 1 when T == 0 (top_k == 1 keeps its T). Chapter 04's
// online softmax gets the max and Z in one read, and the argmax comes with the max. So there
// is nothing to keep the row for: the sampling kernel's copy of the slice in shared memory
// (and the occupancy it costs), its histograms and most of its cluster barriers would be
// pure overhead. Greedy is a streaming reduction, and its time should be the time to read
// the logits once.
//
// WHO DOES WHAT. A row is cut into greedy_blocks_per_row(vocab) slices (8 for long rows, fewer
// for short ones, where 8 blocks would have little to do), one block each, the row's blocks
// one cluster. 16 rows of 151936 are 128 blocks of 512 threads for 132 SMs (a block per row
// would keep 16 of them busy); 256 rows are 2048 blocks, up to two resident per SM
// (__launch_bounds__), streaming through in waves. Each thread has kGreedyUnroll 16-byte
// loads in flight before it uses any (64 KiB a block): what an SM needs in flight to draw
// its share of the memory bandwidth. The split never depends on the number of rows (see
// DETERMINISM), so it cannot be tuned per call.
//
// ALIGNMENT. Rows are vocab floats apart, so unless vocab is a multiple of 4 most rows do not
// start on a 16-byte boundary, where a float4 load must. Each row is cut into a head (the
// 0 to 3 entries before its first 16-byte boundary: block 0 reads them one by one), a body
// of whole float4s (split evenly over the row's blocks) and a tail (the 0 to 3 entries
// after the last whole float4: the row's last block).
//
// PER THREAD. Online statistics over the entries the thread reads, in column order (so a
// strict > keeps the lowest column of equal maxima): for each batch of 4 x kGreedyUnroll
// entries, the batch's max and its first column; if the max grew, the running sum is
// rescaled once; then the batch's exp((x - max) / T) are added in column order.
//
// DETERMINISM. How a row is cut depends on vocab and on where the row starts modulo 16 bytes,
// never on the number of rows or on timing, and every sum is taken in a fixed order: each
// thread's in column order, each warp's by a fixed shuffle tree, a block's 16 warps by
// warp 0 in warp order, the row's blocks by the leader in rank order. A row's token and
// confidence bits are the same in a call of 1 row and in a call of 256.
//
// BAD ROWS (rule 5). Every entry is tested with !(x < +inf), true for NaN (either sign) and
// +inf: such a row is bad whatever else it holds. A row of nothing but -inf keeps its max at
// -inf. Both give token -1 and confidence NaN. -inf entries add exp(-inf) = 0 to Z.
//
// THE EXCHANGE. Each block writes its result into the leader's (rank 0's) shared memory
// (distributed shared memory); after one cluster barrier the leader has them all, and no
// block reads another's shared memory afterwards, so the others may exit. A block may only
// touch another block's shared memory once that block is running: every block arrives at a
// cluster barrier as it starts (relaxed: it has nothing to publish yet) and waits on it just
// before its remote write, long after every block of the cluster has arrived.

constexpr int kGreedyThreads = 512;
constexpr int kGreedyWarps = kGreedyThreads / 32;
constexpr int kGreedyUnroll = 8;           // float4 loads in flight per thread
constexpr int kGreedyMaxBlocks = 8;        // blocks per row: a cluster of the portable size
constexpr int kGreedyEntriesPerBlock = 4096;  // about one block per this many entries of a row

// Statistics of a part of a row. max = -inf: nothing but -inf seen (then z = 0).
struct GreedyStats {
  float max;
  float z;       // sum exp((x - max) / T) over the part
  int argmax;    // the lowest column holding max (INT_MAX while max = -inf)
  int bad;       // a NaN or +inf seen
};

__device__ __forceinline__ GreedyStats greedy_nothing() { return {-INFINITY, 0.0f, INT_MAX, 0}; }

// Two parts of a row (disjoint columns). `scale` = log2(e) / T: exp(d / T) = exp2(d * scale).
__device__ __forceinline__ GreedyStats greedy_combine(const GreedyStats& a, const GreedyStats& b,
                                                      float scale) {
  GreedyStats r = a.max > -INFINITY ? a : b;  // either side may have seen no finite entry
  r.bad = a.bad | b.bad;
  if (a.max > -INFINITY && b.max > -INFINITY) {
    r.max = fmaxf(a.max, b.max);
    r.argmax = a.max > b.max ? a.argmax : b.max > a.max ? b.argmax : min(a.argmax, b.argmax);
    r.z = a.z * exp2f((a.max - r.max) * scale) + b.z * exp2f((b.max - r.max) * scale);
  }
  return r;
}

// One entry, in column order (the head and the tail).
__device__ __forceinline__ void greedy_add(GreedyStats& g, float x, int column, float scale) {
  g.bad |= !(x < INFINITY);
  if (x > g.max) {
    g.z *= exp2f((g.max - x) * scale);  // exp2(-inf) = 0 while max was -inf (and z = 0)
    g.max = x;
    g.argmax = column;
  }
  if (g.max > -INFINITY) g.z += exp2f((x - g.max) * scale);
}

// Lane 0 gets the warp's statistics (a fixed tree: lane 0 + 16, then + 8, ...).
__device__ __forceinline__ GreedyStats greedy_warp_reduce(GreedyStats g, float scale) {
#pragma unroll
  for (int offset = 16; offset > 0; offset /= 2) {
    GreedyStats other;
    other.max = __shfl_down_sync(0xffffffffu, g.max, offset);
    other.z = __shfl_down_sync(0xffffffffu, g.z, offset);
    other.argmax = __shfl_down_sync(0xffffffffu, g.argmax, offset);
    other.bad = __shfl_down_sync(0xffffffffu, g.bad, offset);
    g = greedy_combine(g, other, scale);
  }
  return g;
}

// Grid: rows x (blocks per row) blocks, clusters of (blocks per row).
__global__ void __launch_bounds__(kGreedyThreads, 2)
    greedy_kernel(const float* __restrict__ logits, int vocab, float scale, int* tokens,
                  float* confidence) {
  __cluster_barrier_arrive_relaxed();  // "this block is running" (see THE EXCHANGE)
  __shared__ GreedyStats warp_stats[kGreedyWarps];
  __shared__ GreedyStats block_stats[kGreedyMaxBlocks];  // the leader's: one per block
  cg::cluster_group cluster = cg::this_cluster();
  const int blocks = static_cast<int>(cluster.num_blocks());
  const int rank = static_cast<int>(cluster.block_rank());
  const int row = static_cast<int>(blockIdx.x) / blocks;
  const float* x = logits + static_cast<std::size_t>(row) * vocab;

  // Head, body of float4s, tail (see ALIGNMENT); this block's share of the body.
  const int past_boundary = static_cast<int>((reinterpret_cast<std::uintptr_t>(x) / sizeof(float)) % 4);
  const int head = min(vocab, (4 - past_boundary) % 4);
  const int body_size = (vocab - head) / 4;  // float4s
  const int tail_begin = head + 4 * body_size;
  const float4* body = reinterpret_cast<const float4*>(x + head);
  const int share = (body_size + blocks - 1) / blocks;
  const int begin = min(body_size, rank * share);
  const int end = min(body_size, begin + share);

  GreedyStats g = greedy_nothing();
  if (rank == 0 && static_cast<int>(threadIdx.x) < head)
    greedy_add(g, x[threadIdx.x], threadIdx.x, scale);
  for (int first = begin + threadIdx.x; first < end; first += kGreedyThreads * kGreedyUnroll) {
    float4 v[kGreedyUnroll];
#pragma unroll
    for (int k = 0; k < kGreedyUnroll; ++k) {  // every load out before any is used
      const int i = first + k * kGreedyThreads;
      v[k] = i < end ? __ldcs(body + i) : make_float4(-INFINITY, -INFINITY, -INFINITY, -INFINITY);
    }
    // The batch's max and its first column (columns grow with k, then x, y, z, w).
    float batch_max = g.max;
    int batch_argmax = g.argmax, bad = 0;
#pragma unroll
    for (int k = 0; k < kGreedyUnroll; ++k) {
      const int column = head + 4 * (first + k * kGreedyThreads);
      const float e[4] = {v[k].x, v[k].y, v[k].z, v[k].w};
#pragma unroll
      for (int c = 0; c < 4; ++c) {
        bad |= !(e[c] < INFINITY);
        if (e[c] > batch_max) batch_max = e[c], batch_argmax = column + c;
      }
    }
    g.bad |= bad;
    if (batch_max > g.max) {  // rescale the running sum once per batch (online softmax)
      g.z *= exp2f((g.max - batch_max) * scale);
      g.max = batch_max;
      g.argmax = batch_argmax;
    }
    if (g.max > -INFINITY) {  // (padding past `end` is -inf: it adds 0)
#pragma unroll
      for (int k = 0; k < kGreedyUnroll; ++k) {
        g.z += exp2f((v[k].x - g.max) * scale);
        g.z += exp2f((v[k].y - g.max) * scale);
        g.z += exp2f((v[k].z - g.max) * scale);
        g.z += exp2f((v[k].w - g.max) * scale);
      }
    }
  }
  if (rank == blocks - 1 && static_cast<int>(threadIdx.x) < vocab - tail_begin)
    greedy_add(g, x[tail_begin + threadIdx.x], tail_begin + threadIdx.x, scale);

  // The block: each warp by shuffles, then warp 0 over the warps in order.
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  g = greedy_warp_reduce(g, scale);
  if (lane == 0) warp_stats[warp] = g;
  __syncthreads();
  if (warp == 0) g = greedy_warp_reduce(lane < kGreedyWarps ? warp_stats[lane] : greedy_nothing(), scale);

  // The row: every block's result into the leader's shared memory, then the leader adds
  // them in rank order.
  __cluster_barrier_wait();  // every block of the cluster is running
  if (threadIdx.x == 0) *cluster.map_shared_rank(&block_stats[rank], 0) = g;
  cluster.sync();  // the writes above are visible to the leader
  if (rank == 0 && threadIdx.x == 0) {
    GreedyStats r = block_stats[0];
    for (int b = 1; b < blocks; ++b) r = greedy_combine(r, block_stats[b], scale);
    const bool bad = r.bad || !(r.max > -INFINITY);  // rule 5
    tokens[row] = bad ? -1 : r.argmax;
    confidence[row] = bad ? NAN : 1.0f / r.z;
  }
}

// ------------------------------------------------------------------------------------------
// Host side.

int slice_length(int vocab) { return (vocab + kClusterSize - 1) / kClusterSize; }

// Blocks per row of greedy_kernel: about one per kGreedyEntriesPerBlock entries, a power of
// two (a cluster size every GPU with clusters takes), at most kGreedyMaxBlocks. A function
// of vocab alone, never of rows: a row's result must not depend on the call it is in.
int greedy_blocks_per_row(int vocab) {
  int blocks = 1;
  while (blocks < kGreedyMaxBlocks && static_cast<long long>(blocks) * kGreedyEntriesPerBlock < vocab)
    blocks *= 2;
  return blocks;
}

void launch_greedy(const float* logits, int rows, int vocab, const SamplingParams& params,
                   int* tokens, float* confidence, cudaStream_t stream) {
  // Rule 3: greedy's confidence is under softmax(logits) at T = 1 (there is no temperature to
  // apply when we take the argmax). exp(d) is computed as exp2(d * log2(e)).
  (void)params;
  const float inv_t = 1.0f;
  const float scale = std::min(1.4426950408889634f * inv_t, FLT_MAX);
  const int blocks = greedy_blocks_per_row(vocab);

  cudaLaunchAttribute cluster = {};
  cluster.id = cudaLaunchAttributeClusterDimension;
  cluster.val.clusterDim.x = static_cast<unsigned>(blocks);
  cluster.val.clusterDim.y = 1;
  cluster.val.clusterDim.z = 1;
  cudaLaunchConfig_t config = {};
  config.gridDim = dim3(static_cast<unsigned>(rows) * static_cast<unsigned>(blocks));
  config.blockDim = dim3(kGreedyThreads);
  config.dynamicSmemBytes = 0;
  config.stream = stream;
  config.attrs = &cluster;
  config.numAttrs = 1;
  WB_CUDA(cudaLaunchKernelEx(&config, greedy_kernel, logits, vocab, scale, tokens, confidence));
  WB_CHECK_LAUNCH("greedy_kernel");
}

}  // namespace

std::size_t fused_sampler_workspace_bytes(int rows, int vocab) {
  (void)rows, (void)vocab;
  return 0;  // everything lives in shared memory
}

void sample_fused(const float* logits, int rows, int vocab, const SamplingParams& params,
                  int* tokens, float* confidence, void* workspace, std::size_t workspace_bytes,
                  cudaStream_t stream) {
  check_sampling_args("sample_fused", logits, rows, vocab, params, tokens, confidence);
  if (workspace_bytes < fused_sampler_workspace_bytes(rows, vocab))
    throw std::invalid_argument("ch07 sample_fused: workspace_bytes is smaller than "
                                "fused_sampler_workspace_bytes(rows, vocab)");
  (void)workspace;
  if (rows == 0) return;
  if (is_greedy(params)) {  // rule 1: the argmax and its confidence, one pass (see Greedy)
    launch_greedy(logits, rows, vocab, params, tokens, confidence, stream);
    return;
  }

  static std::once_flag configured;
  std::call_once(configured, [] {
    WB_CUDA(cudaFuncSetAttribute(sample_fused_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                 kMaxCachedSliceBytes));
    // All of the SM's unified L1/shared memory as shared memory: two blocks of 16 rows x
    // 151936 (76 KiB of slice each, plus the static part) then fit on every SM.
    WB_CUDA(cudaFuncSetAttribute(sample_fused_kernel,
                                 cudaFuncAttributePreferredSharedMemoryCarveout,
                                 cudaSharedmemCarveoutMaxShared));
  });

  Args a;
  a.logits = logits;
  a.vocab = vocab;
  a.slice_len = slice_length(vocab);
  const std::size_t slice_bytes = static_cast<std::size_t>(a.slice_len) * sizeof(float);
  a.cache_slice = slice_bytes <= static_cast<std::size_t>(kMaxCachedSliceBytes);
  a.temperature = params.temperature;
  a.top_k = params.top_k;
  a.top_p = params.top_p;
  a.seed = params.seed;
  a.step = params.step;
  a.tokens = tokens;
  a.confidence = confidence;

  cudaLaunchAttribute cluster = {};
  cluster.id = cudaLaunchAttributeClusterDimension;
  cluster.val.clusterDim.x = kClusterSize;
  cluster.val.clusterDim.y = 1;
  cluster.val.clusterDim.z = 1;
  cudaLaunchConfig_t config = {};
  config.gridDim = dim3(static_cast<unsigned>(rows) * kClusterSize);
  config.blockDim = dim3(kThreads);
  // The slice, and later (in the leader, which no longer needs its slice) the scratch copy of
  // the gathered entries that it sorts: never both at once.
  config.dynamicSmemBytes =
      std::max(a.cache_slice ? slice_bytes : 0, kGatherCapacity * sizeof(unsigned long long));
  config.stream = stream;
  config.attrs = &cluster;
  config.numAttrs = 1;
  WB_CUDA(cudaLaunchKernelEx(&config, sample_fused_kernel, a));
  WB_CHECK_LAUNCH("sample_fused_kernel");
}

}  // namespace ch07
