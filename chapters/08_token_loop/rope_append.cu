// Chapter 08, step 1: RoPE on q and k, and the append of k and v to the KV cache. Read
// README.md first; the contract is in token_loop.cuh.
//
// One thread per pair (x[i], x[i+1]), i even, is a good start:
//   - read the position from device memory (*pos): never pass it by value (a CUDA graph
//     would freeze it);
//   - the angle as llama2.c computes it, in float:
//       frequency = 1 / powf(10000, (i % head_size) / head_size),  angle = pos * frequency;
//   - rotate q's pair in place; for i < kv_dim, rotate k's pair with the same angle and write
//     it to key_cache[*pos * kv_dim + i], and copy v's pair (unrotated) to the value cache;
//   - guard i < dim: dim is not a multiple of your block size in general.
#include <cuda_runtime.h>

#include "token_loop.cuh"
#include "wb/check.hpp"
#include "wb/not_implemented.hpp"

namespace ch08 {

// TODO step 1: __global__ void rope_append_kernel(...)

void rope_and_append(float* q, const float* k, const float* v, float* key_cache,
                     float* value_cache, int dim, int kv_dim, int head_size, const int* pos,
                     cudaStream_t stream) {
  wb::not_implemented("ch08 rope_and_append (step 1): RoPE on q and k, append k and v at *pos");
  check_rope_args(q, k, v, key_cache, value_cache, dim, kv_dim, head_size, pos);  // keep
  // TODO: launch rope_append_kernel on `stream` (one thread per pair of q), then
  // WB_CHECK_LAUNCH("rope_append_kernel").
  (void)stream;
}

}  // namespace ch08
