// The whole decoding step in one thread-block cluster (cluster_step.hpp says when and why).
//
// Reading order: which block computes what, shared memory (and the packed weights, which are
// its image), the block's helpers, attention, the two stages of a layer, the step, and the host
// side (the plan, the packing, the launch).
//
// A layer is two stages, each ending at one cluster barrier:
//   attention  every block: RMSNorm(x). Block b, for its query head h: q, k, v of that head
//              (its own rows of Wqkv), RoPE, the cache append, attention over the cache, and
//              Wo's columns of head h times the result: a partial sum of Wo att, dim values,
//              written into slot b of every block's attention partials.
//   FFN        every block: x += the attention partials (in slot order: every block gets the
//              same bits), RMSNorm(x). Block b, for its hidden units: W1 h and W3 h (its rows),
//              SwiGLU, and W2's columns of those units times the result: a partial sum of W2 g,
//              written into slot b of every block's FFN partials. Then x += the FFN partials,
//              and RMSNorm(x) for the next layer.
// After the last layer each block computes its rows of the classifier, and greedy decoding's
// token (the argmax) is picked over all blocks' rows (one more cluster barrier).
#include "cluster_step.hpp"

#include <cooperative_groups.h>

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>
#include <vector>

#include "bulk_copy.cuh"
#include "gpu_decoder.hpp"
#include "greedy_pick.cuh"
#include "persistent_step.hpp"
#include "wb/check.hpp"
#include "wb/upload.hpp"

