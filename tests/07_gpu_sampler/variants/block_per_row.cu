// A must-pass variant of step 4: a sort-free sampler written for plainness rather than speed,
// with one block per row and no workspace. It differs from the reference on purpose: it
// walks the kept tokens in INDEX order when it draws (the reference is free to walk them any
// way), and it keeps every mass as a 64-bit fixed-point integer, so its sums are exact and
// its results do not depend on the order in which threads add.
//
// Per row, each pass re-reading the row (from L2 after the first):
//   1. the max of the logits, and whether the row is bad (rule 5);
//   2. the sum of exp((x - max) / T): the softmax's statistics. Every term scales the
//      difference from the max, never x / T: x / T overflows for a finite x above
//      FLT_MAX * T, and 1 / T itself for T below 2.9e-39 (it is capped at FLT_MAX, so that
//      the max's own term is exp(0 * FLT_MAX) = 1, not exp(0 * inf) = NaN);
//   3. greedy: the argmax (largest logit, lowest index). Done. (Greedy does all of 1 to 3
//      in ONE pass instead, before step 1: the max, its lowest index and the sum of
//      exp((x - max) / T) kept together as the row is read, chapter 04's online softmax.)
//   4. top_k: a radix select finds the k-th largest logit v_k (4 passes of 8 bits over an
//      order-preserving integer key) and one scan finds which of the tokens equal to v_k
//      are kept (the lowest indices): the kept set is "key > v_k, or key == v_k and index
//      <= cut_k", no sort;
//   5. top_p: the same radix select, counting probability mass instead of tokens, finds
//      the logit where the running mass (largest logits first) reaches top_p times the
//      mass top_k kept;
//   6. the draw: u = draw_uniform(seed, step, row); a block-wide prefix sum over the kept
//      tokens' masses in index order finds the first whose running mass reaches u times
//      the kept mass. The sums are exact integers, so the walk can never end past the last
//      kept token.
#include <cub/block/block_reduce.cuh>
#include <cub/block/block_scan.cuh>
#include <cuda_runtime.h>

#include <cfloat>
#include <climits>
#include <cmath>
#include <cstdint>
#include <stdexcept>
#include <string>

#include "sampler.cuh"
#include "wb/check.hpp"

