// Step 2: the report's first GPU port. The GPU sorts every row's logits (CUB's segmented
// radix sort, keys descending, values = token ids); the sorted rows come back to pinned host
// memory; the CPU applies the temperature and does the softmax, the filtering and the draw.
//
// It is correct, and it is slower than the CPU sampler: the sort reads and writes every
// element of the row several times (a pass per radix digit), the copy moves 8 bytes per
// vocabulary entry across PCIe, and the CPU still touches every element (the softmax's sum)
// on one thread. Sorting a whole row to keep 50 tokens of it is the algorithm's mistake, not
// the GPU's.
#include <cub/device/device_segmented_radix_sort.cuh>
#include <cuda_runtime.h>

#include <climits>
#include <cmath>
#include <limits>
#include <stdexcept>
#include <string>
#include <vector>

#include "sampler.cuh"
#include "wb/check.hpp"

namespace ch07 {

namespace {

constexpr int kThreads = 256;

// The sort's keys: the logits themselves; the CPU half applies T. T > 0 keeps their order, so
// this is rule 2's order exactly, where keys x * (1 / T) could round two distinct logits to
// one key, or overflow (1 / T is +inf for a denormal T below 2.9e-39; x / T is +inf for a
// finite x above FLT_MAX * T). -0.0 becomes +0.0: they are the same logit, but a radix sort
// orders keys by their bits, and would put +0.0 of a higher index before -0.0 of a lower one
// (rule 2 breaks ties by index).
__global__ void make_sort_keys(const float* logits, float* keys, long long count) {
  for (long long i = blockIdx.x * static_cast<long long>(blockDim.x) + threadIdx.x; i < count;
       i += static_cast<long long>(gridDim.x) * blockDim.x) {
    const float x = logits[i];
    keys[i] = x == 0.0f ? 0.0f : x;
  }
}

// The sort's values: every row holds the token ids 0..vocab-1 (written once, never changed;
// the sort writes its output elsewhere).
__global__ void fill_token_ids(int* ids, long long count, int vocab) {
  for (long long i = blockIdx.x * static_cast<long long>(blockDim.x) + threadIdx.x; i < count;
       i += static_cast<long long>(gridDim.x) * blockDim.x)
    ids[i] = static_cast<int>(i % vocab);
}

__global__ void fill_row_offsets(int* offsets, int rows, int vocab) {
  const int r = blockIdx.x * blockDim.x + threadIdx.x;
  if (r <= rows) offsets[r] = r * vocab;
}

int grid_for(long long count) {
  return static_cast<int>(std::min<long long>((count + kThreads - 1) / kThreads, 4096));
}

// The CPU half, one row: the logits arrive sorted (x descending, ties in index order: CUB's
// radix sort is stable), so the argmax is its first entry and top-k is a prefix. `t` is the
// temperature (1 when greedy: the confidence is taken at T = 1).
struct Choice {
  int token;
  float confidence;
};

Choice sample_sorted_row(const float* x, const int* ids, int vocab, double t,
                         const SamplingParams& params, float u) {
  const Choice bad{-1, std::numeric_limits<float>::quiet_NaN()};
  for (int i = 0; i < vocab; ++i)  // rule 5: a NaN may sort first or last; look everywhere
    if (std::isnan(x[i]) || x[i] == std::numeric_limits<float>::infinity()) return bad;
  if (x[0] == -std::numeric_limits<float>::infinity()) return bad;  // all -inf

  // The softmax, in double: x[0] is the row's max, and each term is exp((x - max) / T), the
  // difference taken before the division (a difference of floats is finite in double, and
  // the max's own term is exactly 1 for any T > 0). Every element is read here, on one
  // thread (this loop is most of the CPU half's time on a 151936-wide row).
  thread_local std::vector<double> p_row;
  p_row.resize(vocab);
  double sum = 0;
  for (int i = 0; i < vocab; ++i) {
    p_row[i] = std::exp((static_cast<double>(x[i]) - x[0]) / t);
    sum += p_row[i];
  }
  const auto p = [&](int i) { return p_row[i] / sum; };

  if (is_greedy(params)) return {ids[0], static_cast<float>(p(0))};  // rule 1

  // Rule 2. top_k keeps a prefix of k; top_p the shortest prefix of that whose mass reaches
  // top_p times the top-k prefix's mass (renormalized: top_p is a share of what top_k kept).
  const int k = (params.top_k == 0 || params.top_k >= vocab) ? vocab : params.top_k;
  int kept = k;
  if (params.top_p < 1.0f) {
    double top_k_mass = 0;
    for (int i = 0; i < k; ++i) top_k_mass += p(i);
    const double target = params.top_p * top_k_mass;
    double cumulative = 0;
    for (int i = 0; i < k; ++i) {
      cumulative += p(i);
      if (cumulative >= target) {
        kept = i + 1;
        break;
      }
    }
  }

  // The draw: the first kept token whose running mass reaches u times the kept mass. The
  // sums are in double and in the same order both times, so the walk reaches the kept mass
  // at the last kept token; `last` still guards the end (a token of probability 0 is never
  // returned, and never one past the kept set).
  double kept_mass = 0;
  for (int i = 0; i < kept; ++i) kept_mass += p(i);
  const double target = static_cast<double>(u) * kept_mass;
  double cumulative = 0;
  int last = 0;
  for (int i = 0; i < kept; ++i) {
    const double pi = p(i);
    if (pi == 0) break;  // sorted: everything after is masked too
    last = i;
    cumulative += pi;
    if (cumulative >= target) break;
  }
  return {ids[last], static_cast<float>(p(last))};
}

}  // namespace

struct SortThenCpuSampler::Buffers {
  float* keys = nullptr;         // max_rows x vocab: the logits (-0.0 as +0.0), the sort's keys
  float* sorted = nullptr;       // the sort's output keys
  int* token_ids = nullptr;      // max_rows x vocab: 0..vocab-1 in every row
  int* sorted_ids = nullptr;     // the sort's output values
  int* row_offsets = nullptr;    // max_rows + 1: row r is [offsets[r], offsets[r + 1])
  float* uniforms = nullptr;     // max_rows: rule 4's numbers
  void* sort_temp = nullptr;     // CUB's scratch, sized once for max_rows
  std::size_t sort_temp_bytes = 0;
  float* host_sorted = nullptr;  // pinned: the copies run at full PCIe speed, asynchronously
  int* host_ids = nullptr;
  float* host_uniforms = nullptr;
};

SortThenCpuSampler::SortThenCpuSampler(int max_rows, int vocab)
    : buffers_(new Buffers), max_rows_(max_rows), vocab_(vocab) {
  if (max_rows < 1 || vocab < 1)
    throw std::invalid_argument("ch07 SortThenCpuSampler: max_rows and vocab must be >= 1, got " +
                                std::to_string(max_rows) + " and " + std::to_string(vocab));
  const long long count = static_cast<long long>(max_rows) * vocab;
  if (count > INT_MAX)  // CUB's item count is an int
    throw std::invalid_argument("ch07 SortThenCpuSampler: max_rows x vocab must fit in an int");
  Buffers& b = *buffers_;
  // Every allocation happens here, once (chapter 02): sample() only enqueues work.
  WB_CUDA(cudaMalloc(&b.keys, count * sizeof(float)));
  WB_CUDA(cudaMalloc(&b.sorted, count * sizeof(float)));
  WB_CUDA(cudaMalloc(&b.token_ids, count * sizeof(int)));
  WB_CUDA(cudaMalloc(&b.sorted_ids, count * sizeof(int)));
  WB_CUDA(cudaMalloc(&b.row_offsets, (max_rows + 1) * sizeof(int)));
  WB_CUDA(cudaMalloc(&b.uniforms, max_rows * sizeof(float)));
  WB_CUDA(cudaMallocHost(&b.host_sorted, count * sizeof(float)));
  WB_CUDA(cudaMallocHost(&b.host_ids, count * sizeof(int)));
  WB_CUDA(cudaMallocHost(&b.host_uniforms, max_rows * sizeof(float)));
  // A null temp pointer asks CUB how much scratch the largest call needs.
  WB_CUDA(cub::DeviceSegmentedRadixSort::SortPairsDescending(
      nullptr, b.sort_temp_bytes, b.keys, b.sorted, b.token_ids, b.sorted_ids,
      static_cast<int>(count), max_rows, b.row_offsets, b.row_offsets + 1));
  WB_CUDA(cudaMalloc(&b.sort_temp, b.sort_temp_bytes));
  fill_token_ids<<<grid_for(count), kThreads>>>(b.token_ids, count, vocab);
  WB_CHECK_LAUNCH("fill_token_ids");
  fill_row_offsets<<<(max_rows + kThreads) / kThreads, kThreads>>>(b.row_offsets, max_rows, vocab);
  WB_CHECK_LAUNCH("fill_row_offsets");
  WB_CUDA(cudaDeviceSynchronize());
}

SortThenCpuSampler::~SortThenCpuSampler() {
  if (!buffers_) return;
  Buffers& b = *buffers_;
  cudaFree(b.keys);
  cudaFree(b.sorted);
  cudaFree(b.token_ids);
  cudaFree(b.sorted_ids);
  cudaFree(b.row_offsets);
  cudaFree(b.uniforms);
  cudaFree(b.sort_temp);
  cudaFreeHost(b.host_sorted);
  cudaFreeHost(b.host_ids);
  cudaFreeHost(b.host_uniforms);
  delete buffers_;
}

std::size_t SortThenCpuSampler::d2h_bytes_per_row() const {
  return static_cast<std::size_t>(vocab_) * (sizeof(float) + sizeof(int)) + sizeof(float);
}

void SortThenCpuSampler::sample(const float* logits, int rows, const SamplingParams& params,
                                int* tokens, float* confidence, cudaStream_t stream) {
  check_sampling_args("SortThenCpuSampler::sample", logits, rows, vocab_, params, tokens,
                      confidence);
  if (rows > max_rows_)
    throw std::invalid_argument("ch07 SortThenCpuSampler::sample: rows must be <= max_rows (" +
                                std::to_string(max_rows_) + "), got " + std::to_string(rows));
  if (rows == 0) return;
  Buffers& b = *buffers_;
  const long long count = static_cast<long long>(rows) * vocab_;
  const double t = params.temperature == 0.0f ? 1.0 : params.temperature;

  // The GPU half: sort every row by its logits (the temperature is the CPU half's).
  make_sort_keys<<<grid_for(count), kThreads, 0, stream>>>(logits, b.keys, count);
  WB_CHECK_LAUNCH("make_sort_keys");
  std::size_t temp_bytes = b.sort_temp_bytes;
  WB_CUDA(cub::DeviceSegmentedRadixSort::SortPairsDescending(
      b.sort_temp, temp_bytes, b.keys, b.sorted, b.token_ids, b.sorted_ids,
      static_cast<int>(count), rows, b.row_offsets, b.row_offsets + 1, 0, 32, stream));
  fill_draw_uniforms(b.uniforms, rows, params.seed, params.step, stream);

  // Every sorted row crosses PCIe: 8 bytes per vocabulary entry.
  WB_CUDA(cudaMemcpyAsync(b.host_sorted, b.sorted, count * sizeof(float),
                          cudaMemcpyDeviceToHost, stream));
  WB_CUDA(cudaMemcpyAsync(b.host_ids, b.sorted_ids, count * sizeof(int), cudaMemcpyDeviceToHost,
                          stream));
  WB_CUDA(cudaMemcpyAsync(b.host_uniforms, b.uniforms, rows * sizeof(float),
                          cudaMemcpyDeviceToHost, stream));
  WB_CUDA(cudaStreamSynchronize(stream));  // the CPU half needs the data

  // The CPU half, one row after another.
  for (int r = 0; r < rows; ++r) {
    const std::size_t offset = static_cast<std::size_t>(r) * vocab_;
    const Choice c = sample_sorted_row(b.host_sorted + offset, b.host_ids + offset, vocab_, t,
                                       params, b.host_uniforms[r]);
    tokens[r] = c.token;
    confidence[r] = c.confidence;
  }
}

}  // namespace ch07