namespace ch08 {
namespace {

namespace cg = cooperative_groups;
using greedy::Pick;

constexpr int kThreads = 256;  // 8 warps per block
constexpr int kWarps = kThreads / 32;
constexpr int kMaxBlocks = 16;    // Hopper's largest cluster (8 without the non-portable opt-in)
constexpr float kRmsEps = 1e-5f;  // llama2.c's run.c

struct Params : StepShape {
  int blocks;                 // in the cluster
  const float* embedding;     // [vocab][dim]
  const float* packed;        // block b's weights at packed + b * image_floats (pack_weights)
  std::size_t image_floats;
  StepBuffers io;
};

// ---- Which block computes what ------------------------------------------------------------
// Block b of B: the query heads b, b + B, ...; the hidden units of its share of the groups of
// four (W2's columns are then whole 16-byte pieces); its share of the classifier's rows.

struct Rows {
  int begin, end;
  __host__ __device__ int count() const { return end - begin; }
};

__host__ __device__ inline Rows share(int n, int part, int parts) {
  return {int(std::int64_t(n) * part / parts), int(std::int64_t(n) * (part + 1) / parts)};
}

__host__ __device__ inline int largest_share(int n, int parts) { return (n + parts - 1) / parts; }

__host__ __device__ inline int heads_of(const Params& p, int block) {
  return block < p.n_heads ? (p.n_heads - 1 - block) / p.blocks + 1 : 0;
}

__host__ __device__ inline Rows units_of(const Params& p, int block) {
  const Rows groups = share(p.hidden / 4, block, p.blocks);
  return {4 * groups.begin, 4 * groups.end};
}

// ---- Shared memory ---------------------------------------------------------------------------

// Float offsets in a block's dynamic shared memory; the same function on the host (how much to
// ask for, how to pack the weights) and on the device. Every region starts on a 16-byte boundary
// (float4 reads; bulk copies). From `norms` to the end it is the block's packed weights: the
// norms' weights, a slot per layer (the same size in every block: the largest share), the
// classifier's rows.
struct Layout {
  std::size_t x, xn, qkv, att, part, att_parts, ffn_parts, h13, g, partial, red, logits, picks, keys, values,
      barriers, norms, weights, total;
  // Within a layer's slot: per head its q, k, v rows then its Wo columns ([dim][head_size]);
  // then W1's and W3's rows of the block's units, then W2's columns of them ([dim][units]).
  std::size_t head_qkv, head_wo, head, w13, w2, layer, classifier;
};

__host__ __device__ inline Layout layout_for(const Params& p) {
  Layout l{};
  std::size_t at = 0;
  const auto take = [&at](std::size_t floats) {
    const std::size_t start = at;
    at += (floats + 3) / 4 * 4;
    return start;
  };
  const std::size_t dim = p.dim, hs = p.head_size, B = p.blocks, L = p.n_layers;
  const std::size_t heads = std::size_t(largest_share(p.n_heads, p.blocks));
  const std::size_t units = 4 * std::size_t(largest_share(p.hidden / 4, p.blocks));
  l.x = take(dim);               // the residual stream (every block a whole copy)
  l.xn = take(dim);              // RMSNorm(x)
  l.qkv = take(3 * hs);          // q, k, v of the head in hand
  l.att = take(hs);              // its attention output
  l.part = take(dim);            // this block's partial sum of Wo att, or of W2 g
  l.att_parts = take(B * dim);   // every block's partial sum of Wo att (slot = block)
  l.ffn_parts = take(B * dim);   // ... of W2 g
  l.h13 = take(2 * units);       // W1 h, then W3 h, of this block's units
  l.g = take(units);             // SwiGLU of them
  l.partial = take(std::size_t(kWarps) * (hs + 4));  // attention: each warp's m, l and output
  l.red = take(kWarps);                              // one partial per warp
  l.logits = take(std::size_t(largest_share(p.vocab, p.blocks)));  // this block's logits
  l.picks = take(3 * (std::size_t(kWarps) + B));                    // greedy picks: per warp, then per block
  l.keys = take(std::size_t(p.seq_len) * hs);        // the cache rows of this block's first head
  l.values = take(std::size_t(p.seq_len) * hs);
  l.barriers = take((2 * L + 2) * 2);  // mbarriers (8 bytes): 2 per layer, classifier, norms
  l.norms = take((2 * L + 1) * dim);   // RMSNorm weights: attention's, FFN's, final
  l.head_qkv = 0;
  l.head_wo = 3 * hs * dim;
  l.head = 4 * hs * dim;
  l.w13 = heads * l.head;
  l.w2 = l.w13 + 2 * units * dim;
  l.layer = l.w2 + dim * units;
  l.classifier = L * l.layer;
  l.weights = take(l.classifier + std::size_t(largest_share(p.vocab, p.blocks)) * dim);
  l.total = at;
  return l;
}

struct Shared {
  float *x, *xn, *qkv, *att, *part, *att_parts, *ffn_parts, *h13, *g, *partial, *red, *logits, *keys, *values,
      *norms, *weights;
  Pick* picks;
  std::uint64_t* barriers;
  Layout at;
};

__device__ Shared carve(const Params& p, float* base) {
  const Layout l = layout_for(p);
  Shared s{};
  s.x = base + l.x;
  s.xn = base + l.xn;
  s.qkv = base + l.qkv;
  s.att = base + l.att;
  s.part = base + l.part;
  s.att_parts = base + l.att_parts;
  s.ffn_parts = base + l.ffn_parts;
  s.h13 = base + l.h13;
  s.g = base + l.g;
  s.partial = base + l.partial;
  s.red = base + l.red;
  s.logits = base + l.logits;
  s.picks = reinterpret_cast<Pick*>(base + l.picks);
  s.keys = base + l.keys;
  s.values = base + l.values;
  s.norms = base + l.norms;
  s.weights = base + l.weights;
  s.barriers = reinterpret_cast<std::uint64_t*>(base + l.barriers);
  s.at = l;
  return s;
}

// The weights' copy: at its start the block asks the copy engine for all of its packed weights,
// one bulk copy per region, each region behind its own barrier (region k, barrier k): a layer's
// attention weights (2 l), its FFN weights (2 l + 1), the classifier's rows (2 L), the norms'
// weights (2 L + 1). Nobody waits here: each stage waits for its own region when it needs it.
struct Region {
  std::size_t at, floats;  // in shared memory, from the image's start (norms)
};

__host__ __device__ inline Region region_of(const Layout& l, int k, int n_layers) {
  const std::size_t weights = l.weights - l.norms;
  if (k == 2 * n_layers + 1) return {0, weights};
  if (k == 2 * n_layers) return {weights + l.classifier, l.total - l.weights - l.classifier};
  const std::size_t slot = weights + std::size_t(k / 2) * l.layer;
  return k % 2 == 0 ? Region{slot, l.w13} : Region{slot + l.w13, l.layer - l.w13};
}

__device__ void copy_weights(const Params& p, const Shared& s, int rank) {
  const float* image = p.packed + std::size_t(rank) * p.image_floats;
  for (int k = threadIdx.x; k < 2 * p.n_layers + 2; k += kThreads) {
    const Region r = region_of(s.at, k, p.n_layers);
    const std::uint32_t bytes = std::uint32_t(r.floats * sizeof(float));
    bulk::arrive_expecting(s.barriers + k, bytes);
    if (bytes > 0) bulk::bulk_copy(s.norms + r.at, image + r.at, bytes, s.barriers + k);
  }
}

__device__ std::uint64_t* attention_weights(const Shared& s, int layer) { return s.barriers + 2 * layer; }
__device__ std::uint64_t* ffn_weights(const Shared& s, int layer) { return s.barriers + 2 * layer + 1; }
__device__ std::uint64_t* classifier_weights(const Params& p, const Shared& s) { return s.barriers + 2 * p.n_layers; }
__device__ std::uint64_t* norm_weights(const Params& p, const Shared& s) { return s.barriers + 2 * p.n_layers + 1; }

// ---- The block's helpers ----------------------------------------------------------------

__device__ __forceinline__ float warp_sum(float v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

// The sum over the block, in one fixed order.
__device__ float block_sum(float v, float* red) {
  v = warp_sum(v);
  if (threadIdx.x % 32 == 0) red[threadIdx.x / 32] = v;
  __syncthreads();
  float total = 0.0f;
  for (int w = 0; w < kWarps; ++w) total += red[w];
  __syncthreads();  // red is free again
  return total;
}

// out = RMSNorm(x) llama2.c's way: weight * (x / sqrt(mean(x^2) + eps)).
__device__ void rmsnorm(float* out, const float* x, const float* weight, int n, float* red) {
  float squares = 0.0f;
  for (int i = threadIdx.x; i < n; i += kThreads) squares += x[i] * x[i];
  const float scale = rsqrtf(block_sum(squares, red) / float(n) + kRmsEps);
  for (int i = threadIdx.x; i < n; i += kThreads) out[i] = weight[i] * (scale * x[i]);
  __syncthreads();
}

// out[r] = W[r] . vec for r < rows (W in shared memory, [rows][cols]): a warp per kRows rows, the
// lanes reading the rows' 16-byte pieces side by side. Ends with the block meeting.
__device__ void matvec(const float* W, int rows, int cols, const float* vec, float* out) {
  constexpr int kRows = 4;
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, n4 = cols / 4;
  const float4* w = reinterpret_cast<const float4*>(W);
  const float4* x = reinterpret_cast<const float4*>(vec);
  for (int r0 = warp * kRows; r0 < rows; r0 += kWarps * kRows) {
    float acc[kRows] = {};
    for (int c = lane; c < n4; c += 32) {
      const float4 v = x[c];
#pragma unroll
      for (int r = 0; r < kRows; ++r)
        if (r0 + r < rows) {
          const float4 a = w[std::size_t(r0 + r) * n4 + c];
          acc[r] += a.x * v.x + a.y * v.y + a.z * v.z + a.w * v.w;
        }
    }
#pragma unroll
    for (int r = 0; r < kRows; ++r) {
      const float dot = warp_sum(acc[r]);
      if (lane == 0 && r0 + r < rows) out[r0 + r] = dot;
    }
  }
  __syncthreads();
}

// part[r] (+)= W[r] . vec for r < dim, W ([dim][n]: some columns of a matrix) and vec (n) in
// shared memory: a thread per row. Ends with the block meeting.
__device__ void columns_times(const float* W, int n, const float* vec, float* part, int dim, bool add) {
  for (int r = threadIdx.x; r < dim; r += kThreads) {
    const float4* w = reinterpret_cast<const float4*>(W + std::size_t(r) * n);
    const float4* x = reinterpret_cast<const float4*>(vec);
    float dot = 0.0f;
    for (int c = 0; c < n / 4; ++c) {
      const float4 a = w[c], b = x[c];
      dot += a.x * b.x + a.y * b.y + a.z * b.z + a.w * b.w;
    }
    part[r] = add ? part[r] + dot : dot;
  }
  __syncthreads();
}

// Slot `slot` of `parts` ([blocks][dim]) in every block of the cluster = part (dim values):
// distributed shared memory, 16 bytes per store, consecutive threads on consecutive pieces of
// one block's copy. The cluster barrier that ends the stage makes the writes visible.
__device__ void send_to_every_block(const cg::cluster_group& cluster, float* parts, int slot, const float* part,
                                    int dim, int blocks) {
  const int pieces = dim / 4;
  const float4* from = reinterpret_cast<const float4*>(part);
  for (int i = threadIdx.x; i < blocks * pieces; i += kThreads) {
    const int block = i / pieces, piece = i % pieces;
    float4* to = reinterpret_cast<float4*>(cluster.map_shared_rank(parts, block) + std::size_t(slot) * dim);
    to[piece] = from[piece];
  }
}

// x += the partial sums in slots [0, slots) of parts ([slots][dim]), then xn = RMSNorm(x) with
// `weight`, in one pass over x. Four threads per element each add every fourth slot and the
// four sums are added pairwise: one fixed order, so every block gets the same bits.
__device__ void add_partials_and_norm(float* x, const float* parts, int slots, float* xn, const float* weight, int dim,
                                      float* red) {
  float squares = 0.0f;
  for (int base = 0; base < dim; base += kThreads / 4) {
    const int i = base + int(threadIdx.x) / 4, quarter = threadIdx.x % 4;
    float sum = 0.0f;
    if (i < dim)
      for (int b = quarter; b < slots; b += 4) sum += parts[std::size_t(b) * dim + i];
    sum += __shfl_xor_sync(0xffffffffu, sum, 1);
    sum += __shfl_xor_sync(0xffffffffu, sum, 2);
    if (i < dim && quarter == 0) {
      const float updated = x[i] + sum;
      x[i] = updated;
      squares += updated * updated;
    }
  }
  const float scale = rsqrtf(block_sum(squares, red) / float(dim) + kRmsEps);  // (its barriers publish x)
  for (int i = threadIdx.x; i < dim; i += kThreads) xn[i] = weight[i] * (scale * x[i]);
  __syncthreads();
}

// llama2.c's SwiGLU: silu(g) * u, silu(g) = g / (1 + exp(-g)), with silu(-inf) = 0.
__device__ __forceinline__ float swiglu(float gate, float up) {
  const float silu = gate == -INFINITY ? 0.0f : gate * (1.0f / (1.0f + expf(-gate)));
  return silu * up;
}

// ---- Attention --------------------------------------------------------------------------

// The cache rows t < pos of KV head `group` (written by earlier launches) into s.keys and
// s.values, without waiting: they arrive while the block computes its head's q, k and v.
__device__ void copy_history(const Params& p, const Shared& s, int layer, int group, int pos) {
  const int hs = p.head_size, pieces = hs / 4;
  const std::size_t first = std::size_t(layer) * p.seq_len * p.kv_dim + std::size_t(group) * hs;
  for (int i = threadIdx.x; i < pos * pieces; i += kThreads) {
    const int t = i / pieces, c = 4 * (i % pieces);
    bulk::copy16_async(s.keys + t * hs + c, p.io.key_cache + first + std::size_t(t) * p.kv_dim + c);
    bulk::copy16_async(s.values + t * hs + c, p.io.value_cache + first + std::size_t(t) * p.kv_dim + c);
  }
  asm volatile("cp.async.commit_group;" ::: "memory");
}

// RoPE's rotation of pair i of a head at position pos (llama2.c's angle: the pair's place in
// its head, in float). The same for every layer and head: each thread i < head_size / 2
// computes its pair's once per step, at the start, off the layers' path.
struct Rotation {
  float cos = 1.0f, sin = 0.0f;
};

__device__ Rotation rotation_of_pair(int pair, int head_size, int pos) {
  Rotation r;
  if (2 * pair < head_size) {
    const float frequency = 1.0f / powf(10000.0f, float(2 * pair) / float(head_size));
    sincosf(float(pos) * frequency, &r.sin, &r.cos);
  }
  return r;
}

// RoPE on this head's q and k (s.qkv): thread i rotates pair i of each with its rotation.
__device__ void rope(const Params& p, const Shared& s, const Rotation& r) {
  const int i = 2 * int(threadIdx.x), hs = p.head_size;
  if (i < hs)
    for (float* v : {s.qkv + i, s.qkv + hs + i}) {
      const float a = v[0], b = v[1];
      v[0] = a * r.cos - b * r.sin;
      v[1] = a * r.sin + b * r.cos;
    }
  __syncthreads();
}

// s.att = softmax(q k^T / sqrt(head_size)) v over t = 0..pos for the head in s.qkv (q, k, v,
// rotated), KV head `group`. Rows t < copied are in shared memory (copy_history), the other rows
// t < pos in the cache, row pos in s.qkv.
//
// Each warp takes a run of consecutive positions on its own, with no block barrier: its lanes
// score them (lane j: positions first + j, first + j + 32, ...), the warp's max m_w and sum l_w
// of exp(s - m_w) come from shuffles, and its lanes then add exp(s_t - m_w) v_t, `rows`
// positions side by side (lane = slot * columns + column, a column being 4 floats of v). Then
// one barrier, and the warps' results are merged the online-softmax way: m = max m_w,
// att = sum_w exp(m_w - m) o_w / sum_w exp(m_w - m) l_w.
__device__ void attention_head(const Params& p, const Shared& s, int layer, int group, int pos, int copied) {
  constexpr int kMostPerLane = 4;  // positions a lane scores: seq_len <= 8 * 32 * 4 (the plan checks)
  const int hs = p.head_size, lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const int columns = hs / 4, rows = 32 / columns;  // the cluster plan needs 32 % columns == 0
  const std::size_t cache = std::size_t(layer) * p.seq_len * p.kv_dim + std::size_t(group) * hs;
  const auto key = [&](int t) {
    return t == pos ? s.qkv + hs : t < copied ? s.keys + t * hs : p.io.key_cache + cache + std::size_t(t) * p.kv_dim;
  };
  const auto value = [&](int t) {
    return t == pos ? s.qkv + 2 * hs : t < copied ? s.values + t * hs : p.io.value_cache + cache + std::size_t(t) * p.kv_dim;
  };
  // This warp's positions [first, last).
  const int per_warp = (pos + kWarps) / kWarps, first = warp * per_warp, last = min(first + per_warp, pos + 1);
  const int laps = (max(last - first, 0) + 31) / 32;  // of 32 positions
  const float root = sqrtf(float(hs));
  const float4* q4 = reinterpret_cast<const float4*>(s.qkv);
  float score[kMostPerLane];
  float m = -INFINITY;
#pragma unroll
  for (int i = 0; i < kMostPerLane; ++i) {
    const int t = first + lane + 32 * i;
    score[i] = -INFINITY;
    if (i < laps && t < last) {
      const float4* k4 = reinterpret_cast<const float4*>(key(t));
      float dot = 0.0f;
      for (int c = 0; c < columns; ++c) {
        const float4 a = k4[c], b = q4[c];
        dot += a.x * b.x + a.y * b.y + a.z * b.z + a.w * b.w;
      }
      score[i] = dot / root;
      m = fmaxf(m, score[i]);
    }
  }
  for (int o = 16; o > 0; o >>= 1) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, o));
  float l = 0.0f;
#pragma unroll
  for (int i = 0; i < kMostPerLane; ++i) {
    score[i] = score[i] == -INFINITY ? 0.0f : expf(score[i] - m);  // (a warp with no position: m = -inf)
    l += score[i];
  }
  l = warp_sum(l);
  // The weighted sum: lane (slot, column) takes positions first + j0 + slot of each group of
  // `rows`, their weights from the lanes that scored them.
  const int slot = lane / columns, column = lane % columns;
  float4 acc = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
#pragma unroll
  for (int i = 0; i < kMostPerLane; ++i) {
    if (i >= laps) break;  // (the same for the whole warp)
    for (int j0 = 0; j0 < 32; j0 += rows) {
      const float w = __shfl_sync(0xffffffffu, score[i], j0 + slot);
      const int t = first + 32 * i + j0 + slot;
      if (t < last) {
        const float4 v = reinterpret_cast<const float4*>(value(t))[column];
        acc.x += w * v.x;
        acc.y += w * v.y;
        acc.z += w * v.z;
        acc.w += w * v.w;
      }
    }
  }
  for (int o = columns; o < 32; o <<= 1) {  // add the slots: lanes with slot 0 hold the warp's sum
    acc.x += __shfl_xor_sync(0xffffffffu, acc.x, o);
    acc.y += __shfl_xor_sync(0xffffffffu, acc.y, o);
    acc.z += __shfl_xor_sync(0xffffffffu, acc.z, o);
    acc.w += __shfl_xor_sync(0xffffffffu, acc.w, o);
  }
  float* mine = s.partial + warp * (hs + 4);  // m_w, l_w, (2 unused), o_w[hs]: 16-byte aligned
  if (lane == 0) {
    mine[0] = m;
    mine[1] = l;
  }
  if (slot == 0) reinterpret_cast<float4*>(mine + 4)[column] = acc;
  __syncthreads();
  // The merge: kWarps consecutive threads per output element, one per warp's result, combined by
  // shuffles in a fixed order.
  static_assert(kWarps == 8, "the merge's shuffles combine 8 lanes");
  for (int base = 0; base < hs; base += kThreads / kWarps) {
    const int i = base + int(threadIdx.x) / kWarps, w = threadIdx.x % kWarps;
    const float* theirs = s.partial + w * (hs + 4);
    const float m_w = theirs[0];
    float most = m_w;
    for (int o = 1; o < kWarps; o <<= 1) most = fmaxf(most, __shfl_xor_sync(0xffffffffu, most, o));
    const float scale = m_w == -INFINITY ? 0.0f : expf(m_w - most);
    float sum = scale * theirs[1], out = i < hs ? scale * theirs[4 + i] : 0.0f;
    for (int o = 1; o < kWarps; o <<= 1) {
      sum += __shfl_xor_sync(0xffffffffu, sum, o);
      out += __shfl_xor_sync(0xffffffffu, out, o);
    }
    if (i < hs && w == 0) s.att[i] = out / sum;
  }
  __syncthreads();
}

// ---- The two stages of a layer ------------------------------------------------------------------

// Attention, for this block's heads: s.part = the sum over them of Wo[:, head] att(head), sent
// to slot `rank` of every block's attention partials. s.xn holds RMSNorm(x). first_write: the
// step's first write into the other blocks, which first waits until every block runs.
__device__ void attention_stage(const Params& p, const Shared& s, const cg::cluster_group& cluster, int layer,
                                int rank, int pos, const Rotation& rotation, bool first_write) {
  const int heads = heads_of(p, rank), per_group = p.n_heads / p.n_kv_heads, hs = p.head_size;
  const float* slot = s.weights + std::size_t(layer) * s.at.layer;
  bulk::wait(attention_weights(s, layer), 0);
  for (int k = 0; k < heads; ++k) {
    const int h = rank + k * p.blocks, group = h / per_group;
    const float* head = slot + k * s.at.head;
    matvec(head + s.at.head_qkv, 3 * hs, p.dim, s.xn, s.qkv);  // q, k, v of head h
    rope(p, s, rotation);
    if (h % per_group == 0) {  // the cache append, once per KV head
      const std::size_t row = (std::size_t(layer) * p.seq_len + pos) * p.kv_dim + std::size_t(group) * hs;
      for (int i = threadIdx.x; i < hs; i += kThreads) {
        p.io.key_cache[row + i] = s.qkv[hs + i];
        p.io.value_cache[row + i] = s.qkv[2 * hs + i];
      }
    }
    asm volatile("cp.async.wait_all;" ::: "memory");  // this thread's history copies
    __syncthreads();                                    // everyone's
    attention_head(p, s, layer, group, pos, k == 0 ? pos : 0);
    columns_times(head + s.at.head_wo, hs, s.att, s.part, p.dim, /*add=*/k > 0);
  }
  if (first_write) __cluster_barrier_wait();  // every block runs (step's arrive)
  if (heads > 0) send_to_every_block(cluster, s.att_parts, rank, s.part, p.dim, p.blocks);
}

// FFN, for this block's hidden units: s.part = W2[:, units] swiglu(W1 h, W3 h) for them, sent to
// slot `rank` of every block's FFN partials (zeros from a block without units). s.xn holds h.
__device__ void ffn_stage(const Params& p, const Shared& s, const cg::cluster_group& cluster, int layer, int rank) {
  const int n = units_of(p, rank).count();
  const float* slot = s.weights + std::size_t(layer) * s.at.layer;
  bulk::wait(ffn_weights(s, layer), 0);
  matvec(slot + s.at.w13, 2 * n, p.dim, s.xn, s.h13);  // W1 h, then W3 h (their rows are packed so)
  for (int j = threadIdx.x; j < n; j += kThreads) s.g[j] = swiglu(s.h13[j], s.h13[n + j]);
  __syncthreads();
  columns_times(slot + s.at.w2, n, s.g, s.part, p.dim, /*add=*/false);
  send_to_every_block(cluster, s.ffn_parts, rank, s.part, p.dim, p.blocks);
}

// ---- Greedy decoding's token -----------------------------------------------------------------
// The decoder's greedy loop needs only the argmax of the logits, so this step picks it itself
// and the sampler's launch is skipped (GpuDecoder::decode): each block over its rows of the
// classifier, then block 0 over the blocks, in block order (greedy_pick.cuh: chapter 07's
// greedy rule).

// s.logits holds this block's rows [rows.begin, rows.end): copies them to the decoder's logits,
// and writes *token = the pick over every block's (and the host's slot io.token_home[pos]).
__device__ void publish_logits_and_pick(const Params& p, const Shared& s, const cg::cluster_group& cluster,
                                        int rank, Rows rows, int pos) {
  Pick mine = greedy::none();
  for (int i = threadIdx.x; i < rows.count(); i += kThreads) {  // increasing index per thread
    const float v = s.logits[i];
    p.io.logits[rows.begin + i] = v;
    mine = greedy::consider(mine, rows.begin + i, v);
  }
  mine = greedy::warp_pick(mine);
  if (threadIdx.x % 32 == 0) s.picks[threadIdx.x / 32] = mine;
  __syncthreads();
  if (threadIdx.x == 0) {
    Pick block = s.picks[0];
    for (int w = 1; w < kWarps; ++w) block = greedy::better(block, s.picks[w]);
    cluster.map_shared_rank(s.picks, 0)[kWarps + rank] = block;  // block 0's slot for this block
  }
  cluster.sync();
  if (rank == 0 && threadIdx.x == 0) {
    Pick all = s.picks[kWarps];
    for (int b = 1; b < p.blocks; ++b) all = greedy::better(all, s.picks[kWarps + b]);
    const int token = greedy::token_of(all);
    *p.io.token = token;
    if (p.io.token_home) p.io.token_home[pos] = token;  // straight into the host's pinned slot
  }
}

// ---- The step -------------------------------------------------------------------------------

__device__ void step(const Params& p, const Shared& s) {
  const cg::cluster_group cluster = cg::this_cluster();
  const int rank = int(cluster.block_rank()), dim = p.dim, tid = threadIdx.x;
  const std::size_t L = std::size_t(p.n_layers);
  if (tid == 0) {
    for (int k = 0; k < 2 * p.n_layers + 2; ++k) bulk::init(s.barriers + k, 1);
    bulk::init_done();
  }
  __syncthreads();
  copy_weights(p, s, rank);
  const int pos = *p.io.pos, token = *p.io.token;
  const bool known = token >= 0 && token < p.vocab;
  for (int i = tid; i < dim; i += kThreads)  // an unknown token: NaN, and the logits show it
    s.x[i] = known ? __ldg(p.embedding + std::size_t(token) * dim + i) : __int_as_float(0x7fc00000);
  const Rotation rotation = rotation_of_pair(tid, p.head_size, pos);
  const int head_blocks = min(p.n_heads, p.blocks);
  const int my_group = rank < p.n_heads ? rank / (p.n_heads / p.n_kv_heads) : 0;
  // "This block runs": the others may write into its shared memory once every block has said
  // so, which attention_stage waits for just before layer 0's first such write (so the wait
  // overlaps layer 0's work instead of delaying it).
  __cluster_barrier_arrive_relaxed();
  bulk::wait(norm_weights(p, s), 0);
  rmsnorm(s.xn, s.x, s.norms, dim, s.red);  // layer 0's attention norm
  for (int l = 0; l < p.n_layers; ++l) {
    if (rank < p.n_heads) copy_history(p, s, l, my_group, pos);
    attention_stage(p, s, cluster, l, rank, pos, rotation, /*first_write=*/l == 0);
    cluster.sync();
    // x += Wo att; xn = the FFN's RMSNorm(x)
    add_partials_and_norm(s.x, s.att_parts, head_blocks, s.xn, s.norms + (L + l) * dim, dim, s.red);
    ffn_stage(p, s, cluster, l, rank);
    cluster.sync();
    // x += W2 g; xn = the next layer's attention RMSNorm(x), after the last layer the final one
    const float* next = l + 1 < p.n_layers ? s.norms + (l + 1) * dim : s.norms + 2 * L * dim;
    add_partials_and_norm(s.x, s.ffn_parts, p.blocks, s.xn, next, dim, s.red);
  }
  // logits = classifier xn: this block's rows
  bulk::wait(classifier_weights(p, s), 0);
  const Rows vocab = share(p.vocab, rank, p.blocks);
  matvec(s.weights + s.at.classifier, vocab.count(), dim, s.xn, s.logits);
  publish_logits_and_pick(p, s, cluster, rank, vocab, pos);
  // Every block read *pos and *token before the first cluster barrier.
  if (rank == 0 && tid == 0) *p.io.pos = pos + 1;
}

__global__ void __launch_bounds__(kThreads, 1) cluster_step_kernel(const Params p) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  extern __shared__ __align__(128) float shared[];
  step(p, carve(p, shared));
#endif
}

