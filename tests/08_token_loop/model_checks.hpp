#pragma once
// Chapter 08's model checks, shared by test_model.cu (the decoder with the student's kernels)
// and test_persistent.cu (the decoder's persistent step): the CPU engine's logits and tokens,
// and the comparisons against them, with the messages that say what went wrong.
//
// TOLERANCE of the logits. Both engines compute in fp32 and differ only in the order of their
// sums (the GPU matvec's tree reductions vs the CPU's sequential dot products; rsqrtf vs
// 1/sqrtf; the softmax's exp): each costs ~1e-7 relative per operation, which grows through the
// layers and the positions to ~1e-5 of the logits' scale. A real mistake (a wrong RoPE angle, a
// stale or missing cache row, the wrong KV head, a frozen position) moves logits by O(0.1..1)
// of that scale. The bound, |gpu - cpu| <= 2e-3 * max(1, max |cpu logit|) per position, sits
// two orders of magnitude above the noise and two below the mistakes.
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <memory>
#include <optional>
#include <stdexcept>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "gpu_decoder.hpp"
#include "sampler.cuh"
#include "token_loop.cuh"
#include "wb/api_counter.hpp"
#include "wb/buffer.hpp"
#include "wb/check.hpp"
#include "wb/kernel_coverage.hpp"  // quick(): under compute-sanitizer
#include "wb/model/checkpoint.hpp"
#include "wb/model/data.hpp"
#include "wb/model/generate.hpp"
#include "wb/model/matmul.hpp"
#include "wb/model/synthetic.hpp"
#include "wb/model/tokenizer.hpp"
#include "wb/model/transformer.hpp"
#include "wb/random.hpp"
#include "wb/testing.hpp"

