// The whole decoding step as one persistent kernel (persistent_step.hpp says why and how).
//
// Reading order: the parameters and shared memory, which block and warp compute what, the
// weight stream (L2 prefetch ahead, the ring of shared-memory slots and its matvec), the
// stages' inputs (tagged values, RMSNorm), attention, the stages in step order (step), the
// kernel, and the host side (the plan and the launch).
#include "persistent_step.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <stdexcept>
#include <string>
#include <vector>

#include "bulk_copy.cuh"
#include "cluster_step.hpp"
#include "gpu_decoder.hpp"
#include "greedy_pick.cuh"
#include "tagged_values.cuh"
#include "wb/check.hpp"
#include "wb/global_timer.cuh"

namespace ch08 {
namespace {

// 7 warps compute and an 8th streams the weights: 2 warps per SM sub-partition (each with its
// quarter of the register file), so each thread may have up to 255 registers.
constexpr int kWarps = 7;                  // the computing warps
constexpr int kThreads = kWarps * 32;      // the threads that compute (block_sync: these meet)
constexpr int kBlockThreads = kThreads + 32;  // and one more warp: the weight ring's producer
// The weight ring's slots ("The weight ring" below): PersistentTuning::ring_slots of them, at
// most kMaxRingSlots (its barriers' room).
constexpr int kMaxRingSlots = PersistentTuning::kMaxRingSlots;
constexpr std::uint32_t kMinSlotBytes = 16384;  // a slot's size: this, or one row if longer
constexpr int kMaxNormPerThread = 10;      // the norm weights a thread prefetches: dim <= 2240
constexpr float kRmsEps = 1e-5f;           // llama2.c's run.c

// The weights a step reads: GpuModel's device copies (the packed Wqkv and W1|W3 of layer 0;
// every per-layer array is [layer][...], which PersistentStep's constructor checks).
struct StepWeights {
  const float* embedding;   // [vocab][dim]
  const float* rms_att;     // [layer][dim]
  const float* wqkv;        // [layer][dim + 2 kv_dim][dim]
  const float* wo;          // [layer][dim][dim]
  const float* rms_ffn;     // [layer][dim]
  const float* w13;         // [layer][2 hidden][dim]: W1's rows, then W3's
  const float* w2;          // [layer][dim][hidden]
  const float* rms_final;   // [dim]
  const float* classifier;  // [vocab][dim]
};

struct Params : StepShape {
  StepWeights w;
  StepBuffers io;
  // The stages' outputs, tagged (tagged_values.cuh): the persistent step's own buffers.
  struct Activations {
    std::uint64_t *qkv, *att, *xa, *xb, *g;  // dim + 2 kv_dim; dim; dim; dim; hidden
    std::uint64_t* picks;                    // 2 per block: its greedy pick (pick_token)
  } act;
  std::uint32_t launch;  // counts the launches: the tags' base
  unsigned poll_sleep_ns;  // PersistentTuning's, between two polls of a value not yet written
  int prefetch_ahead;      // PersistentTuning's: stages from the one sent to the one asked of L2
  int ring_slots;          // PersistentTuning's: the weight ring's slots
  int wqkv_skip_blocks;    // 0, or n_heads: the head blocks compute no Wqkv rows (wqkv_on_head_blocks)
  std::uint32_t copies_in_flight;  // PersistentTuning's: ring copies the producer lets run at once
  int history_rows;      // cache rows a head block keeps in shared memory
  std::uint32_t slot_bytes;  // a weight ring slot's size (slot_bytes_for)
  // Null, or this launch's trace: [block][kStampsPerLayer * n_layers + kFinalStamps] stamps of
  // the global timer (PersistentStep::arm_trace; stamp() below).
  unsigned long long* trace;
};

// A slot holds whole rows: at least kMinSlotBytes, at least the longest row (16-byte units).
__host__ __device__ inline std::uint32_t slot_bytes_for(int dim, int hidden) {
  const std::uint32_t longest = std::uint32_t(dim > hidden ? dim : hidden) * sizeof(float);
  return longest > kMinSlotBytes ? (longest + 15) / 16 * 16 : kMinSlotBytes;
}

// ---- Shared memory ---------------------------------------------------------------------------

// Byte offsets into the block's dynamic shared memory; the same function on the host (how
// much to ask for) and on the device (where things are). Every region starts 16-byte aligned.
struct Layout {
  std::size_t barriers, ring, vec, res, red, q, k, v, rope, scores, partial, keys, values, total;
};

__host__ __device__ inline Layout layout_for(int dim, int hidden, int head_size, int seq_len, int ring_slots,
                                             int history_rows) {
  Layout l{};
  std::size_t at = 0;
  const auto take = [&at](std::size_t floats) {
    const std::size_t start = at;
    at += (floats * sizeof(float) + 15) / 16 * 16;
    return start;
  };
  l.barriers = take(2 * kMaxRingSlots * 2);  // the ring's mbarriers (8 bytes): full, then empty
  l.ring = take(std::size_t(ring_slots) * slot_bytes_for(dim, hidden) / sizeof(float));  // its slots
  l.vec = take(std::size_t(dim > hidden ? dim : hidden));  // the stage's input vector
  l.res = take(std::size_t(dim));          // the residual rows this block updates
  l.red = take(32);                        // one partial per warp
  l.q = take(std::size_t(head_size));      // attention: rotated q,
  l.k = take(std::size_t(head_size));      // this position's rotated k
  l.v = take(std::size_t(head_size));      // and v,
  l.rope = take(std::size_t(head_size));   // RoPE's cos, sin of each pair at this position,
  l.scores = take(std::size_t(seq_len));   // the scores, then exp(s - max),
  l.partial = take(4 * kThreads);          // the weighted sum's partial sums,
  l.keys = take(std::size_t(history_rows) * head_size);    // and the head's cache rows
  l.values = take(std::size_t(history_rows) * head_size);  // t < history_rows, copied early
  l.total = at;
  return l;
}

struct Shared {
  std::uint64_t* barriers;
  unsigned char* ring;
  float *vec, *res, *red, *q, *k, *v, *rope, *scores, *partial, *keys, *values;
};

__device__ Shared carve(const Params& p, unsigned char* base) {
  const Layout l = layout_for(p.dim, p.hidden, p.head_size, p.seq_len, p.ring_slots, p.history_rows);
  const auto f = [base](std::size_t at) { return reinterpret_cast<float*>(base + at); };
  return Shared{reinterpret_cast<std::uint64_t*>(base + l.barriers),
                base + l.ring,
                f(l.vec),
                f(l.res),
                f(l.red),
                f(l.q),
                f(l.k),
                f(l.v),
                f(l.rope),
                f(l.scores),
                f(l.partial),
                f(l.keys),
                f(l.values)};
}

// ---- Rows: which block computes what --------------------------------------------------------
// Block b owns rows [rows * b / blocks, rows * (b + 1) / blocks) of every matrix, so its rows are
// contiguous in memory.

struct Rows {
  int begin, end;
};

// In 32-bit arithmetic: every stage computes its shares, and a 64-bit division is a long software
// routine on the GPU, slow enough to show in tokens per second. rows * blocks < 2^32 for every
// matrix: PersistentStep's constructor checks.
__device__ Rows share(Rows all, int part, int parts) {
  const unsigned n = unsigned(all.end - all.begin);
  return {all.begin + int(n * unsigned(part) / unsigned(parts)), all.begin + int(n * unsigned(part + 1) / unsigned(parts))};
}

__device__ Rows my_rows(int rows) { return share({0, rows}, blockIdx.x, gridDim.x); }

// ---- Block-wide helpers ---------------------------------------------------------------------

// The computing warps meet (named barrier 1: the producer warp never joins it).
__device__ __forceinline__ void block_sync() { asm volatile("bar.sync 1, %0;" ::"n"(kThreads) : "memory"); }

// Sums (maxes) over the block, in one fixed order: every block gets the same bits.
__device__ float block_sum(float v, float* red) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  if (threadIdx.x % 32 == 0) red[threadIdx.x / 32] = v;
  block_sync();
  float total = 0.0f;
  for (int w = 0; w < kWarps; ++w) total += red[w];
  block_sync();  // red is free again
  return total;
}

__device__ float block_max(float v, float* red) {
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  if (threadIdx.x % 32 == 0) red[threadIdx.x / 32] = v;
  block_sync();
  float m = -INFINITY;
  for (int w = 0; w < kWarps; ++w) m = fmaxf(m, red[w]);
  block_sync();
  return m;
}

__device__ __forceinline__ float warp_sum(float v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

// ---- The weight stream --------------------------------------------------------------------
// Every block reads its rows of each matrix once per token, in the stages' order, which never
// depends on the activations. So the weights need not wait for the activations at all. The
// block's producer warp does all of it:
//   - it asks L2 for the block's rows of the stage prefetch_ahead after the one it is copying
//     (one bulk prefetch instruction per 4 KB, no waiting; the classifier, too large for L2 at
//     once, its first chunk only), and
//   - its first thread copies them on, piece by piece, into a ring of shared-memory slots ("The
//     weight ring" below), as far ahead as the ring holds.
// So when a stage's input arrives, its weights are normally in shared memory already, and the
// stage's arithmetic does not wait for round trips to L2. The computing warps issue no
// prefetch: when they did, at the start of each stage, a per-stage trace on the H200 showed them
// spending a visible part of the stage in those instructions (they go to the copy unit that the
// ring's copies keep busy), and the tokens per second rose when the producer took them over.

struct Matrix {
  const float* rows;  // [n][cols]
  int n, cols;
  int skip_blocks = 0;  // blocks [0, skip_blocks) compute none of its rows (PersistentTuning::wqkv_on_head_blocks)
};

// This block's rows of m: my_rows over the blocks from m.skip_blocks on.
__device__ Rows rows_of(const Matrix& m) {
  if (int(blockIdx.x) < m.skip_blocks) return {0, 0};
  return share({0, m.n}, int(blockIdx.x) - m.skip_blocks, int(gridDim.x) - m.skip_blocks);
}

constexpr std::uint32_t kPrefetchPiece = 4096;  // bytes per prefetch instruction
constexpr int kClassifierChunk = 128;           // classifier rows per block asked of L2 ahead

// Hopper's bulk prefetch: L2 fetches `bytes` at `src` (16-byte aligned, a multiple of 16); the
// thread does not wait, and nothing tells when it is done.
__device__ __forceinline__ void prefetch_l2(const void* src, std::uint32_t bytes) {
  asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" ::"l"(src), "r"(bytes) : "memory");
}

// Asks L2 for `bytes` from `src` (16-byte aligned, a multiple of 16), the producer warp's lanes
// issuing its 4 KB pieces side by side.
__device__ void prefetch_bytes(const float* src, std::size_t bytes) {
  const char* base = reinterpret_cast<const char*>(src);
  for (std::size_t at = std::size_t(threadIdx.x % 32) * kPrefetchPiece; at < bytes; at += 32 * std::size_t(kPrefetchPiece))
    prefetch_l2(base + at, std::uint32_t(bytes - at < kPrefetchPiece ? bytes - at : kPrefetchPiece));
}

// This block's rows [first, last) of m.
__device__ void prefetch_rows(const Matrix& m, int first, int last) {
  if (last > first)
    prefetch_bytes(m.rows + std::size_t(first) * std::size_t(m.cols), std::size_t(last - first) * m.cols * sizeof(float));
}

__device__ Matrix wqkv_of(const Params& p, int l) {
  const std::size_t rows = std::size_t(p.dim) + 2 * std::size_t(p.kv_dim);
  return {p.w.wqkv + std::size_t(l) * rows * p.dim, int(rows), p.dim, p.wqkv_skip_blocks};
}
__device__ Matrix wo_of(const Params& p, int l) { return {p.w.wo + std::size_t(l) * p.dim * p.dim, p.dim, p.dim}; }
__device__ Matrix w1_of(const Params& p, int l) {
  return {p.w.w13 + std::size_t(l) * 2 * p.hidden * p.dim, p.hidden, p.dim};
}
__device__ Matrix w3_of(const Params& p, int l) {
  return {w1_of(p, l).rows + std::size_t(p.hidden) * p.dim, p.hidden, p.dim};
}
__device__ Matrix w2_of(const Params& p, int l) { return {p.w.w2 + std::size_t(l) * p.dim * p.hidden, p.dim, p.hidden}; }
__device__ Matrix classifier_of(const Params& p) { return {p.w.classifier, p.vocab, p.dim}; }

// The matvec stages in order: 4 per layer (Wqkv, Wo, W1 with W3, W2), then the classifier. A
// stage reads one matrix, or two of one shape, a piece of each in turn (W1 and W3: the pair).
struct Stage {
  Matrix a, b;
  bool pair;
};

__device__ int stage_count(const Params& p) { return 4 * p.n_layers + 1; }

__device__ Stage stage_of(const Params& p, int stage) {
  const int l = stage / 4;
  if (stage == 4 * p.n_layers) return {classifier_of(p), {}, false};
  switch (stage % 4) {
    case 0: return {wqkv_of(p, l), {}, false};
    case 1: return {wo_of(p, l), {}, false};
    case 2: return {w1_of(p, l), w3_of(p, l), true};
    default: return {w2_of(p, l), {}, false};
  }
}

// This block's rows of a stage, asked of L2 by the producer warp's lanes (the classifier, too
// large for L2 at once: its first chunk; the rest comes as the ring copies it).
__device__ void prefetch_stage(const Params& p, int stage) {
  if (stage >= stage_count(p)) return;
  const Stage st = stage_of(p, stage);
  const Rows r = rows_of(st.a);
  const int last = stage == stage_count(p) - 1 ? min(r.end, r.begin + kClassifierChunk) : r.end;
  prefetch_rows(st.a, r.begin, last);
  if (st.pair) prefetch_rows(st.b, r.begin, last);
}

// ---- The weight ring ------------------------------------------------------------------------
// A block's rows of a matrix are contiguous in memory; the ring cuts them into pieces of whole
// rows that fit a slot, and walks the token's pieces in the stages' order: per layer Wqkv, Wo,
// W1 and W3 (a piece of each, in turn: matvec_pair), W2, then the classifier. Both sides walk
// the same sequence and count the pieces, so piece n is in slot n % slots, and its use of
// that slot is the (n / slots)-th:
//   producer (one thread): wait until the slot's last piece has been read (`empty`), then one
//            bulk copy into the slot, which completes `full` when it has landed;
//   computing warps: wait for `full`, read the rows, each warp says it is done (`empty`).
// Only the producer ever waits for the other side, so the computing warps never stall on the
// ring unless the copies are behind; and the producer runs as far ahead as `slots` pieces.

struct Ring {
  unsigned char* slots;  // count * slot_bytes
  std::uint64_t* full;   // [count]: the producer's arrival plus the copy's bytes
  std::uint64_t* empty;  // [count]: one arrival per computing warp
  std::uint32_t slot_bytes;
  std::uint32_t count;   // the slots (PersistentTuning::ring_slots)
  std::uint32_t copies;  // the copies in flight at most (PersistentTuning::copies_in_flight)
  std::uint32_t next;    // the pieces this thread has passed: the next piece's number
};

__device__ __forceinline__ int rows_per_piece(const Matrix& m, const Ring& ring) {
  return int(ring.slot_bytes / (std::uint32_t(m.cols) * std::uint32_t(sizeof(float))));  // 32-bit, as share()
}

// The producer: `rows` rows of m from row `first` into the ring's next slot, once the slot's last
// piece has been read (`empty`) and the copy ring.copies before it has landed (its `full`);
// the copy completes the slot's `full` when it has landed.
//
// Why so few copies at once (3 by default), when the ring has 8 slots or more: on the H200, bench 08's 110M grid
// plan decoded faster with at most 3 than with 1, 2, 4, 6 or no limit (interleaved runs; the
// lesson has the story). Our reading, not measured directly: a copy's bytes come back to the SM
// on the same path as the tagged values a waiting block polls for, and a hand-off is on the
// step's critical path where a copy, already ahead, is not.
//
// The copy is the weights' last read in the token, so it marks their lines in L2 evict-first:
// the step streams far more weight bytes through L2 than it holds, and the lines it reads again
// (the tagged activations every block polls, the KV cache, the next stages' prefetched weights)
// then stay. On the H200 this made the 110M grid plan about 1% faster (interleaved runs);
// evict-first on the prefetches as well gained nothing more.
__device__ void send_piece(Ring& ring, const Matrix& m, int first, int rows) {
  const std::uint32_t slot = ring.next % ring.count, use = ring.next / ring.count;
  if (use > 0) bulk::wait(ring.empty + slot, (use - 1) & 1u);
  if (ring.next >= ring.copies) {
    const std::uint32_t landed = ring.next - ring.copies;  // its slot is not reused before this piece's
    bulk::wait(ring.full + landed % ring.count, (landed / ring.count) & 1u);
  }
  const std::uint32_t bytes = std::uint32_t(rows) * std::uint32_t(m.cols) * std::uint32_t(sizeof(float));
  bulk::arrive_expecting(ring.full + slot, bytes);
  bulk::bulk_copy(ring.slots + std::size_t(slot) * ring.slot_bytes, m.rows + std::size_t(first) * std::size_t(m.cols),
                  bytes, ring.full + slot, bulk::evict_first());
  ++ring.next;
}

// This block's rows of m into the ring, piece by piece.
__device__ void send_rows(Ring& ring, const Matrix& m) {
  const Rows rows = rows_of(m);
  const int per_piece = rows_per_piece(m, ring);
  for (int first = rows.begin; first < rows.end; first += per_piece)
    send_piece(ring, m, first, min(per_piece, rows.end - first));
}

// The same for two matrices of one shape, a piece of each in turn (matvec_pair reads them so).
__device__ void send_rows_pair(Ring& ring, const Matrix& a, const Matrix& b) {
  const Rows rows = rows_of(a);
  const int per_piece = rows_per_piece(a, ring);
  for (int first = rows.begin; first < rows.end; first += per_piece) {
    send_piece(ring, a, first, min(per_piece, rows.end - first));
    send_piece(ring, b, first, min(per_piece, rows.end - first));
  }
}

// The whole token's weights, in the order step() reads them, by the producer warp: its first
// thread copies each stage into the ring; once a stage is all sent, the warp asks L2 for the
// stage p.prefetch_ahead after it. (The lanes meet first: the others must not run ahead while
// the first waits for free slots.)
__device__ void stream_weights(const Params& p, Ring ring) {
  for (int stage = 0; stage < p.prefetch_ahead; ++stage) prefetch_stage(p, stage);
  for (int stage = 0; stage < stage_count(p); ++stage) {
    if (threadIdx.x % 32 == 0) {
      const Stage st = stage_of(p, stage);
      if (st.pair)
        send_rows_pair(ring, st.a, st.b);
      else
        send_rows(ring, st.a);
    }
    __syncwarp();
    prefetch_stage(p, stage + p.prefetch_ahead);
  }
}

// One row (shared memory) times vec (shared memory), by a warp: lane l adds the products of the
// 16-byte pieces l, l + 32, ... in that order, then the lanes are added in a fixed tree: the
// same bits whichever block and warp compute the row.
__device__ float row_dot(const float* row, const float* vec, int cols) {
  const float4* w = reinterpret_cast<const float4*>(row);
  const float4* x = reinterpret_cast<const float4*>(vec);
  float acc = 0.0f;
#pragma unroll 4
  for (int c = threadIdx.x % 32; c < cols / 4; c += 32) {
    const float4 a = w[c], v = x[c];
    acc += a.x * v.x + a.y * v.y + a.z * v.z + a.w * v.w;
  }
  return warp_sum(acc);
}

// Row r of two matrices times the same vec, by a warp: row_dot's sums, each in row_dot's order
// (the same bits), the two side by side (each load of vec serves both, and the two chains of
// additions overlap).
__device__ float2 row_dot_pair(const float* row_a, const float* row_b, const float* vec, int cols) {
  const float4* a4 = reinterpret_cast<const float4*>(row_a);
  const float4* b4 = reinterpret_cast<const float4*>(row_b);
  const float4* x = reinterpret_cast<const float4*>(vec);
  float acc_a = 0.0f, acc_b = 0.0f;
#pragma unroll 4
  for (int c = threadIdx.x % 32; c < cols / 4; c += 32) {
    const float4 a = a4[c], b = b4[c], v = x[c];
    acc_a += a.x * v.x + a.y * v.y + a.z * v.z + a.w * v.w;
    acc_b += b.x * v.x + b.y * v.y + b.z * v.z + b.w * v.w;
  }
  return make_float2(warp_sum(acc_a), warp_sum(acc_b));
}

// This block's rows of m times vec (shared memory), from the ring: the rows of each piece are
// dealt to the warps in turn (the block's row j to warp j % kWarps), and store(row, value) is
// called by the row's lane 0. Ends with the block meeting (the next stage overwrites vec and
// reads what this one left in shared memory).
template <typename Store>
__device__ void matvec(Ring& ring, const Matrix& m, const float* vec, Store&& store) {
  const Rows rows = rows_of(m);
  const int per_piece = rows_per_piece(m, ring), warp = threadIdx.x / 32;
  for (int first = rows.begin; first < rows.end; first += per_piece, ++ring.next) {
    const std::uint32_t slot = ring.next % ring.count;
    bulk::wait(ring.full + slot, (ring.next / ring.count) & 1u);
    const float* piece = reinterpret_cast<const float*>(ring.slots + std::size_t(slot) * ring.slot_bytes);
    const int count = min(per_piece, rows.end - first);
    for (int r = (warp - (first - rows.begin) % kWarps + kWarps) % kWarps; r < count; r += kWarps) {
      const float dot = row_dot(piece + std::size_t(r) * std::size_t(m.cols), vec, m.cols);
      if (threadIdx.x % 32 == 0) store(first + r, dot);
    }
    __syncwarp();
    if (threadIdx.x % 32 == 0) bulk::arrive(ring.empty + slot);  // this warp is done with the slot
  }
  block_sync();
}

// The same for two matrices of one shape whose pieces come in turn (send_rows_pair), row r of
// both by the same warp: store(row, a_dot, b_dot). How W1 and W3 make SwiGLU's two inputs.
template <typename Store>
__device__ void matvec_pair(Ring& ring, const Matrix& a, const Matrix& b, const float* vec, Store&& store) {
  const Rows rows = rows_of(a);
  const int per_piece = rows_per_piece(a, ring), warp = threadIdx.x / 32;
  for (int first = rows.begin; first < rows.end; first += per_piece, ring.next += 2) {
    const std::uint32_t slot_a = ring.next % ring.count, slot_b = (ring.next + 1) % ring.count;
    bulk::wait(ring.full + slot_a, (ring.next / ring.count) & 1u);
    bulk::wait(ring.full + slot_b, ((ring.next + 1) / ring.count) & 1u);
    const float* piece_a = reinterpret_cast<const float*>(ring.slots + std::size_t(slot_a) * ring.slot_bytes);
    const float* piece_b = reinterpret_cast<const float*>(ring.slots + std::size_t(slot_b) * ring.slot_bytes);
    const int count = min(per_piece, rows.end - first);
    for (int r = (warp - (first - rows.begin) % kWarps + kWarps) % kWarps; r < count; r += kWarps) {
      const std::size_t at = std::size_t(r) * std::size_t(a.cols);
      const float2 dots = row_dot_pair(piece_a + at, piece_b + at, vec, a.cols);
      if (threadIdx.x % 32 == 0) store(first + r, dots.x, dots.y);
    }
    __syncwarp();
    if (threadIdx.x % 32 == 0) {  // this warp is done with both slots
      bulk::arrive(ring.empty + slot_a);
      bulk::arrive(ring.empty + slot_b);
    }
  }
  block_sync();
}

// ---- Inputs ---------------------------------------------------------------------------------

// vec[0..n) = the tagged values of src once they carry `tag` (thread t: t, t + kThreads, ...).
__device__ void await_vector(const std::uint64_t* src, int n, std::uint32_t tag, float* vec, const Params& p) {
  tagged::await_vector<kThreads>(src, n, tag, vec, p.poll_sleep_ns);
}

// A norm's weights, the elements this thread normalizes, read before the input is awaited.
struct NormWeights {
  float w[kMaxNormPerThread];
};

__device__ __forceinline__ void load_norm(NormWeights& nw, const float* weight, int n) {
#pragma unroll
  for (int k = 0; k < kMaxNormPerThread; ++k) {
    const int i = int(threadIdx.x) + k * kThreads;
    if (i < n) nw.w[k] = __ldg(weight + i);
  }
}

// vec = RMSNorm(vec) llama2.c's way: weight * (x / sqrt(mean(x^2) + eps)). The caller filled vec
// with await_vector's mapping (each thread its own elements); afterwards the block may read all.
__device__ void rmsnorm_in_place(float* vec, int n, const NormWeights& nw, float* red) {
  float squares = 0.0f;
#pragma unroll
  for (int k = 0; k < kMaxNormPerThread; ++k) {
    const int i = int(threadIdx.x) + k * kThreads;
    if (i < n) squares += vec[i] * vec[i];
  }
  const float scale = rsqrtf(block_sum(squares, red) / float(n) + kRmsEps);
#pragma unroll
  for (int k = 0; k < kMaxNormPerThread; ++k) {
    const int i = int(threadIdx.x) + k * kThreads;
    if (i < n) vec[i] = nw.w[k] * (scale * vec[i]);
  }
  block_sync();
}

// The residual rows `mine` of the stage input in vec (filled with await_vector's mapping), into
// res before RMSNorm overwrites vec: each thread copies its own elements, so no barrier is
// needed here, and the norm's barriers publish res before any store reads it. (The Wo and W2
// stages used to await these rows from L2 again, a round trip on the chain for values the block
// already had.)
__device__ void keep_residual(const Shared& s, Rows mine, int n) {
  const unsigned rows = unsigned(mine.end - mine.begin);
  for (int i = int(threadIdx.x); i < n; i += kThreads)
    if (unsigned(i - mine.begin) < rows) s.res[i - mine.begin] = s.vec[i];
}

// llama2.c's SwiGLU: silu(g) * u, silu(g) = g / (1 + exp(-g)), with silu(-inf) = 0.
__device__ __forceinline__ float swiglu(float gate, float up) {
  const float silu = gate == -INFINITY ? 0.0f : gate * (1.0f / (1.0f + expf(-gate)));
  return silu * up;
}

// ---- The trace (bench 08's --persistent-trace) -------------------------------------------------
// In a traced launch thread 0 of every block stamps the global timer where a stage's input is
// complete and where its outputs are published (StepStamp in persistent_step.hpp), so the host
// can tell the hand-offs (the last writer's stamp to a reader's) from the stages' own work. An
// untraced launch pays one uniform branch per stamp.
__device__ __forceinline__ void stamp(const Params& p, int layer, StepStamp which) {
  if (p.trace == nullptr || threadIdx.x != 0) return;
  const int per_block = kStampsPerLayer * p.n_layers + kFinalStamps;
  p.trace[std::size_t(blockIdx.x) * per_block + layer * kStampsPerLayer + int(which)] = wb::global_timer_ns();
}

// ---- Attention ------------------------------------------------------------------------------

// The rows t < pos of a head's keys and values were written by earlier launches: the head's block
// copies them into shared memory at the start of the layer, so that they have arrived by the
// time its attention stage needs them, while the block computes its share of Wqkv. At most
// p.history_rows rows (what shared memory holds); later rows are read from device memory.
// Returns the rows copied.
__device__ int copy_history(const Params& p, const Shared& s, int layer, int h, int pos) {
  const int hs = p.head_size, kv = p.kv_dim, group = h / (p.n_heads / p.n_kv_heads), pieces = hs / 4;
  const int rows = min(pos, p.history_rows);
  const std::size_t first = std::size_t(layer) * std::size_t(p.seq_len) * kv + std::size_t(group) * hs;
  for (int i = threadIdx.x; i < rows * pieces; i += kThreads) {
    const int t = i / pieces, c = 4 * (i % pieces);
    bulk::copy16_async(s.keys + t * hs + c, p.io.key_cache + first + std::size_t(t) * kv + c);
    bulk::copy16_async(s.values + t * hs + c, p.io.value_cache + first + std::size_t(t) * kv + c);
  }
  asm volatile("cp.async.commit_group;" ::: "memory");
  return rows;
}

// Attention of query head h at position pos (one block): RoPE on q and on this position's k,
// the cache append (by the first head of each KV group), the scores over t = 0..pos, their
// softmax, and the weighted sum of the value rows, published to att[h * head_size ...].
__device__ void attention_head(const Params& p, const Shared& s, int layer, int h, int pos, std::uint32_t tag,
                               int copied) {
  const int hs = p.head_size, kv = p.kv_dim, tid = threadIdx.x;
  const int group = h / (p.n_heads / p.n_kv_heads);  // the KV head this query head reads
  // This head's q, and its KV head's k and v of this position (the three loads of a thread
  // issued together: one round trip), then RoPE on q and k in shared memory.
  const std::uint64_t* q_in = p.act.qkv + h * hs;
  const std::uint64_t* k_in = p.act.qkv + p.dim + group * hs;
  const std::uint64_t* v_in = p.act.qkv + p.dim + kv + group * hs;
  for (int i = tid; i < hs; i += kThreads) {
    std::uint64_t w[3] = {tagged::load(q_in + i), tagged::load(k_in + i), tagged::load(v_in + i)};
    const std::uint64_t* src[3] = {q_in + i, k_in + i, v_in + i};
    float* dst[3] = {s.q + i, s.k + i, s.v + i};
#pragma unroll
    for (int k = 0; k < 3; ++k) {
      while (!tagged::has_tag(w[k], tag)) {
        __nanosleep(p.poll_sleep_ns);
        w[k] = tagged::load(src[k]);
      }
      *dst[k] = tagged::value_of(w[k]);
    }
  }
  block_sync();
  stamp(p, layer, StepStamp::AttentionIn);
  for (int i = 2 * tid; i < hs; i += 2 * kThreads) {
    const float cs = s.rope[i], sn = s.rope[i + 1];  // this position's angle (step computed it)
    const float q0 = s.q[i], q1 = s.q[i + 1], k0 = s.k[i], k1 = s.k[i + 1];
    s.q[i] = q0 * cs - q1 * sn;
    s.q[i + 1] = q0 * sn + q1 * cs;
    s.k[i] = k0 * cs - k1 * sn;
    s.k[i + 1] = k0 * sn + k1 * cs;
  }
  asm volatile("cp.async.wait_all;" ::: "memory");  // this thread's copies of the history
  block_sync();                                       // everyone's, and the rotated q and k
  const std::size_t layer_rows = std::size_t(layer) * std::size_t(p.seq_len);
  float* key_rows = p.io.key_cache + layer_rows * kv + group * hs;  // row t at + t * kv
  float* value_rows = p.io.value_cache + layer_rows * kv + group * hs;
  if (h % (p.n_heads / p.n_kv_heads) == 0)  // one writer per KV head; the others use s.k, s.v
    for (int i = tid; i < hs; i += kThreads) {
      key_rows[std::size_t(pos) * kv + i] = s.k[i];
      value_rows[std::size_t(pos) * kv + i] = s.v[i];
    }
  // Scores: a thread per position, the whole dot product in 16-byte loads (rows t < pos were
  // written by earlier launches; row pos is this step's, in shared memory).
  // The pieces of a row are loaded together, kPieces at a time (one round trip per 64 floats).
  // Thread t starts at piece t % pieces and wraps around: in shared memory the rows of a warp's
  // threads are hs floats apart, so pieces at the same index would all be in the same banks.
  constexpr int kPieces = 16;
  const float root = sqrtf(float(hs));
  const int pieces = hs / 4;
  for (int t = tid; t <= pos; t += kThreads) {
    const float* row = t == pos ? s.k : t < copied ? s.keys + t * hs : key_rows + std::size_t(t) * kv;
    const float4* key = reinterpret_cast<const float4*>(row);
    const float4* q = reinterpret_cast<const float4*>(s.q);
    const int shift = t % pieces;
    float dot = 0.0f;
    for (int c0 = 0; c0 < pieces; c0 += kPieces) {
      float4 k4[kPieces];
      int at[kPieces];
#pragma unroll
      for (int c = 0; c < kPieces; ++c) {
        at[c] = c0 + c + shift < pieces ? c0 + c + shift : c0 + c + shift - pieces;
        if (c0 + c < pieces) k4[c] = key[at[c]];
      }
#pragma unroll
      for (int c = 0; c < kPieces; ++c)
        if (c0 + c < pieces) {
          const float4 b = q[at[c]];
          dot += k4[c].x * b.x + k4[c].y * b.y + k4[c].z * b.z + k4[c].w * b.w;
        }
    }
    s.scores[t] = dot / root;
  }
  // Softmax, chapter 04's way: the max first, then exp(s - max) and its sum (each thread its
  // own positions until the sums).
  float m = -INFINITY;
  for (int t = tid; t <= pos; t += kThreads) m = fmaxf(m, s.scores[t]);
  m = block_max(m, s.red);
  float sum = 0.0f;
  for (int t = tid; t <= pos; t += kThreads) {
    const float e = expf(s.scores[t] - m);
    s.scores[t] = e;
    sum += e;
  }
  sum = block_sum(sum, s.red);  // (its barrier also publishes every e)
  stamp(p, layer, StepStamp::AttentionScores);
  // Weighted sum: thread (group g, column c) adds p_t * v_t[4c..4c+3] over t = g, g + groups, ...;
  // the groups' partial sums are then added in a fixed order.
  const int columns = hs / 4, groups = kThreads / columns;
  const int column = tid % columns, g = tid / columns;
  if (g < groups) {
    // Eight positions' loads issued together, then added in position order.
    constexpr int kRows = 8;
    float4 acc = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    for (int t0 = g; t0 <= pos; t0 += kRows * groups) {
      float4 v4[kRows];
#pragma unroll
      for (int r = 0; r < kRows; ++r) {
        const int t = t0 + r * groups;
        if (t <= pos) {
          const float* row = t == pos ? s.v : t < copied ? s.values + t * hs : value_rows + std::size_t(t) * kv;
          v4[r] = reinterpret_cast<const float4*>(row)[column];
        }
      }
#pragma unroll
      for (int r = 0; r < kRows; ++r) {
        const int t = t0 + r * groups;
        if (t <= pos) {
          const float w = s.scores[t];
          acc.x += w * v4[r].x;
          acc.y += w * v4[r].y;
          acc.z += w * v4[r].z;
          acc.w += w * v4[r].w;
        }
      }
    }
    reinterpret_cast<float4*>(s.partial + g * hs)[column] = acc;
  }
  block_sync();
  for (int i = tid; i < hs; i += kThreads) {
    float out = 0.0f;
    for (int j = 0; j < groups; ++j) out += s.partial[j * hs + i];
    tagged::publish(p.act.att + h * hs + i, out / sum, tag);
  }
  block_sync();  // s.q, s.k, s.v, s.partial are the next head's
}

// ---- Greedy decoding's token ----------------------------------------------------------------
// The decoder's greedy loop needs only the argmax of the logits, so the step picks it itself and
// the sampler's launch is skipped (GpuDecoder::decode): each block among its rows of the
// classifier, published as two tagged values, then block 0 over every block's (greedy_pick.cuh:
// chapter 07's greedy rule). Any other sampling overwrites *token with the sampler's.

// A pick as two tagged values: the logit, and the row's index (-2: a NaN or +inf was seen).
__device__ greedy::Pick pick_from(float value, float code_bits) {
  const int code = __float_as_int(code_bits);
  return greedy::Pick{value, code >= 0 ? code : -1, code == -2};
}

// `mine`: lane 0's pick over the rows its warp computed. Block 0 writes *token; it reads the
// blocks' picks into s.partial (attention's partial sums: free after the last layer).
__device__ void pick_token(const Params& p, const Shared& s, greedy::Pick mine, int pos, std::uint32_t tag) {
  static_assert(3 * kWarps <= 32, "the warps' picks go in s.red (32 floats)");
  greedy::Pick* per_warp = reinterpret_cast<greedy::Pick*>(s.red);
  mine = greedy::warp_pick(mine);
  if (threadIdx.x % 32 == 0) per_warp[threadIdx.x / 32] = mine;
  block_sync();
  if (threadIdx.x == 0) {
    greedy::Pick block = per_warp[0];
    for (int w = 1; w < kWarps; ++w) block = greedy::better(block, per_warp[w]);
    tagged::publish(p.act.picks + 2 * blockIdx.x, block.value, tag);
    tagged::publish(p.act.picks + 2 * blockIdx.x + 1, __int_as_float(block.bad ? -2 : block.index), tag);
  }
  if (blockIdx.x != 0) return;
  float* picks = s.partial;  // 2 per block (the constructor checks the room)
  await_vector(p.act.picks, 2 * int(gridDim.x), tag, picks, p);
  block_sync();
  if (threadIdx.x >= 32) return;
  greedy::Pick all = greedy::none();  // better() gives the same pick in any order
  for (int b = threadIdx.x; b < int(gridDim.x); b += 32) all = greedy::better(all, pick_from(picks[2 * b], picks[2 * b + 1]));
  all = greedy::warp_pick(all);
  if (threadIdx.x == 0) {
    const int token = greedy::token_of(all);
    *p.io.token = token;
    if (p.io.token_home) p.io.token_home[pos] = token;  // straight into the host's pinned slot
  }
}

// The tag of every value written for `layer` in launch `launch` (tagged_values.cuh): unique
// until the 32-bit count wraps, after 2^32 / n_layers launches, and until then never 0 (the
// buffers' first contents). A reader compares tags for equality only, so the wrap is harmless:
// by then every word carries a recent tag.
__device__ __forceinline__ std::uint32_t layer_tag(const Params& p, int layer) {
  return p.launch * std::uint32_t(p.n_layers) + std::uint32_t(layer) + 1u;
}

// The stages, each waiting only for the tagged values it reads (their weights come through the
// ring):
//   A: xb (the last layer's output; layer 0: the embedding row) -> RMSNorm -> Wqkv -> qkv
//   B: q, k, v of a head -> RoPE, append, attention -> att          (blocks < n_heads)
//   C: att -> Wo, + the residual xb -> xa
//   D: xa -> RMSNorm -> W1 and W3 rows of this block's hidden units -> g = swiglu(W1 h, W3 h)
//   E: g -> W2, + the residual xa -> xb
// then xb -> RMSNorm -> classifier -> logits.
__device__ void step(const Params& p, const Shared& s, Ring& ring) {
  const int tid = threadIdx.x, dim = p.dim, hidden = p.hidden;
  const int pos = *p.io.pos;  // read before this block writes anything block 0 waits for
  const int token = *p.io.token;
  const bool known = token >= 0 && token < p.vocab;
  const float nan = __int_as_float(0x7fc00000);  // an unknown token: the mistake shows in the logits
  const Rows mine = my_rows(dim);      // the residual rows this block's Wo and W2 stages write
  NormWeights norm;
  // RoPE's angles depend on the position only: computed once per launch, for every layer (the
  // head blocks' powf and sincosf were on the chain of each layer's attention).
  for (int i = 2 * tid; i < p.head_size; i += 2 * kThreads) {
    // llama2.c's angle: frequency from the pair's place in its head, in float.
    const float frequency = 1.0f / powf(10000.0f, float(i) / float(p.head_size));
    sincosf(float(pos) * frequency, &s.rope[i + 1], &s.rope[i]);
  }

  for (int l = 0; l < p.n_layers; ++l) {
    const std::uint32_t tag = layer_tag(p, l), before = tag - 1;  // before: the last layer's xb
    const std::size_t L = std::size_t(l);
    // A: qkv = Wqkv RMSNorm(x)
    // The history of the block's first head (the bench's grid has one head per head block).
    const int copied = blockIdx.x < p.n_heads ? copy_history(p, s, l, blockIdx.x, pos) : 0;
    load_norm(norm, p.w.rms_att + L * dim, dim);
    if (l == 0) {
      const float* row = p.w.embedding + (known ? std::size_t(token) : 0) * dim;
      for (int i = tid; i < dim; i += kThreads) s.vec[i] = known ? __ldg(row + i) : nan;  // await_vector's mapping
    } else {
      await_vector(p.act.xb, dim, before, s.vec, p);
    }
    stamp(p, l, StepStamp::QkvIn);
    keep_residual(s, mine, dim);  // x: stage C adds Wo att to it
    rmsnorm_in_place(s.vec, dim, norm, s.red);
    matvec(ring, wqkv_of(p, l), s.vec, [&](int r, float d) { tagged::publish(p.act.qkv + r, d, tag); });
    stamp(p, l, StepStamp::QkvOut);
    // B: att = attention(q, the caches + this position's k and v), a block per query head
    for (int h = blockIdx.x; h < p.n_heads; h += gridDim.x)
      attention_head(p, s, l, h, pos, tag, h == int(blockIdx.x) ? copied : 0);
    if (int(blockIdx.x) >= p.n_heads) {  // no head here: its attention stamps mark QkvOut's time
      stamp(p, l, StepStamp::AttentionIn);
      stamp(p, l, StepStamp::AttentionScores);
    }
    stamp(p, l, StepStamp::AttentionOut);
    // C: xa = x + Wo att (x: the residual rows stage A kept)
    await_vector(p.act.att, dim, tag, s.vec, p);
    block_sync();
    stamp(p, l, StepStamp::WoIn);
    matvec(ring, wo_of(p, l), s.vec, [&](int r, float d) { tagged::publish(p.act.xa + r, s.res[r - mine.begin] + d, tag); });
    stamp(p, l, StepStamp::WoOut);
    // D: g = swiglu(W1 h, W3 h) for this block's hidden units, h = RMSNorm(xa)
    load_norm(norm, p.w.rms_ffn + L * dim, dim);
    await_vector(p.act.xa, dim, tag, s.vec, p);
    stamp(p, l, StepStamp::W13In);
    keep_residual(s, mine, dim);  // xa: stage E adds W2 g to it
    rmsnorm_in_place(s.vec, dim, norm, s.red);
    matvec_pair(ring, w1_of(p, l), w3_of(p, l), s.vec,
                [&](int j, float gate, float up) { tagged::publish(p.act.g + j, swiglu(gate, up), tag); });
    stamp(p, l, StepStamp::W13Out);
    // E: xb = xa + W2 g (xa: the residual rows stage D kept)
    await_vector(p.act.g, hidden, tag, s.vec, p);
    block_sync();
    stamp(p, l, StepStamp::W2In);
    matvec(ring, w2_of(p, l), s.vec, [&](int r, float v) { tagged::publish(p.act.xb + r, s.res[r - mine.begin] + v, tag); });
    stamp(p, l, StepStamp::W2Out);
  }
  // logits = classifier RMSNorm(xb), and greedy decoding's pick of the next token
  const std::uint32_t last = layer_tag(p, p.n_layers - 1);
  load_norm(norm, p.w.rms_final, dim);
  await_vector(p.act.xb, dim, last, s.vec, p);
  stamp(p, p.n_layers, StepStamp::QkvIn);  // the classifier's input: the last layer's xb
  rmsnorm_in_place(s.vec, dim, norm, s.red);
  greedy::Pick pick = greedy::none();  // a warp's rows come in increasing order, to its lane 0
  matvec(ring, classifier_of(p), s.vec, [&](int r, float v) {
    __stcg(p.io.logits + r, v);
    pick = greedy::consider(pick, r, v);
  });
  stamp(p, p.n_layers, StepStamp::QkvOut);  // the classifier's rows written
  pick_token(p, s, pick, pos, last);
  // Every block read *pos and *token before writing its rows of xb, and block 0 has read all of
  // xb (and every block's pick).
  if (blockIdx.x == 0 && tid == 0) *p.io.pos = pos + 1;
}

// Warps 0..kWarps-1 compute (step); the last warp streams the weights (stream_weights): its
// lanes ask L2 for them ahead, and its first thread copies them into the ring.
__global__ void __launch_bounds__(kBlockThreads, 1) persistent_step_kernel(const Params p) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  extern __shared__ __align__(16) unsigned char shared[];
  const Shared s = carve(p, shared);
  Ring ring{s.ring,         s.barriers, s.barriers + kMaxRingSlots, p.slot_bytes, std::uint32_t(p.ring_slots),
            p.copies_in_flight, 0};
  if (threadIdx.x == 0) {
    for (int k = 0; k < p.ring_slots; ++k) {
      bulk::init(ring.full + k, 1);
      bulk::init(ring.empty + k, kWarps);
    }
    bulk::init_done();
  }
  __syncthreads();  // the barriers are ready (the last time all the block's warps meet)
  if (threadIdx.x >= kThreads) {
    stream_weights(p, ring);
    return;
  }
  step(p, s, ring);
#endif
}

// ---- Host: the plan -------------------------------------------------------------------------

bool aligned16(const void* p) { return reinterpret_cast<std::uintptr_t>(p) % 16 == 0; }

[[noreturn]] void unsupported(const GpuModel& model, const std::string& what) {
  throw std::invalid_argument("ch08 persistent step: " + what + " (" + model.config().summary() + ")");
}

StepWeights step_weights(const GpuModel& model) {
  const wb::model::Weights& w = model.host().weights();
  return StepWeights{model.device(w.token_embedding), model.device(w.layers[0].rms_att), model.qkv(0),
                     model.device(w.layers[0].wo),    model.device(w.layers[0].rms_ffn), model.w13(0),
                     model.device(w.layers[0].w2),    model.device(w.rms_final),         model.device(w.classifier)};
}

Params params_for(const GpuModel& model, const StepBuffers& io) {
  const wb::model::Config& c = model.config();
  Params p{};
  static_cast<StepShape&>(p) = step_shape(c);
  p.w = step_weights(model);
  p.io = io;
  p.slot_bytes = slot_bytes_for(c.dim, c.hidden_dim);
  return p;
}

// The per-layer weights of the checkpoint are each one array over the layers ([layer][...]);
// the kernel walks them with a stride, so check that they are.
void check_layer_strides(const GpuModel& model) {
  const wb::model::Config& c = model.config();
  const wb::model::Weights& w = model.host().weights();
  const std::size_t dim = c.dim, hidden = c.hidden_dim;
  for (std::size_t l = 1; l < std::size_t(c.n_layers); ++l) {
    const wb::model::LayerWeights &first = w.layers[0], &layer = w.layers[l];
    if (layer.rms_att != first.rms_att + l * dim || layer.rms_ffn != first.rms_ffn + l * dim ||
        layer.wo != first.wo + l * dim * dim || layer.w2 != first.w2 + l * dim * hidden)
      unsupported(model, "the layers' weights are not laid out one array per kind ([layer][...])");
  }
}

}  // namespace