// ---- Host: the plan, the packing, the launch --------------------------------------------------

Params params_for(const wb::model::Config& c, int blocks) {
  Params p{};
  static_cast<StepShape&>(p) = step_shape(c);
  p.blocks = blocks;
  return p;
}

cudaLaunchConfig_t launch_config(int blocks, std::size_t shared_bytes, cudaLaunchAttribute* cluster,
                                 cudaStream_t stream) {
  cluster->id = cudaLaunchAttributeClusterDimension;
  cluster->val.clusterDim.x = unsigned(blocks);
  cluster->val.clusterDim.y = 1;
  cluster->val.clusterDim.z = 1;
  cudaLaunchConfig_t config{};
  config.gridDim = dim3(unsigned(blocks));
  config.blockDim = dim3(kThreads);
  config.dynamicSmemBytes = shared_bytes;
  config.stream = stream;
  config.attrs = cluster;
  config.numAttrs = 1;
  return config;
}

[[noreturn]] void refuse(const wb::model::Config& c, const std::string& why) {
  throw std::invalid_argument("ch08 persistent step: no cluster can hold this model: " + why + " (" + c.summary() +
                              ")");
}

// What the kernel's code assumes of the model (the persistent step's constructor has checked
// the rest: multiples of 4, alignment, Hopper).
void check_shape(const wb::model::Config& c) {
  const int columns = c.head_size() / 4;
  if (columns < 1 || columns > 32 || 32 % columns != 0)
    refuse(c, "its head size " + std::to_string(c.head_size()) +
                  " is not 4, 8, 16, 32, 64 or 128 (a warp's lanes split a value row in 16-byte pieces)");
  if (c.seq_len > 4 * 32 * kWarps)
    refuse(c, "its context of " + std::to_string(c.seq_len) + " positions is over " +
                  std::to_string(4 * 32 * kWarps) + " (four positions per lane)");
}

