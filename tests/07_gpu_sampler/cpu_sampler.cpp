// Step 1 (given): the CPU sampler, and the reference the tests compute exact answers with.
//
// Everything is the contract of sampler.cuh read literally, in double precision: the
// probabilities of a row, its order (logit descending, ties by lower index), what top_k and
// top_p keep, and a draw that walks the kept tokens. It is written to be obviously right,
// then made fast enough to sample a 151936-wide row in a millisecond or two: it never sorts a
// whole row when the kept set is short (std::nth_element finds the first k in linear time),
// and it splits the rows over threads when asked.
#include <algorithm>
#include <cmath>
#include <limits>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "reference.hpp"
#include "sampler.cuh"

namespace ch07::reference {

bool is_bad_row(const float* row, int vocab) {
  bool any_finite = false;
  for (int i = 0; i < vocab; ++i) {
    const float x = row[i];
    if (std::isnan(x) || x == std::numeric_limits<float>::infinity()) return true;
    any_finite = any_finite || std::isfinite(x);
  }
  return !any_finite;  // all -inf: no distribution
}

double confidence_temperature(const SamplingParams& params) {
  return params.temperature == 0.0f ? 1.0 : static_cast<double>(params.temperature);
}

std::vector<double> probabilities(const float* row, int vocab, double temperature) {
  double max_z = -std::numeric_limits<double>::infinity();
  for (int i = 0; i < vocab; ++i) max_z = std::max(max_z, row[i] / temperature);
  std::vector<double> p(vocab);
  double sum = 0;  // in double: 151936 terms summed in float lose ~5 digits
  for (int i = 0; i < vocab; ++i) {
    p[i] = std::exp(row[i] / temperature - max_z);  // exp(-inf) = 0: a masked token
    sum += p[i];
  }
  for (double& v : p) v /= sum;
  return p;
}

std::vector<int> ranked_tokens(const float* row, int vocab, int count) {
  count = std::clamp(count, 0, vocab);
  std::vector<int> ids(vocab);
  for (int i = 0; i < vocab; ++i) ids[i] = i;
  // Rule 2's order. The logits, not p: T > 0 keeps their order, and they have no rounding.
  const auto before = [row](int a, int b) { return row[a] > row[b] || (row[a] == row[b] && a < b); };
  if (count < vocab) std::nth_element(ids.begin(), ids.begin() + count, ids.end(), before);
  std::sort(ids.begin(), ids.begin() + count, before);
  ids.resize(count);
  return ids;
}

namespace {

// The first n of `ranked` (rank order) whose mass reaches `target` (at least 1); -1 when the
// whole list falls short.
int nucleus_length(const std::vector<int>& ranked, const std::vector<double>& p, double target) {
  double cumulative = 0;
  for (std::size_t n = 0; n < ranked.size(); ++n) {
    cumulative += p[ranked[n]];
    if (cumulative >= target) return static_cast<int>(n) + 1;
  }
  return -1;
}

KeptSet make_kept(const std::vector<int>& tokens, const std::vector<double>& p, int count) {
  KeptSet kept;
  kept.tokens.assign(tokens.begin(), tokens.begin() + count);
  for (int t : kept.tokens) {
    kept.p.push_back(p[t]);
    kept.mass += p[t];
  }
  return kept;
}

}  // namespace

KeptSet kept_set(const float* row, int vocab, const SamplingParams& params) {
  if (is_greedy(params)) {  // rule 1: the argmax, lowest index on ties
    const std::vector<double> p = probabilities(row, vocab, confidence_temperature(params));
    KeptSet kept = make_kept(ranked_tokens(row, vocab, 1), p, 1);
    kept.top_k_kept = 1;
    kept.top_k_mass = kept.mass;
    return kept;
  }
  const std::vector<double> p = probabilities(row, vocab, params.temperature);
  const int k = (params.top_k == 0 || params.top_k >= vocab) ? vocab : params.top_k;

  if (k == vocab && params.top_p >= 1.0f) {
    // Nothing is filtered: every token is kept, in index order (the order of a kept set
    // only changes which token a given u picks, not the distribution; no sort needed).
    std::vector<int> all(vocab);
    for (int i = 0; i < vocab; ++i) all[i] = i;
    KeptSet kept = make_kept(all, p, vocab);
    kept.top_k_kept = vocab;
    kept.top_k_mass = kept.mass;
    return kept;
  }
  if (k < vocab) {
    const std::vector<int> ranked = ranked_tokens(row, vocab, k);
    KeptSet top_k = make_kept(ranked, p, k);
    int n = k;
    if (params.top_p < 1.0f) n = nucleus_length(ranked, p, params.top_p * top_k.mass);
    if (n < 0) n = k;  // rounding: the whole top-k is the nucleus
    KeptSet kept = make_kept(ranked, p, n);
    kept.top_k_kept = k;
    kept.top_k_mass = top_k.mass;
    return kept;
  }
  // top_k off, top_p on: rank a few tokens, and more only when the nucleus is longer.
  double total = 0;
  for (double v : p) total += v;
  const double target = params.top_p * total;
  for (int count = 256;; count = std::min(vocab, count * 4)) {
    const std::vector<int> ranked = ranked_tokens(row, vocab, count);
    int n = nucleus_length(ranked, p, target);
    if (n < 0 && count == vocab) n = vocab;  // rounding: the whole row is the nucleus
    if (n > 0) {
      KeptSet kept = make_kept(ranked, p, n);
      kept.top_k_kept = vocab;
      kept.top_k_mass = total;
      return kept;
    }
  }
}

int draw_from(const KeptSet& kept, float u) {
  const double target = static_cast<double>(u) * kept.mass;
  double cumulative = 0;
  int last_possible = -1;
  for (std::size_t i = 0; i < kept.tokens.size(); ++i) {
    if (kept.p[i] > 0) last_possible = static_cast<int>(i);
    cumulative += kept.p[i];
    if (kept.p[i] > 0 && cumulative >= target) return kept.tokens[i];
  }
  // u * mass rounded above the running sum: the last token that can be drawn, never one
  // past the kept set.
  return kept.tokens[last_possible];
}

}  // namespace ch07::reference