StepShape step_shape(const wb::model::Config& c) {
  return StepShape{c.dim,      c.hidden_dim,  c.n_layers,    c.n_heads, c.n_kv_heads,
                   c.head_size(), c.kv_dim(), c.vocab_size, c.seq_len};
}

namespace {
double median_of(std::vector<double> v) {
  if (v.empty()) return 0.0;
  std::sort(v.begin(), v.end());
  return v.size() % 2 ? v[v.size() / 2] : 0.5 * (v[v.size() / 2 - 1] + v[v.size() / 2]);
}
}  // namespace

std::vector<std::string> trace_table(const StepTrace& t) {
  using S = StepStamp;
  const int heads = std::min(t.n_heads, t.blocks);  // the blocks that compute attention
  // Over blocks [0, upto): the latest stamp, the median and the earliest, in ns.
  const auto latest = [&](int layer, S which, int upto) {
    unsigned long long m = 0;
    for (int b = 0; b < upto; ++b) m = std::max(m, t.at(b, layer, which));
    return double(m);
  };
  const auto earliest = [&](int layer, S which) {
    unsigned long long m = ~0ull;
    for (int b = 0; b < t.blocks; ++b) m = std::min(m, t.at(b, layer, which));
    return double(m);
  };
  const auto median_stamp = [&](int layer, S which) {
    std::vector<double> v;
    for (int b = 0; b < t.blocks; ++b) v.push_back(double(t.at(b, layer, which)));
    return median_of(v);
  };
  const auto median_span = [&](int layer, S from, S to, int upto) {
    std::vector<double> v;
    for (int b = 0; b < upto; ++b) v.push_back(double(t.at(b, layer, to)) - double(t.at(b, layer, from)));
    return median_of(v);
  };
  struct Row {
    const char* name;
    std::vector<double> handoff, work, straggle;
  };
  std::vector<Row> rows = {{"Wqkv (input: xb)", {}, {}, {}},
                           {"attention (input: qkv)", {}, {}, {}},
                           {"  RoPE, scores, softmax", {}, {}, {}},
                           {"  weighted sum, publish", {}, {}, {}},
                           {"Wo (input: att)", {}, {}, {}},
                           {"W1|W3 (input: xa)", {}, {}, {}},
                           {"W2 (input: g)", {}, {}, {}},
                           {"classifier (input: xb)", {}, {}, {}}};
  std::vector<double> layer_ns;
  // Which blocks hold up Wqkv, the stage attention waits for: the head blocks (they also copy
  // their head's cache history) or the others.
  int head_block_last = 0;
  std::vector<double> qkv_work_heads, qkv_work_others;
  for (int l = 0; l < t.n_layers; ++l) {
    int last = 0;
    for (int b = 0; b < t.blocks; ++b) {
      if (t.at(b, l, S::QkvOut) > t.at(last, l, S::QkvOut)) last = b;
      (b < heads ? qkv_work_heads : qkv_work_others).push_back(double(t.at(b, l, S::QkvOut)) - double(t.at(b, l, S::QkvIn)));
    }
    head_block_last += last < heads;
  }
  for (int l = 0; l < t.n_layers; ++l) {
    if (l > 0) {
      rows[0].handoff.push_back(median_stamp(l, S::QkvIn) - latest(l - 1, S::W2Out, t.blocks));
      rows[0].straggle.push_back(latest(l, S::QkvIn, t.blocks) - earliest(l, S::QkvIn));
    }
    rows[0].work.push_back(median_span(l, S::QkvIn, S::QkvOut, t.blocks));
    // Attention, over the head blocks: the hand-off from the last qkv row published to the
    // head's q, k and v in shared memory, then its two halves' work.
    std::vector<double> qkv_in, softmax, weighted;
    const double qkv_ready = latest(l, S::QkvOut, t.blocks);
    for (int b = 0; b < heads; ++b) {
      qkv_in.push_back(double(t.at(b, l, S::AttentionIn)) - qkv_ready);
      softmax.push_back(double(t.at(b, l, S::AttentionScores)) - double(t.at(b, l, S::AttentionIn)));
      weighted.push_back(double(t.at(b, l, S::AttentionOut)) - double(t.at(b, l, S::AttentionScores)));
    }
    rows[1].handoff.push_back(median_of(qkv_in));
    rows[2].work.push_back(median_of(softmax));
    rows[3].work.push_back(median_of(weighted));
    const struct {
      int row;
      S in, out, before;
      int writers;
    } stages[] = {{4, S::WoIn, S::WoOut, S::AttentionOut, heads},
                  {5, S::W13In, S::W13Out, S::WoOut, t.blocks},
                  {6, S::W2In, S::W2Out, S::W13Out, t.blocks}};
    for (const auto& st : stages) {
      rows[std::size_t(st.row)].handoff.push_back(median_stamp(l, st.in) - latest(l, st.before, st.writers));
      rows[std::size_t(st.row)].work.push_back(median_span(l, st.in, st.out, t.blocks));
      rows[std::size_t(st.row)].straggle.push_back(latest(l, st.in, t.blocks) - earliest(l, st.in));
    }
    if (l + 1 < t.n_layers) layer_ns.push_back(median_stamp(l + 1, S::QkvIn) - median_stamp(l, S::QkvIn));
  }
  const int f = t.n_layers;  // the classifier's stamps
  rows[7].handoff.push_back(median_stamp(f, S::QkvIn) - latest(f - 1, S::W2Out, t.blocks));
  rows[7].work.push_back(median_span(f, S::QkvIn, S::QkvOut, t.blocks));
  rows[7].straggle.push_back(latest(f, S::QkvIn, t.blocks) - earliest(f, S::QkvIn));

  std::vector<std::string> lines;
  char line[200];
  std::snprintf(line, sizeof line, "%-24s %12s %12s %12s", "stage (median of layers)", "hand-off us", "work us",
                "straggle us");
  lines.emplace_back(line);
  const auto us = [](const std::vector<double>& v) {  // "-": not measured for that stage
    char cell[32] = "-";
    if (!v.empty()) std::snprintf(cell, sizeof cell, "%.2f", median_of(v) / 1e3);
    return std::string(cell);
  };
  for (const Row& r : rows) {
    std::snprintf(line, sizeof line, "%-24s %12s %12s %12s", r.name, us(r.handoff).c_str(), us(r.work).c_str(),
                  us(r.straggle).c_str());
    lines.emplace_back(line);
  }
  std::snprintf(line, sizeof line, "Wqkv's last block to publish: a head block in %d of %d layers; work %s us (head "
                "blocks), %s us (the others)", head_block_last, t.n_layers, us(qkv_work_heads).c_str(),
                us(qkv_work_others).c_str());
  lines.emplace_back(line);
  std::snprintf(line, sizeof line, "a layer (median block's Wqkv input to the next's): %s us; the token: %.2f us",
                us(layer_ns).c_str(), (latest(f, S::QkvOut, t.blocks) - earliest(0, S::QkvIn)) / 1e3);
  lines.emplace_back(line);
  return lines;
}

