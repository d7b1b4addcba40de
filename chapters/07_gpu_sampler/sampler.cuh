#pragma once
// Chapter 07: the GPU token sampler. The API the tests call; do not edit.
//
// A sampler turns a row of logits (one per vocabulary entry) into one token id. This chapter
// samples `rows` rows at once (a diffusion decoder samples a block of 16 masked positions at
// every denoising step; a batch of sequences does the same), and returns, with each token,
// its confidence.
//
// THE CONTRACT (every implementation; the tests check each point)
//
//   Input   logits: `rows` x `vocab` row-major float32 (device memory for the GPU steps).
//   Params  temperature T (0 = greedy), top_k (0 = off), top_p (1 = off), seed, step.
//   Output  token[r] in [0, vocab) and confidence[r] for every row r.
//
//   1. Greedy (T == 0) and top_k == 1 return the argmax of the row, the LOWEST index on ties,
//      and never draw a random number.
//   2. Otherwise the distribution is p = softmax(logits / T) over the whole row. Order the
//      tokens by p descending, ties by lower index (T > 0 keeps the order of the logits, so
//      this is the logits' own order: exact, whatever rounding logits / T suffers). top_k
//      keeps the first k (k >= vocab keeps all). top_p then keeps the SHORTEST prefix of
//      what is left whose mass, renormalized over what top_k kept, reaches top_p: the first
//      n with p_1 + ... + p_n >= top_p * (p_1 + ... + p_K); it never keeps fewer than one
//      token. The token is drawn with probability proportional to p among the kept tokens,
//      nothing else (a kept token of probability 0, a masked one, is never drawn).
//   3. confidence[r] = p(token) under softmax(logits / T) over the WHOLE row (not the kept
//      set), with T = 1 when the temperature is 0 (top_k == 1 with T > 0 uses that T). It is
//      what a diffusion decoder ranks positions by.
//   4. Randomness: the one uniform number that row r's draw uses is draw_uniform(seed, step,
//      r) below: cuRAND's counter-based Philox generator, keyed by the seed, with the step
//      and the row as its counter. The same (seed, step, logits, params) gives the same
//      tokens on every run and every launch configuration; another step or another row gets
//      an independent number. No host RNG, no state kept between calls. How the number
//      picks a kept token (walking them in probability order, or in index order) is each
//      implementation's choice: only the distribution is specified, so two correct
//      implementations may return different tokens for the same number.
//   5. Bad rows have defined results, never a token outside [0, vocab):
//        - a row with a NaN logit:           token = -1, confidence = NaN (the row is garbage:
//                                            say so loudly rather than pick something);
//        - a row whose logits are all -inf:  token = -1, confidence = NaN (no distribution);
//        - -inf entries otherwise are masked tokens: probability exactly 0, never drawn;
//        - +inf logits are treated like NaN (the softmax is undefined).
//   6. Bad arguments throw std::invalid_argument naming the function and the argument
//      (check_sampling_args below): rows < 0, vocab < 1, T < 0 or not finite, top_k < 0,
//      top_p outside (0, 1] or NaN, null pointers when rows > 0; for the step 2 and step 3
//      objects also rows > max_rows (and, for step 3, a kept set it cannot hold: see there);
//      for sample_fused also workspace_bytes < fused_sampler_workspace_bytes(rows, vocab).
//   7. The GPU sampler (step 4) enqueues everything on `stream` and returns without waiting:
//      no synchronization, no allocation, no host<->device copies; its scratch memory is the
//      caller's workspace. It can be captured in a CUDA graph.
#include <cuda_runtime.h>
#ifdef __CUDACC__
#include <curand_kernel.h>
#endif

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>

namespace ch07 {

struct SamplingParams {
  float temperature = 1.0f;  // 0 = greedy; otherwise the logits are divided by it
  int top_k = 0;             // 0 = off; otherwise keep the k most probable tokens
  float top_p = 1.0f;        // 1 = off; otherwise in (0, 1): keep the nucleus of this mass
  std::uint64_t seed = 0;    // which random stream
  std::uint64_t step = 0;    // which call in that stream (a decoding step, a denoising step)
};

// Whether a call draws at all (rule 1): greedy and top_k == 1 are the argmax. (Host and
// device: a kernel that gets the params by value can ask too.)
__host__ __device__ inline bool is_greedy(const SamplingParams& p) {
  return p.temperature == 0.0f || p.top_k == 1;
}

// Rule 4: the uniform number in (0, 1] that row `row` of call `step` draws with. Philox's
// 128-bit counter is (step, 4 * row) through curand_init's subsequence and offset, which for
// Philox only set the counter (no skip-ahead work), so this costs one Philox round trip.
#ifdef __CUDACC__
__device__ inline float draw_uniform(std::uint64_t seed, std::uint64_t step, int row) {
  curandStatePhilox4_32_10_t state;
  curand_init(seed, /*subsequence=*/step, /*offset=*/4ull * static_cast<unsigned>(row), &state);
  return curand_uniform(&state);  // (0, 1]
}
#endif

// Fills uniforms[r] = draw_uniform(seed, step, r) for r < rows, on `stream` (the steps that
// draw on the CPU fetch their numbers from here, so every step draws the same numbers).
void fill_draw_uniforms(float* uniforms, int rows, std::uint64_t seed, std::uint64_t step,
                        cudaStream_t stream);

// ---------------------------------------------------------------------------------------
// Step 1 (given, not graded): the CPU sampler. logits, tokens and confidence are HOST
// arrays; uniforms[r] is row r's number (from fill_draw_uniforms). `threads` > 1 splits the
// rows over that many threads.
void sample_cpu(const float* logits, int rows, int vocab, const SamplingParams& params,
                const float* uniforms, int* tokens, float* confidence, int threads = 1);

// ---------------------------------------------------------------------------------------
// Step 2: the first GPU port of the report. Temperature on the GPU, every row sorted by
// probability with CUB's segmented sort (keys descending, values = token ids), the sorted
// rows copied to the host, then softmax, filtering and the draw on the CPU. Correct, and
// slower than the CPU sampler: measure why.
//
// The device and pinned host buffers it needs for up to `max_rows` x `vocab` are allocated
// once, in the constructor (chapter 02's lesson), and freed by the destructor.
// sample(): logits on the device; tokens and confidence on the HOST, written when it
// returns (it synchronizes `stream`: its CPU half needs the data).
class SortThenCpuSampler {
 public:
  SortThenCpuSampler(int max_rows, int vocab);
  ~SortThenCpuSampler();
  SortThenCpuSampler(const SortThenCpuSampler&) = delete;
  SortThenCpuSampler& operator=(const SortThenCpuSampler&) = delete;