namespace ch07 {

namespace {

void sample_rows(const float* logits, int first, int last, int vocab, const SamplingParams& params,
                 const float* uniforms, int* tokens, float* confidence) {
  for (int r = first; r < last; ++r) {
    const float* row = logits + static_cast<std::size_t>(r) * vocab;
    if (reference::is_bad_row(row, vocab)) {  // rule 5
      tokens[r] = -1;
      confidence[r] = std::numeric_limits<float>::quiet_NaN();
      continue;
    }
    const reference::KeptSet kept = reference::kept_set(row, vocab, params);
    const int token = is_greedy(params) ? kept.tokens[0] : reference::draw_from(kept, uniforms[r]);
    // Rule 3: the kept set carries each token's probability under the whole row.
    const auto at = std::find(kept.tokens.begin(), kept.tokens.end(), token);
    tokens[r] = token;
    confidence[r] = static_cast<float>(kept.p[at - kept.tokens.begin()]);
  }
}

}  // namespace

void sample_cpu(const float* logits, int rows, int vocab, const SamplingParams& params,
                const float* uniforms, int* tokens, float* confidence, int threads) {
  check_sampling_args("sample_cpu", logits, rows, vocab, params, tokens, confidence);
  if (threads < 1)
    throw std::invalid_argument("ch07 sample_cpu: threads must be >= 1, got " +
                                std::to_string(threads));
  if (rows > 0 && uniforms == nullptr && !is_greedy(params))
    throw std::invalid_argument("ch07 sample_cpu: uniforms must not be null when sampling");
  threads = std::min(threads, rows);
  if (threads <= 1) {
    sample_rows(logits, 0, rows, vocab, params, uniforms, tokens, confidence);
    return;
  }
  // Contiguous blocks of rows, one per thread: rows are independent (rule 4 gives each its
  // own number), so the result does not depend on the split.
  std::vector<std::thread> workers;
  for (int t = 0; t < threads; ++t) {
    const int first = static_cast<int>(static_cast<long long>(rows) * t / threads);
    const int last = static_cast<int>(static_cast<long long>(rows) * (t + 1) / threads);
    workers.emplace_back(sample_rows, logits, first, last, vocab, std::cref(params), uniforms,
                         tokens, confidence);
  }
  for (std::thread& w : workers) w.join();
}

}  // namespace ch07
