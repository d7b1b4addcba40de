#pragma once
// Chapter 08 (capstone): the whole token loop on the GPU. The API the tests call; do not edit.
//
// One decoding step of a llama2 model, all on the device (tests/08_token_loop/gpu_decoder.hpp
// strings it together):
//
//   x = embedding[token]                                   (token read from device memory)
//   per layer:  h = RMSNorm(x)                             chapter 06 (fused with the add)
//               q, k, v = [Wq; Wk; Wv] h                   chapter 01's matvec (rows packed)
//               rope_and_append(q, k, v -> caches at pos)  THIS CHAPTER, step 1
//               a = attention(q, caches, 0..pos)           THIS CHAPTER, step 2 (ch 04's softmax)
//               x = x + Wo a; h = RMSNorm(x)               chapter 06's fused add + norm
//               g = swiglu([W1; W3] h)                     THIS CHAPTER, step 3 (after one matvec)
//               x = x + W2 g                               (fused with the next layer's norm)
//   logits = Wcls RMSNorm(x); token = sample(logits)       chapters 01, 06, 07
//
// and then the step itself captured once as a CUDA graph and replayed per token (step 4).
//
// THE POSITION LIVES IN DEVICE MEMORY. A CUDA graph freezes every kernel argument it was
// captured with; a step that passed `pos` by value would replay position 0 forever. So every
// kernel that depends on the position reads it through `const int* pos` (device memory, one
// int, 0 <= *pos < seq_len: the decoder checks that on the host before each step), and the
// step ends with a one-thread kernel that advances it. The token works the same way.
//
// Every function enqueues on `stream` and returns without waiting: no synchronization, no
// allocation, no host<->device copy (all of them would break the graph capture of step 4).
// Bad arguments throw std::invalid_argument naming the function and the argument (the
// check_* helpers below); nothing is enqueued then.
#include <cuda_runtime.h>

#include <functional>
#include <stdexcept>
#include <string>

namespace ch08 {

// Every pointer below is a device pointer that need only be float-aligned (4 bytes): a caller
// may pass a view that starts one float past an 8- or 16-byte boundary. A kernel that loads
// float2 or float4 checks the alignment of what it vectorizes first.

// ---- Step 1: RoPE, and the append to the KV cache ----------------------------------------
//
// q: dim floats (n_heads heads of head_size), k and v: kv_dim floats (n_kv_heads heads), the
// step's fresh projections. llama2.c's RoPE: each consecutive pair (x[i], x[i+1]), i even, of
// every head is rotated by the angle
//      theta = pos * 10000^(-(i % head_size) / head_size)
//      (x[i], x[i+1]) <- (x[i] cos theta - x[i+1] sin theta,  x[i] sin theta + x[i+1] cos theta)
// with pos = *pos. The rotated q is written back in place; the rotated k and the (unrotated)
// v are written to row *pos of this layer's caches:
//      key_cache[*pos * kv_dim + j] = rotated k[j],  value_cache[*pos * kv_dim + j] = v[j]
// k and v are read-only; no other row of the caches is touched. head_size must be even,
// dim and kv_dim multiples of head_size.
void rope_and_append(float* q, const float* k, const float* v, float* key_cache,
                     float* value_cache, int dim, int kv_dim, int head_size, const int* pos,
                     cudaStream_t stream);

// ---- Step 2: attention over the KV cache --------------------------------------------------
//
// For every query head h (n_heads of them) and its KV head g = h / (n_heads / n_kv_heads)
// (grouped-query attention: n_heads / n_kv_heads query heads share one KV head):
//      s_t   = dot(q_h, key_cache[t, g]) / sqrt(head_size)      for t = 0 .. *pos
//      a_t   = softmax(s)_t                                      (over t = 0 .. *pos only)
//      out_h = sum_t a_t * value_cache[t, g]                     (head_size floats)
// where key_cache[t, g] is the head_size floats at key_cache + t * kv_dim + g * head_size
// (kv_dim = n_kv_heads * head_size). Rows of the caches past *pos hold anything (stale
// positions, garbage) and must not change the result. q and the caches are read-only.
// `scores` is the caller's scratch of n_heads * seq_len floats (the reference writes s there
// and turns each row into its softmax in place, chapter 04's way: the max first, then exp and
// the sum; chapter 04's own softmax_fused needs its output apart from its input, and this
// is the only scratch); its contents afterwards are unspecified. n_heads must be a multiple of n_kv_heads,
// and at most 65535 (a grid's y dimension: the reference puts the heads there, the positions on x);
// head_size >= 1.
void attention(float* out, const float* q, const float* key_cache, const float* value_cache,
               float* scores, int n_heads, int n_kv_heads, int head_size, int seq_len,
               const int* pos, cudaStream_t stream);

// ---- Step 3: SwiGLU -------------------------------------------------------------------------
//
// out[i] = silu(gate[i]) * up[i],  silu(g) = g / (1 + exp(-g)),  for i < n: the feed-forward
// nonlinearity of llama, one elementwise pass (chapter 05's lesson: read each input once,
// write once). out may be gate itself (the decoder computes it in place); otherwise gate and up
// are read-only. A gate of -inf gives 0 * up (silu(-inf) = 0), +inf gives +inf * up, NaN
// propagates. Every output is within 1e-5 of its exact value, relative, for every gate: very
// negative ones too, where silu is tiny (a sigmoid written as 0.5 * (1 + tanh(g / 2)) cancels
// there and is not); below about -88, where the exact value is under 1e-30 (float's denormal
// range and below), within 1e-30 absolute.
void swiglu(float* out, const float* gate, const float* up, int n, cudaStream_t stream);

// ---- Step 4: the step as a CUDA graph ------------------------------------------------------
//
// A decoding step of a 12-layer model is over a hundred small kernels; launched one by one,
// the CPU's launch calls (a few microseconds each) take longer than the kernels. A CUDA graph
// records them once and replays them with one launch.
class StepGraph {
 public:
  StepGraph() = default;
  ~StepGraph();  // frees what capture() made
  StepGraph(const StepGraph&) = delete;
  StepGraph& operator=(const StepGraph&) = delete;