  void sample(const float* logits, int rows, const SamplingParams& params, int* tokens,
              float* confidence, cudaStream_t stream);

  // Bytes this object copies device-to-host per row (the tests count the copies with CUPTI
// and compare).
  std::size_t d2h_bytes_per_row() const;

 private:
  struct Buffers;
  Buffers* buffers_ = nullptr;
  int max_rows_ = 0;
  int vocab_ = 0;
};

// ---------------------------------------------------------------------------------------
// Step 3: softmax on the GPU, the top candidates of each row selected on the GPU and only
// they copied back (at most kMaxCandidates per row), the filtering and the draw on the CPU.
// The report's 5.5x.
//
// It is exact, not an approximation: the candidates are the first kMaxCandidates of the
// sorted order (with their probabilities under the whole row's softmax), so they hold the
// whole kept set whenever top_k is between 1 and kMaxCandidates, or top_k is off (0 or
// >= vocab) and the top_p nucleus fits in them. sample() throws std::invalid_argument, saying
// which, when it cannot be exact: top_k between kMaxCandidates and vocab (renormalizing
// top_p needs the mass of all k), top_k off with top_p == 1 on a row longer than
// kMaxCandidates (every token is kept), or a nucleus longer than kMaxCandidates (found
// after the copy: the rows are checked before any token is written). A greedy call
// (is_greedy: the argmax, whatever top_k and top_p say) is never refused: the first candidate
// is the argmax. Step 4 has no limit.
class TopCandidatesSampler {
 public:
  static constexpr int kMaxCandidates = 1024;

  TopCandidatesSampler(int max_rows, int vocab);
  ~TopCandidatesSampler();
  TopCandidatesSampler(const TopCandidatesSampler&) = delete;
  TopCandidatesSampler& operator=(const TopCandidatesSampler&) = delete;

  void sample(const float* logits, int rows, const SamplingParams& params, int* tokens,
              float* confidence, cudaStream_t stream);

  std::size_t d2h_bytes_per_row() const;

 private:
  struct Buffers;
  Buffers* buffers_ = nullptr;
  int max_rows_ = 0;
  int vocab_ = 0;
};

// ---------------------------------------------------------------------------------------
// Step 4: the fused GPU sampler. No sort: temperature, the softmax statistics, the top-k /
// top-p cut found without sorting, the draw with draw_uniform, and the confidence, all on the
// device; only tokens[r] and confidence[r] (device pointers) leave the kernels.
//
// The caller owns the scratch memory: fused_sampler_workspace_bytes(rows, vocab) bytes at
// `workspace` (256-byte aligned, contents on entry are garbage). Rule 7 applies.
std::size_t fused_sampler_workspace_bytes(int rows, int vocab);

void sample_fused(const float* logits, int rows, int vocab, const SamplingParams& params,
                  int* tokens, float* confidence, void* workspace, std::size_t workspace_bytes,
                  cudaStream_t stream);

// ---------------------------------------------------------------------------------------
// Rule 6. Every entry point calls this first; rows == 0 is nothing to do.
inline void check_sampling_args(const char* function, const void* logits, int rows, int vocab,
                                const SamplingParams& p, const void* tokens,
                                const void* confidence) {
  const std::string where = std::string("ch07 ") + function + ": ";
  if (rows < 0)
    throw std::invalid_argument(where + "rows must be >= 0, got " + std::to_string(rows));
  if (vocab < 1)
    throw std::invalid_argument(where + "vocab must be >= 1, got " + std::to_string(vocab));
  if (!(p.temperature >= 0.0f) || !std::isfinite(p.temperature))
    throw std::invalid_argument(where + "temperature must be finite and >= 0 (0 = greedy), got " +
                                std::to_string(p.temperature));
  if (p.top_k < 0)
    throw std::invalid_argument(where + "top_k must be >= 0 (0 = off), got " +
                                std::to_string(p.top_k));
  if (!(p.top_p > 0.0f && p.top_p <= 1.0f))
    throw std::invalid_argument(where + "top_p must be in (0, 1] (1 = off), got " +
                                std::to_string(p.top_p));
  if (rows > 0 && (logits == nullptr || tokens == nullptr || confidence == nullptr))
    throw std::invalid_argument(where + "logits, tokens and confidence must not be null");
}

}  // namespace ch07