const char* plan_name(PersistentPlan plan) { return plan == PersistentPlan::Cluster ? "cluster" : "grid"; }

PersistentStep::PersistentStep(const GpuModel& model, const StepBuffers& buffers) : model_(model), buffers_(buffers) {
  const wb::model::Config& c = model.config();
  // What the model must be, then what the GPU must have.
  if (c.n_layers < 1) unsupported(model, "needs at least one layer");
  if (c.dim % 4 != 0 || c.hidden_dim % 4 != 0 || c.head_size() % 4 != 0)
    unsupported(model, "needs dim, hidden_dim and head_size to be multiples of 4 (rows of whole 16-byte units)");
  if (c.dim > kMaxNormPerThread * kThreads)
    unsupported(model, "a dim over " + std::to_string(kMaxNormPerThread * kThreads) + " is not planned for");
  if (c.head_size() / 4 > kThreads) unsupported(model, "head_size is over " + std::to_string(4 * kThreads));
  check_layer_strides(model);
  int device = 0;
  WB_CUDA(cudaGetDevice(&device));
  cudaDeviceProp prop{};
  WB_CUDA(cudaGetDeviceProperties(&prop, device));
  if (prop.major < 9)
    unsupported(model, "needs Hopper or newer (its L2 bulk prefetch, sm_90); this GPU is sm_" +
                           std::to_string(prop.major) + std::to_string(prop.minor));
  const Params probe = params_for(model, buffers);
  for (const void* ptr : {static_cast<const void*>(probe.w.embedding), static_cast<const void*>(probe.w.rms_att),
                          static_cast<const void*>(probe.w.wqkv), static_cast<const void*>(probe.w.wo),
                          static_cast<const void*>(probe.w.rms_ffn), static_cast<const void*>(probe.w.w13),
                          static_cast<const void*>(probe.w.w2), static_cast<const void*>(probe.w.rms_final),
                          static_cast<const void*>(probe.w.classifier), static_cast<const void*>(buffers.key_cache),
                          static_cast<const void*>(buffers.value_cache)})
    if (!aligned16(ptr)) unsupported(model, "a weight matrix or cache is not 16-byte aligned in device memory");

  int optin = 0;
  WB_CUDA(cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, device));
  const SharedPlan shared = plan_shared(tuning_.ring_slots);
  if (!shared.why_not.empty()) unsupported(model, shared.why_not);
  apply(shared);
  // Every block must write some rows of xb (the last stage), which block 0 waits for before it
  // advances *pos: so at most dim blocks (and at most what is resident at once: the blocks
  // wait for each other).
  max_blocks_ = shared.blocks_at_once;
  // The kernel splits rows among blocks in 32-bit arithmetic (share): rows * blocks < 2^32.
  const std::uint64_t most_rows = std::max({c.vocab_size, c.dim + 2 * c.kv_dim(), c.hidden_dim});
  if (most_rows * std::uint64_t(max_blocks_) > 0xffffffffu)
    unsupported(model, "a matrix of " + std::to_string(most_rows) + " rows split among " + std::to_string(max_blocks_) +
                           " blocks overflows the kernel's 32-bit row arithmetic");
  blocks_ = std::min(prop.multiProcessorCount, max_blocks_);
  checked_blocks_ = max_blocks_;
  // Block 0 gathers every block's greedy pick (2 floats) into attention's partial sums.
  if (2 * max_blocks_ > 4 * kThreads)
    unsupported(model, "the greedy picks of " + std::to_string(max_blocks_) + " blocks are more than block 0 gathers (" +
                           std::to_string(2 * kThreads) + ")");
  // The tagged activations: qkv, att, xa, xb, g, the picks; zero = tag 0, which no write carries.
  tagged_words_ = std::size_t(c.dim + 2 * c.kv_dim()) + 3 * std::size_t(c.dim) + std::size_t(c.hidden_dim) +
                  2 * std::size_t(max_blocks_);
  WB_CUDA(cudaMalloc(&tagged_, tagged_words_ * sizeof(std::uint64_t)));
  WB_CUDA(cudaMemset(tagged_, 0, tagged_words_ * sizeof(std::uint64_t)));
  // The memset runs on the legacy stream, which the decoder's non-blocking stream does not wait
  // for; and the memory may be an earlier decoder's, whose words carry the tags this one's first
  // launch will wait for. So the zeros must be there before any launch: wait here, once.
  WB_CUDA(cudaDeviceSynchronize());
  plan_cluster(optin);
}