  // Records everything `enqueue_step(stream)` enqueues on `stream` into a graph (nothing runs
  // while it is recorded) and instantiates it. A second capture replaces the first and frees
  // it. `stream` must be a stream the caller created (the legacy default stream cannot be
  // captured): a null stream throws std::invalid_argument. If enqueue_step throws, the capture
  // is ended, nothing is kept, and the exception propagates.
  void capture(const std::function<void(cudaStream_t)>& enqueue_step, cudaStream_t stream);

  // Enqueues one replay of the captured step on `stream` (one launch) and returns without
  // waiting. Throws std::logic_error when nothing was captured.
  void replay(cudaStream_t stream) const;

  bool captured() const { return exec_ != nullptr; }

 private:
  cudaGraph_t graph_ = nullptr;
  cudaGraphExec_t exec_ = nullptr;
};

// ---- Argument checks (call them first; they throw before anything is enqueued) ---------------

inline void check_rope_args(const float* q, const float* k, const float* v, const float* key_cache,
                            const float* value_cache, int dim, int kv_dim, int head_size,
                            const int* pos) {
  const std::string where = "ch08 rope_and_append: ";
  if (head_size < 2 || head_size % 2 != 0)
    throw std::invalid_argument(where + "head_size must be even and >= 2 (RoPE rotates pairs), got " +
                                std::to_string(head_size));
  if (dim < head_size || dim % head_size != 0)
    throw std::invalid_argument(where + "dim must be a positive multiple of head_size (" +
                                std::to_string(head_size) + "), got " + std::to_string(dim));
  if (kv_dim < head_size || kv_dim % head_size != 0 || kv_dim > dim)
    throw std::invalid_argument(where + "kv_dim must be a multiple of head_size and <= dim, got " +
                                std::to_string(kv_dim));
  if (!q || !k || !v || !key_cache || !value_cache || !pos)
    throw std::invalid_argument(where + "q, k, v, the caches and pos must be device pointers, got null");
}

inline void check_attention_args(const float* out, const float* q, const float* key_cache,
                                 const float* value_cache, const float* scores, int n_heads,
                                 int n_kv_heads, int head_size, int seq_len, const int* pos) {
  const std::string where = "ch08 attention: ";
  if (n_kv_heads < 1 || n_heads < n_kv_heads || n_heads % n_kv_heads != 0)
    throw std::invalid_argument(where + "n_heads (" + std::to_string(n_heads) +
                                ") must be a positive multiple of n_kv_heads (" +
                                std::to_string(n_kv_heads) + ")");
  if (n_heads > 65535)
    throw std::invalid_argument(where + "n_heads must be at most 65535 (a grid's y dimension), got " +
                                std::to_string(n_heads));
  if (head_size < 1)
    throw std::invalid_argument(where + "head_size must be >= 1, got " + std::to_string(head_size));
  if (seq_len < 1)
    throw std::invalid_argument(where + "seq_len must be >= 1, got " + std::to_string(seq_len));
  if (!out || !q || !key_cache || !value_cache || !scores || !pos)
    throw std::invalid_argument(where + "out, q, the caches, scores and pos must be device pointers, got null");
}

inline void check_swiglu_args(const float* out, const float* gate, const float* up, int n) {
  if (n < 0) throw std::invalid_argument("ch08 swiglu: n must be >= 0, got " + std::to_string(n));
  if (n > 0 && (!out || !gate || !up))
    throw std::invalid_argument("ch08 swiglu: out, gate and up must be device pointers, got null (n = " +
                                std::to_string(n) + ")");
}

}  // namespace ch08
