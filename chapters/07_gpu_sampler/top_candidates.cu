// Step 3: softmax on the GPU, the top candidates of each row selected on the GPU, and only
// they cross PCIe (at most kMaxCandidates per row); the CPU filters and draws. The report's
// 5.5x.
#include <cub/block/block_reduce.cuh>
#include <cub/device/device_segmented_radix_sort.cuh>
#include <cuda_runtime.h>

#include <cmath>
#include <limits>
#include <stdexcept>
#include <string>

#include "sampler.cuh"
#include "wb/check.hpp"
#include "wb/not_implemented.hpp"

namespace ch07 {

struct TopCandidatesSampler::Buffers {
  // TODO: what step 2 had, plus the softmax's statistics (row max and row sum per row) and
  // the candidates: max_rows x min(vocab, kMaxCandidates) probabilities and token ids, on
  // the device and pinned on the host.
};

TopCandidatesSampler::TopCandidatesSampler(int max_rows, int vocab)
    : buffers_(new Buffers), max_rows_(max_rows), vocab_(vocab) {
  // TODO: as step 2: check, allocate once, size CUB's temp storage, fill ids and offsets.
  wb::not_implemented("TopCandidatesSampler::TopCandidatesSampler (step 3)");
}

TopCandidatesSampler::~TopCandidatesSampler() {
  // TODO: free every buffer.
  delete buffers_;
}

std::size_t TopCandidatesSampler::d2h_bytes_per_row() const {
  // TODO: the candidates' bytes per row, plus the row's uniform.
  wb::not_implemented("TopCandidatesSampler::d2h_bytes_per_row (step 3)");
}

void TopCandidatesSampler::sample(const float* logits, int rows, const SamplingParams& params,
                                  int* tokens, float* confidence, cudaStream_t stream) {
  check_sampling_args("TopCandidatesSampler::sample", logits, rows, vocab_, params, tokens,
                      confidence);
  // TODO: the bad arguments of the header (rows > max_rows; a kept set that cannot fit in
  // the candidates: top_k between kMaxCandidates and vocab, or top_k off with top_p == 1 on a
  // long row) throw std::invalid_argument before any work.
  // TODO: the GPU half, on `stream`:
  //   1. the softmax's statistics of each row: the max of the logits and the sum of
  //      exp((x - max) * inv_t), inv_t = 1 / T capped at FLT_MAX (a block per row, chapter
  //      04; the difference first: x * inv_t can overflow); a bad row (rule 5) gets NaN;
  //   2. the sort of step 2;
  //   3. a kernel writes the first min(vocab, kMaxCandidates) of each sorted row with their
  //      probabilities exp((x - max) * inv_t) / sum: that is the whole selection;
  //   4. the uniforms; copy candidates and uniforms back; wait.
  // TODO: the CPU half: with top_k off, check every row's nucleus ends among its candidates
  // (else throw, before writing any token); then per row as step 2, on the candidates (their
  // probabilities are already the whole row's: the confidence is one of them).
  wb::not_implemented("TopCandidatesSampler::sample (step 3)");
}

}  // namespace ch07
