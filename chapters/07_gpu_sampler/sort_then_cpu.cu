// Step 2: the report's first GPU port. The GPU divides by the temperature and sorts every row
// (CUB's segmented radix sort, keys descending, values = token ids); the sorted rows come
// back to pinned host memory; the CPU does the softmax, the filtering and the draw.
//
// Build it, make it pass the tests, then time it against the CPU sampler (step 1):
// `./workbook bench 07`. It is meant to be slower. The lesson (README.md) says why.
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

// Everything sample() needs, allocated once in the constructor, freed in the destructor.
struct SortThenCpuSampler::Buffers {
  // TODO: device buffers for max_rows x vocab keys (the logits, -0.0 as +0.0) and their sorted copy, token
  // ids (the sort's values: 0..vocab-1 in every row) and their sorted copy, the rows'
  // offsets for the segmented sort (max_rows + 1 ints), the uniforms (max_rows floats), CUB's
  // temp storage and its size; PINNED host buffers (cudaMallocHost) for what comes back.
};

SortThenCpuSampler::SortThenCpuSampler(int max_rows, int vocab)
    : buffers_(new Buffers), max_rows_(max_rows), vocab_(vocab) {
  // TODO: check max_rows >= 1 and vocab >= 1 (std::invalid_argument), allocate every buffer,
  // ask CUB how much temp storage the largest call needs (call SortPairsDescending with a
  // null temp pointer), allocate it, and fill the token ids and the row offsets once.
  wb::not_implemented("SortThenCpuSampler::SortThenCpuSampler (step 2)");
}

SortThenCpuSampler::~SortThenCpuSampler() {
  // TODO: free every buffer (cudaFree, cudaFreeHost). Never throw from a destructor.
  delete buffers_;
}

std::size_t SortThenCpuSampler::d2h_bytes_per_row() const {
  // TODO: the bytes sample() copies device-to-host per row (the tests count them).
  wb::not_implemented("SortThenCpuSampler::d2h_bytes_per_row (step 2)");
}

void SortThenCpuSampler::sample(const float* logits, int rows, const SamplingParams& params,
                                int* tokens, float* confidence, cudaStream_t stream) {
  check_sampling_args("SortThenCpuSampler::sample", logits, rows, vocab_, params, tokens,
                      confidence);
  // TODO: rows > max_rows_ is a bad argument (std::invalid_argument); rows == 0 does nothing.
  // TODO: the GPU half, all on `stream`:
  //   1. a kernel copies the logits into the keys buffer, -0.0 as +0.0 (a radix sort orders
  //      bits; T > 0 keeps the order, so the sort needs no T);
  //   2. cub::DeviceSegmentedRadixSort::SortPairsDescending sorts each row (keys the logits,
  //      values token ids) with your temp storage;
  //   3. fill_draw_uniforms(uniforms, rows, params.seed, params.step, stream);
  //   4. cudaMemcpyAsync the sorted keys, sorted ids and uniforms to the pinned buffers;
  //      then wait for the stream (the CPU needs them).
  // TODO: the CPU half, row by row, on the sorted row: rule 5 (NaN or +inf anywhere, or all
  // -inf: token -1, confidence NaN), the softmax in double, exp((x - x[0]) / T) with T = 1
  // when greedy (x[0] is the max; the difference first, so nothing overflows), rule 1
  // (greedy: the first entry), rule 2 (top_k a prefix; top_p the shortest prefix of it whose
  // mass reaches top_p times the top-k mass), the draw with uniforms[r], rule 3's confidence.
  wb::not_implemented("SortThenCpuSampler::sample (step 2)");
}

}  // namespace ch07
