// Step 4: the fused GPU sampler. No sort, no copy back, no CPU: the kernels read each row of
// logits, find the top-k / top-p cut without sorting, draw with draw_uniform, and write one
// token and one confidence per row.
//
// Read the lesson's step 4 (README.md) for the plan and its hints. Rule 7 of sampler.cuh
// applies: enqueue on `stream`, no synchronization, no allocation, no copies; your scratch
// memory is the caller's `workspace`.
#include <cuda_runtime.h>

#include <cstdint>
#include <stdexcept>
#include <string>

#include "sampler.cuh"
#include "wb/check.hpp"
#include "wb/not_implemented.hpp"

namespace ch07 {

std::size_t fused_sampler_workspace_bytes(int rows, int vocab) {
  // TODO: the scratch bytes sample_fused needs for rows x vocab (0 is a fine answer if
  // everything fits in shared memory and registers).
  (void)rows;
  (void)vocab;
  wb::not_implemented("fused_sampler_workspace_bytes (step 4)");
}

// TODO: your kernel(s). One plan (one block per row):
//   1. the max of the logits and whether the row is bad (rule 5);
//   2. the sum of exp((x - max) / T): take the difference first, and multiply by 1 / T
//      capped at FLT_MAX (x / T overflows for a denormal T or a logit near FLT_MAX);
//   3. greedy: the argmax, lowest index on ties; done;
//   4. top_k without a sort: the k-th largest logit by a radix select (histograms of 8-bit
//      digits of an order-preserving integer key), then which of its ties are kept;
//   5. top_p: the same select, weighing each token by its probability;
//   6. u = draw_uniform(params.seed, params.step, row); a block-wide prefix sum over the
//      kept tokens' probabilities finds the first whose running mass reaches u times the
//      kept mass; never past the last kept token;
//   7. tokens[row], confidence[row] = p(token) over the whole row.

void sample_fused(const float* logits, int rows, int vocab, const SamplingParams& params,
                  int* tokens, float* confidence, void* workspace, std::size_t workspace_bytes,
                  cudaStream_t stream) {
  check_sampling_args("sample_fused", logits, rows, vocab, params, tokens, confidence);
  // TODO: check workspace_bytes >= fused_sampler_workspace_bytes(rows, vocab)
  // (std::invalid_argument); rows == 0 does nothing; launch your kernel(s) on `stream`.
  (void)workspace;
  (void)workspace_bytes;
  (void)stream;
  wb::not_implemented("sample_fused (step 4)");
}

}  // namespace ch07