// Each block's weights as its shared memory holds them (layout_for, from `norms` on), block
// after block: what lets a block fetch them all in a dozen bulk copies.
std::vector<float> pack_weights(const wb::model::Config& c, const wb::model::Weights& w, int blocks) {
  const Params p = params_for(c, blocks);
  const Layout l = layout_for(p);
  const std::size_t image = l.total - l.norms, dim = c.dim, hs = c.head_size(), hidden = c.hidden_dim;
  const std::size_t L = c.n_layers, weights = l.weights - l.norms;
  const int per_group = c.n_heads / c.n_kv_heads;
  std::vector<float> packed(image * blocks, 0.0f);
  const auto rows = [&](float* dst, const float* src, std::size_t first, std::size_t count, std::size_t cols) {
    std::copy(src + first * cols, src + (first + count) * cols, dst);
  };
  for (int b = 0; b < blocks; ++b) {
    float* img = packed.data() + std::size_t(b) * image;
    for (std::size_t layer = 0; layer < L; ++layer) {
      const wb::model::LayerWeights& lw = w.layers[layer];
      rows(img + layer * dim, lw.rms_att, 0, 1, dim);
      rows(img + (L + layer) * dim, lw.rms_ffn, 0, 1, dim);
      float* slot = img + weights + layer * l.layer;
      for (int k = 0; k < heads_of(p, b); ++k) {
        const std::size_t h = std::size_t(b + k * blocks), group = h / per_group;
        float* head = slot + k * l.head;
        rows(head + l.head_qkv, lw.wq, h * hs, hs, dim);
        rows(head + l.head_qkv + hs * dim, lw.wk, group * hs, hs, dim);
        rows(head + l.head_qkv + 2 * hs * dim, lw.wv, group * hs, hs, dim);
        for (std::size_t r = 0; r < dim; ++r)  // Wo's columns of head h: hs values of every row
          std::copy_n(lw.wo + r * dim + h * hs, hs, head + l.head_wo + r * hs);
      }
      const Rows units = units_of(p, b);
      const std::size_t n = units.count();
      rows(slot + l.w13, lw.w1, units.begin, n, dim);
      rows(slot + l.w13 + n * dim, lw.w3, units.begin, n, dim);
      for (std::size_t r = 0; r < dim; ++r)  // W2's columns of the units: n values of every row
        std::copy_n(lw.w2 + r * hidden + units.begin, n, slot + l.w2 + r * n);
    }
    rows(img + 2 * L * dim, w.rms_final, 0, 1, dim);
    const Rows vocab = share(c.vocab_size, b, blocks);
    rows(img + weights + l.classifier, w.classifier, vocab.begin, vocab.count(), dim);
  }
  return packed;
}

}  // namespace

