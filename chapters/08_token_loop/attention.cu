// Chapter 08, step 2: attention of this step's queries over the KV cache. Read README.md
// first; the contract is in token_loop.cuh.
//
// The reference does it in three kernels, the steps of llama2.c's loop:
//   1. scores[h * seq_len + t] = dot(q_h, K[t, g]) / sqrt(head_size) for t <= *pos, and -inf
//      for *pos < t < seq_len, with g = h / (n_heads / n_kv_heads);
//   2. a softmax over each head's row, entries 0 .. *pos (subtract the max before exp!).
//      Chapter 04's softmax_fused ("softmax.cuh") would do it, but its y must not overlap
//      x, and `scores` is your only scratch: think about where its output would go;
//   3. out_h[i] = sum over t <= *pos of a[h, t] * V[t, g][i].
// Rows of the caches past *pos hold garbage (even NaN): never read them. Read *pos on the
// device in every kernel.
#include <cuda_runtime.h>

#include "token_loop.cuh"
#include "wb/check.hpp"
#include "wb/not_implemented.hpp"

namespace ch08 {

// TODO step 2: the kernels (scores, softmax, weighted sum), or one kernel per head.

void attention(float* out, const float* q, const float* key_cache, const float* value_cache,
               float* scores, int n_heads, int n_kv_heads, int head_size, int seq_len,
               const int* pos, cudaStream_t stream) {
  wb::not_implemented("ch08 attention (step 2): scores, softmax and weighted sum over the KV cache");
  check_attention_args(out, q, key_cache, value_cache, scores, n_heads, n_kv_heads, head_size,
                       seq_len, pos);  // keep: rejects bad arguments
  // TODO: launch your kernels on `stream`, each followed by WB_CHECK_LAUNCH("...").
  (void)stream;
}

}  // namespace ch08