// Shared memory for a weight ring of `ring_slots` slots: the ring, the stages' vectors and the
// scores, and in what is left a head's cache history (keys and values, up to seq_len rows).
PersistentStep::SharedPlan PersistentStep::plan_shared(int ring_slots) const {
  const wb::model::Config& c = model_.config();
  int device = 0, optin = 0, sms = 0;
  WB_CUDA(cudaGetDevice(&device));
  WB_CUDA(cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, device));
  WB_CUDA(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
  const auto bytes = [&](int history_rows) {
    return layout_for(c.dim, c.hidden_dim, c.head_size(), c.seq_len, ring_slots, history_rows).total;
  };
  SharedPlan plan;
  const std::size_t base = bytes(0);
  const std::size_t row_pair = 2 * sizeof(float) * std::size_t(c.head_size());
  plan.history_rows = base + row_pair <= std::size_t(optin) ? int(std::min<std::size_t>(c.seq_len, (optin - base) / row_pair)) : 0;
  while (plan.history_rows > 0 && bytes(plan.history_rows) > std::size_t(optin)) --plan.history_rows;  // 16-byte rounding
  plan.shared_bytes = bytes(plan.history_rows);
  if (plan.shared_bytes > std::size_t(optin)) {
    plan.why_not = "a weight ring of " + std::to_string(ring_slots) + " slots, the scores of " + std::to_string(c.seq_len) +
                   " positions and the stage vectors need " + std::to_string(plan.shared_bytes) +
                   " bytes of shared memory; a block has " + std::to_string(optin);
    return plan;
  }
  // The occupancy query needs the kernel allowed this much; never less than the plan in use.
  WB_CUDA(cudaFuncSetAttribute(persistent_step_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                               int(std::max(plan.shared_bytes, shared_bytes_))));
  int per_sm = 0;
  WB_CUDA(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, persistent_step_kernel, kBlockThreads, plan.shared_bytes));
  if (per_sm < 1) plan.why_not = "no block of the kernel fits on an SM";
  plan.blocks_at_once = std::min(per_sm * sms, c.dim);
  return plan;
}