namespace ch07 {

namespace {

constexpr int kThreads = 1024;
// Masses as integers: p * 2^48. Exact sums of up to 2^15 rows' worth of probability, and a
// resolution (3.6e-15) far below anything a test of 10^5 draws can see.
constexpr double kMassScale = 281474976710656.0;  // 2^48
using Mass = unsigned long long;

// Larger logit -> larger key, as unsigned integers (the radix select's digits). -0.0 and
// +0.0 are the same logit, so they get the same key.
__device__ unsigned order_key(float x) {
  const unsigned bits = __float_as_uint(x == 0.0f ? 0.0f : x);
  return (bits & 0x80000000u) ? ~bits : (bits | 0x80000000u);
}

struct MaxOp {
  __device__ float operator()(float a, float b) const { return fmaxf(a, b); }
};

// Greedy's one pass: (max logit, its lowest index, sum exp((x - max) / T), bad) over a part
// of a row.
struct Online {
  float max;
  float sum;
  int index;
  int bad;
};
struct OnlineOp {
  float inv_t;  // 1 / T, capped at FLT_MAX
  __device__ Online operator()(const Online& a, const Online& b) const {
    Online r = a.max > -INFINITY ? a : b;
    r.bad = a.bad | b.bad;
    if (a.max > -INFINITY && b.max > -INFINITY) {
      r.max = fmaxf(a.max, b.max);
      r.index = a.max > b.max ? a.index : b.max > a.max ? b.index : min(a.index, b.index);
      r.sum = a.sum * expf((a.max - r.max) * inv_t) + b.sum * expf((b.max - r.max) * inv_t);
    }
    return r;
  }
};

struct Shared {
  union {
    cub::BlockReduce<float, kThreads>::TempStorage reduce_float;
    cub::BlockReduce<int, kThreads>::TempStorage reduce_int;
    cub::BlockReduce<Online, kThreads>::TempStorage reduce_online;
    cub::BlockReduce<Mass, kThreads>::TempStorage reduce_mass;
    cub::BlockScan<Mass, kThreads>::TempStorage scan;
  } temp;
  Mass histogram[256];
  float broadcast_float;
  Mass broadcast_mass;
  unsigned broadcast_key;
  int broadcast_int;
};

// The kept set so far: key > key_cut, or key == key_cut and index <= index_cut.
struct Cut {
  unsigned key = 0;
  int index = INT_MAX;
  __device__ bool keeps(unsigned key_i, int i) const {
    return key_i > key || (key_i == key && i <= index);
  }
};

// Radix select, MSB first: the key at which the running total of `weight` over the kept
// tokens (largest keys first) reaches `target`, and how much of `target` is left for the
// tokens with exactly that key. weight(i) is 1 to count tokens, the mass to count mass.
template <typename Weight>
__device__ void radix_select(const float* row, int vocab, const Cut& kept, Weight weight,
                             Mass target, Shared& s, unsigned* key_out, Mass* left_out) {
  unsigned prefix = 0, prefix_mask = 0;
  for (int shift = 24; shift >= 0; shift -= 8) {
    for (int d = threadIdx.x; d < 256; d += kThreads) s.histogram[d] = 0;
    __syncthreads();
    for (int i = threadIdx.x; i < vocab; i += kThreads) {
      const unsigned key = order_key(row[i]);
      if ((key & prefix_mask) == prefix && kept.keeps(key, i)) {
        const Mass w = weight(i);
        if (w > 0) atomicAdd(&s.histogram[(key >> shift) & 255u], w);  // integers: exact
      }
    }
    __syncthreads();
    if (threadIdx.x == 0) {
      int digit = 255;
      for (; digit > 0 && target > s.histogram[digit]; --digit) target -= s.histogram[digit];
      s.broadcast_key = prefix | (static_cast<unsigned>(digit) << shift);
      s.broadcast_mass = target;
    }
    __syncthreads();
    prefix = s.broadcast_key;
    target = s.broadcast_mass;
    prefix_mask |= 255u << shift;
    __syncthreads();
  }
  *key_out = prefix;
  *left_out = target;
}

// The first index, in index order, at which the running sum of item(i) reaches target.
// item(i) >= 0; the caller guarantees the total reaches target.
template <typename Item>
__device__ int first_index_reaching(int vocab, Item item, Mass target, Shared& s) {
  Mass carried = 0;
  for (int base = 0; base < vocab; base += kThreads) {
    const int i = base + threadIdx.x;
    const Mass mine = i < vocab ? item(i) : 0;
    Mass before = 0, chunk_total = 0;
    cub::BlockScan<Mass, kThreads>(s.temp.scan).ExclusiveSum(mine, before, chunk_total);
    if (threadIdx.x == 0) s.broadcast_int = -1;
    __syncthreads();
    if (mine > 0 && carried + before < target && carried + before + mine >= target)
      s.broadcast_int = i;  // exactly one thread
    __syncthreads();
    const int found = s.broadcast_int;
    __syncthreads();
    if (found >= 0) return found;
    carried += chunk_total;
  }
  return vocab - 1;  // not reached: cannot happen with exact integer sums
}

__global__ void __launch_bounds__(kThreads)
    sample_rows_kernel(const float* logits, int vocab, SamplingParams params, int* tokens,
                       float* confidence) {
  __shared__ Shared s;
  const int r = blockIdx.x;
  const float* row = logits + static_cast<std::size_t>(r) * vocab;
  // 1 / T, capped: for T below 2.9e-39 it is +inf, and (max - max) * inf would be NaN.
  const float t = params.temperature == 0.0f ? 1.0f : params.temperature;
  const float inv_t = fminf(1.0f / t, FLT_MAX);

  // Greedy: one pass. Each thread keeps its own (max, index, sum) as it reads (in index
  // order, so a strict > keeps the lowest index), 8 loads in flight before it uses any.
  if (is_greedy(params)) {
    Online mine{-INFINITY, 0.0f, INT_MAX, 0};
    for (int base = threadIdx.x; base < vocab; base += 8 * kThreads) {
      float x[8];
      for (int k = 0; k < 8; ++k) {
        const int i = base + k * kThreads;
        x[k] = i < vocab ? row[i] : -INFINITY;  // -inf: adds nothing
      }
      for (int k = 0; k < 8; ++k) {
        mine.bad |= !(x[k] < INFINITY);  // NaN or +inf
        if (x[k] > mine.max) {
          mine.sum *= expf((mine.max - x[k]) * inv_t);  // 0 while max was -inf (and sum 0)
          mine.max = x[k];
          mine.index = base + k * kThreads;
        }
        if (mine.max > -INFINITY) mine.sum += expf((x[k] - mine.max) * inv_t);
      }
    }
    const Online all =
        cub::BlockReduce<Online, kThreads>(s.temp.reduce_online).Reduce(mine, OnlineOp{inv_t});
    if (threadIdx.x == 0) {
      const bool bad = all.bad || !(all.max > -INFINITY);  // rule 5
      tokens[r] = bad ? -1 : all.index;
      confidence[r] = bad ? NAN : 1.0f / all.sum;
    }
    return;
  }

  // 1. max and bad row
  float local_max = -INFINITY;
  int bad = 0;
  for (int i = threadIdx.x; i < vocab; i += kThreads) {
    const float x = row[i];
    bad |= isnan(x) || x == INFINITY;
    local_max = fmaxf(local_max, x);
  }
  const float block_max = cub::BlockReduce<float, kThreads>(s.temp.reduce_float).Reduce(local_max, MaxOp{});
  __syncthreads();
  const int block_bad = cub::BlockReduce<int, kThreads>(s.temp.reduce_int).Sum(bad);
  if (threadIdx.x == 0) s.broadcast_float = (block_bad > 0 || block_max == -INFINITY) ? NAN : block_max;
  __syncthreads();
  const float m = s.broadcast_float;
  if (isnan(m)) {  // rule 5
    if (threadIdx.x == 0) {
      tokens[r] = -1;
      confidence[r] = NAN;
    }
    return;
  }

  // 2. the softmax's sum
  float local_sum = 0.0f;
  for (int i = threadIdx.x; i < vocab; i += kThreads) local_sum += expf((row[i] - m) * inv_t);
  __syncthreads();
  const float block_sum = cub::BlockReduce<float, kThreads>(s.temp.reduce_float).Sum(local_sum);
  if (threadIdx.x == 0) s.broadcast_float = block_sum;
  __syncthreads();
  const float sum = s.broadcast_float;
  const auto p = [&](int i) { return expf((row[i] - m) * inv_t) / sum; };
  const auto finish = [&](int token) {
    if (threadIdx.x == 0) {
      tokens[r] = token;
      confidence[r] = p(token);
    }
  };

  // 4. top_k: the k-th largest key, and how many of the tokens with that key are kept.
  Cut top_k;  // keeps everything
  if (params.top_k > 0 && params.top_k < vocab) {
    unsigned key_k = 0;
    Mass ties_kept = 0;
    radix_select(row, vocab, Cut{}, [](int) -> Mass { return 1; }, params.top_k, s, &key_k,
                 &ties_kept);
    top_k.key = key_k;
    top_k.index = first_index_reaching(
        vocab, [&](int i) -> Mass { return order_key(row[i]) == key_k ? 1 : 0; }, ties_kept, s);
  }
  const auto mass = [&](int i) -> Mass { return static_cast<Mass>(p(i) * kMassScale); };
  const auto mass_kept_by = [&](const Cut& cut) {
    Mass local = 0;
    for (int i = threadIdx.x; i < vocab; i += kThreads)
      if (cut.keeps(order_key(row[i]), i)) local += mass(i);
    __syncthreads();
    const Mass total = cub::BlockReduce<Mass, kThreads>(s.temp.reduce_mass).Sum(local);
    if (threadIdx.x == 0) s.broadcast_mass = total;
    __syncthreads();
    const Mass result = s.broadcast_mass;
    __syncthreads();
    return result;
  };

  // 5. top_p: where the running mass of top_k's set, largest first, reaches top_p of it.
  Cut kept = top_k;
  if (params.top_p < 1.0f) {
    const Mass top_k_mass = mass_kept_by(top_k);
    Mass target = static_cast<Mass>(ceil(static_cast<double>(params.top_p) * top_k_mass));
    if (target < 1) target = 1;
    unsigned key_p = 0;
    Mass left = 0;
    radix_select(row, vocab, top_k, mass, target, s, &key_p, &left);
    kept.key = key_p;
    kept.index = first_index_reaching(
        vocab,
        [&](int i) -> Mass {
          const unsigned key = order_key(row[i]);
          return key == key_p && top_k.keeps(key, i) ? mass(i) : 0;
        },
        left < 1 ? Mass{1} : left, s);
  }
  // Both cuts apply: top_p's cut lies inside top_k's set, except that a tie at the top_p
  // key may reach past top_k's index cut; keeping both conditions is exact.
  const auto keeps = [&](int i) {
    const unsigned key = order_key(row[i]);
    return top_k.keeps(key, i) && kept.keeps(key, i);
  };

  // 6. the draw, in index order, over exact integer masses.
  Mass local_total = 0;
  for (int i = threadIdx.x; i < vocab; i += kThreads)
    if (keeps(i)) local_total += mass(i);
  __syncthreads();
  const Mass total = cub::BlockReduce<Mass, kThreads>(s.temp.reduce_mass).Sum(local_total);
  if (threadIdx.x == 0) s.broadcast_mass = total;
  __syncthreads();
  const Mass kept_mass = s.broadcast_mass;
  __syncthreads();
  const float u = draw_uniform(params.seed, params.step, r);  // (0, 1]
  Mass target = static_cast<Mass>(ceil(static_cast<double>(u) * kept_mass));
  if (target < 1) target = 1;
  if (target > kept_mass) target = kept_mass;
  const int token = first_index_reaching(
      vocab, [&](int i) -> Mass { return keeps(i) ? mass(i) : 0; }, target, s);
  finish(token);
}

}  // namespace

std::size_t fused_sampler_workspace_bytes(int rows, int vocab) {
  (void)rows;
  (void)vocab;
  return 0;  // everything lives in shared memory
}

void sample_fused(const float* logits, int rows, int vocab, const SamplingParams& params,
                  int* tokens, float* confidence, void* workspace, std::size_t workspace_bytes,
                  cudaStream_t stream) {
  (void)workspace;
  (void)workspace_bytes;
  check_sampling_args("sample_fused", logits, rows, vocab, params, tokens, confidence);
  if (rows == 0) return;
  sample_rows_kernel<<<rows, kThreads, 0, stream>>>(logits, vocab, params, tokens, confidence);
  WB_CHECK_LAUNCH("sample_rows_kernel");
}

}  // namespace ch07
