// Step 3: softmax on the GPU, the top candidates of each row selected on the GPU, and only
// they cross PCIe. The report's 5.5x.
//
// Step 2 copied 8 bytes per vocabulary entry and summed 151936 exponentials per row on one
// CPU thread. Neither is needed: the row's max and sum are a GPU reduction (chapter 04), and
// a token that can be kept is among the first kMaxCandidates of the sorted order whenever
// top_k <= kMaxCandidates or the nucleus is that short. So the GPU computes the softmax's
// statistics, sorts, and writes the first kMaxCandidates of each row with their
// probabilities; 8 KiB per row come back instead of 1.2 MB; the CPU only filters and draws.
//
// The sort is still here, and it is now most of the time: step 4 removes it.
#include <cub/block/block_reduce.cuh>
#include <cub/device/device_segmented_radix_sort.cuh>
#include <cuda_runtime.h>

#include <algorithm>
#include <cfloat>
#include <climits>
#include <cmath>
#include <limits>
#include <stdexcept>
#include <string>

#include "sampler.cuh"
#include "wb/check.hpp"

namespace ch07 {

namespace {

constexpr int kThreads = 256;
constexpr int kCandidates = TopCandidatesSampler::kMaxCandidates;

struct MaxOp {
  __device__ float operator()(float a, float b) const { return fmaxf(a, b); }
};

// The softmax's statistics of each row (one block per row): the max of the logits and
// sum exp((x - max) * inv_t). The difference is taken first: x * inv_t could overflow for a
// finite x, and (x - max) * inv_t is 0 for the max whatever inv_t (capped at FLT_MAX by the
// caller; 0 * inf would be NaN). A bad row (rule 5: a NaN or +inf logit, or no finite one)
// gets NaN for both, so every probability computed from them is NaN and the CPU sees the row
// is bad.
__global__ void row_softmax_stats(const float* logits, int vocab, float inv_t, float* row_max,
                                  float* row_sum) {
  using Reduce = cub::BlockReduce<float, kThreads>;
  using ReduceInt = cub::BlockReduce<int, kThreads>;
  __shared__ typename Reduce::TempStorage temp;
  __shared__ typename ReduceInt::TempStorage temp_int;
  __shared__ float shared_max;
  const float* row = logits + static_cast<std::size_t>(blockIdx.x) * vocab;

  float local_max = -INFINITY;
  int bad = 0;
  for (int i = threadIdx.x; i < vocab; i += kThreads) {
    const float x = row[i];
    bad |= isnan(x) || x == INFINITY;  // fmaxf would quietly skip a NaN
    local_max = fmaxf(local_max, x);
  }
  const float block_max = Reduce(temp).Reduce(local_max, MaxOp{});
  const int block_bad = ReduceInt(temp_int).Sum(bad);
  if (threadIdx.x == 0) shared_max = (block_bad > 0 || block_max == -INFINITY) ? NAN : block_max;
  __syncthreads();
  const float m = shared_max;

  float local_sum = 0.0f;
  for (int i = threadIdx.x; i < vocab; i += kThreads) local_sum += expf((row[i] - m) * inv_t);
  __syncthreads();  // temp is reused
  const float block_sum = Reduce(temp).Sum(local_sum);
  if (threadIdx.x == 0) {
    row_max[blockIdx.x] = m;
    row_sum[blockIdx.x] = isnan(m) ? NAN : block_sum;
  }
}

// The sort's keys: as in step 2, the logits themselves (rule 2's order, and no overflow);
// -0.0 becomes +0.0, so ties stay in index order.
__global__ void make_sort_keys(const float* logits, float* keys, long long count) {
  for (long long i = blockIdx.x * static_cast<long long>(blockDim.x) + threadIdx.x; i < count;
       i += static_cast<long long>(gridDim.x) * blockDim.x) {
    const float x = logits[i];
    keys[i] = x == 0.0f ? 0.0f : x;
  }
}

__global__ void fill_token_ids(int* ids, long long count, int vocab) {
  for (long long i = blockIdx.x * static_cast<long long>(blockDim.x) + threadIdx.x; i < count;
       i += static_cast<long long>(gridDim.x) * blockDim.x)
    ids[i] = static_cast<int>(i % vocab);
}

__global__ void fill_row_offsets(int* offsets, int rows, int vocab) {
  const int r = blockIdx.x * blockDim.x + threadIdx.x;
  if (r <= rows) offsets[r] = r * vocab;
}

// The selection: the first `count` entries of each sorted row, with their probabilities
// exp((x - max) * inv_t) / sum under the whole row's softmax (the same terms as
// row_softmax_stats). Grid: (rows, candidate blocks): rows on x, whose 2^31 - 1 blocks hold
// any batch, where y stops at 65535.
__global__ void gather_candidates(const float* sorted, const int* sorted_ids, int vocab,
                                  float inv_t, const float* row_max, const float* row_sum,
                                  int count, float* candidate_p, int* candidate_ids) {
  const int r = blockIdx.x;
  const int i = blockIdx.y * blockDim.x + threadIdx.x;
  if (i >= count) return;
  const std::size_t from = static_cast<std::size_t>(r) * vocab + i;
  const std::size_t to = static_cast<std::size_t>(r) * count + i;
  candidate_p[to] = expf((sorted[from] - row_max[r]) * inv_t) / row_sum[r];  // NaN for a bad row
  candidate_ids[to] = sorted_ids[from];
}

int grid_for(long long count) {
  return static_cast<int>(std::min<long long>((count + kThreads - 1) / kThreads, 4096));
}

int effective_top_k(const SamplingParams& params, int vocab) {
  return (params.top_k == 0 || params.top_k >= vocab) ? vocab : params.top_k;
}

// How many of the first n candidates (rank order) reach `target` mass; -1 if they all fall
// short.
int nucleus_length(const float* p, int n, double target) {
  double cumulative = 0;
  for (int i = 0; i < n; ++i) {
    cumulative += p[i];
    if (cumulative >= target) return i + 1;
  }
  return -1;
}

struct Choice {
  int token;
  float confidence;
};

// The CPU half, one row: `count` candidates in rank order with their whole-row probabilities.
// The caller has checked that the kept set lies among them.
Choice sample_candidates(const float* p, const int* ids, int count, int vocab,
                         const SamplingParams& params, float u) {
  if (std::isnan(p[0])) return {-1, std::numeric_limits<float>::quiet_NaN()};  // rule 5
  if (is_greedy(params)) return {ids[0], p[0]};                                // rule 1

  // Rule 2. When top_k is off the kept set is the whole row, whose mass is 1 (the softmax
  // was normalized on the GPU); otherwise it is the first k candidates.
  const int k = effective_top_k(params, vocab);
  const int ranked = std::min(k, count);
  double top_k_mass = 1.0;
  if (k <= count) {
    top_k_mass = 0;
    for (int i = 0; i < k; ++i) top_k_mass += p[i];
  }
  int kept = ranked;
  if (params.top_p < 1.0f) {
    const int n = nucleus_length(p, ranked, params.top_p * top_k_mass);
    kept = n > 0 ? n : ranked;  // short only by rounding: keep the whole prefix
  }

  // The draw, in rank order: the first kept candidate whose running mass reaches u times the
  // kept mass (never a candidate past the kept ones, never one of probability 0).
  double kept_mass = 0;
  for (int i = 0; i < kept; ++i) kept_mass += p[i];
  const double target = static_cast<double>(u) * kept_mass;
  double cumulative = 0;
  int last = 0;
  for (int i = 0; i < kept && p[i] > 0; ++i) {
    last = i;
    cumulative += p[i];
    if (cumulative >= target) break;
  }
  return {ids[last], p[last]};
}

}  // namespace

struct TopCandidatesSampler::Buffers {
  float* keys = nullptr;          // max_rows x vocab: the logits (-0.0 as +0.0), the sort's keys
  float* sorted = nullptr;
  int* token_ids = nullptr;       // max_rows x vocab: 0..vocab-1 in every row
  int* sorted_ids = nullptr;
  int* row_offsets = nullptr;     // max_rows + 1
  float* row_max = nullptr;       // max_rows: the softmax's statistics
  float* row_sum = nullptr;
  float* candidate_p = nullptr;   // max_rows x candidates: what comes back
  int* candidate_ids = nullptr;
  float* uniforms = nullptr;
  void* sort_temp = nullptr;
  std::size_t sort_temp_bytes = 0;
  float* host_p = nullptr;        // pinned
  int* host_ids = nullptr;
  float* host_uniforms = nullptr;
};

TopCandidatesSampler::TopCandidatesSampler(int max_rows, int vocab)
    : buffers_(new Buffers), max_rows_(max_rows), vocab_(vocab) {
  if (max_rows < 1 || vocab < 1)
    throw std::invalid_argument("ch07 TopCandidatesSampler: max_rows and vocab must be >= 1, got " +
                                std::to_string(max_rows) + " and " + std::to_string(vocab));
  const long long count = static_cast<long long>(max_rows) * vocab;
  if (count > INT_MAX)
    throw std::invalid_argument("ch07 TopCandidatesSampler: max_rows x vocab must fit in an int");
  const int candidates = std::min(vocab, kCandidates);
  const std::size_t candidate_count = static_cast<std::size_t>(max_rows) * candidates;
  Buffers& b = *buffers_;
  WB_CUDA(cudaMalloc(&b.keys, count * sizeof(float)));
  WB_CUDA(cudaMalloc(&b.sorted, count * sizeof(float)));
  WB_CUDA(cudaMalloc(&b.token_ids, count * sizeof(int)));
  WB_CUDA(cudaMalloc(&b.sorted_ids, count * sizeof(int)));
  WB_CUDA(cudaMalloc(&b.row_offsets, (max_rows + 1) * sizeof(int)));
  WB_CUDA(cudaMalloc(&b.row_max, max_rows * sizeof(float)));
  WB_CUDA(cudaMalloc(&b.row_sum, max_rows * sizeof(float)));
  WB_CUDA(cudaMalloc(&b.candidate_p, candidate_count * sizeof(float)));
  WB_CUDA(cudaMalloc(&b.candidate_ids, candidate_count * sizeof(int)));
  WB_CUDA(cudaMalloc(&b.uniforms, max_rows * sizeof(float)));
  WB_CUDA(cudaMallocHost(&b.host_p, candidate_count * sizeof(float)));
  WB_CUDA(cudaMallocHost(&b.host_ids, candidate_count * sizeof(int)));
  WB_CUDA(cudaMallocHost(&b.host_uniforms, max_rows * sizeof(float)));
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

TopCandidatesSampler::~TopCandidatesSampler() {
  if (!buffers_) return;
  Buffers& b = *buffers_;
  for (void* p : {static_cast<void*>(b.keys), static_cast<void*>(b.sorted),
                  static_cast<void*>(b.token_ids), static_cast<void*>(b.sorted_ids),
                  static_cast<void*>(b.row_offsets), static_cast<void*>(b.row_max),
                  static_cast<void*>(b.row_sum), static_cast<void*>(b.candidate_p),
                  static_cast<void*>(b.candidate_ids), static_cast<void*>(b.uniforms), b.sort_temp})
    cudaFree(p);
  cudaFreeHost(b.host_p);
  cudaFreeHost(b.host_ids);
  cudaFreeHost(b.host_uniforms);
  delete buffers_;
}

std::size_t TopCandidatesSampler::d2h_bytes_per_row() const {
  return static_cast<std::size_t>(std::min(vocab_, kCandidates)) * (sizeof(float) + sizeof(int)) +
         sizeof(float);
}

void TopCandidatesSampler::sample(const float* logits, int rows, const SamplingParams& params,
                                  int* tokens, float* confidence, cudaStream_t stream) {
  const char* where = "ch07 TopCandidatesSampler::sample: ";
  check_sampling_args("TopCandidatesSampler::sample", logits, rows, vocab_, params, tokens,
                      confidence);
  if (rows > max_rows_)
    throw std::invalid_argument(std::string(where) + "rows must be <= max_rows (" +
                                std::to_string(max_rows_) + "), got " + std::to_string(rows));
  const int candidates = std::min(vocab_, kCandidates);
  const int k = effective_top_k(params, vocab_);
  if (!is_greedy(params) && k > candidates && k < vocab_)
    throw std::invalid_argument(std::string(where) + "top_k = " + std::to_string(params.top_k) +
                                " is more than the " + std::to_string(kCandidates) +
                                " candidates it keeps (step 4 has no limit)");
  if (!is_greedy(params) && k > candidates && params.top_p >= 1.0f)
    throw std::invalid_argument(std::string(where) + "with top_k and top_p off every one of " +
                                std::to_string(vocab_) + " tokens is kept, more than the " +
                                std::to_string(kCandidates) + " candidates (step 4 has no limit)");
  if (rows == 0) return;
  Buffers& b = *buffers_;
  const long long count = static_cast<long long>(rows) * vocab_;
  // 1 / T, capped at FLT_MAX: for T below 2.9e-39 it is +inf, and (max - max) * inf is NaN.
  const float t = params.temperature == 0.0f ? 1.0f : params.temperature;
  const float inv_t = fminf(1.0f / t, FLT_MAX);

  // The GPU half: the softmax's statistics, the sort, and the candidates' probabilities.
  row_softmax_stats<<<rows, kThreads, 0, stream>>>(logits, vocab_, inv_t, b.row_max, b.row_sum);
  WB_CHECK_LAUNCH("row_softmax_stats");
  make_sort_keys<<<grid_for(count), kThreads, 0, stream>>>(logits, b.keys, count);
  WB_CHECK_LAUNCH("make_sort_keys");
  std::size_t temp_bytes = b.sort_temp_bytes;
  WB_CUDA(cub::DeviceSegmentedRadixSort::SortPairsDescending(
      b.sort_temp, temp_bytes, b.keys, b.sorted, b.token_ids, b.sorted_ids,
      static_cast<int>(count), rows, b.row_offsets, b.row_offsets + 1, 0, 32, stream));
  gather_candidates<<<dim3(rows, (candidates + kThreads - 1) / kThreads), kThreads, 0, stream>>>(
      b.sorted, b.sorted_ids, vocab_, inv_t, b.row_max, b.row_sum, candidates, b.candidate_p,
      b.candidate_ids);
  WB_CHECK_LAUNCH("gather_candidates");
  fill_draw_uniforms(b.uniforms, rows, params.seed, params.step, stream);

  // Only the candidates cross PCIe: 8 bytes each, kMaxCandidates per row at most.
  const std::size_t candidate_count = static_cast<std::size_t>(rows) * candidates;
  WB_CUDA(cudaMemcpyAsync(b.host_p, b.candidate_p, candidate_count * sizeof(float),
                          cudaMemcpyDeviceToHost, stream));
  WB_CUDA(cudaMemcpyAsync(b.host_ids, b.candidate_ids, candidate_count * sizeof(int),
                          cudaMemcpyDeviceToHost, stream));
  WB_CUDA(cudaMemcpyAsync(b.host_uniforms, b.uniforms, rows * sizeof(float),
                          cudaMemcpyDeviceToHost, stream));
  WB_CUDA(cudaStreamSynchronize(stream));

  // Exactness check before any token is written: with top_k off, every good row's nucleus
  // must end among its candidates.
  if (!is_greedy(params) && k > candidates) {
    for (int r = 0; r < rows; ++r) {
      const float* p = b.host_p + static_cast<std::size_t>(r) * candidates;
      if (!std::isnan(p[0]) && nucleus_length(p, candidates, params.top_p) < 0)
        throw std::invalid_argument(
            std::string(where) + "row " + std::to_string(r) + ": the top_p = " +
            std::to_string(params.top_p) + " nucleus is longer than the " +
            std::to_string(kCandidates) + " candidates (step 4 has no limit)");
    }
  }
  for (int r = 0; r < rows; ++r) {
    const std::size_t offset = static_cast<std::size_t>(r) * candidates;
    const Choice c = sample_candidates(b.host_p + offset, b.host_ids + offset, candidates, vocab_,
                                       params, b.host_uniforms[r]);
    tokens[r] = c.token;
    confidence[r] = c.confidence;
  }
}

}  // namespace ch07