void PersistentStep::apply(const SharedPlan& plan) {
  history_rows_ = plan.history_rows;
  shared_bytes_ = plan.shared_bytes;
  WB_CUDA(cudaFuncSetAttribute(persistent_step_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                               int(shared_bytes_)));
}

// The Cluster plan, where a cluster's shared memory holds the model, and the default plan:
// Cluster where it can run (a model that small is all hand-offs on the grid; bench 08 measures
// both plans), Grid otherwise.
void PersistentStep::plan_cluster(int optin) {
  try {
    cluster_ = std::make_unique<ClusterStep>(model_, buffers_, optin);
    plan_ = PersistentPlan::Cluster;
  } catch (const std::invalid_argument& e) {
    cluster_unavailable_ = e.what();
    plan_ = PersistentPlan::Grid;
  }
}

std::size_t PersistentStep::cluster_shared_bytes() const { return cluster_ ? cluster_->shared_bytes() : 0; }
int PersistentStep::cluster_blocks() const { return cluster_ ? cluster_->blocks() : 0; }

void PersistentStep::set_plan(PersistentPlan plan) {
  if (plan == PersistentPlan::Cluster && !cluster_unavailable_.empty())
    throw std::invalid_argument(cluster_unavailable_);
  plan_ = plan;
}

PersistentStep::~PersistentStep() {
  if (tagged_) cudaFree(tagged_);
  if (trace_) cudaFree(trace_);
}