ClusterStep::ClusterStep(const GpuModel& model, const StepBuffers& io, int shared_optin) : model_(model), io_(io) {
  const wb::model::Config& c = model.config();
  check_shape(c);
  std::size_t smallest = 0;
  for (int blocks = kMaxBlocks; blocks >= 2 && blocks_ == 0; blocks /= 2) {
    const std::size_t bytes = layout_for(params_for(c, blocks)).total * sizeof(float);
    smallest = bytes;
    if (bytes > std::size_t(shared_optin)) continue;
    WB_CUDA(cudaFuncSetAttribute(cluster_step_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(bytes)));
    WB_CUDA(cudaFuncSetAttribute(cluster_step_kernel, cudaFuncAttributeNonPortableClusterSizeAllowed, 1));
    cudaLaunchAttribute attribute{};
    const cudaLaunchConfig_t config = launch_config(blocks, bytes, &attribute, nullptr);
    int clusters = 0;
    if (cudaOccupancyMaxActiveClusters(&clusters, cluster_step_kernel, &config) != cudaSuccess) {
      (void)cudaGetLastError();  // this size is not supported here: try a smaller one
      continue;
    }
    if (clusters >= 1) {
      blocks_ = blocks;
      shared_bytes_ = bytes;
    }
  }
  if (blocks_ == 0)
    refuse(c, "even 2 blocks would each need " + std::to_string(smallest) +
                  " bytes of shared memory (their share of the weights, the activations, a head's cache rows over " +
                  std::to_string(c.seq_len) + " positions); a block has " + std::to_string(shared_optin));
  const std::vector<float> packed = pack_weights(c, model.host().weights(), blocks_);
  image_floats_ = packed.size() / std::size_t(blocks_);
  WB_CUDA(cudaMalloc(&packed_, packed.size() * sizeof(float)));
  wb::upload_bytes(packed_, packed.data(), packed.size() * sizeof(float));  // read on the decoder's non-blocking stream
}

ClusterStep::~ClusterStep() {
  if (packed_) cudaFree(packed_);
}

void ClusterStep::enqueue(cudaStream_t stream) {
  Params p = params_for(model_.config(), blocks_);
  p.embedding = model_.device(model_.host().weights().token_embedding);
  p.packed = packed_;
  p.image_floats = image_floats_;
  p.io = io_;
  cudaLaunchAttribute attribute{};
  const cudaLaunchConfig_t config = launch_config(blocks_, shared_bytes_, &attribute, stream);
  WB_CUDA(cudaLaunchKernelEx(&config, cluster_step_kernel, p));
  WB_CHECK_LAUNCH("cluster_step_kernel");
}

}  // namespace ch08
