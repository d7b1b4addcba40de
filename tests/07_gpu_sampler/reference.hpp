#pragma once
// Chapter 07's CPU reference: the contract of sampler.cuh computed in double precision, one
// row at a time. sample_cpu (step 1, given) is built on it, and the tests use it for the
// exact answers: the argmax, each token's probability, the kept set and its distribution.
#include <cstddef>
#include <vector>

#include "sampler.cuh"

namespace ch07::reference {

// Rule 5: a row with a NaN or +inf logit, or with no finite logit, has no distribution.
bool is_bad_row(const float* row, int vocab);

// softmax(row / T) in double: p[i] = exp(z_i - z_max) / sum_j exp(z_j - z_max), z = row / T.
// T is the temperature the contract uses for the confidence: 1 when params.temperature == 0.
double confidence_temperature(const SamplingParams& params);
std::vector<double> probabilities(const float* row, int vocab, double temperature);

// The contract's order (rule 2): logit descending, ties by lower index. Returns the first
// `count` token ids of that order (count is clamped to vocab).
std::vector<int> ranked_tokens(const float* row, int vocab, int count);

// What rule 2 keeps of a good row, in rank order, with each token's probability under the
// WHOLE row's softmax (rule 3's confidence); `mass` is their sum. For greedy params (rule 1)
// it is the argmax alone.
struct KeptSet {
  std::vector<int> tokens;
  std::vector<double> p;
  double mass = 0;
  int top_k_kept = 0;          // K: how many top_k kept before top_p cut (min(k, vocab))
  double top_k_mass = 0;       // their mass: what top_p is relative to
};
KeptSet kept_set(const float* row, int vocab, const SamplingParams& params);

// The one token the CPU sampler draws for uniform u in (0, 1]: it walks the kept tokens in
// rank order and returns the first whose running mass reaches u * mass (the last kept token
// of nonzero probability if rounding leaves the walk short).
int draw_from(const KeptSet& kept, float u);

}  // namespace ch07::reference