void PersistentStep::arm_trace() {
  const wb::model::Config& c = model_.config();
  if (!trace_) {
    const std::size_t stamps = std::size_t(max_blocks_) * std::size_t(kStampsPerLayer * c.n_layers + kFinalStamps);
    WB_CUDA(cudaMalloc(&trace_, stamps * sizeof(unsigned long long)));
  }
  trace_armed_ = true;
  trace_written_ = false;
}

StepTrace PersistentStep::read_trace() {
  if (!trace_written_) throw std::logic_error("ch08 persistent step: read_trace() without a traced grid-plan launch");
  const wb::model::Config& c = model_.config();
  StepTrace t;
  t.blocks = blocks_;
  t.n_layers = c.n_layers;
  t.n_heads = c.n_heads;
  t.ns.resize(std::size_t(blocks_) * std::size_t(kStampsPerLayer * c.n_layers + kFinalStamps));
  WB_CUDA(cudaDeviceSynchronize());  // the launch ran on the decoder's non-blocking stream
  WB_CUDA(cudaMemcpy(t.ns.data(), trace_, t.ns.size() * sizeof(unsigned long long), cudaMemcpyDeviceToHost));
  return t;
}

void PersistentStep::set_tuning(const PersistentTuning& tuning) {
  using T = PersistentTuning;
  if (tuning.prefetch_ahead < 0 || tuning.prefetch_ahead > T::kMaxPrefetchAhead ||
      tuning.poll_sleep_ns > T::kMaxPollSleepNs || tuning.ring_slots < T::kMinRingSlots ||
      tuning.ring_slots > T::kMaxRingSlots || tuning.copies_in_flight < 1 || tuning.copies_in_flight > tuning.ring_slots)
    throw std::invalid_argument("ch08 persistent step: prefetch_ahead " + std::to_string(tuning.prefetch_ahead) + " (0.." +
                                std::to_string(T::kMaxPrefetchAhead) + "), poll_sleep_ns " +
                                std::to_string(tuning.poll_sleep_ns) + " (0.." + std::to_string(T::kMaxPollSleepNs) +
                                "), ring_slots " + std::to_string(tuning.ring_slots) + " (" +
                                std::to_string(T::kMinRingSlots) + ".." + std::to_string(T::kMaxRingSlots) +
                                ") and copies_in_flight " + std::to_string(tuning.copies_in_flight) +
                                " (1..ring_slots)");
  if (tuning.ring_slots != tuning_.ring_slots) {
    const SharedPlan plan = plan_shared(tuning.ring_slots);
    if (!plan.why_not.empty()) throw std::invalid_argument("ch08 persistent step: " + plan.why_not);
    if (plan.blocks_at_once < blocks_)
      throw std::invalid_argument("ch08 persistent step: with a weight ring of " + std::to_string(tuning.ring_slots) +
                                  " slots only " + std::to_string(plan.blocks_at_once) + " blocks fit at once; the grid has " +
                                  std::to_string(blocks_));
    apply(plan);
    max_blocks_ = std::min(plan.blocks_at_once, checked_blocks_);  // no more than the constructor checked
  }
  tuning_ = tuning;
}