namespace ch08::model_checks {

using wb::model::Model;
using wb::model::Tokenizer;

inline constexpr double kRelTol = 2e-3;  // of max(1, max |cpu logit|): see TOLERANCE above
inline const ch07::SamplingParams kGreedy{0.0f, 0, 1.0f, 0, 0};

// Under compute-sanitizer (wb::coverage::quick()) every kernel launch costs milliseconds, and
// a decoding step is about ten launches per layer: the tests keep their checks but decode
// this many steps at most. What the tools judge (every access of every kernel, at positions
// 0, 1 and more) needs a few steps, not hundreds.
inline constexpr int kQuickSteps = 12;
inline int steps_for(int full) { return wb::coverage::quick() ? std::min(full, kQuickSteps) : full; }

inline double logit_scale(const std::vector<float>& ref) {
  double m = 1.0;
  for (float v : ref) m = std::max(m, double(std::fabs(v)));
  return m;
}

// The CPU engine's logits for a teacher-forced sequence, one row per position.
// Two threads: the test runs beside other GPU tests under `ctest -j`, and OpenMP's threads
// spin while they wait; several processes of all-core teams slowed each other down a
// hundredfold on the first GPU run. The models here are small.
inline constexpr int kCpuThreads = 2;

inline std::vector<std::vector<float>> cpu_logits(const Model& m, const std::vector<int>& tokens) {
  wb::model::CpuMatmul cpu(kCpuThreads);
  wb::model::Transformer t(m, cpu, kCpuThreads);
  std::vector<std::vector<float>> rows;
  for (int pos = 0; pos < int(tokens.size()); ++pos) {
    const auto l = t.forward(tokens[std::size_t(pos)], pos);
    rows.emplace_back(l.begin(), l.end());
  }
  return rows;
}

// Teacher forcing on the GPU in `mode`; every position compared with the CPU's logits.
// `configure`, if given, is applied to the decoder after set_mode (the persistent step's block count).
inline void check_teacher_forced(const Model& m, const std::vector<int>& tokens, ch08::StepMode mode,
                                 const std::string& what,
                                 const std::function<void(ch08::GpuDecoder&)>& configure = {}) {
  const auto ref = cpu_logits(m, tokens);
  ch08::GpuModel gm(m);
  ch08::GpuDecoder dec(gm);
  dec.set_mode(mode);
  if (configure) configure(dec);
  double worst = 0;
  for (int pos = 0; pos < int(tokens.size()); ++pos) {
    REQUIRE(dec.position() == pos);
    const std::vector<float> got = dec.forward_logits(tokens[std::size_t(pos)]);
    const std::vector<float>& want = ref[std::size_t(pos)];
    const double scale = logit_scale(want);  // once per position: it reads every logit
    const double tol = kRelTol * scale;
    for (std::size_t i = 0; i < want.size(); ++i) {
      const double err = std::fabs(double(got[i]) - double(want[i]));
      worst = std::max(worst, err / scale);
      if (!(err <= tol)) {  // NaN fails too
        FAIL("ch08 model, " << what << " (" << ch08::to_string(mode) << "): logits at position " << pos
             << " (token " << tokens[std::size_t(pos)] << ") differ from the CPU engine's: logit " << i
             << " is " << got[i] << ", the CPU says " << want[i] << " (|diff| " << err << " > tolerance "
             << tol << " = 2e-3 of the logits' scale). Positions 0.." << pos - 1 << " matched.\n"
             << (pos == 0 ? "hint: position 0 already differs: RoPE at angle 0 is the identity and attention "
                            "over one position returns v; check the append (the caches' row *pos) and "
                            "attention's softmax over t = 0..*pos"
                          : "hint: position 0 matched, a later one does not: check RoPE's angle (pos * "
                            "10000^(-(i % head_size)/head_size)), that every kernel reads *pos (not a value "
                            "frozen at capture), grouped-query heads (g = h / (n_heads/n_kv_heads)) and that "
                            "attention covers t = 0..*pos inclusive"));
      }
    }
  }
  wb::testing::record_metric(std::string("max_rel_logit_error_") + ch08::to_string(mode), worst);
}

inline std::vector<int> random_sequence(const Model& m, int n, const std::string& label) {
  std::mt19937_64 rng = wb::rng_for(label);
  std::uniform_int_distribution<int> pick(2, m.config().vocab_size - 1);
  std::vector<int> t{Tokenizer::kBos};
  while (int(t.size()) < n) t.push_back(pick(rng));
  return t;
}

inline std::optional<wb::model::TinyStoriesFiles> stories_or_skip() {
  std::string why;
  auto files = wb::model::tiny_stories_from_env(&why);
  if (!files) wb::testing::mark_skipped(why);
  return files;
}

// The prompts the greedy tests decode from (one under compute-sanitizer: quick()).
inline std::vector<std::string> greedy_prompts() {
  if (wb::coverage::quick()) return {"Once upon a time"};
  return {"", "Once upon a time", "Lily and Ben went to the park", "The little dog"};
}

// True where CUPTI can count API calls; otherwise marks the test case skipped and says why.
inline bool cupti_or_skip() {
  if (wb::ApiCounter::available()) return true;
  wb::testing::mark_skipped("CUPTI is not available: " + wb::ApiCounter::unavailable_reason());
  return false;
}

// What CUPTI counts during one generate() from BOS, after one that is not counted (in Graph
// mode it captures the step), and the forward passes it ran.
struct CountedDecode {
  wb::ApiCounts counts;
  int passes = 0;
};

inline CountedDecode count_decode(ch08::GpuDecoder& dec, int steps, const ch07::SamplingParams& sampling) {
  const std::vector<int> bos{Tokenizer::kBos};
  (void)dec.generate(bos, steps, sampling);
  wb::ApiCounter counter;
  (void)dec.generate(bos, steps, sampling);
  return {counter.counts(), dec.forward_passes()};
}

// The tokens the CPU engine produces (wb::model::generate: BOS first, prompt forced).
inline std::vector<int> cpu_greedy(const Model& m, const Tokenizer& tok, const std::string& prompt, int steps) {
  wb::model::CpuMatmul cpu(kCpuThreads);
  wb::model::Transformer t(m, cpu, kCpuThreads);
  wb::model::GenerateOptions o;
  o.prompt = prompt;
  o.steps = steps;
  return wb::model::generate(t, tok, o).tokens;
}

// Where GPU and CPU greedy tokens first differ: fine only if the CPU's own top two logits at
// that position are within the tolerance (a near tie that float noise may flip).
inline void compare_greedy(const Model& m, const std::vector<int>& cpu, const std::vector<int>& gpu,
                    const std::string& what) {
  const std::size_t n = std::min(cpu.size(), gpu.size());
  std::size_t i = 0;
  while (i < n && cpu[i] == gpu[i]) ++i;
  if (i == n && cpu.size() == gpu.size()) return;
  if (i == n) {
    // One stopped (BOS) where the other went on: the position after the shorter one.
    if (i == 0) FAIL("ch08 model, " << what << ": no tokens");
  }
  // Token i was chosen by the forward pass at position i - 1 over tokens[0..i-1].
  const std::vector<int> prefix(cpu.begin(), cpu.begin() + std::ptrdiff_t(i));
  const auto rows = cpu_logits(m, prefix);
  std::vector<float> last = rows.back();
  std::vector<float> sorted = last;
  std::partial_sort(sorted.begin(), sorted.begin() + 2, sorted.end(), std::greater<float>());
  const double gap = double(sorted[0]) - double(sorted[1]);
  const double noise = kRelTol * logit_scale(last);
  const std::string got = i < gpu.size() ? std::to_string(gpu[i]) : std::string("the end (BOS)");
  const std::string want = i < cpu.size() ? std::to_string(cpu[i]) : std::string("the end (BOS)");
  if (gap <= noise) {
    wb::testing::record_note(what + ": GPU and CPU first differ at token " + std::to_string(i) + " (GPU " + got +
                             ", CPU " + want + ") where the CPU's top two logits are " + std::to_string(gap) +
                             " apart, within float noise (" + std::to_string(noise) + "): accepted");
    return;
  }
  FAIL("ch08 model, " << what << ": greedy decoding differs from the CPU engine at token " << i << " (GPU "
                      << got << ", CPU " << want << "; the " << i << " tokens before agree). The CPU's top two "
                      << "logits there are " << gap << " apart, far more than float noise (" << noise
                      << "): the GPU's logits are wrong, not tied.\nhint: the teacher-forced logits test "
                         "says where the logits go wrong first");
}

// A natural teacher-forced sequence of `length` tokens for stories260K: the CPU's own greedy
// story, continued past its end (BOS) with random tokens drawn for `label`.
inline std::vector<int> stories_teacher_sequence(const Model& m, const Tokenizer& tok, int length,
                                                 const std::string& label) {
  std::vector<int> tokens = cpu_greedy(m, tok, "Once upon a time", length);
  const std::vector<int> more = random_sequence(m, length, label);
  for (std::size_t i = 1; int(tokens.size()) < length; ++i) tokens.push_back(more[i]);
  tokens.resize(std::size_t(length));
  return tokens;
}

inline std::string decode_text(const Tokenizer& tok, const std::vector<int>& tokens) {
  std::string text;
  for (std::size_t i = 1; i < tokens.size(); ++i) {
    const std::string piece = tok.decode(tokens[i - 1], tokens[i]);
    if (!wb::model::is_unprintable_piece(piece)) text += piece;
  }
  return text;
}

// A dim-64 model, 4 query heads over 2 KV heads, of the other sizes given: small enough for the
// CPU engine at every position, shaped for one corner at a time.
inline Model dim64_model(int hidden_dim, int n_layers, int vocab_size, int seq_len) {
  wb::model::SyntheticSpec s = wb::model::synthetic_small();
  s.dim = 64;
  s.hidden_dim = hidden_dim;
  s.n_layers = n_layers;
  s.n_heads = 4;
  s.n_kv_heads = 2;
  s.vocab_size = vocab_size;
  s.seq_len = seq_len;
  return wb::model::make_synthetic(s);
}

// A small model with a short context (for the position check).
inline Model short_context_model() { return dim64_model(96, 2, 256, 16); }

// CUPTI's count of one call of the fused sampler (what a token adds to the step's launches).
inline std::uint64_t sampler_launches(int vocab, const ch07::SamplingParams& p) {
  wb::DeviceBuffer<float> logits{static_cast<std::size_t>(vocab)};
  std::vector<float> host(static_cast<std::size_t>(vocab));
  std::mt19937_64 rng = wb::rng_for("ch08/model/sampler_launches");
  std::normal_distribution<float> normal(0.0f, 2.0f);
  for (float& x : host) x = normal(rng);
  logits.upload(host);
  wb::DeviceBuffer<int> token(1);
  wb::DeviceBuffer<float> conf(1);
  wb::DeviceBuffer<unsigned char> ws(ch07::fused_sampler_workspace_bytes(1, vocab));
  cudaStream_t s;
  WB_CUDA(cudaStreamCreate(&s));
  ch07::sample_fused(logits.data(), 1, vocab, p, token.data(), conf.data(), ws.data(), ws.bytes(), s);
  WB_CUDA(cudaStreamSynchronize(s));
  wb::ApiCounter counter;
  ch07::sample_fused(logits.data(), 1, vocab, p, token.data(), conf.data(), ws.data(), ws.bytes(), s);
  const std::uint64_t n = counter.counts().launches;
  WB_CUDA(cudaStreamSynchronize(s));
  WB_CUDA(cudaStreamDestroy(s));
  return n;
}

}  // namespace ch08::model_checks