void PersistentStep::set_blocks(int blocks) {
  int device = 0, sms = 0;
  WB_CUDA(cudaGetDevice(&device));
  WB_CUDA(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
  if (blocks == 0) blocks = std::min(sms, max_blocks_);
  if (blocks < 1 || blocks > max_blocks_)
    throw std::invalid_argument("ch08 persistent step: " + std::to_string(blocks) + " blocks; 1.." +
                                std::to_string(max_blocks_) +
                                " can run (all resident at once, at most dim); 0 = one per SM");
  blocks_ = blocks;
}

void PersistentStep::enqueue(cudaStream_t stream) {
  if (plan_ == PersistentPlan::Cluster) {
    cluster_->enqueue(stream);
    return;
  }
  const wb::model::Config& c = model_.config();
  Params p = params_for(model_, buffers_);
  p.act.qkv = tagged_;
  p.act.att = p.act.qkv + c.dim + 2 * c.kv_dim();
  p.act.xa = p.act.att + c.dim;
  p.act.xb = p.act.xa + c.dim;
  p.act.g = p.act.xb + c.dim;
  p.act.picks = p.act.g + c.hidden_dim;
  p.launch = launches_;
  p.history_rows = history_rows_;
  p.poll_sleep_ns = tuning_.poll_sleep_ns;
  p.prefetch_ahead = tuning_.prefetch_ahead;
  p.ring_slots = tuning_.ring_slots;
  // The head blocks are blocks [0, n_heads) when the grid has more blocks than heads.
  p.wqkv_skip_blocks = !tuning_.wqkv_on_head_blocks && blocks_ > c.n_heads ? c.n_heads : 0;
  p.copies_in_flight = std::uint32_t(tuning_.copies_in_flight);
  p.trace = trace_armed_ ? trace_ : nullptr;
  trace_written_ = trace_armed_;
  trace_armed_ = false;
  cudaLaunchAttribute cooperative{};
  cooperative.id = cudaLaunchAttributeCooperative;  // every block resident at once, or an error
  cooperative.val.cooperative = 1;
  cudaLaunchConfig_t config{};
  config.gridDim = dim3(unsigned(blocks_));
  config.blockDim = dim3(kBlockThreads);
  config.dynamicSmemBytes = shared_bytes_;
  config.stream = stream;
  config.attrs = &cooperative;
  config.numAttrs = 1;
  WB_CUDA(cudaLaunchKernelEx(&config, persistent_step_kernel, p));
  WB_CHECK_LAUNCH("persistent_step_kernel");
  ++launches_;  // the next launch's tags (unsigned: wraps, as the kernel's arithmetic does)
}

}  // namespace ch08
