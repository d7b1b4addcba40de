// Chapter 07 correctness: every point of sampler.cuh's contract, checked on every step it
// applies to (step 1 the CPU sampler, step 2 SortThenCpuSampler, step 3
// TopCandidatesSampler, step 4 sample_fused), each step in its own test cases so that a step
// not written yet reads "to do" without hiding the others.
//
// Exact where the contract is exact: greedy and top_k == 1 against the double-precision
// argmax (lowest index on planted ties), confidences against the double softmax. Statistical
// where it is about a distribution: over up to 10^5 draws (rows x steps: every (step, row)
// has its own Philox number; see draws_for), no token outside the exact kept set, and a chi-square
// goodness-of-fit against the exact renormalized distribution. The statistical tests use
// FIXED logits and seeds (not WB_SEED), so the suite is deterministic: a correct sampler
// either passes them or fails them every time, and its chance of failing one at the
// significance used (1e-7 per test) is negligible.
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
#include <map>
#include <memory>
#include <optional>
#include <random>
#include <sstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "../lib/hashed_fill.cuh"
#include "../lib/kernel_coverage_test.hpp"
#include "../lib/owned_stream.hpp"
#include "reference.hpp"
#include "runner.cuh"
#include "sampler.cuh"
#include "wb/api_counter.hpp"
#include "wb/buffer.hpp"
#include "wb/check.hpp"
#include "wb/kernel_coverage.hpp"  // quick(): under compute-sanitizer
#include "wb/not_implemented.hpp"
#include "wb/random.hpp"
#include "wb/testing.hpp"
#include "wb/timing.hpp"  // launch_spin_kernel

namespace {

using ch07::SamplingParams;
using ch07::testing::Draws;
using ch07::testing::Runner;
using ch07::testing::Step;
using ch07::testing::step_name;
namespace ref = ch07::reference;

constexpr float kInf = std::numeric_limits<float>::infinity();
// Confidences: fp32 exp and sums against the double reference, on logits of magnitude < 40.
constexpr double kConfidenceRtol = 1e-4;
constexpr double kConfidenceAtol = 1e-12;
// Chi-square significance per test. A correct sampler fails a given test with probability
// 1e-7; the suite has fewer than 100 such tests.
constexpr double kAlpha = 1e-7;
// The band at the top_p boundary: a token whose inclusion changes when top_p moves by this
// relative amount may go either way (fp32 sums on the GPU).
constexpr float kTopPBand = 1e-4f;

std::string shape_of(int rows, int vocab) {
  return std::to_string(rows) + "x" + std::to_string(vocab);
}

std::string params_of(const SamplingParams& p) {
  std::ostringstream s;
  s << "T = " << p.temperature << ", top_k = " << p.top_k << ", top_p = " << p.top_p
    << ", seed = " << p.seed << ", step = " << p.step;
  return s.str();
}

// ---------------------------------------------------------------------------------------
// Rows of logits.

std::vector<float> normal_row(int vocab, float sigma, std::mt19937_64& rng) {
  std::normal_distribution<float> normal(0.0f, sigma);
  std::vector<float> row(vocab);
  for (float& x : row) x = normal(rng);
  return row;
}

// `count` tokens at random positions get the row's max: ties the argmax must break by index.
void plant_max_ties(std::vector<float>& row, int count, std::mt19937_64& rng) {
  const float top = *std::max_element(row.begin(), row.end());
  std::uniform_int_distribution<int> pick(0, static_cast<int>(row.size()) - 1);
  for (int i = 0; i < count; ++i) row[pick(rng)] = top;
}

// The tokens ranked k - count / 2 .. k + count / 2 - 1 (0-based, rule 2's order) all get the
// logit of the first of them: `count` equal logits straddling rank k, at the row's own random
// positions (so, in a wide row, in different parts of it). top_k = k keeps the count / 2 of
// them with the lowest indices; ordering equal logits any other way keeps others.
void plant_ties_across_rank(std::vector<float>& row, int k, int count) {
  const int vocab = static_cast<int>(row.size());
  const std::vector<int> ranked = ref::ranked_tokens(row.data(), vocab, k + count / 2);
  const float tied = row[ranked[k - count / 2]];
  for (int r = k - count / 2; r < k + count / 2; ++r) row[ranked[r]] = tied;
}

// `head` random tokens raised by `boost`: a peaked row with a long tail.
void boost_head(std::vector<float>& row, int head, float boost, std::mt19937_64& rng) {
  std::uniform_int_distribution<int> pick(0, static_cast<int>(row.size()) - 1);
  for (int i = 0; i < head; ++i) row[pick(rng)] += boost;
}

// `rows` peaked rows one after another (row-major): each normal_row(vocab, sigma), then
// boost_head(head, boost), drawn from `rng` in that order.
std::vector<float> peaked_rows(int rows, int vocab, float sigma, int head, float boost, std::mt19937_64& rng) {
  std::vector<float> logits;
  logits.reserve(static_cast<std::size_t>(rows) * vocab);
  for (int r = 0; r < rows; ++r) {
    std::vector<float> row = normal_row(vocab, sigma, rng);
    boost_head(row, head, boost, rng);
    logits.insert(logits.end(), row.begin(), row.end());
  }
  return logits;
}

void mask_some(std::vector<float>& row, double fraction, std::mt19937_64& rng) {
  std::bernoulli_distribution masked(fraction);
  const int keep = static_cast<int>(std::max_element(row.begin(), row.end()) - row.begin());
  for (int i = 0; i < static_cast<int>(row.size()); ++i)
    if (i != keep && masked(rng)) row[i] = -kInf;
}

std::vector<float> repeat_rows(const std::vector<float>& row, int rows) {
  std::vector<float> all;
  all.reserve(row.size() * rows);
  for (int r = 0; r < rows; ++r) all.insert(all.end(), row.begin(), row.end());
  return all;
}

// The top_p that makes the nucleus exactly `n` tokens of what top_k keeps, in the middle of
// its interval (so no rounding can move the boundary: the band never matters for it).
float top_p_for_nucleus(const std::vector<float>& row, SamplingParams params, int n) {
  params.top_p = 1.0f;
  const ref::KeptSet all = ref::kept_set(row.data(), static_cast<int>(row.size()), params);
  std::vector<int> ranked = ref::ranked_tokens(row.data(), static_cast<int>(row.size()), n);
  const std::vector<double> p =
      ref::probabilities(row.data(), static_cast<int>(row.size()), params.temperature);
  double before = 0;
  for (int i = 0; i + 1 < n; ++i) before += p[ranked[i]];
  const double through = before + p[ranked[n - 1]];
  return static_cast<float>((before + through) / 2 / all.top_k_mass);
}

// ---------------------------------------------------------------------------------------
// What the contract says about one row.

// Softmax statistics of a row at one temperature, in double: p(i) = exp(x_i / T - max) / sum.
struct RowSoftmax {
  double t = 1, max = 0, sum = 1;
  double p(const float* row, int i) const { return std::exp(row[i] / t - max) / sum; }
};

RowSoftmax softmax_of(const float* row, int vocab, double t) {
  RowSoftmax s;
  s.t = t;
  s.max = -std::numeric_limits<double>::infinity();
  for (int i = 0; i < vocab; ++i) s.max = std::max(s.max, row[i] / t);
  s.sum = 0;
  for (int i = 0; i < vocab; ++i) s.sum += std::exp(row[i] / t - s.max);
  return s;
}

struct Expected {
  bool bad = false;
  RowSoftmax at_t;             // the confidence's softmax (T, or 1 when greedy)
  RowSoftmax at_one;           // the same row at T = 1 (to recognize an ignored temperature)
  ref::KeptSet kept;           // the exact kept set
  std::vector<char> allowed;   // kept, widened by the top_p band
};

Expected expected_for(const float* row, int vocab, const SamplingParams& params) {
  Expected e;
  e.bad = ref::is_bad_row(row, vocab);
  if (e.bad) return e;
  e.at_t = softmax_of(row, vocab, ref::confidence_temperature(params));
  e.at_one = e.at_t.t == 1.0 ? e.at_t : softmax_of(row, vocab, 1.0);
  e.kept = ref::kept_set(row, vocab, params);
  e.allowed.assign(vocab, 0);
  for (int t : e.kept.tokens) e.allowed[t] = 1;
  if (!ch07::is_greedy(params) && params.top_p < 1.0f) {
    SamplingParams loose = params;
    loose.top_p = std::min(1.0f, params.top_p * (1.0f + kTopPBand));
    for (int t : ref::kept_set(row, vocab, loose).tokens) e.allowed[t] = 1;
  }
  for (int t = 0; t < vocab; ++t)
    if (row[t] == -kInf) e.allowed[t] = 0;  // kept perhaps, but never drawn (probability 0)
  return e;
}

// expected_for of every row of a batch, the rows spread over the CPU's threads.
std::vector<Expected> expected_rows(const std::vector<float>& logits, int rows, int vocab,
                                    const SamplingParams& params) {
  std::vector<Expected> expected(rows);
  const int threads = std::min(rows, ch07::testing::cpu_threads());
  std::vector<std::thread> workers;
  for (int t = 0; t < threads; ++t)
    workers.emplace_back([&, t] {
      for (int r = t; r < rows; r += threads)
        expected[r] = expected_for(logits.data() + static_cast<std::size_t>(r) * vocab, vocab, params);
    });
  for (std::thread& w : workers) w.join();
  return expected;
}

bool close_to(double got, double want, double rtol) {
  return std::abs(got - want) <= kConfidenceAtol + rtol * std::abs(want);
}

// A sampled token's confidence that matches softmax(logits) at T = 1 and not at T: the
// temperature was ignored (it shows in the confidence, whatever it did to the draw).
bool temperature_ignored(const Expected& e, const float* row, int token, float confidence) {
  return e.at_t.t != 1.0 && close_to(confidence, e.at_one.p(row, token), 1e-3) &&
         !close_to(confidence, e.at_t.p(row, token), 1e-3);
}

const char* kTemperatureIgnored =
    "the temperature was ignored: the confidence is the token's probability under "
    "softmax(logits) at T = 1.\nhint: apply T everywhere (T = 0 means greedy): every probability is "
    "exp((x - max) / T) / sum, in the draw and in the confidence.";

// The 0-based rank of `token` in rule 2's order.
int rank_of(const float* row, int vocab, int token) {
  int rank = 0;
  for (int i = 0; i < vocab; ++i)
    rank += row[i] > row[token] || (row[i] == row[token] && i < token);
  return rank;
}

// A token outside the kept set: which known mistake explains it.
std::string diagnose_outside(const float* row, int vocab, const SamplingParams& params,
                             const ref::KeptSet& kept, int token) {
  if (token == ch07::testing::kPoisonToken)
    return "the token was never written (it still holds the poison the test filled it with)."
           "\nhint: write tokens[r] and confidence[r] for every row r < rows.";
  if (token < 0 || token >= vocab)
    return "rule 5: a token is always in [0, vocab) for a good row, got " + std::to_string(token) +
           ".\nhint: -1 is only for bad rows (a NaN or +inf logit, or all -inf); a draw that "
           "runs off the end of its candidates must stop at the last one.";
  if (row[token] == -kInf)
    return "rule 5: drew token " + std::to_string(token) +
           ", a masked token (logit -inf, probability exactly 0).\nhint: a masked token may "
           "be in the kept set but can never be drawn: the draw must pass over probability "
           "0 (compare cumulative >= target only on a token with p > 0).";
  const int rank = rank_of(row, vocab, token);
  const int k = (params.top_k == 0 || params.top_k >= vocab) ? vocab : params.top_k;
  if (!kept.tokens.empty() && row[token] == row[kept.tokens.back()])
    return "rule 2 (ties): drew token " + std::to_string(token) + ", ranked " +
           std::to_string(rank + 1) + ": its logit equals that of token " +
           std::to_string(kept.tokens.back()) + ", the last one kept (ranked " +
           std::to_string(kept.tokens.size()) + "), and equal logits are ordered by the LOWER "
           "index, so the kept set ends before this one" +
           (rank == k ? " (or top_k kept one too many: rank < k, not rank <= k)" : "") +
           ".\nhint: order by (logit, index) pairs: the larger logit first, on equal logits "
           "the smaller index (a sort key of (key << 32 | ~index), sorted descending, does "
           "both; a stable sort of the logits alone does too).";
  if (rank == k && !ch07::is_greedy(params))
    return "rule 2 (top_k): drew token " + std::to_string(token) + ", ranked " +
           std::to_string(rank + 1) + ": top_k = " + std::to_string(k) +
           " keeps exactly k tokens, this is one too many (an off-by-one at the top-k "
           "boundary).\nhint: ranks are 0-based: keep rank < k, not rank <= k.";
  if (rank > k)
    return "rule 2 (top_k): drew token " + std::to_string(token) + ", ranked " +
           std::to_string(rank + 1) + ", but top_k = " + std::to_string(k) +
           ".\nhint: the kept set is the first k of the order by logit, descending.";
  // Inside top_k, outside the nucleus: was top_p measured against the whole row?
  SamplingParams whole = params;
  whole.top_k = 0;
  const ref::KeptSet nucleus_of_row = ref::kept_set(row, vocab, whole);
  if (rank < static_cast<int>(nucleus_of_row.tokens.size()) && k < vocab)
    return "rule 2 (top_p after top_k): drew token " + std::to_string(token) + ", ranked " +
           std::to_string(rank + 1) +
           ", which only a nucleus measured against the WHOLE row's mass keeps: top_p must be "
           "renormalized over what top_k kept (top_p not renormalized after top_k, or top_p "
           "applied before top_k).\nhint: the target is top_p * (p_1 + ... + p_k), not top_p.";
  return "rule 2 (top_p): drew token " + std::to_string(token) + ", ranked " +
         std::to_string(rank + 1) + ", outside the top_p = " + std::to_string(params.top_p) +
         " nucleus.\nhint: the nucleus is the SHORTEST prefix whose mass reaches top_p times "
         "the top-k mass; the token that crosses the target is the last one kept.";
}

// Rule 3's confidence for a token drawn from a good row; empty when right.
std::string check_confidence(const Expected& e, const float* row, int token, float confidence) {
  const double want = e.at_t.p(row, token);
  if (close_to(confidence, want, kConfidenceRtol)) return "";
  std::ostringstream s;
  s << "rule 3: confidence of token " << token << " is " << confidence << ", expected "
    << want << " (its probability under softmax(logits / T) over the whole row)";
  if (temperature_ignored(e, row, token, confidence)) {
    s << "; " << kTemperatureIgnored;
    return s.str();
  }
  if (e.kept.mass > 0 && e.kept.mass < 0.999 && close_to(confidence, want / e.kept.mass, 1e-3))
    s << ". It matches the probability renormalized over the kept set: the confidence is "
         "over the WHOLE row, not the kept set.";
  s << "\nhint: confidence = exp((x_token - max) / T) / sum exp((x - max) / T) "
       "(T = 1 when greedy): the same numbers the softmax computed, before any filtering.";
  return s.str();
}

// Every row of one call: bad rows (rule 5), membership (rules 1, 2), confidence (rule 3).
// Returns the first problem, empty when all is well.
std::string check_draws(const std::vector<float>& logits, int vocab, const SamplingParams& params,
                        const std::vector<Expected>& expected, const Draws& d) {
  for (std::size_t r = 0; r < d.tokens.size(); ++r) {
    const Expected& e = expected[expected.size() == 1 ? 0 : r];
    const float* row = logits.data() + (expected.size() == 1 ? 0 : r * vocab);
    const int token = d.tokens[r];
    const std::string where = "row " + std::to_string(r) + ": ";
    if (e.bad) {
      if (token != -1 || !std::isnan(d.confidence[r]))
        return where + "rule 5: a row with a NaN or +inf logit, or only -inf logits, gives "
                       "token -1 and confidence NaN; got token " + std::to_string(token) +
               ", confidence " + std::to_string(d.confidence[r]) +
               ".\nhint: check the row before sampling it (isnan, x == +inf, max == -inf); "
               "fmaxf skips a NaN silently.";
      continue;
    }
    if (token < 0 || token >= vocab || !e.allowed[token]) {
      if (ch07::is_greedy(params) && token >= 0 && token < vocab && token != e.kept.tokens[0] &&
          row[token] == row[e.kept.tokens[0]])
        return where + "rule 1: greedy returns the argmax with the LOWEST index on ties: got " +
               std::to_string(token) + ", expected " + std::to_string(e.kept.tokens[0]) +
               " (same logit " + std::to_string(row[token]) +
               ").\nhint: when two values tie, keep the smaller index (in the reduction too: "
               "compare (value, index) pairs).";
      if (ch07::is_greedy(params) && token >= 0 && token < vocab)
        return where + "rule 1: greedy (T = 0 or top_k = 1) returns the argmax: got " +
               std::to_string(token) + " (logit " + std::to_string(row[token]) +
               "), expected " + std::to_string(e.kept.tokens[0]) + " (logit " +
               std::to_string(row[e.kept.tokens[0]]) + ").\nhint: no draw at all when greedy.";
      if (token >= 0 && token < vocab && temperature_ignored(e, row, token, d.confidence[r]))
        return where + "drew token " + std::to_string(token) + ", outside the kept set, and " +
               kTemperatureIgnored;
      return where + diagnose_outside(row, vocab, params, e.kept, token);
    }
    const std::string c = check_confidence(e, row, token, d.confidence[r]);
    if (!c.empty()) return where + c;
  }
  return "";
}

std::string failure_head(Step step, const std::string& what, int rows, int vocab,
                         const SamplingParams& params) {
  return std::string("ch07 ") + step_name(step) + ", " + what + ", " + shape_of(rows, vocab) +
         ", " + params_of(params) + ", test seed " + std::to_string(wb::base_seed()) + ": ";
}

void check_integrity(Runner& runner, Step step, const std::string& what) {
  const std::string broken = runner.integrity();
  if (!broken.empty())
    FAIL_CHECK("ch07 " << step_name(step) << ", " << what << ", "
                       << shape_of(runner.rows(), runner.vocab()) << ": " << broken
                       << "\nhint: the logits are const: keep logits / T in your own buffer; "
                          "write tokens[r] and confidence[r] only for r < rows, and nothing "
                          "past the end of the workspace.");
}

// ---------------------------------------------------------------------------------------
// Greedy: exact.

struct Shape {
  int rows, vocab;
};

// Under compute-sanitizer (wb::coverage::quick()), about how many logits one call or one
// distribution may push through a sampler (see draws_for and quick_skips): 2^20, and 2^17
// under racecheck, which follows every shared-memory access (on the H200, with 14 runs side
// by side, the fused sampler's cases at 2^20 logits still ran 6 to 15 minutes there).
long long quick_logits() { return wb::coverage::racecheck() ? 1 << 17 : 1 << 20; }

// What racecheck costs grows with the blocks launched, not only with the logits: on the H200
// the fused sampler's cases of many small rows (256 rows x 64, 80 calls) ran past 15 minutes
// there too. So under racecheck the batches of many rows keep at most this many, and the
// repeated calls are few; the checks stay (racecheck needs the accesses, not the statistics:
// the known-wrong versions are caught by the full run, not by the tools).
constexpr int kRacecheckRows = 32;
int rows_under_racecheck(int rows) {
  return wb::coverage::racecheck() ? std::min(rows, kRacecheckRows) : rows;
}

// Under compute-sanitizer, the batches past 2 x quick_logits() are left out (16 and 256 rows
// of 151936; under racecheck 5 x 151937 too): no path depends on the row count (1 x 151936
// and 5 x 151937 run the same code).
bool quick_skips(const Shape& s) {
  return wb::coverage::quick() && static_cast<long long>(s.rows) * s.vocab > 2 * quick_logits();
}

// The logits of a batch, drawn once per process and label (256 x 151936 normal floats take
// most of a second to draw; every step reuses them).
const std::vector<float>& batch_logits(const std::string& label, Shape s, float sigma,
                                       int planted_ties, int head, float boost) {
  static std::map<std::string, std::vector<float>> cache;
  auto it = cache.find(label);
  if (it != cache.end()) return it->second;
  std::mt19937_64 rng = wb::rng_for(label);
  std::vector<float> logits;
  logits.reserve(static_cast<std::size_t>(s.rows) * s.vocab);
  for (int r = 0; r < s.rows; ++r) {
    std::vector<float> row = normal_row(s.vocab, sigma, rng);
    if (planted_ties > 0) plant_max_ties(row, r % planted_ties, rng);
    if (head > 0) boost_head(row, head, boost, rng);
    logits.insert(logits.end(), row.begin(), row.end());
  }
  return cache[label] = std::move(logits);
}

// 2 x 262147: a row too long for the fused reference to keep in shared memory (its slices
// are re-read from device memory, one entry at a time where a slice does not start on a
// 16-byte boundary), as a 256000-token vocabulary is.
const std::vector<Shape> kShapes = {{1, 1},     {1, 2},      {3, 5},       {2, 31},
                                    {7, 1000},  {17, 1025},  {64, 32000},  {2, 4097},  {3, 10001},
                                    {1, 151936}, {16, 151936}, {5, 151937}, {256, 151936},
                                    {2, 262147}};

void greedy_on_every_shape(Step step) {
  for (const Shape s : kShapes) {
    if (quick_skips(s)) continue;
    // 0, 1 or 2 extra copies of each row's max: ties the argmax breaks by the lowest index.
    const std::vector<float>& logits =
        batch_logits("ch07/greedy/" + shape_of(s.rows, s.vocab), s, 3.0f, 3, 0, 0.0f);
    std::vector<Expected> expected;
    Runner runner(step, logits, s.rows, s.vocab);
    for (const SamplingParams params :
         {SamplingParams{0.0f, 0, 1.0f, 1, 0}, SamplingParams{0.7f, 1, 0.5f, 2, 3}}) {
      expected = expected_rows(logits, s.rows, s.vocab, params);
      const Draws d = runner.run(params);
      const std::string failure = check_draws(logits, s.vocab, params, expected, d);
      if (!failure.empty()) {
        FAIL_CHECK(failure_head(step, "greedy", s.rows, s.vocab, params) << failure);
        return;
      }
    }
    check_integrity(runner, step, "greedy");
  }
}

// Greedy with each row's max in one of its first or last columns. A kernel that splits a row
// (into 16-byte packs, into shares per thread, block or cluster rank) leaves its leftovers at
// the two ends: a share rounded down (n / parts) gives the last n % parts entries to no one,
// and the entries before the first 16-byte boundary or after the last whole pack need a loop
// of their own. Rows of 50257 (GPT-2's vocabulary: odd, so the rows of a batch start at every
// alignment), whose widths the shapes above do not cover.
void greedy_at_the_ends_of_a_row(Step step) {
  // Under compute-sanitizer fewer rows (about quick_logits() of them; see quick_skips).
  const int vocab = 50257, rows = wb::coverage::racecheck() ? 4 : wb::coverage::quick() ? 16 : 64, ends = rows / 2;
  std::mt19937_64 rng = wb::rng_for("ch07/greedy-at-the-ends");
  std::vector<float> logits;
  logits.reserve(static_cast<std::size_t>(rows) * vocab);
  for (int r = 0; r < rows; ++r) {
    std::vector<float> row = normal_row(vocab, 3.0f, rng);
    const int at = r < ends ? r : vocab - 1 - (r - ends);  // column 0, 1, ... and vocab - 1, vocab - 2, ...
    row[at] = *std::max_element(row.begin(), row.end()) + 1.0f;
    logits.insert(logits.end(), row.begin(), row.end());
  }
  Runner runner(step, logits, rows, vocab);
  const SamplingParams params{0.0f, 0, 1.0f, 1, 0};
  const Draws d = runner.run(params);
  const std::string failure = check_draws(logits, vocab, params, expected_rows(logits, rows, vocab, params), d);
  if (!failure.empty()) {
    FAIL_CHECK(failure_head(step, "greedy, the max in one of the first or last " + std::to_string(ends) + " columns",
                            rows, vocab, params)
               << failure
               << "\nhint: every entry of a row must be read. Split n entries over parts as "
                  "[n * i / parts, n * (i + 1) / parts), or give the last part the remainder; "
                  "read the entries before the first 16-byte boundary and after the last whole "
                  "float4 one by one.");
    return;
  }
  check_integrity(runner, step, "greedy at the ends of a row");
}

// Rule 1's lowest index when the equal maxima are close together. greedy_on_every_shape plants
// its ties at random columns, which seldom fall among the entries ONE thread reads (its 16-byte
// pack, or the packs it loads in one go, a block's width apart): an argmax that keeps the last
// of equal values inside a thread's own loop (x >= best instead of x > best) while its
// reductions across threads take the lower index passes that case in most runs. Here every
// row's maximum is planted twice, a distance of 1 to 4096 columns apart (16 distances, each at
// 4 offsets from a 16-byte boundary): one pack, neighbouring packs, a warp's and a block's
// stride of packs. Rows of 8192 (every row aligned) and of 50257 (every alignment).
void greedy_ties_close_together(Step step) {
  constexpr int kDistances[] = {1, 2, 3, 4, 5, 8, 16, 31, 32, 64, 128, 256, 512, 1024, 2048, 4096};
  constexpr int kCount = sizeof(kDistances) / sizeof(kDistances[0]);
  for (const int vocab : {8192, 50257}) {
    // Every distance at 4 offsets; under compute-sanitizer fewer rows (as greedy_at_the_ends_of_a_row).
    const int rows = wb::coverage::racecheck() ? 4 : wb::coverage::quick() ? kCount : 4 * kCount;
    std::mt19937_64 rng = wb::rng_for("ch07/greedy-ties-close/" + std::to_string(vocab));
    std::vector<float> logits;
    logits.reserve(static_cast<std::size_t>(rows) * vocab);
    std::vector<int> lower(rows), upper(rows);
    for (int r = 0; r < rows; ++r) {
      std::vector<float> row = normal_row(vocab, 3.0f, rng);
      // The lower column: an offset 0 to 3 from a multiple of 4 (of the row's own start), within
      // the first 1600 columns (one block's share of the row in the common splits).
      lower[r] = 4 * ((97 * r) % 400) + (r / kCount) % 4;
      upper[r] = lower[r] + kDistances[r % kCount];
      const float top = *std::max_element(row.begin(), row.end()) + 1.0f;
      row[lower[r]] = row[upper[r]] = top;
      logits.insert(logits.end(), row.begin(), row.end());
    }
    Runner runner(step, logits, rows, vocab);
    for (const SamplingParams params : {SamplingParams{0.0f, 0, 1.0f, 1, 0}, SamplingParams{0.7f, 1, 0.5f, 2, 3}}) {
      const Draws d = runner.run(params);
      const std::string failure =
          check_draws(logits, vocab, params, expected_rows(logits, rows, vocab, params), d);
      if (failure.empty()) continue;
      std::string pair;
      for (int r = 0; r < rows && pair.empty(); ++r)
        if (d.tokens[r] != lower[r])
          pair = "; row " + std::to_string(r) + " at columns " + std::to_string(lower[r]) + " and " +
                 std::to_string(upper[r]) + " (" + std::to_string(upper[r] - lower[r]) +
                 " apart), so its argmax is " + std::to_string(lower[r]);
      FAIL_CHECK(failure_head(step, "greedy, two equal maxima close together", rows, vocab, params)
                 << "every row holds its maximum twice, 1 to 4096 columns apart" << pair << ". " << failure
                 << "\nTies this close are read by ONE thread (one float4, or the packs it loads in one "
                    "go): the comparison in the thread's own loop must keep the first of equal values "
                    "(x > best, columns in increasing order), as the reductions across threads do.");
      return;
    }
    check_integrity(runner, step, "greedy, two equal maxima close together");
  }
}

// Sampling on every shape: a few calls each, every token in its row's kept set.
void sampling_on_every_shape(Step step) {
  for (const Shape s : kShapes) {
    if (quick_skips(s)) continue;
    // A head of 20 likely tokens: step 3's nucleus fits in its candidates.
    const std::vector<float>& logits =
        batch_logits("ch07/sampling/" + shape_of(s.rows, s.vocab), s, 2.0f, 0, 20, 6.0f);
    Runner runner(step, logits, s.rows, s.vocab);
    const SamplingParams params{0.8f, 50, 0.9f, 7, 0};
    const std::vector<Expected> expected = expected_rows(logits, s.rows, s.vocab, params);
    const std::uint64_t calls = wb::coverage::quick() ? 1 : 3;
    for (std::uint64_t call = 0; call < calls; ++call) {
      SamplingParams p = params;
      p.step = call;
      const std::string failure = check_draws(logits, s.vocab, p, expected, runner.run(p));
      if (!failure.empty()) {
        FAIL_CHECK(failure_head(step, "sampling", s.rows, s.vocab, p) << failure);
        return;
      }
    }
    check_integrity(runner, step, "sampling");
  }
}

// ---------------------------------------------------------------------------------------
// Distributions: many draws of one row (copied into every row of the batch).

// Upper tail of the chi-square distribution: Q(df / 2, x / 2), the regularized upper
// incomplete gamma function (series below a + 1, continued fraction above).
double chi_square_p_value(double x, int df) {
  const double a = df / 2.0, z = x / 2.0;
  if (z <= 0) return 1.0;
  const double log_front = -z + a * std::log(z) - std::lgamma(a);
  if (z < a + 1) {
    double term = 1.0 / a, sum = term;
    for (int n = 1; n < 100000 && term > sum * 1e-16; ++n) {
      term *= z / (a + n);
      sum += term;
    }
    return std::max(0.0, 1.0 - sum * std::exp(log_front));
  }
  const double tiny = 1e-300;
  double b = z + 1 - a, c = 1 / tiny, d = 1 / b, h = d;
  for (int i = 1; i < 100000; ++i) {
    const double an = -i * (i - a);
    b += 2;
    d = an * d + b;
    if (std::abs(d) < tiny) d = tiny;
    c = b + an / c;
    if (std::abs(c) < tiny) c = tiny;
    d = 1 / d;
    const double delta = d * c;
    h *= delta;
    if (std::abs(delta - 1) < 1e-16) break;
  }
  return std::exp(log_front) * h;
}

struct Fit {
  double statistic = 0, p_value = 1;
  int cells = 0;
  std::string worst;  // the cells furthest from expectation
};

struct Cell {
  double expected = 0;
  long long observed = 0;
  std::string name;
};

// Chi-square of observed counts against expected ones, cell by cell in the order given. Cells
// expected below 5 draws are pooled (in rank order, so the tail forms one cell).
Fit chi_square_of(const std::vector<Cell>& given) {
  std::vector<Cell> cells;
  Cell pool{0, 0, "the pooled tail"};
  for (const Cell& c : given) {
    if (c.expected >= 5) {
      cells.push_back(c);
    } else {
      pool.expected += c.expected;
      pool.observed += c.observed;
    }
  }
  if (pool.expected >= 5 || cells.empty()) cells.push_back(pool);
  else if (pool.expected > 0 || pool.observed > 0) {
    cells.back().expected += pool.expected;
    cells.back().observed += pool.observed;
    cells.back().name += " + the pooled tail";
  }
  Fit fit;
  fit.cells = static_cast<int>(cells.size());
  std::vector<std::pair<double, std::string>> terms;
  for (const Cell& c : cells) {
    const double term = (c.observed - c.expected) * (c.observed - c.expected) / c.expected;
    fit.statistic += term;
    std::ostringstream s;
    s << c.name << ": observed " << c.observed << ", expected " << c.expected;
    terms.push_back({term, s.str()});
  }
  fit.p_value = fit.cells > 1 ? chi_square_p_value(fit.statistic, fit.cells - 1) : 1.0;
  std::sort(terms.rbegin(), terms.rend());
  for (std::size_t i = 0; i < std::min<std::size_t>(3, terms.size()); ++i)
    fit.worst += (i ? "; " : "") + terms[i].second;
  return fit;
}

// Chi-square of observed counts against N * q (q over the kept tokens, renormalized), one cell
// per token.
Fit chi_square(const std::map<int, long long>& counts, const ref::KeptSet& kept, long long n) {
  std::vector<Cell> cells;
  cells.reserve(kept.tokens.size());
  for (std::size_t i = 0; i < kept.tokens.size(); ++i) {
    const double e = n * kept.p[i] / kept.mass;
    const auto it = counts.find(kept.tokens[i]);
    const long long o = it == counts.end() ? 0 : it->second;
    cells.push_back({e, o, e >= 5 ? "token " + std::to_string(kept.tokens[i]) + " (rank " +
                                        std::to_string(i + 1) + ")"
                                  : std::string()});
  }
  return chi_square_of(cells);
}

// The same test with coarser cells: the kept tokens grouped by logit value (rule 2 gives equal
// logits equal probability), the largest logit first. On a row of thousands of tokens that
// share a few logit values each token alone gets a dozen draws, too few to show a bias of a
// few percent; the groups get thousands. Returns false (and no fit) when no two kept tokens
// of nonzero probability share a logit: the groups would be the tokens.
bool chi_square_by_logit(const std::map<int, long long>& counts, const ref::KeptSet& kept,
                         const float* row, long long n, Fit* fit) {
  std::map<float, Cell> groups;  // -0.0 and +0.0 are one logit: they compare equal
  std::map<float, long long> members;
  int possible = 0;
  for (std::size_t i = 0; i < kept.tokens.size(); ++i) {
    if (kept.p[i] <= 0) continue;  // masked: drawn never, expected never
    ++possible;
    const float x = row[kept.tokens[i]];
    const auto it = counts.find(kept.tokens[i]);
    groups[x].expected += n * kept.p[i] / kept.mass;
    groups[x].observed += it == counts.end() ? 0 : it->second;
    ++members[x];
  }
  if (static_cast<int>(groups.size()) == possible) return false;
  std::vector<Cell> cells;
  for (auto it = groups.rbegin(); it != groups.rend(); ++it) {
    std::ostringstream name;
    name << "the " << members[it->first] << " token(s) of logit " << it->first;
    cells.push_back({it->second.expected, it->second.observed, name.str()});
  }
  *fit = chi_square_of(cells);
  return true;
}

struct DistributionCase {
  std::string name;
  std::vector<float> row;
  SamplingParams params;
  // A kept set step 3 cannot hold (top_k > kMaxCandidates, or a longer nucleus): it throws
  // there (bad_arguments checks that), so only steps 1, 2 and 4 sample it.
  bool beyond_candidates = false;
  std::string note;  // what the row is built to catch, added to a failure
  // Sampled only when every case before it passed: a sampler that failed one of them may
  // never return on this row (a radix select by count, looking for a k-th entry that does
  // not exist, can narrow an empty range forever).
  bool only_after_passes = false;
};

// How many draws each step gets: 10^5 where a draw is cheap (steps 3 and 4; the GPU does the
// row-wide work, and the chapter's known-wrong versions are step 3's); fewer for the steps
// whose CPU half touches every logit of every draw (steps 1 and 2), most of all on
// 151936-wide rows. Their chi-square is weaker there but
// still exact (the same significance); the suite must run in seconds, many times over (once
// per known-wrong version). Under compute-sanitizer (wb::coverage::quick()) a case gets at
// most 2560 draws and about quick_logits() in all (8 draws of a 151936-wide row, 1 under
// racecheck):
// the tools slow each logit's shared-memory traffic down a hundredfold or more (racecheck
// ran past 15 minutes with 2560 draws of the wide rows), and what they check (every access
// of every path) needs the calls, not the statistics; the chi-square stays exact, only
// weaker.
long long draws_for_full_run(Step step, int vocab);
long long draws_for(Step step, int vocab) {
  const long long full = draws_for_full_run(step, vocab);
  if (!wb::coverage::quick()) return full;
  const long long at_least = wb::coverage::racecheck() ? 1 : 8;
  const long long at_most = wb::coverage::racecheck() ? kRacecheckRows : 2560;
  return std::min(full, std::clamp(quick_logits() / vocab, at_least, at_most));
}
long long draws_for_full_run(Step step, int vocab) {
  if (vocab < 20000) {
    if (step == Step::SortThenCpu || step == Step::Cpu) return 12800;  // their CPU half is slow
    return 102400;
  }
  switch (step) {
    case Step::Fused: return 102400;
    case Step::TopCandidates: return 20480;
    case Step::Cpu: return 2048;
    default: return 512;
  }
}

// False when the case failed (the failure is reported).
bool check_distribution(Step step, const DistributionCase& c) {
  const int vocab = static_cast<int>(c.row.size());
  const long long n = draws_for(step, vocab);
  const int rows = static_cast<int>(std::min<long long>(256, n));
  const int calls = static_cast<int>(n / rows);
  Runner runner(step, repeat_rows(c.row, rows), rows, vocab);
  const Expected e = expected_for(c.row.data(), vocab, c.params);
  std::map<int, long long> counts;
  const std::vector<float> one_row = c.row;
  for (int call = 0; call < calls; ++call) {
    SamplingParams p = c.params;
    p.step = static_cast<std::uint64_t>(call);
    const Draws d = runner.run(p);
    const std::string failure = check_draws(one_row, vocab, p, {e}, d);
    if (!failure.empty()) {
      FAIL_CHECK(failure_head(step, "distribution of " + c.name, rows, vocab, p) << failure << c.note);
      return false;
    }
    for (int t : d.tokens) ++counts[t];
  }
  bool ok = true;
  const Fit fit = chi_square(counts, e.kept, static_cast<long long>(calls) * rows);
  wb::testing::record_metric("chi2_p_" + c.name, fit.p_value);
  if (fit.p_value < kAlpha) {
    std::ostringstream s;
    s << failure_head(step, "distribution of " + c.name, rows, vocab, c.params)
      << "rule 2: over " << calls * rows << " draws the tokens do not follow the exact "
      << "distribution (p renormalized over the kept set): chi-square " << fit.statistic
      << " on " << fit.cells - 1 << " degrees of freedom, p-value " << fit.p_value << " < "
      << kAlpha << ". Furthest cells: " << fit.worst << ".";
    // Which known mistake fits instead?
    SamplingParams at_one = c.params;
    at_one.temperature = 1.0f;
    const Fit untempered = chi_square(counts, ref::kept_set(c.row.data(), vocab, at_one),
                                      static_cast<long long>(calls) * rows);
    if (c.params.temperature != 1.0f && untempered.p_value > 1e-3)
      s << " The draws fit softmax(logits) at T = 1 instead (p-value " << untempered.p_value
        << "): the temperature was ignored.\nhint: the distribution is softmax(logits / T).";
    else
      s << "\nhint: draw with ONE uniform u per (row, step): the first kept token whose running "
           "mass reaches u * (kept mass); every kept token in proportion to its p, masked "
           "ones never; a different u for every row and every step.";
    FAIL_CHECK(s.str() << c.note);
    ok = false;
  }
  // Where many kept tokens share a logit: the draws counted per logit value as well.
  Fit grouped;
  if (fit.p_value >= kAlpha &&
      chi_square_by_logit(counts, e.kept, c.row.data(), static_cast<long long>(calls) * rows, &grouped)) {
    wb::testing::record_metric("chi2_p_by_logit_" + c.name, grouped.p_value);
    if (grouped.p_value < kAlpha) {
      ok = false;
      // A case whose note carries its own hint (what its row is built to catch) gives that one;
      // the report keeps the first hint line.
      const bool own_hint = c.note.find("\nhint:") != std::string::npos;
      FAIL_CHECK(failure_head(step, "distribution of " + c.name, rows, vocab, c.params)
                 << "rule 2: over " << calls * rows << " draws, the tokens counted together by "
                 << "logit value do not follow the exact distribution (each token alone gets too "
                    "few draws to show it): chi-square " << grouped.statistic << " on "
                 << grouped.cells - 1 << " degrees of freedom, p-value " << grouped.p_value << " < "
                 << kAlpha << ". Furthest cells: " << grouped.worst << "."
                 << (own_hint ? ""
                              : "\nhint: every kept token is drawn in proportion to its OWN p, also among "
                                "thousands that share a histogram bin: a draw that picks a bin by its mass and "
                                "then a token of the bin as if they were equally likely (or ranks them by the "
                                "bin's average weight) keeps each bin's total and loses the proportions inside "
                                "it. Refine inside the bin down to a single logit value (the radix select's "
                                "passes), then pick by index within that run of equal logits.")
                 << c.note);
    }
  }
  check_integrity(runner, step, "distribution of " + c.name);
  return ok;
}

std::vector<DistributionCase> distribution_cases() {
  std::vector<DistributionCase> cases;
  std::mt19937_64 rng(0x5A3C1D07ull);  // fixed: the suite is deterministic
  {  // peaked: one token dominant, a few strong ones, a tail
    std::vector<float> row = normal_row(1000, 1.0f, rng);
    boost_head(row, 6, 4.0f, rng);
    row[417] = 9.0f;
    cases.push_back({"a peaked row", row, SamplingParams{1.0f, 0, 1.0f, 11, 0}});
  }
  {  // flat: 300 nearly equal tokens
    cases.push_back({"a flat row", normal_row(300, 0.1f, rng), SamplingParams{1.0f, 0, 1.0f, 12, 0}});
  }
  {  // temperature: T = 0.5 and T = 2 on the same row, nothing filtered
    const std::vector<float> row = normal_row(200, 1.0f, rng);
    cases.push_back({"a row at T = 0.5", row, SamplingParams{0.5f, 0, 1.0f, 13, 0}});
    cases.push_back({"a row at T = 2", row, SamplingParams{2.0f, 0, 1.0f, 14, 0}});
  }
  {  // top_k and top_p together (the issue's setting), on a narrow row
    std::vector<float> row = normal_row(2000, 1.5f, rng);
    SamplingParams p{1.0f, 50, 1.0f, 15, 0};
    p.top_p = top_p_for_nucleus(row, p, 30);
    cases.push_back({"top_k 50 + top_p (30 kept)", row, p});
  }
  {  // masked entries: half the row -inf, top_k larger than what is finite in its prefix
    std::vector<float> row = normal_row(400, 1.0f, rng);
    mask_some(row, 0.5, rng);
    cases.push_back({"a half-masked row", row, SamplingParams{1.3f, 0, 1.0f, 16, 0}});
  }
  {  // 151936 wide, a head and a long tail: top_k 50 + top_p at T = 0.7
    std::vector<float> row = normal_row(151936, 1.5f, rng);
    boost_head(row, 300, 9.0f, rng);
    SamplingParams p{0.7f, 50, 1.0f, 17, 0};
    p.top_p = top_p_for_nucleus(row, p, 40);
    cases.push_back({"a 151936-wide long-tail row, top_k 50 + top_p", row, p});
  }
  {  // 151936 wide, top_p alone (nucleus of a few hundred: fits step 3's candidates)
    std::vector<float> row = normal_row(151936, 1.0f, rng);
    boost_head(row, 400, 11.0f, rng);
    SamplingParams p{1.0f, 0, 1.0f, 18, 0};
    p.top_p = top_p_for_nucleus(row, p, 250);
    cases.push_back({"a 151936-wide row, top_p alone", row, p});
  }
  {  // A tail of many tiny terms: one logit 0 and 151935 at -20, top_k = 1. Each tail term is
     // e^-20 = 2.1e-9, together 3.1e-4 of Z: the confidence is 1 / (1 + 151935 e^-20) = 0.99969,
     // not 1 (the lesson's tolerance is 1e-4). A softmax that stops summing at the first term
     // below some threshold (2^-24, or anything down to 2^-28), or adds the terms one by one to
     // a float total of 1, loses the whole tail and reports 1.
    std::vector<float> row(151936, -20.0f);
    row[70001] = 0.0f;
    const std::string note =
        "\nthis row: one logit 0 and 151935 at -20. Each of those terms is e^-20 = 2.1e-9, tiny alone, "
        "but together they are 3.1e-4 of Z, so the kept token's confidence is 0.99969, not 1.\nhint: Z is "
        "the sum over the whole row: never stop at the first small term. On the CPU sum in double (2.1e-9 "
        "added to a float total of 1 adds nothing); on the GPU each thread's float partial sum, combined "
        "in a tree, keeps them.";
    cases.push_back({"top_k 1 on a 151936-wide row of one 0 and 151935 logits at -20 (a tail of tiny terms)",
                     row, SamplingParams{1.0f, 1, 1.0f, 22, 0}, false, note});
  }
  {  // A denormal temperature (finite and > 0: a valid argument), with logits in [-1, 1] so that
     // logits / T stays finite in fp32 (|x| / T <= 2.9e38). Three tokens share the max: p = 1/3
     // each, every other token 0. Sampled, and greedy through top_k = 1 (T kept for the
     // confidence).
    std::uniform_real_distribution<float> below(-1.0f, 0.9f);
    std::vector<float> row(64);
    for (float& x : row) x = below(rng);
    row[5] = row[23] = row[41] = 1.0f;
    const std::string note =
        "\nthis row: T = 3.5e-39 is a denormal float. 1 / T = 2.9e38 is still finite, but log2(e) / T "
        "= 4.1e38 is not: it rounds to +inf, and then the max's own term is exp2((x - max) * inf) = "
        "exp2(0 * inf) = exp2(NaN), so Z and every confidence are NaN (below T = 2.9e-39, 1 / T "
        "itself is +inf).\nhint: cap each scale factor at FLT_MAX (fminf(1.0f / T, FLT_MAX), and "
        "the same for log2(e) / T): (max - max) * FLT_MAX is 0, the max's term is 1, and every "
        "other term is exp of a huge negative number, 0.";
    const SamplingParams sampled{3.5e-39f, 0, 1.0f, 19, 0}, greedy{3.5e-39f, 1, 1.0f, 20, 0};
    cases.push_back({"a row at a denormal T = 3.5e-39 (three equal maxima)", row, sampled, false, note});
    cases.push_back({"the same row at T = 3.5e-39, top_k = 1", row, greedy, false, note});
  }
  {  // A denormal temperature further down: T = 1e-40, where 1 / T = 1e40 is more than FLT_MAX
     // (3.4e38), +inf in fp32, and so is x / T for every logit above FLT_MAX * T = 0.034. Logits
     // in [-1, 1], three tokens share the max: p = 1/3 each, every other token 0 (the reference
     // works in double, where nothing overflows). Sampled, and through top_k = 1.
    std::uniform_real_distribution<float> below(-1.0f, 0.9f);
    std::vector<float> row(64);
    for (float& x : row) x = below(rng);
    row[9] = row[33] = row[60] = 1.0f;
    const std::string note =
        "\nthis row: T = 1e-40 is a denormal float, and 1 / T = 1e40 is more than FLT_MAX (3.4e38): "
        "in fp32 it is +inf, and so is x / T for every logit above FLT_MAX * T = 0.034. Scaled that "
        "way, the three maxima become +inf (a bad row by mistake: token -1) or their terms exp(inf - "
        "inf) = NaN. T > 0 is a valid argument: each maximum has p = 1/3, every other token 0.\nhint: "
        "scale the difference from the max, never the logit: exp((x - max) * inv_t) with inv_t = "
        "fminf(1.0f / T, FLT_MAX), so the max's own term is exp(0 * FLT_MAX) = 1; rank by the logits "
        "themselves (T > 0 keeps their order).";
    const SamplingParams sampled{1e-40f, 0, 1.0f, 23, 0}, greedy{1e-40f, 1, 1.0f, 24, 0};
    cases.push_back({"a row at a denormal T = 1e-40, 1 / T = +inf in fp32 (three equal maxima)", row,
                     sampled, false, note});
    cases.push_back({"the same row at T = 1e-40, top_k = 1", row, greedy, false, note});
  }
  {  // Finite logits near FLT_MAX at T = 0.5: a good row (rule 5 is about NaN and +inf), but
     // x / T overflows to +inf in fp32 for every |x| above FLT_MAX * T = 1.7e38. Three maxima
     // at 3e38, the others in [-3e38, 2.9e38]: p = 1/3 each for the maxima, every other token
     // 0 ((x - max) / T <= -2e37; in fp32 x - max may itself round to -inf, and exp(-inf) = 0).
    std::uniform_real_distribution<double> wide(-3e38, 2.9e38);  // double: b - a overflows a float
    std::vector<float> row(64);
    for (float& x : row) x = static_cast<float>(wide(rng));
    row[2] = row[27] = row[45] = 3.0e38f;
    const std::string note =
        "\nthis row: 64 finite logits near FLT_MAX (3.4e38), three maxima at 3e38 and the others in "
        "[-3e38, 2.9e38], at T = 0.5. Every logit is finite, so the row is good, but x / T overflows "
        "to +inf in fp32 for every logit above FLT_MAX * T = 1.7e38 (and x * (1 / T) does the same). "
        "Each maximum has p = 1/3, every other token 0.\nhint: scale the difference from the max, "
        "(x - max) / T, never x / T: it is 0 for the max and negative for every other token (x - max "
        "may round to -inf, and exp(-inf) is 0); rank by the logits themselves.";
    const SamplingParams sampled{0.5f, 0, 1.0f, 25, 0}, greedy{0.5f, 1, 1.0f, 26, 0};
    cases.push_back({"a row of finite logits near FLT_MAX at T = 0.5 (three equal maxima at 3e38)", row,
                     sampled, false, note});
    cases.push_back({"the same row near FLT_MAX at T = 0.5, top_k = 1", row, greedy, false, note});
  }
  {  // An unfiltered draw from one crowded histogram bin: 8192 logits alternating 0 and -0.1,
     // all within 1/8 of the max, so a 256-bin histogram over (max - x) / T puts every one of
     // them in its first bin, more than a bounded gather or list holds. The even tokens hold
     // 1 / (1 + e^-0.1) = 52.5% of the mass. Each token alone gets a dozen draws, too few for
     // the per-token test to see a bias of 5%; check_distribution also counts them by logit.
    std::vector<float> row(8192);
    for (int i = 0; i < 8192; ++i) row[i] = i % 2 == 0 ? 0.0f : -0.1f;
    const std::string note =
        "\nthis row: 8192 logits alternating 0 and -0.1, no filter: every token is kept, and every "
        "one of them falls in the same bin of a histogram over the logits (thousands per block). "
        "The even tokens must be drawn 52.5% of the time, the odd ones 47.5%.";
    cases.push_back({"an unfiltered row of 8192 logits alternating 0 and -0.1 (one crowded bin)", row,
                     SamplingParams{1.0f, 0, 1.0f, 21, 0}, true, note});
  }
  {  // top_k between the number of finite logits and vocab: a row of 400 with 250 of them masked
     // (-inf) at random columns, top_k = 200. 200 < vocab, but only 150 tokens have a nonzero
     // probability (the masked ones come last in the order, p = 0), so top_k keeps every finite
     // logit and the draws follow the whole row's softmax. A sampler that decides "top_k is on"
     // by comparing k with vocab, and then looks for the mass of the first k tokens among the
     // finite ones, looks for a 200th token that is not there.
    std::vector<float> row = normal_row(400, 1.0f, rng);
    std::vector<int> ids(row.size());
    for (int i = 0; i < static_cast<int>(ids.size()); ++i) ids[i] = i;
    std::shuffle(ids.begin(), ids.end(), rng);
    for (int i = 0; i < 250; ++i) row[ids[i]] = -kInf;
    const std::string note =
        "\nthis row: 400 logits, 250 of them -inf (masked), top_k = 200. top_k < vocab, but only 150 "
        "tokens have a nonzero probability: in rule 2's order the masked tokens come last (p = 0), "
        "so the first 200 are the 150 finite ones and 50 masked ones, and the draws follow the "
        "softmax of the whole row.\nhint: when k is at least the number of tokens that are not "
        "-inf, top_k keeps all of them: compare k with that count (the valid entries), not with "
        "vocab, before looking for the k-th token or the mass of the first k.";
    cases.push_back({"top_k 200 on a row of 400 with 250 masked (k above its 150 finite logits)", row,
                     SamplingParams{1.0f, 200, 1.0f, 32, 0}, false, note});
    // The same mistake where k is large: a design that walks a short sorted list (of at most
    // a few thousand entries) can meet position 200 among its padding, with the whole mass
    // there by accident, and still not meet position 4096; and a row whose finite logits are
    // too many for such a list (8192) takes the long way, a radix select by count that runs
    // past the last finite logit. Step 3 refuses both rows (k > kMaxCandidates).
    const auto masked_row = [&](int vocab, int finite) {
      std::vector<float> r = normal_row(vocab, 1.0f, rng);
      std::vector<int> order(r.size());
      for (int i = 0; i < vocab; ++i) order[i] = i;
      std::shuffle(order.begin(), order.end(), rng);
      for (int i = 0; i < vocab - finite; ++i) r[order[i]] = -kInf;
      return r;
    };
    const std::string large_k_note =
        "\nthis row: most logits are -inf (masked), and top_k is below vocab but above the number "
        "of finite logits. Every finite logit is kept (the masked ones have p = 0), so the draws "
        "follow the softmax of the whole row. Looking for the k-th token among the finite ones "
        "finds none: the kept mass used is then whatever the variable held (with shared memory "
        "poisoned before each call: garbage, token -1).\nhint: when k is at least the number of "
        "tokens that are not -inf, top_k keeps all of them: compare k with that count (the valid "
        "entries), not with vocab.";
    cases.push_back({"top_k 4096 on a row of 8192 with 6400 masked (k above its 1792 finite logits)",
                     masked_row(8192, 1792), SamplingParams{1.0f, 4096, 1.0f, 33, 0}, true, large_k_note});
    cases.push_back({"top_k 16384 on a row of 32768 with 24576 masked (k above its 8192 finite logits)",
                     masked_row(32768, 8192), SamplingParams{1.0f, 16384, 1.0f, 34, 0}, true,
                     large_k_note, /*only_after_passes=*/true});
  }
  {  // top_p alone on a row wider than step 3's 1024 candidates, whose tokens past rank 1024
     // hold a real share of the mass (16%): one token holds half of it, 2047 logits of
     // N(0, 0.5^2) the rest, and the nucleus is 657 tokens (it fits in the candidates). On the
     // 151936-wide rows above the tail past rank 1024 holds under 1%, too little to show a
     // target taken from the candidates' mass instead of the whole row's.
    std::vector<float> row = normal_row(2048, 0.5f, rng);
    double rest = 0;
    for (int i = 0; i < 2048; ++i)
      if (i != 1500) rest += std::exp(static_cast<double>(row[i]));
    row[1500] = static_cast<float>(std::log(rest));  // p = 1/2
    SamplingParams p{1.0f, 0, 1.0f, 35, 0};
    p.top_p = top_p_for_nucleus(row, p, 657);
    const std::string note =
        "\nthis row: 2048 logits, token 1500 holding half the mass and 2047 logits of N(0, 0.5^2) the "
        "rest; top_k off and top_p = 0.75 keep the 657 most likely tokens. With top_k off, top_p's "
        "target is top_p times the mass top_k kept, which is the WHOLE row (1): the first 1024 tokens "
        "hold only about 84% of it, and a target of top_p x 0.84 cuts the nucleus at about 280 tokens "
        "(token 1500 then drawn about 79% of the time instead of 67%).\nhint: with top_k off (0 or >= vocab) the target "
        "is top_p itself (the softmax sums to 1 over the row); sum a kept mass only when top_k keeps "
        "fewer tokens than the row has.";
    cases.push_back({"top_p alone on a 2048-wide row whose tokens past rank 1024 hold 16% of the mass",
                     row, p, false, note});
  }
  {  // Masses too large for a fixed-point scale chosen for probabilities: an unfiltered 151936-wide
     // row of 100000 logits 0 and 51936 at -1, at random columns. Z = sum exp(x - max) = 100000 +
     // 51936 / e = 119106: the zeros hold 84.0% of the mass. Weights exp(x - max) (at most 1, not
     // divided by Z) times 2^48, the scale of the lesson's hint for probabilities, sum to 119106 x
     // 2^48, past 2^64: the zeros' 100000 x 2^48 wraps to 34464 x 2^48, and a draw over the
     // wrapped masses takes the zeros 64% of the time. Each token alone gets about one draw, so
     // check_distribution counts them by logit value. Every other row here has Z below 2^16; the
     // flat row of the membership probes does not, but there the wrapped top_p cut keeps a
     // prefix of the exact nucleus, which no membership check can see. Left out under racecheck
     // (a shared-memory hazard needs no such row: the crowded-bin row above takes the same way).
    if (wb::coverage::racecheck()) return cases;
    std::vector<float> row(151936, -1.0f);
    std::vector<int> ids(row.size());
    for (int i = 0; i < static_cast<int>(ids.size()); ++i) ids[i] = i;
    std::shuffle(ids.begin(), ids.end(), rng);
    for (int i = 0; i < 100000; ++i) row[ids[i]] = 0.0f;
    const std::string note =
        "\nthis row: 151936 logits, 100000 of them 0 and 51936 at -1, nothing filtered. The softmax's "
        "denominator Z = sum exp(x - max) = 100000 + 51936 / e = 119106, so the zeros must be drawn 84.0% "
        "of the time. Masses kept as fixed-point integers exp(x - max) x 2^48 (weights up to 1 each, not "
        "probabilities) sum to 119106 x 2^48, more than 2^64: the sum wraps (the zeros' 100000 x 2^48 "
        "to 34464 x 2^48), and draws over the wrapped masses take the zeros about 64% of the time.\nhint: "
        "a fixed-point scale must leave room for the largest sum it can meet: vocab weights of at most 1 "
        "sum to at most vocab, so take 2^s with vocab x 2^s below 2^63 (the reference: the largest power "
        "of two with vocab x 2^s <= 2^62), or scale probabilities (exp(x - max) / Z, summing to 1) by 2^48.";
    cases.push_back({"an unfiltered 151936-wide row of 100000 logits 0 and 51936 at -1 (Z = 119106, past "
                     "2^16)", row, SamplingParams{1.0f, 0, 1.0f, 36, 0}, true, note});
  }
  return cases;
}

void distributions(Step step) {
  bool failed = false;
  for (const DistributionCase& c : distribution_cases()) {
    if (c.beyond_candidates && step == Step::TopCandidates) continue;  // step 3 refuses these rows
    if (c.only_after_passes && failed) continue;  // it might hang what failed already
    failed |= !check_distribution(step, c);
  }
}

// ---------------------------------------------------------------------------------------
// Membership probes: rows and settings where each known filtering mistake keeps a token the
// contract does not, with enough draws that it gets drawn.

void membership(Step step) {
  std::mt19937_64 rng(0x3E3B3E5Dull);
  std::vector<DistributionCase> cases;
  {  // top_k alone, flat row: the token ranked k + 1 is as likely as the kept ones
    cases.push_back({"top_k 20 alone", normal_row(1000, 0.3f, rng), SamplingParams{1.0f, 20, 1.0f, 21, 0}});
  }
  {  // top_k then top_p: top_k keeps 40% of the mass, so a top_p of the whole row keeps all k
    std::vector<float> row = normal_row(3000, 1.0f, rng);
    boost_head(row, 100, 2.0f, rng);
    SamplingParams p{1.0f, 60, 1.0f, 22, 0};
    p.top_p = top_p_for_nucleus(row, p, 15);
    cases.push_back({"top_k 60 then top_p (15 kept)", row, p});
  }
  {  // ties across the top-k boundary (rule 2: equal logits by lower index), in a short row
     // (one block's) and a wide one (spread over many)
    std::vector<float> row = normal_row(1000, 0.3f, rng);
    plant_ties_across_rank(row, 20, 8);
    cases.push_back({"top_k 20, 8 equal logits across rank 20", row, SamplingParams{1.0f, 20, 1.0f, 24, 0}});
    std::vector<float> wide = normal_row(151936, 1.0f, rng);
    plant_ties_across_rank(wide, 50, 8);
    cases.push_back({"top_k 50, 8 equal logits across rank 50 of a 151936-wide row", wide,
                     SamplingParams{1.0f, 50, 1.0f, 25, 0}});
  }
  {  // top_p alone on a wide row
    std::vector<float> row = normal_row(151936, 1.0f, rng);
    boost_head(row, 200, 12.0f, rng);
    SamplingParams p{1.0f, 0, 1.0f, 23, 0};
    p.top_p = top_p_for_nucleus(row, p, 120);
    cases.push_back({"top_p alone on a 151936-wide row", row, p});
  }
  {  // Kept sets too long for a bounded list (the reference's fused sampler gathers at most
     // 2048 entries to sort, and lists at most 2048 of one histogram bin per block, before it
     // falls back to a path without a bound): step 4 has no limit, so that path must be exact
     // too. None of the rows above goes that far. top_p about 0.5, placed mid-interval.
    const auto about_half = [](const std::vector<float>& row, SamplingParams p) {
      p.top_p = 0.5f;
      const int n = static_cast<int>(ref::kept_set(row.data(), static_cast<int>(row.size()), p).tokens.size());
      p.top_p = top_p_for_nucleus(row, p, n);
      return p;
    };
    // top_k 4096 then top_p: the top 4096 of N(0, 1) hold ~18% of the row's mass, so a top_p
    // target taken from the whole row's mass keeps all 4096 (half the draws outside).
    std::vector<float> row = normal_row(151936, 1.0f, rng);
    cases.push_back({"top_k 4096 then top_p ~0.5 on a 151936-wide row", row,
                     about_half(row, SamplingParams{1.0f, 4096, 1.0f, 26, 0}), true,
                     "\nthis row: top_k = 4096 keeps more tokens than a small gather or sort holds; "
                     "the path your sampler takes beyond that bound must apply top_p the same way "
                     "(renormalized over the top-k mass)."});
    // A flat row: every logit within ~0.1 of 0, so the ~75000 tokens of the nucleus all share
    // one histogram bin (8 per unit of logit), thousands in every block's slice.
    std::vector<float> flat = normal_row(151936, 0.02f, rng);
    cases.push_back({"top_p ~0.5 on a flat 151936-wide row (logits N(0, 0.02^2))", flat,
                     about_half(flat, SamplingParams{1.0f, 0, 1.0f, 27, 0}), true,
                     "\nthis row: flat, every logit within ~0.1 of the others, so tens of thousands "
                     "of entries fall in the same bin of a histogram over the logits. A selection "
                     "that refines over a bounded list of one bin's entries (or a bounded gather) "
                     "sees only part of the row here: when the list overflows, fall back to "
                     "scanning every entry of the bin."});
  }
  {  // Equal logits of both signs: -0.0 == +0.0 (rule 2 compares logits), so 8 zeros straddling
     // rank 20 are one run of ties, ordered by index whatever their sign bits. The row is
     // shifted so that the run is exactly 0, and the 4 zeros with the lowest indices (the ones
     // top_k keeps) are made -0.0: an order key taken from the raw bits, where -0.0 sorts below
     // +0.0, keeps the 4 +0.0 ones instead.
    std::vector<float> row = normal_row(1000, 0.3f, rng);
    plant_ties_across_rank(row, 20, 8);
    const std::vector<int> ranked = ref::ranked_tokens(row.data(), 1000, 24);
    const float tied = row[ranked[16]];
    for (float& x : row) x -= tied;  // the run becomes +0.0 (x - x), nothing else 0
    std::vector<int> zeros(ranked.begin() + 16, ranked.end());
    std::sort(zeros.begin(), zeros.end());
    for (int i = 0; i < 4; ++i) row[zeros[i]] = -0.0f;
    cases.push_back({"top_k 20, 8 zeros (-0.0 and +0.0) across rank 20", row,
                     SamplingParams{1.0f, 20, 1.0f, 28, 0}, false,
                     "\nthis row: the 8 equal logits across rank 20 are zeros, -0.0 at the 4 lowest "
                     "indices and +0.0 at the others. -0.0 == +0.0, so they are one run of equal "
                     "logits, ordered by index whatever the sign bit: top_k keeps the four -0.0. A "
                     "radix key made from the raw bits puts every +0.0 above every -0.0.\nhint: fold "
                     "-0.0 into +0.0 before taking the bits (x == 0.0f ? 0.0f : x), as the lesson's "
                     "order key does."});
  }
  {  // Equal logits across the top_p cut: top_p keeps the shortest prefix of the ORDER, so the cut
     // can fall inside a run of equal logits, and keeps its tokens with the lowest indices only.
     // A cut taken as a logit value ("every token whose logit reaches the cut token's") keeps
     // the whole run. On a short row (a bounded gather's way), and with a run of 3000 equal
     // logits leading a wider row (too many for a bounded gather: the way beyond it).
    const std::string note =
        "\nthis row: equal logits straddle the top_p cut. top_p keeps the SHORTEST prefix of the "
        "order (logit descending, then index ascending) whose mass reaches top_p of the total, so "
        "the cut falls inside the run: its tokens with the lowest indices are kept, the rest of "
        "the run is not. A cut taken as a logit value (keep every token whose logit reaches the "
        "cut token's) keeps the whole run.\nhint: the cut is a position, as for top_k: inside the "
        "run (every token of it has the same p), keep the first ceil((target - mass before the "
        "run) / p) tokens by index.";
    std::vector<float> row = normal_row(1000, 0.3f, rng);
    plant_ties_across_rank(row, 40, 8);
    SamplingParams p{1.0f, 0, 1.0f, 29, 0};
    p.top_p = top_p_for_nucleus(row, p, 40);
    cases.push_back({"top_p cut inside a run of 8 equal logits (ranks 37 to 44; the first 40 kept)",
                     row, p, false, note});
    std::vector<float> wide = normal_row(9000, 1.0f, rng);
    std::vector<int> ids(wide.size());
    for (int i = 0; i < static_cast<int>(ids.size()); ++i) ids[i] = i;
    std::shuffle(ids.begin(), ids.end(), rng);
    for (float& x : wide) x -= 4.0f;  // N(-4, 1): below the run (max about -0.2)
    for (int i = 0; i < 3000; ++i) wide[ids[i]] = 1.0f;
    SamplingParams q{1.0f, 0, 1.0f, 30, 0};
    q.top_p = top_p_for_nucleus(wide, q, 1500);
    cases.push_back({"top_p cut inside a run of 3000 equal logits leading a 9000-wide row (the first "
                     "1500 kept)", wide, q, true, note});
  }
  {  // Equal logits across rank k where top_k keeps more than a bounded gather holds: top_k 3000
     // of an 8192-wide row, and the 1000 tokens ranked 2501 to 3500 share one logit. top_k keeps
     // the 500 of them with the lowest indices. The rows with 8 equal logits across rank 20 or 50
     // above are answered from a short sorted list; this one takes a sampler's way beyond it
     // (the reference's long way), where keeping the whole run of the k-th logit, or the wrong
     // half of it, keeps 500 tokens too many (about 8% of the draws land on them).
    std::vector<float> row = normal_row(8192, 1.0f, rng);
    plant_ties_across_rank(row, 3000, 1000);
    cases.push_back({"top_k 3000, 1000 equal logits across rank 3000 of an 8192-wide row (the first "
                     "500 of them kept)", row, SamplingParams{1.0f, 3000, 1.0f, 31, 0}, true,
                     "\nthis row: top_k = 3000 keeps more tokens than a small gather or sort holds, "
                     "and the 1000 tokens ranked 2501 to 3500 share one logit (the 3000th largest). "
                     "top_k keeps exactly 3000 tokens: the 2500 larger ones and the 500 of the run "
                     "with the lowest indices, never the other 500.\nhint: top_k's cut is a position "
                     "(rank < k), not a logit value: where the k-th logit is shared, the cut falls "
                     "inside its run, k - (tokens above the run) of them kept by index, and the "
                     "kept mass is theirs only (not the whole run's)."});
  }
  for (const DistributionCase& c : cases) {
    // Step 3 refuses these rows. Racecheck leaves them out: a wide row's selections re-read
    // all of it several times, minutes under the tool (see quick_logits).
    if (c.beyond_candidates && (step == Step::TopCandidates || wb::coverage::racecheck())) continue;
    const int vocab = static_cast<int>(c.row.size());
    const int wide_rows = wb::coverage::racecheck() ? 1 : wb::coverage::quick() ? 8 : 32;
    const int rows = vocab > 20000 ? wide_rows : rows_under_racecheck(256);
    int calls = vocab > 20000 ? (step == Step::SortThenCpu ? 4 : 16) : 40;
    if (wb::coverage::quick()) calls = vocab > 20000 || wb::coverage::racecheck() ? 1 : 4;  // see draws_for
    Runner runner(step, repeat_rows(c.row, rows), rows, vocab);
    const Expected e = expected_for(c.row.data(), vocab, c.params);
    for (int call = 0; call < calls; ++call) {
      SamplingParams p = c.params;
      p.step = static_cast<std::uint64_t>(call);
      const std::string failure = check_draws(c.row, vocab, p, {e}, runner.run(p));
      if (!failure.empty()) {
        FAIL_CHECK(failure_head(step, "membership, " + c.name, rows, vocab, p) << failure << c.note);
        break;
      }
    }
    check_integrity(runner, step, "membership, " + c.name);
  }
}

// ---------------------------------------------------------------------------------------
// The draw's end: with u = 1 exactly, the target is the whole kept mass, and a running sum
// that falls short of it (fp32 rounding) must stop at the last kept token, not step past.

// A grid-stride loop over a fixed grid: under compute-sanitizer every block costs, and 2^30
// draws in 2^22 blocks of 256 took minutes there.
__global__ void find_uniform_one(std::uint64_t seed, std::uint64_t steps, int rows,
                                 unsigned long long* found) {
  const std::uint64_t total = steps * rows;
  const std::uint64_t stride = static_cast<std::uint64_t>(gridDim.x) * blockDim.x;
  for (std::uint64_t i = blockIdx.x * static_cast<std::uint64_t>(blockDim.x) + threadIdx.x; i < total;
       i += stride) {
    const std::uint64_t step = i / rows;
    const int row = static_cast<int>(i % rows);
    if (ch07::draw_uniform(seed, step, row) == 1.0f) atomicMin(found, static_cast<unsigned long long>(i));
  }
}

// A (step, row) whose rule-4 number is exactly 1.0f (about one in 3.4e7), found on the GPU.
bool find_step_with_u_one(std::uint64_t seed, int rows, std::uint64_t* step, int* row) {
  wb::DeviceBuffer<unsigned long long> found(1);
  const unsigned long long none = ~0ull;
  WB_CUDA(cudaMemcpy(found.data(), &none, sizeof(none), cudaMemcpyHostToDevice));
  const std::uint64_t steps = 1ull << 24;  // 2^24 steps x 64 rows: ~30 expected hits
  find_uniform_one<<<1024, 256>>>(seed, steps, rows, found.data());
  WB_CHECK_LAUNCH("find_uniform_one");
  unsigned long long hit = none;
  WB_CUDA(cudaMemcpy(&hit, found.data(), sizeof(hit), cudaMemcpyDeviceToHost));
  if (hit == none) return false;
  *step = hit / rows;
  *row = static_cast<int>(hit % rows);
  return true;
}

void draw_never_steps_past_the_kept_set(Step step) {
  const std::uint64_t seed = 0xC0FFEE07ull;
  std::uint64_t at_step = 0;
  int at_row = 0;
  if (!find_step_with_u_one(seed, 64, &at_step, &at_row)) {
    wb::testing::record_note("no (step, row) with u = 1 found; probe skipped");
    MESSAGE("ch07: no (step, row) with u = 1 found for seed " << seed << "; probe skipped");
    return;
  }
  wb::testing::record_note("u = 1 at step " + std::to_string(at_step) + ", row " +
                           std::to_string(at_row));
  // One dominant token and 1023 of probability 1.5e-8 each: below half an ulp of the running
  // sum in fp32, so an fp32 running sum stays at the dominant token's p, short of the kept
  // mass by 1.5e-5. top_k = 1000 keeps the dominant one and 999 of them; the rest of the
  // 1023 are the next candidates in rank order; everything else is far below.
  const int vocab = 4096;
  std::vector<float> row(vocab, -40.0f);
  std::mt19937_64 rng(0xF10A7ull);
  std::vector<int> ids(vocab);
  for (int i = 0; i < vocab; ++i) ids[i] = i;
  std::shuffle(ids.begin(), ids.end(), rng);
  row[ids[0]] = 0.0f;
  for (int i = 1; i < 1024; ++i) row[ids[i]] = -18.0f;
  const int rows = at_row + 1;
  Runner runner(step, repeat_rows(row, rows), rows, vocab);
  const SamplingParams params{1.0f, 1000, 1.0f, seed, at_step};
  const Expected e = expected_for(row.data(), vocab, params);
  const Draws d = runner.run(params);
  const int token = d.tokens[at_row];
  if (token < 0 || token >= vocab || !e.allowed[token]) {
    const int rank = token >= 0 && token < vocab ? rank_of(row.data(), vocab, token) : -1;
    FAIL_CHECK(failure_head(step, "the draw at u = 1", rows, vocab, params)
               << "row " << at_row << " draws with u = 1 exactly, and got token " << token
               << (rank >= 0 ? " (rank " + std::to_string(rank + 1) + ")" : std::string())
               << ", outside the kept set (the first " << e.kept.tokens.size()
               << "): the draw stepped past the last kept token. A running sum in fp32 falls "
                  "short of a kept mass summed another way (1 + 999 * 1.5e-8 sums to 1 in "
                  "fp32), so no kept token reached u * mass and the walk ran on."
               << "\nhint: compute the target and the running sum the same way, and when the "
                  "walk reaches the last kept token without crossing the target, stop THERE.");
  }
  check_integrity(runner, step, "the draw at u = 1");
}

// ---------------------------------------------------------------------------------------
// Rule 4: determinism and independence.

void determinism(Step step) {
  const bool racecheck = wb::coverage::racecheck();  // fewer rows: see kRacecheckRows
  for (const Shape s : {Shape{racecheck ? 30 : 300, 1000}, Shape{racecheck ? 2 : 16, 151936}}) {
    std::mt19937_64 rng = wb::rng_for("ch07/determinism/" + shape_of(s.rows, s.vocab));
    const std::vector<float> logits = peaked_rows(s.rows, s.vocab, 2.0f, 30, 5.0f, rng);
    Runner runner(step, logits, s.rows, s.vocab);
    const SamplingParams params{0.8f, 50, 0.9f, 99, 5};
    const Draws a = runner.run(params);
    const Draws b = runner.run(params);
    const std::string head = failure_head(step, "determinism", s.rows, s.vocab, params);
    for (int r = 0; r < s.rows; ++r) {
      if (a.tokens[r] != b.tokens[r] ||
          std::memcmp(&a.confidence[r], &b.confidence[r], sizeof(float)) != 0) {
        FAIL_CHECK(head << "rule 4: two calls with the same (seed, step, logits, params) gave "
                           "row " << r << " token " << a.tokens[r] << " then " << b.tokens[r]
                        << " (confidence " << a.confidence[r] << " then " << b.confidence[r]
                        << ").\nhint: the only randomness is draw_uniform(seed, step, row); "
                           "float atomics add in a different order every run: reduce in a "
                           "fixed order (or in integers).");
        return;
      }
    }
    // Another launch configuration: the first half of the rows alone.
    const int half = s.rows / 2;
    const Draws c = runner.run(params, half);
    for (int r = 0; r < half; ++r) {
      if (c.tokens[r] != a.tokens[r]) {
        FAIL_CHECK(head << "rule 4: row " << r << " drew token " << a.tokens[r] << " in a call of "
                        << s.rows << " rows but " << c.tokens[r] << " in a call of the first "
                        << half << " rows: a row's draw must not depend on how many rows the "
                           "call has.\nhint: the row's number is draw_uniform(seed, step, row), "
                           "with the row's index in the batch, not a thread's or a block's.");
        return;
      }
    }
    check_integrity(runner, step, "determinism");
  }
}

// Fraction of equal tokens among pairs of draws that must be independent, against the rate
// independence gives (sum of q^2); a generous 8-sigma margin.
std::string check_equal_rate(long long equal, long long pairs, double q2, const std::string& what,
                             const std::string& hint) {
  const double expected = pairs * q2;
  const double limit = expected + 8 * std::sqrt(expected) + 10;
  if (equal <= limit) return "";
  std::ostringstream s;
  s << "rule 4: " << what << " drew the same token in " << equal << " of " << pairs
    << " pairs; independent draws agree in about " << expected << " (the limit here is "
    << limit << ").\nhint: " << hint;
  return s.str();
}

void independence(Step step) {
  std::mt19937_64 rng(0x1D1D1D07ull);
  // Under racecheck 32 rows and 4 calls (see kRacecheckRows): a shared number would still
  // make 124 of 124 neighbouring pairs equal, against a limit of about 23.
  const int vocab = 64, rows = rows_under_racecheck(256), calls = wb::coverage::racecheck() ? 4 : 40;
  const std::vector<float> row = normal_row(vocab, 0.05f, rng);  // nearly uniform over 64
  Runner runner(step, repeat_rows(row, rows), rows, vocab);
  double q2 = 0;
  {
    const std::vector<double> p = ref::probabilities(row.data(), vocab, 1.0);
    for (double v : p) q2 += v * v;
  }
  const SamplingParams base{1.0f, 0, 1.0f, 4242, 0};
  long long equal_rows = 0, pairs_rows = 0, equal_steps = 0, pairs_steps = 0;
  long long equal_seeds = 0, pairs_seeds = 0;
  std::vector<int> previous;
  for (int call = 0; call < calls; ++call) {
    SamplingParams p = base;
    p.step = static_cast<std::uint64_t>(call);
    const Draws d = runner.run(p);
    for (int r = 0; r + 1 < rows; ++r) equal_rows += d.tokens[r] == d.tokens[r + 1];
    pairs_rows += rows - 1;
    if (!previous.empty())
      for (int r = 0; r < rows; ++r) equal_steps += d.tokens[r] == previous[r];
    if (!previous.empty()) pairs_steps += rows;
    previous = d.tokens;
    SamplingParams other_seed = p;
    other_seed.seed = base.seed + 1;
    const Draws o = runner.run(other_seed);
    for (int r = 0; r < rows; ++r) equal_seeds += d.tokens[r] == o.tokens[r];
    pairs_seeds += rows;
  }
  const std::string head = failure_head(step, "independence", rows, vocab, base);
  std::string f = check_equal_rate(
      equal_rows, pairs_rows, q2, "neighbouring rows of one call (identical logits)",
      "every row draws with its own number: draw_uniform(seed, step, row) with THIS row's "
      "index; one number shared by all rows makes identical rows identical.");
  if (!f.empty()) FAIL_CHECK(head << "rows share random numbers. " << f);
  f = check_equal_rate(equal_steps, pairs_steps, q2, "the same row at consecutive steps",
                       "the step is part of Philox's counter: draw_uniform(seed, params.step, "
                       "row); without it every step repeats the same numbers.");
  if (!f.empty()) FAIL_CHECK(head << "steps repeat the same random numbers. " << f);
  f = check_equal_rate(equal_seeds, pairs_seeds, q2, "the same (step, row) under two seeds",
                       "the seed is Philox's key: draw_uniform(params.seed, ...).");
  if (!f.empty()) FAIL_CHECK(head << "seeds do not change the draws. " << f);
  check_integrity(runner, step, "independence");
}

// ---------------------------------------------------------------------------------------
// Rule 4 names the number itself: row r of a call draws with draw_uniform(seed, step, r).
// The tests above see draws that are random, reproducible and independent, which another
// Philox number is too (seed and step swapped: both std::uint64_t, it compiles; or a seed or
// step cut to 32 bits). Here every row is {0, 0}, two tokens of probability 1/2: walked in
// either order (the contract leaves it free), one token is drawn for u <= 1/2 and the other
// for u > 1/2, so the tokens show which side of 1/2 each row's number fell on.

__global__ void rule4_numbers(std::uint64_t seed, std::uint64_t step, int rows, float* u) {
  const int row = blockIdx.x * blockDim.x + threadIdx.x;
  if (row < rows) u[row] = ch07::draw_uniform(seed, step, row);
}

void draws_use_the_rule4_number(Step step) {
  const int rows = 64, vocab = 2;
  const std::vector<float> logits(static_cast<std::size_t>(rows) * vocab, 0.0f);
  Runner runner(step, logits, rows, vocab);
  // seed != step; the second call's seed and step need more than 32 bits each.
  for (const SamplingParams params : {SamplingParams{1.0f, 0, 1.0f, 1234, 7},
                                      SamplingParams{1.0f, 0, 1.0f, (1ull << 40) + 5, (1ull << 33) + 9}}) {
    const std::string head = failure_head(step, "the number each row draws with", rows, vocab, params);
    wb::DeviceBuffer<float> numbers(rows);
    rule4_numbers<<<1, rows>>>(params.seed, params.step, rows, numbers.data());
    WB_CHECK_LAUNCH("rule4_numbers");
    const std::vector<float> u = numbers.download();
    const Draws d = runner.run(params);
    const std::string failure =
        check_draws(logits, vocab, params, {expected_for(logits.data(), vocab, params)}, d);
    if (!failure.empty()) {
      FAIL_CHECK(head << failure);
      return;
    }
    // Rows the walk order "first" explains: token first for u <= 1/2, the other above. Rows
    // with u within 1e-3 of 1/2 are left out (how u * mass rounds there is the sampler's).
    int wrong[2] = {0, 0}, example[2] = {-1, -1};
    for (int r = 0; r < rows; ++r) {
      if (std::abs(u[r] - 0.5f) < 1e-3f) continue;
      for (int first = 0; first < 2; ++first)
        if (d.tokens[r] != (u[r] <= 0.5f ? first : 1 - first) && wrong[first]++ == 0) example[first] = r;
    }
    if (wrong[0] == 0 || wrong[1] == 0) continue;
    const int first = wrong[0] <= wrong[1] ? 0 : 1, r = example[first];
    FAIL_CHECK(head << "rule 4: row r draws with u = draw_uniform(seed, step, r). Every row here is "
                       "{0, 0}, two tokens of probability 1/2, so a walk that puts token "
                    << first << " first draws it for u <= 1/2 and token " << 1 - first
                    << " for u > 1/2 (walking the other way swaps them), yet " << wrong[first] << " of "
                    << rows << " rows drew the other token: row " << r << " drew token "
                    << d.tokens[r] << " with u = " << u[r]
                    << ". The rows drew with other numbers than rule 4's.\nhint: pass the seed "
                       "as the seed and the step as the step, all 64 bits of each: "
                       "draw_uniform(params.seed, params.step, row) in a kernel, "
                       "fill_draw_uniforms(u, rows, params.seed, params.step, stream) for a CPU "
                       "half (both are std::uint64_t: swapped, they compile and still look "
                       "random).");
    return;
  }
  check_integrity(runner, step, "the number each row draws with");
}

// ---------------------------------------------------------------------------------------
// No state kept between calls (rule 4): a decoder rewrites ONE logits buffer at every step
// and samples it again, with the same pointer, the same shape and often the same params
// (greedy). Each call must read the logits as they are when it runs; a result remembered
// from an earlier call (keyed by the pointer and the params) is stale.

void logits_read_at_every_call(Step step) {
  const int rows = 4, vocab = 32000;
  std::mt19937_64 rng = wb::rng_for("ch07/overwritten-logits");
  std::vector<float> before, after;
  std::vector<int> planted(rows);
  for (int r = 0; r < rows; ++r) {
    std::vector<float> row = normal_row(vocab, 2.0f, rng);
    before.insert(before.end(), row.begin(), row.end());
    // The rewritten row: another column gets the max + 10. It is then the argmax, and holds
    // over 99% of the mass of the top 50, so top_k 50 + top_p 0.9 keep it alone too.
    const int argmax = static_cast<int>(std::max_element(row.begin(), row.end()) - row.begin());
    planted[r] = (argmax + 1 + 3989 * r) % vocab;  // never the old argmax
    row[planted[r]] = row[argmax] + 10.0f;
    after.insert(after.end(), row.begin(), row.end());
  }
  Runner runner(step, before, rows, vocab);
  for (const SamplingParams params :
       {SamplingParams{0.0f, 0, 1.0f, 0, 0}, SamplingParams{1.0f, 50, 0.9f, 31, 4}}) {
    runner.replace_logits(before);
    const Draws old = runner.run(params);
    runner.replace_logits(after);  // the same buffer, overwritten in place
    const Draws d = runner.run(params);
    const std::vector<Expected> expected = expected_rows(after, rows, vocab, params);
    const std::string head = failure_head(step, "logits overwritten in place", rows, vocab, params);
    for (int r = 0; r < rows; ++r) {
      const int token = d.tokens[r];
      std::string problem;
      if (token != planted[r])
        problem = "the call returned token " + std::to_string(token) + ", expected " +
                  std::to_string(planted[r]) + " (it now holds the row's maximum, 10 above every "
                  "other logit)" + (token == old.tokens[r] ? ": the answer of the previous call, "
                  "on the logits as they were before" : "") + ".";
      else
        problem = check_confidence(expected[r], after.data() + static_cast<std::size_t>(r) * vocab,
                                   token, d.confidence[r]);
      if (problem.empty()) continue;
      FAIL_CHECK(head << "row " << r << ": the logits were overwritten in place between two calls "
                         "with the same pointer, shape and params; " << problem
                      << "\nrule 4: a call's result depends on its arguments only, the logits as "
                         "they are when it runs; no state is kept between calls.\nhint: read the "
                         "logits at every call; never return an earlier call's results (cached "
                         "by pointer and params, or otherwise).");
      return;
    }
  }
  check_integrity(runner, step, "logits overwritten in place");
}

// ---------------------------------------------------------------------------------------
// Rule 5: bad rows among good ones.

void bad_rows(Step step) {
  const int vocab = 3001;
  std::mt19937_64 rng = wb::rng_for("ch07/bad-rows");
  std::vector<std::vector<float>> rows;
  for (int i = 0; i < 9; ++i) {
    std::vector<float> row = normal_row(vocab, 2.0f, rng);
    boost_head(row, 10, 5.0f, rng);
    rows.push_back(row);
  }
  rows[1][1234] = std::nanf("");                   // a NaN
  std::fill(rows[3].begin(), rows[3].end(), -kInf);  // all masked
  rows[4][77] = kInf;                               // +inf
  std::fill(rows[5].begin(), rows[5].end(), -kInf);  // one finite entry
  rows[5][2999] = -3.0f;
  mask_some(rows[6], 0.9, rng);                     // mostly masked, still good
  rows[7][0] = -std::nanf("");                      // a NaN with the sign bit set
  rows[8][3000] = std::nanf("");                    // a NaN in the last entry
  std::vector<float> logits;
  for (const auto& r : rows) logits.insert(logits.end(), r.begin(), r.end());
  const int n = static_cast<int>(rows.size());
  Runner runner(step, logits, n, vocab);
  for (const SamplingParams params :
       {SamplingParams{0.0f, 0, 1.0f, 3, 0}, SamplingParams{0.9f, 40, 0.95f, 3, 1},
        SamplingParams{1.0f, 1, 1.0f, 3, 2}}) {
    std::vector<Expected> expected;
    for (int r = 0; r < n; ++r) expected.push_back(expected_for(rows[r].data(), vocab, params));
    const Draws d = runner.run(params);
    const std::string failure = check_draws(logits, vocab, params, expected, d);
    if (!failure.empty())
      FAIL_CHECK(failure_head(step, "bad rows (NaN, +inf, all -inf) among good ones", n, vocab,
                              params)
                 << failure);
    if (d.tokens[5] != 2999 || d.confidence[5] != 1.0f)
      FAIL_CHECK(failure_head(step, "a row with one finite logit", n, vocab, params)
                 << "rule 5: a row whose only finite logit is at 2999 must give token 2999 "
                    "with confidence 1, got "
                 << d.tokens[5] << " with " << d.confidence[5]
                 << ".\nhint: -inf entries are masked tokens, probability exactly 0; the row "
                    "is still good.");
  }
  check_integrity(runner, step, "bad rows");
}

// ---------------------------------------------------------------------------------------
// Rule 6: bad arguments.

void expect_invalid_argument(Step step, const std::function<void()>& call,
                             const std::string& needle, const std::string& what) {
  try {
    call();
  } catch (const wb::NotImplemented&) {
    throw;
  } catch (const std::invalid_argument& e) {
    const std::string message = e.what();
    CHECK_MESSAGE(message.find(needle) != std::string::npos,
                  "ch07 " << step_name(step) << ", " << what
                          << ": rule 6: the error should name '" << needle
                          << "', got: " << message);
    return;
  } catch (const std::exception& e) {
    FAIL_CHECK("ch07 " << step_name(step) << ", " << what
                       << ": rule 6: expected std::invalid_argument, got another exception: "
                       << e.what());
    return;
  }
  FAIL_CHECK("ch07 " << step_name(step) << ", " << what
                     << ": rule 6: expected std::invalid_argument, nothing was thrown.\nhint: "
                        "call check_sampling_args(...) first in every entry point, then the "
                        "step's own checks (max_rows, step 3's limits, the workspace).");
}

// Step 3's refusal of a nucleus longer than its candidates is found after the copy, row by
// row; the header says the rows are checked before any token is written. Three rows of
// `vocab` (> kMaxCandidates): rows 0 and 2 put all but 2e-6 of their mass on one token (a
// nucleus of 1), row 1 is flat (a top_p = 0.9 nucleus of 0.9 x vocab tokens). The call must
// throw and leave every row's token and confidence as they were, row 0's and row 2's included.
void refusal_writes_no_token(Step step, int vocab, SamplingParams params) {
  params.top_k = 0;
  params.top_p = 0.9f;
  const int rows = 3;
  const int planted[rows] = {7, -1, vocab - 3};  // row 1: none, every logit 0
  std::vector<float> logits(static_cast<std::size_t>(rows) * vocab, 0.0f);
  for (int r = 0; r < rows; ++r)
    if (planted[r] >= 0) logits[static_cast<std::size_t>(r) * vocab + planted[r]] = 20.0f;
  Runner runner(step, logits, rows, vocab);
  constexpr float kUnwritten = -3.25f;  // no confidence is negative
  std::vector<int> tokens(rows, ch07::testing::kPoisonToken);
  std::vector<float> confidence(rows, kUnwritten);
  const std::string head = failure_head(step, "a nucleus longer than kMaxCandidates in row 1 only",
                                        rows, vocab, params);
  try {
    runner.call_raw(runner.logits_for_call(), rows, params, tokens.data(), confidence.data());
  } catch (const wb::NotImplemented&) {
    throw;
  } catch (const std::invalid_argument&) {
    for (int r = 0; r < rows; ++r) {
      if (tokens[r] == ch07::testing::kPoisonToken &&
          std::memcmp(&confidence[r], &kUnwritten, sizeof(float)) == 0)
        continue;
      FAIL_CHECK(head << "sample() threw std::invalid_argument (right: row 1, a flat row, needs "
                      << static_cast<int>(0.9 * vocab) << " tokens for its nucleus), but row " << r
                      << " had already been written: token " << tokens[r] << ", confidence "
                      << confidence[r] << " (" << (planted[r] >= 0 ? "a good row" : "the refused row")
                      << "; the caller's arrays held " << ch07::testing::kPoisonToken << " and "
                      << kUnwritten << ").\nrule 6 (the header, step 3): a nucleus longer than "
                         "kMaxCandidates is found after the copy, and the rows are checked before "
                         "any token is written: a call that throws writes nothing.\nhint: check "
                         "every row's nucleus in a loop of its own, then sample the rows in a second "
                         "loop.");
      return;
    }
    return;
  } catch (const std::exception& e) {
    FAIL_CHECK(head << "rule 6: expected std::invalid_argument, got another exception: "
                    << e.what());
    return;
  }
  FAIL_CHECK(head << "rule 6: expected std::invalid_argument naming the nucleus (row 1, a flat "
                     "row, needs " << static_cast<int>(0.9 * vocab) << " tokens for its nucleus, "
                     "more than kMaxCandidates), nothing was thrown (tokens " << tokens[0] << ", "
                  << tokens[1] << ", " << tokens[2] << ").\nhint: with top_k off, check that every "
                     "row's nucleus ends among its candidates before sampling any row.");
}

void bad_arguments(Step step) {
  const int vocab = 2000, rows = 4;
  std::mt19937_64 rng = wb::rng_for("ch07/bad-arguments");
  std::vector<float> logits;
  for (int r = 0; r < rows; ++r) {
    const std::vector<float> row = normal_row(vocab, 1.0f, rng);
    logits.insert(logits.end(), row.begin(), row.end());
  }
  Runner runner(step, logits, rows, vocab);
  const SamplingParams good{1.0f, 10, 0.9f, 1, 0};
  runner.run(good);  // a valid call first: a starter's NotImplemented shows as "to do" here
  const float* x = runner.logits_for_call();
  int* t = runner.tokens_for_call();
  float* c = runner.confidence_for_call();
  const auto with = [&](auto change) {
    SamplingParams p = good;
    change(p);
    return p;
  };
  const auto call = [&](const SamplingParams& p, int n) {
    return [&runner, x, t, c, p, n] { runner.call_raw(x, n, p, t, c); };
  };
  const auto call_all = [&](const SamplingParams& p) { return call(p, rows); };
  expect_invalid_argument(step, call(good, -1), "rows", "rows = -1");
  expect_invalid_argument(step, call_all(with([](auto& p) { p.temperature = -1.0f; })), "temperature",
                          "temperature = -1");
  expect_invalid_argument(step, call_all(with([](auto& p) { p.temperature = std::nanf(""); })),
                          "temperature", "temperature = NaN");
  expect_invalid_argument(step, call_all(with([](auto& p) { p.temperature = kInf; })), "temperature",
                          "temperature = inf");
  expect_invalid_argument(step, call_all(with([](auto& p) { p.top_k = -2; })), "top_k", "top_k = -2");
  expect_invalid_argument(step, call_all(with([](auto& p) { p.top_p = 0.0f; })), "top_p", "top_p = 0");
  expect_invalid_argument(step, call_all(with([](auto& p) { p.top_p = 1.5f; })), "top_p", "top_p = 1.5");
  expect_invalid_argument(step, call_all(with([](auto& p) { p.top_p = std::nanf(""); })), "top_p",
                          "top_p = NaN");
  expect_invalid_argument(step, [&] { runner.call_raw(nullptr, rows, good, t, c); }, "null",
                          "logits = nullptr");
  expect_invalid_argument(step, [&] { runner.call_raw(x, rows, good, nullptr, c); }, "null",
                          "tokens = nullptr");
  expect_invalid_argument(step, [&] { runner.call_raw(x, rows, good, t, nullptr); }, "null",
                          "confidence = nullptr");
  // rows == 0 is nothing to do, null pointers included.
  runner.call_raw(nullptr, 0, good, nullptr, nullptr);

  std::vector<float> host_x(8, 0.5f);
  std::vector<int> host_t(2);
  std::vector<float> host_c(2);
  switch (step) {
    case Step::Cpu:
      expect_invalid_argument(
          step, [&] { ch07::sample_cpu(host_x.data(), 2, 0, good, host_x.data(), host_t.data(), host_c.data()); },
          "vocab", "vocab = 0");
      break;
    case Step::Fused: {
      wb::DeviceBuffer<float> dx(8);
      wb::DeviceBuffer<int> dt(2);
      wb::DeviceBuffer<float> dc(2);
      expect_invalid_argument(
          step,
          [&] {
            ch07::sample_fused(dx.data(), 2, 0, good, dt.data(), dc.data(), runner.workspace(),
                               runner.workspace_bytes(), runner.stream());
          },
          "vocab", "vocab = 0");
      if (runner.workspace_bytes() > 0)
        expect_invalid_argument(
            step,
            [&] {
              ch07::sample_fused(x, rows, vocab, good, t, c, runner.workspace(),
                                 runner.workspace_bytes() - 1, runner.stream());
            },
            "workspace", "workspace_bytes one short of fused_sampler_workspace_bytes");
      break;
    }
    case Step::SortThenCpu:
      expect_invalid_argument(step, [] { ch07::SortThenCpuSampler s(2, 0); }, "vocab", "vocab = 0");
      expect_invalid_argument(step, call(good, rows + 1), "max_rows", "rows = max_rows + 1");
      break;
    case Step::TopCandidates: {
      expect_invalid_argument(step, [] { ch07::TopCandidatesSampler s(2, 0); }, "vocab", "vocab = 0");
      expect_invalid_argument(step, call(good, rows + 1), "max_rows", "rows = max_rows + 1");
      // Its limits: top_k between kMaxCandidates and vocab; top_k and top_p both off on a row
      // longer than kMaxCandidates; a nucleus longer than kMaxCandidates.
      expect_invalid_argument(step, call_all(with([](auto& p) { p.top_k = 1500; })), "top_k",
                              "top_k = 1500 > kMaxCandidates");
      expect_invalid_argument(step, call_all(with([](auto& p) { p.top_k = 0; p.top_p = 1.0f; })),
                              "top_p", "top_k and top_p off, vocab 2000 > kMaxCandidates");
      expect_invalid_argument(step, call_all(with([](auto& p) { p.top_k = 0; p.top_p = 0.99f; })),
                              "nucleus", "a flat row whose top_p = 0.99 nucleus is ~1900 tokens");
      refusal_writes_no_token(step, vocab, good);
      break;
    }
  }
  check_integrity(runner, step, "bad arguments");
}

// ---------------------------------------------------------------------------------------
// Bytes that come back (steps 2 to 4) and rule 7 (step 4).

void bytes_to_host(Step step) {
  if (!wb::ApiCounter::available()) {
    wb::testing::record_note("CUPTI unavailable: " + wb::ApiCounter::unavailable_reason());
    return;
  }
  const int rows = 16, vocab = 151936;
  std::mt19937_64 rng = wb::rng_for("ch07/bytes");
  const std::vector<float> logits = peaked_rows(rows, vocab, 2.0f, 30, 6.0f, rng);
  Runner runner(step, logits, rows, vocab);
  const SamplingParams params{1.0f, 50, 0.9f, 5, 0};
  runner.run(params);  // warm: the first call may set things up
  const Draws d = runner.run(params);
  const double per_row = static_cast<double>(d.counts.bytes_d2h) / rows;
  wb::testing::record_metric("d2h_bytes_per_row", step == Step::Fused ? 8.0 : per_row);
  const std::string head = failure_head(step, "bytes copied to the host", rows, vocab, params);
  if (step == Step::Fused) {
    const bool none_copied = d.counts.bytes_d2h == 0 && d.counts.memcpys == 0;
    CHECK_MESSAGE(none_copied,
                  head << "rule 7: sample_fused copied " << d.counts.bytes_d2h
                       << " bytes device-to-host itself (" << d.counts.summary()
                       << "); only the caller copies, and only tokens and confidences (8 bytes "
                          "a row).\nhint: the tokens and confidences are device pointers: "
                          "write them from the kernel.");
    return;
  }
  const std::size_t declared = runner.d2h_bytes_per_row();
  CHECK_MESSAGE(d.counts.bytes_d2h == declared * rows,
                head << "the sampler copied " << d.counts.bytes_d2h << " bytes device-to-host ("
                     << per_row << " a row), but d2h_bytes_per_row() says " << declared
                     << ".\nhint: count every cudaMemcpy*(DeviceToHost) of sample(), per row.");
  const std::size_t limit = step == Step::SortThenCpu
                                ? static_cast<std::size_t>(vocab) * 8 + 64
                                : static_cast<std::size_t>(ch07::TopCandidatesSampler::kMaxCandidates) * 8 + 64;
  CHECK_MESSAGE(d.counts.bytes_d2h <= limit * rows,
                head << per_row << " bytes a row came back; the most this step should copy is "
                     << limit << " (" << (step == Step::SortThenCpu ? "the sorted row: 4-byte key "
                                          "and 4-byte id per entry" : "kMaxCandidates candidates "
                                          "of 8 bytes")
                     << ", plus the row's uniform).\nhint: copy only what the CPU half reads.");
  // A call of fewer rows than max_rows (a decoder's last block, or a batch that shrinks):
  // d2h_bytes_per_row() is per row OF THE CALL, so 4 rows copy 4 rows' worth, not max_rows'
  // (256 bytes of slack: a small fixed copy per call, folded into the per-row figure above,
  // is not what this looks for; 12 rows too many are 98 KB for step 3, 14 MB for step 2).
  const int fewer = 4;
  const std::size_t slack = 256;
  const Draws f = runner.run(params, fewer);
  CHECK_MESSAGE(f.counts.bytes_d2h <= declared * fewer + slack,
                failure_head(step, "bytes copied to the host by a call of 4 rows (max_rows 16)",
                             fewer, vocab, params)
                    << "sample(rows = " << fewer << ") on an object built for max_rows = " << rows
                    << " copied " << f.counts.bytes_d2h << " bytes device-to-host ("
                    << static_cast<double>(f.counts.bytes_d2h) / fewer
                    << " a row of the call), but d2h_bytes_per_row() says " << declared
                    << " (at most " << declared * fewer + slack << " in all for 4 rows)"
                    << ".\nrule: a call copies what ITS rows need (chapter 02: the buffers are sized "
                       "for max_rows once; each call uses the first `rows` of them).\nhint: size every "
                       "cudaMemcpyAsync by the call's rows, not by max_rows.");
}

void rule7_no_sync_alloc_copy(Runner& runner, const SamplingParams& params) {
  const std::string head =
      failure_head(Step::Fused, "rule 7", runner.rows(), runner.vocab(), params);
  if (!wb::ApiCounter::available()) {
    wb::testing::record_note("CUPTI unavailable: " + wb::ApiCounter::unavailable_reason());
    return;
  }
  const Draws d = runner.run(params);
  const wb::ApiCounts& c = d.counts;
  const bool no_allocation = c.mallocs == 0 && c.frees == 0 && c.host_allocs == 0;
  const bool no_copy = c.bytes_h2d == 0 && c.bytes_d2h == 0;
  CHECK_MESSAGE(no_allocation,
                head << "rule 7: sample_fused allocated or freed memory (" << c.summary()
                     << ").\nhint: your scratch is the caller's workspace: ask for it in "
                        "fused_sampler_workspace_bytes.");
  CHECK_MESSAGE(c.syncs == 0,
                head << "rule 7: sample_fused synchronized (" << c.summary()
                     << ").\nhint: enqueue on the stream and return; the caller waits.");
  CHECK_MESSAGE(no_copy,
                head << "rule 7: sample_fused copied between host and device (" << c.summary()
                     << ").\nhint: pass the params to the kernel by value.");
}

void fused_rule7_and_graphs() {
  const int rows = 16, vocab = 151936;
  std::mt19937_64 rng = wb::rng_for("ch07/graph");
  const std::vector<float> logits = peaked_rows(rows, vocab, 2.0f, 30, 6.0f, rng);
  Runner runner(Step::Fused, logits, rows, vocab);
  const SamplingParams sampled{0.8f, 50, 0.9f, 77, 9};
  rule7_no_sync_alloc_copy(runner, sampled);
  rule7_no_sync_alloc_copy(runner, SamplingParams{0.0f, 0, 1.0f, 0, 0});
  const Draws direct = runner.run(sampled);

  // Captured into a CUDA graph, replayed: the same tokens as the direct call.
  wb::DeviceBuffer<int> tokens(rows);
  wb::DeviceBuffer<float> confidence(rows);
  cudaStream_t s = runner.stream();
  cudaGraph_t graph = nullptr;
  WB_CUDA(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
  try {
    ch07::sample_fused(runner.device_logits(), rows, vocab, sampled, tokens.data(),
                       confidence.data(), runner.workspace(), runner.workspace_bytes(), s);
  } catch (...) {
    cudaStreamEndCapture(s, &graph);
    if (graph) cudaGraphDestroy(graph);
    throw;
  }
  const cudaError_t end = cudaStreamEndCapture(s, &graph);
  if (end != cudaSuccess) {
    cudaGetLastError();
    FAIL_CHECK(failure_head(Step::Fused, "CUDA graph capture", rows, vocab, sampled)
               << "rule 7: sample_fused could not be captured into a CUDA graph ("
               << cudaGetErrorString(end)
               << ").\nhint: no synchronization, allocation or host copy inside; everything on "
                  "the stream you are given.");
    return;
  }
  cudaGraphExec_t exec = nullptr;
  WB_CUDA(cudaGraphInstantiate(&exec, graph, 0));
  for (int replay = 0; replay < 3; ++replay) {
    WB_CUDA(cudaMemsetAsync(tokens.data(), 0x7F, rows * sizeof(int), s));
    WB_CUDA(cudaGraphLaunch(exec, s));
    WB_CUDA(cudaStreamSynchronize(s));
    const std::vector<int> got = tokens.download();
    if (got != direct.tokens) {
      FAIL_CHECK(failure_head(Step::Fused, "CUDA graph replay", rows, vocab, sampled)
                 << "rule 7: replay " << replay + 1 << " of the captured call gave other tokens "
                    "than the direct call with the same arguments.\nhint: everything the call "
                    "depends on must be in its arguments (no state kept between calls).");
      break;
    }
  }
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
  check_integrity(runner, Step::Fused, "rule 7 and graphs");
}

// ---------------------------------------------------------------------------------------
// Rule 7 with calls at once. sample_fused keeps nothing of its own between its kernels: its
// scratch is the caller's workspace (or a block's shared memory). A server samples several
// batches at once, on several streams (or replays several graphs at once), and a buffer of
// the sampler's own (a __device__ array, a static allocation) is then written by two calls
// at once. Here a long call runs on one stream while eight short ones come and go on another,
// of higher priority (the GPU schedules its blocks first, so they run while the long call's
// blocks are still coming). Every row is 0 but one planted logit, at another column in every
// call and large enough to be the only token kept, so each row's token and confidence are
// known exactly, whatever the draw.

// Row r of a call planted with `salt` holds its planted logit at this column.
__host__ __device__ inline int planted_column(int row, int vocab, int salt) {
  return static_cast<int>((static_cast<long long>(row) * 7919 + salt) % vocab);
}

__global__ void plant_one_per_row(float* x, int rows, int vocab, int salt, float value) {
  const int r = blockIdx.x * blockDim.x + threadIdx.x;
  if (r < rows) x[static_cast<std::size_t>(r) * vocab + planted_column(r, vocab, salt)] = value;
}

std::string first_line_of(const std::exception& e) {
  const std::string text = e.what();
  return text.substr(0, text.find('\n'));
}

// One call: its rows (all 0 but the planted logit) and its outputs (poisoned), filled on `s`.
struct PlantedCall {
  int rows, vocab, salt;
  float value;
  std::string name;
  wb::DeviceBuffer<float> logits;
  wb::DeviceBuffer<int> tokens;
  wb::DeviceBuffer<float> confidence;

  PlantedCall(int rows_, int vocab_, int salt_, float value_, std::string name_, cudaStream_t s)
      : rows(rows_), vocab(vocab_), salt(salt_), value(value_), name(std::move(name_)),
        logits(static_cast<std::size_t>(rows_) * vocab_), tokens(rows_), confidence(rows_) {
    WB_CUDA(cudaMemsetAsync(logits.data(), 0, logits.bytes(), s));
    plant_one_per_row<<<(rows + 255) / 256, 256, 0, s>>>(logits.data(), rows, vocab, salt, value);
    WB_CHECK_LAUNCH("plant_one_per_row");
    WB_CUDA(cudaMemsetAsync(tokens.data(), 0x7F, tokens.bytes(), s));  // kPoisonToken
    confidence.poison(s);
  }
  // The planted token's probability at T = 1 (greedy's confidence is at T = 1 too).
  double planted_p() const {
    const double e = std::exp(static_cast<double>(value));
    return e / (e + (vocab - 1));
  }
  void launch(const SamplingParams& params, wb::DeviceBuffer<unsigned char>& workspace, cudaStream_t s) {
    ch07::sample_fused(logits.data(), rows, vocab, params, tokens.data(), confidence.data(),
                       workspace.data(), workspace.bytes(), s);
  }
};

void fused_two_calls_at_once() {
  if (wb::coverage::quick()) {
    wb::testing::mark_skipped("skipped under compute-sanitizer / WB_QUICK: the tools run one kernel at a "
                              "time, so two calls never overlap");
    return;
  }
  int least = 0, greatest = 0;
  WB_CUDA(cudaDeviceGetStreamPriorityRange(&least, &greatest));
  const wb::testing::OwnedStream stream_a(cudaStreamNonBlocking, least), stream_b(cudaStreamNonBlocking, greatest);
  const int vocab = 8192, short_rows = 16, short_calls = 8;
  struct Round {
    const char* what;
    SamplingParams params;
    int long_rows;
    float long_value, short_value;  // the planted logit: alone in the kept set
  };
  // Greedy: the argmax is the planted column. Sampled (top_p 0.9 alone): e^12 / (e^12 + 8191)
  // = 0.952 of the mass (0.982 for e^13), so the nucleus is the planted token alone.
  const Round rounds[] = {{"greedy", SamplingParams{0.0f, 0, 1.0f, 0, 0}, 16384, 1.0f, 2.0f},
                          {"sampled, top_p 0.9", SamplingParams{1.0f, 0, 0.9f, 43, 0}, 2048, 12.0f, 13.0f}};
  for (const Round& round : rounds) {
    std::vector<PlantedCall> calls;
    calls.reserve(1 + short_calls);
    calls.emplace_back(round.long_rows, vocab, 1, round.long_value,
                       "the call of " + shape_of(round.long_rows, vocab) + " on stream A", stream_a.s);
    for (int i = 0; i < short_calls; ++i)
      calls.emplace_back(short_rows, vocab, 2 + i, round.short_value,
                         "call " + std::to_string(i + 1) + " of " + std::to_string(short_calls) + " (" +
                             shape_of(short_rows, vocab) + ") on stream B",
                         stream_b.s);
    // A workspace for each stream (stream B's calls follow each other on theirs).
    wb::DeviceBuffer<unsigned char> workspace_a(ch07::fused_sampler_workspace_bytes(round.long_rows, vocab));
    wb::DeviceBuffer<unsigned char> workspace_b(ch07::fused_sampler_workspace_bytes(short_rows, vocab));
    WB_CUDA(cudaStreamSynchronize(stream_a.s));
    WB_CUDA(cudaStreamSynchronize(stream_b.s));

    // The long call, then the short ones while it runs.
    SamplingParams p = round.params;
    calls[0].launch(p, workspace_a, stream_a.s);
    for (int i = 1; i <= short_calls; ++i) {
      p.step = static_cast<std::uint64_t>(i);
      calls[i].launch(p, workspace_b, stream_b.s);
    }
    WB_CUDA(cudaStreamSynchronize(stream_a.s));
    WB_CUDA(cudaStreamSynchronize(stream_b.s));

    std::ostringstream head;
    head << "ch07 step 4 (sample_fused), two calls at once on two streams (" << round.what << ": "
         << shape_of(round.long_rows, vocab) << " on stream A, and " << short_calls << " calls of "
         << shape_of(short_rows, vocab) << " on stream B, of higher priority, while it runs), test seed "
         << wb::base_seed() << ": ";
    for (const PlantedCall& c : calls) {
      const std::vector<int> tokens = c.tokens.download();
      const std::vector<float> confidence = c.confidence.download();
      int wrong = 0, first = -1;
      for (int r = 0; r < c.rows; ++r) {
        const bool right = tokens[r] == planted_column(r, vocab, c.salt) &&
                           close_to(confidence[r], c.planted_p(), kConfidenceRtol);
        if (!right && wrong++ == 0) first = r;
      }
      if (wrong == 0) continue;
      const int token = tokens[first];
      std::string crossed;
      for (const PlantedCall& other : calls)
        if (&other != &c && first < other.rows && token == planted_column(first, vocab, other.salt))
          crossed = " Token " + std::to_string(token) + " is where " + other.name + " planted the maximum "
                    "of ITS row " + std::to_string(first) + ": the two calls' results crossed.";
      std::ostringstream s;
      s << head.str() << c.name << ": " << wrong << " of its " << c.rows << " rows are wrong; row " << first
        << " gave token " << token << (token == ch07::testing::kPoisonToken ? " (never written)" : "")
        << " with confidence " << confidence[first] << ", expected token "
        << planted_column(first, vocab, c.salt) << " with confidence " << c.planted_p()
        << " (every row is 0 but one logit of " << c.value << ", the only token kept)." << crossed
        << "\nrule 7: a call's scratch memory is the caller's workspace: two calls running at once, "
           "each with its own logits, outputs and workspace, must not see each other."
           "\nhint: sample_fused keeps nothing of its own. Partial results passed between its kernels "
           "or blocks (a row's per-block max, argmax and sum, counters, flags) go in the workspace "
           "(ask for the bytes in fused_sampler_workspace_bytes), or stay in shared memory (a "
           "cluster's distributed shared memory): a __device__ array or a static buffer is one for "
           "the whole process, and every call running at the time writes it.";
      FAIL_CHECK(s.str());
      return;
    }
  }
}

// ---------------------------------------------------------------------------------------
// Steps 2 and 3 are objects: what the constructor sets up on the device (every row's token ids,
// the rows' offsets for the segmented sort) must be there for the first sample(), on any stream.
// A constructor's plain <<<...>>> launches go to the legacy default stream, which a stream made
// with cudaStreamNonBlocking does not wait for, and the legacy stream may be busy with other
// work: here a kernel that holds it for 200 ms, launched just before the constructor. The first
// call (greedy, on a non-blocking stream) must return every row's argmax. A constructor that
// returns before its kernels ran sorts rows whose offsets and ids are still whatever the fresh
// allocations held (garbage tokens, or a fault, which is sticky: these cases come after every
// case that cannot fault but the "any shape" ones).
void first_call_after_the_constructor(Step step) {
  const int rows = 4, vocab = 32000;
  std::mt19937_64 rng = wb::rng_for("ch07/first-call-after-the-constructor");
  std::vector<float> logits;
  for (int r = 0; r < rows; ++r) {
    std::vector<float> row = normal_row(vocab, 2.0f, rng);
    row[1000 + 7919 * r] = *std::max_element(row.begin(), row.end()) + 1.0f;  // never column 0
    logits.insert(logits.end(), row.begin(), row.end());
  }
  const wb::DeviceBuffer<float> device_logits(logits);  // uploaded, the copy done
  const wb::testing::OwnedStream stream;                // non-blocking
  const SamplingParams params{0.0f, 0, 1.0f, 0, 0};
  Draws d;
  d.tokens.assign(rows, ch07::testing::kPoisonToken);
  d.confidence.assign(rows, std::nanf(""));
  const std::string head = failure_head(step, "the first call after the constructor, on a non-blocking stream "
                                              "while the legacy default stream is busy", rows, vocab, params);
  const std::string rule =
      "\nrule: an object is ready when its constructor returns: sample() on ANY stream (here one made with "
      "cudaStreamNonBlocking, which does not wait for the legacy default stream) must see everything the "
      "constructor set up on the device.\nhint: the constructor's kernels (token ids, row offsets) run on the "
      "legacy default stream, behind whatever is queued there: wait for them before the constructor returns "
      "(cudaDeviceSynchronize, once: the constructor is not the hot path), or make sample() wait for them "
      "(an event recorded after them, cudaStreamWaitEvent on the caller's stream).";
  wb::launch_spin_kernel(200e6, nullptr);  // the legacy default stream: busy for 200 ms
  try {
    if (step == Step::SortThenCpu) {
      ch07::SortThenCpuSampler sampler(rows, vocab);
      sampler.sample(device_logits.data(), rows, params, d.tokens.data(), d.confidence.data(), stream.s);
    } else {
      ch07::TopCandidatesSampler sampler(rows, vocab);
      sampler.sample(device_logits.data(), rows, params, d.tokens.data(), d.confidence.data(), stream.s);
    }
    WB_CUDA(cudaDeviceSynchronize());
  } catch (const wb::NotImplemented&) {
    throw;
  } catch (const std::exception& e) {
    FAIL_CHECK(head << "the call failed: " << first_line_of(e) << rule);
    return;
  }
  const std::string failure = check_draws(logits, vocab, params, expected_rows(logits, rows, vocab, params), d);
  if (!failure.empty()) FAIL_CHECK(head << failure << rule);
}

// ---------------------------------------------------------------------------------------
// Everything a call does goes on the caller's stream, for the steps that draw on the CPU too:
// their numbers (fill_draw_uniforms), kernels and copies. Every other case leaves the legacy
// default stream idle, so work put there by mistake (a launch without its stream argument,
// fill_draw_uniforms(..., 0)) starts at once, beside the call's own work on its non-blocking
// stream, and is done before anything reads it: right by luck. Here the legacy stream is busy
// (a kernel that holds it for 200 ms) while a sampled call runs on a non-blocking stream: work
// sent to the legacy stream waits behind it, and the call reads whatever its buffers held from
// the call before (a call with the same seed at another step, made first, so that every
// kernel is loaded and every buffer written once). Every row is {0, 0}, as in
// draws_use_the_rule4_number: the tokens show which side of 1/2 each row's number fell on.
// Left out under compute-sanitizer, which runs one kernel at a time.

// Host memory that a copy on a stream writes without involving any other stream.
struct PinnedHost {
  void* p = nullptr;
  explicit PinnedHost(std::size_t bytes) { WB_CUDA(cudaMallocHost(&p, std::max<std::size_t>(bytes, 1))); }
  ~PinnedHost() { cudaFreeHost(p); }
  PinnedHost(const PinnedHost&) = delete;
  PinnedHost& operator=(const PinnedHost&) = delete;
};

void draws_while_the_legacy_stream_is_busy(Step step) {
  if (wb::coverage::quick()) {
    wb::testing::mark_skipped("skipped under compute-sanitizer / WB_QUICK: the tools run one kernel at a "
                              "time, so a busy legacy stream delays every stream alike");
    return;
  }
  const int rows = 64, vocab = 2;
  const std::vector<float> logits(static_cast<std::size_t>(rows) * vocab, 0.0f);
  const wb::DeviceBuffer<float> device_logits(logits);
  const wb::testing::OwnedStream stream;  // non-blocking
  const SamplingParams before{1.0f, 0, 1.0f, 0xB5E707ull, 1};
  SamplingParams params = before;
  params.step = 2;
  std::vector<float> u_before, u;  // rule 4's numbers of both calls, computed while all is idle
  for (const SamplingParams& p : {before, params}) {
    wb::DeviceBuffer<float> numbers(rows);
    rule4_numbers<<<1, rows>>>(p.seed, p.step, rows, numbers.data());
    WB_CHECK_LAUNCH("rule4_numbers");
    (p.step == before.step ? u_before : u) = numbers.download();
  }
  std::unique_ptr<ch07::SortThenCpuSampler> sort_then_cpu;
  std::unique_ptr<ch07::TopCandidatesSampler> top_candidates;
  if (step == Step::SortThenCpu) sort_then_cpu = std::make_unique<ch07::SortThenCpuSampler>(rows, vocab);
  if (step == Step::TopCandidates) top_candidates = std::make_unique<ch07::TopCandidatesSampler>(rows, vocab);
  wb::DeviceBuffer<int> device_tokens(rows);
  wb::DeviceBuffer<float> device_confidence(rows);
  wb::DeviceBuffer<unsigned char> workspace(ch07::fused_sampler_workspace_bytes(rows, vocab));
  const PinnedHost host_tokens(rows * sizeof(int)), host_confidence(rows * sizeof(float));
  int* tokens = static_cast<int*>(host_tokens.p);
  float* confidence = static_cast<float*>(host_confidence.p);
  const auto call = [&](const SamplingParams& p) {
    std::fill(tokens, tokens + rows, ch07::testing::kPoisonToken);
    std::fill(confidence, confidence + rows, std::nanf(""));
    if (step == Step::SortThenCpu) {
      sort_then_cpu->sample(device_logits.data(), rows, p, tokens, confidence, stream.s);
    } else if (step == Step::TopCandidates) {
      top_candidates->sample(device_logits.data(), rows, p, tokens, confidence, stream.s);
    } else {
      WB_CUDA(cudaMemsetAsync(device_tokens.data(), 0x7F, device_tokens.bytes(), stream.s));  // kPoisonToken
      WB_CUDA(cudaMemsetAsync(device_confidence.data(), 0xFF, device_confidence.bytes(), stream.s));
      ch07::sample_fused(device_logits.data(), rows, vocab, p, device_tokens.data(), device_confidence.data(),
                         workspace.data(), workspace.bytes(), stream.s);
      // Read back on the call's stream, into pinned memory: nothing here waits for the legacy stream.
      WB_CUDA(cudaMemcpyAsync(tokens, device_tokens.data(), device_tokens.bytes(), cudaMemcpyDeviceToHost, stream.s));
      WB_CUDA(cudaMemcpyAsync(confidence, device_confidence.data(), device_confidence.bytes(),
                              cudaMemcpyDeviceToHost, stream.s));
      WB_CUDA(cudaStreamSynchronize(stream.s));
    }
  };
  const std::string head = failure_head(step, "a sampled call on a non-blocking stream while the legacy default "
                                              "stream is busy", rows, vocab, params);
  std::vector<int> got(rows);
  std::vector<float> got_confidence(rows);
  try {
    call(before);  // everything loaded and written once, with the numbers of step 1
    WB_CUDA(cudaDeviceSynchronize());
    wb::launch_spin_kernel(200e6, nullptr);  // the legacy default stream: busy for 200 ms
    call(params);
    got.assign(tokens, tokens + rows);  // as the call left them, before the busy kernel ends
    got_confidence.assign(confidence, confidence + rows);
    WB_CUDA(cudaDeviceSynchronize());
  } catch (const wb::NotImplemented&) {
    throw;
  } catch (const std::exception& e) {
    cudaDeviceSynchronize();
    FAIL_CHECK(head << "the call failed: " << first_line_of(e));
    return;
  }
  Draws d;
  d.tokens = got;
  d.confidence = got_confidence;
  const std::string failure = check_draws(logits, vocab, params, {expected_for(logits.data(), vocab, params)}, d);
  if (!failure.empty()) {
    FAIL_CHECK(head << failure);
    return;
  }
  // As in draws_use_the_rule4_number: each walk order ("first" drawn for u <= 1/2) against the
  // rows' numbers, rows within 1e-3 of 1/2 left out.
  const auto disagreements = [&](const std::vector<float>& numbers, int first) {
    int n = 0;
    for (int r = 0; r < rows; ++r)
      if (std::abs(numbers[r] - 0.5f) >= 1e-3f && got[r] != (numbers[r] <= 0.5f ? first : 1 - first)) ++n;
    return n;
  };
  const int first = disagreements(u, 0) <= disagreements(u, 1) ? 0 : 1;
  const int wrong = disagreements(u, first);
  if (wrong == 0) return;
  int r = 0;
  while (r + 1 < rows && (std::abs(u[r] - 0.5f) < 1e-3f || got[r] == (u[r] <= 0.5f ? first : 1 - first))) ++r;
  const int stale = std::min(disagreements(u_before, 0), disagreements(u_before, 1));
  FAIL_CHECK(head << "rule 4: row r draws with u = draw_uniform(seed, step, r) of THIS call, but " << wrong << " of "
                  << rows << " rows drew on the other side of 1/2 (row " << r << ": token " << got[r]
                  << ", u = " << u[r] << ")"
                  << (stale == 0 ? "; every row drew as the call before (step " + std::to_string(before.step) +
                                       ") would have: its numbers were still in the buffer"
                                 : std::string())
                  << ". While the legacy default stream was busy with a 200 ms kernel, the call ran on a stream "
                     "made with cudaStreamNonBlocking: work of the call sent to the legacy stream was still "
                     "waiting behind that kernel when the call read its results.\nrule: a call enqueues "
                     "everything on the caller's stream (and steps 2 and 3 wait for that stream only).\nhint: pass "
                     "the call's stream to every launch, copy and helper: fill_draw_uniforms(u, rows, seed, step, "
                     "stream), kernel<<<grid, block, shared, stream>>>. A launch without a stream goes to the legacy "
                     "default stream, which a non-blocking stream does not wait for.");
}

// ---------------------------------------------------------------------------------------
// runner.run(params) for a call every step must take; empty when it threw std::invalid_argument
// (a refusal), and then the case fails with `head`, what it said and `rule_and_hint`. A step
// still to do passes NotImplemented on ("to do").
std::optional<Draws> run_not_refused(Runner& runner, const SamplingParams& params, const std::string& head,
                                     const std::string& rule_and_hint) {
  try {
    return runner.run(params);
  } catch (const wb::NotImplemented&) {
    throw;
  } catch (const std::invalid_argument& ex) {
    FAIL_CHECK(head << "the call threw: " << first_line_of(ex) << rule_and_hint);
    return std::nullopt;
  }
}

// Step 3's limit is inclusive: its kMaxCandidates = 1024 candidates hold the whole kept set
// whenever 1 <= top_k <= kMaxCandidates, so top_k = 1024 is sampled exactly, not refused (it
// refuses top_k from 1025 to vocab - 1: bad_arguments checks 1500). Every step runs the row:
// a flat 2000-wide row, top_k = 1024 alone and then with a top_p that keeps 900 of them.
void top_k_at_the_candidate_limit(Step step) {
  const int vocab = 2000, rows = rows_under_racecheck(64), k = ch07::TopCandidatesSampler::kMaxCandidates;
  std::mt19937_64 rng(0x1024C07ull);  // fixed, as the membership probes
  const std::vector<float> row = normal_row(vocab, 0.3f, rng);
  Runner runner(step, repeat_rows(row, rows), rows, vocab);
  SamplingParams with_top_p{1.0f, k, 1.0f, 38, 0};
  with_top_p.top_p = top_p_for_nucleus(row, with_top_p, 900);
  for (const SamplingParams& params : {SamplingParams{1.0f, k, 1.0f, 37, 0}, with_top_p}) {
    const Expected e = expected_for(row.data(), vocab, params);
    const int calls = wb::coverage::quick() ? 1 : 4;
    for (int call = 0; call < calls; ++call) {
      SamplingParams p = params;
      p.step = static_cast<std::uint64_t>(call);
      const std::string head = failure_head(step, "top_k = kMaxCandidates (1024), step 3's limit", rows, vocab, p);
      const std::optional<Draws> d = run_not_refused(
          runner, p, head,
          "\nrule: top_k = kMaxCandidates keeps exactly the " + std::to_string(k) +
              " candidates step 3 copies back, so it is sampled exactly, not refused. Step 3 refuses only what it "
              "cannot hold: top_k above kMaxCandidates and below vocab, top_k and top_p both off on a row longer "
              "than kMaxCandidates, a nucleus longer than kMaxCandidates.\nhint: the limit is inclusive: refuse k > "
              "kMaxCandidates, not k >= kMaxCandidates.");
      if (!d) return;
      const std::string failure = check_draws(row, vocab, p, {e}, *d);
      if (!failure.empty()) {
        FAIL_CHECK(head << failure);
        return;
      }
    }
  }
  check_integrity(runner, step, "top_k = kMaxCandidates");
}

// ---------------------------------------------------------------------------------------
// A vocabulary of one token is a valid shape (check_sampling_args asks for vocab >= 1), and
// rule 5 holds there too: the lone logit is checked like any other. A finite one is token 0
// with confidence 1; a NaN (either sign), +inf or -inf is a bad row (token -1, confidence
// NaN). Greedy, top_k = 1, sampled with top_p, and top_k past the vocabulary.
void rows_of_one_token(Step step) {
  const float nan = std::nanf("");
  const std::vector<float> logits = {0.5f, nan, 3.0f, kInf, -kInf, -nan, -1e30f, 1e30f};
  const int rows = static_cast<int>(logits.size()), vocab = 1;
  Runner runner(step, logits, rows, vocab);
  for (const SamplingParams params : {SamplingParams{0.0f, 0, 1.0f, 5, 0}, SamplingParams{0.7f, 1, 1.0f, 5, 1},
                                      SamplingParams{1.0f, 0, 0.5f, 5, 2}, SamplingParams{2.0f, 5, 1.0f, 5, 3}}) {
    const std::string head = failure_head(step, "rows of a one-token vocabulary (vocab = 1)", rows, vocab, params);
    const std::optional<Draws> d = run_not_refused(
        runner, params, head, "\nrule: vocab = 1 is a valid shape: every row is sampled (rule 6 refuses only vocab < 1).");
    if (!d) return;
    const std::string failure =
        check_draws(logits, vocab, params, expected_rows(logits, rows, vocab, params), *d);
    if (!failure.empty()) {
      FAIL_CHECK(head << failure
                      << "\nthese rows: one logit each, {0.5, NaN, 3, +inf, -inf, -NaN, -1e30, 1e30}."
                         "\nrule: a row of one token still goes through rule 5: a finite logit gives token 0 "
                         "with confidence 1, a NaN, +inf or -inf one gives token -1 and confidence NaN."
                         "\nhint: no shortcut for vocab = 1 that skips the bad-row check (\"one token, nothing "
                         "to choose\"): the check is what the row needs.");
      return;
    }
  }
  check_integrity(runner, step, "vocab = 1");
}

// top_k >= vocab keeps every token, as top_k = 0 does (sampler.cuh: "k >= vocab keeps all").
// A short row (100 tokens, fewer than step 3's kMaxCandidates) at top_k = vocab, vocab + 1
// and far past it, with top_p off and on: every step samples it (step 3's candidates hold
// the whole row: nothing to refuse).
void top_k_at_or_past_vocab(Step step) {
  const int vocab = 100, rows = 8;
  std::mt19937_64 rng(0x70C0DE07ull);  // fixed, as the membership probes
  const std::vector<float> row = normal_row(vocab, 1.0f, rng);
  const std::vector<float> logits = repeat_rows(row, rows);
  Runner runner(step, logits, rows, vocab);
  for (const int k : {vocab, vocab + 1, 5000}) {
    for (const float top_p : {1.0f, 0.8f}) {
      const SamplingParams params{1.0f, k, top_p, 40, static_cast<std::uint64_t>(k)};
      const std::string head = failure_head(step, "top_k >= vocab keeps every token", rows, vocab, params);
      const std::optional<Draws> d = run_not_refused(
          runner, params, head,
          "\nrule: top_k >= vocab keeps every token, exactly as top_k = 0 does; here that is " + std::to_string(vocab) +
              " tokens, fewer than step 3's " + std::to_string(ch07::TopCandidatesSampler::kMaxCandidates) +
              " candidates, so every step samples it and none refuses it.\nhint: turn top_k into the number of "
              "tokens it keeps first, k = (top_k == 0 || top_k >= vocab) ? vocab : top_k, and compare that k (with "
              "the candidates, with a rank), never the raw argument.");
      if (!d) return;
      const std::string failure = check_draws(logits, vocab, params, {expected_for(row.data(), vocab, params)}, *d);
      if (!failure.empty()) {
        FAIL_CHECK(head << failure
                        << "\nrule: top_k >= vocab keeps every token, exactly as top_k = 0 does.");
        return;
      }
    }
  }
  check_integrity(runner, step, "top_k >= vocab");
}

// ---------------------------------------------------------------------------------------
// Rule 7 for step 4's greedy calls (T = 0, top_k = 1), which may take a kernel of their own:
// its launch goes on the caller's stream too. As in draws_while_the_legacy_stream_is_busy: the
// legacy default stream is busy with a 200 ms kernel while greedy calls run on a non-blocking
// stream and are read back on it; a launch sent to the legacy stream (a cudaLaunchConfig_t
// whose stream was left 0, a <<<grid, block>>> without its stream) is still waiting when the
// results are read. Every row is 0 but one planted logit (PlantedCall), so each row's token and
// confidence are known exactly. Left out under compute-sanitizer, which runs one kernel at a time.
void fused_greedy_while_the_legacy_stream_is_busy() {
  if (wb::coverage::quick()) {
    wb::testing::mark_skipped("skipped under compute-sanitizer / WB_QUICK: the tools run one kernel at a "
                              "time, so a busy legacy stream delays every stream alike");
    return;
  }
  const int rows = 64, vocab = 4096;
  const wb::testing::OwnedStream stream;  // non-blocking
  PlantedCall planted(rows, vocab, 3, 2.0f, "greedy", stream.s);
  wb::DeviceBuffer<unsigned char> workspace(ch07::fused_sampler_workspace_bytes(rows, vocab));
  const PinnedHost host_tokens(rows * sizeof(int)), host_confidence(rows * sizeof(float));
  int* tokens = static_cast<int*>(host_tokens.p);
  float* confidence = static_cast<float*>(host_confidence.p);
  const SamplingParams calls[] = {SamplingParams{0.0f, 0, 1.0f, 0, 0}, SamplingParams{1.0f, 1, 1.0f, 5, 1}};
  std::vector<std::vector<int>> got_tokens;
  std::vector<std::vector<float>> got_confidence;
  try {
    for (const SamplingParams& p : calls) planted.launch(p, workspace, stream.s);  // everything loaded once
    WB_CUDA(cudaDeviceSynchronize());
    wb::launch_spin_kernel(200e6, nullptr);  // the legacy default stream: busy for 200 ms
    for (const SamplingParams& p : calls) {
      std::fill(tokens, tokens + rows, ch07::testing::kPoisonToken);
      std::fill(confidence, confidence + rows, std::nanf(""));
      WB_CUDA(cudaMemsetAsync(planted.tokens.data(), 0x7F, planted.tokens.bytes(), stream.s));  // kPoisonToken
      WB_CUDA(cudaMemsetAsync(planted.confidence.data(), 0xFF, planted.confidence.bytes(), stream.s));
      planted.launch(p, workspace, stream.s);
      // Read back on the call's stream, into pinned memory: nothing here waits for the legacy stream.
      WB_CUDA(cudaMemcpyAsync(tokens, planted.tokens.data(), planted.tokens.bytes(), cudaMemcpyDeviceToHost, stream.s));
      WB_CUDA(cudaMemcpyAsync(confidence, planted.confidence.data(), planted.confidence.bytes(),
                              cudaMemcpyDeviceToHost, stream.s));
      WB_CUDA(cudaStreamSynchronize(stream.s));
      got_tokens.emplace_back(tokens, tokens + rows);  // as the call left them, before the busy kernel ends
      got_confidence.emplace_back(confidence, confidence + rows);
    }
    WB_CUDA(cudaDeviceSynchronize());
  } catch (const wb::NotImplemented&) {
    throw;
  } catch (const std::exception& e) {
    cudaDeviceSynchronize();
    FAIL_CHECK(failure_head(Step::Fused, "a greedy call on a non-blocking stream while the legacy default stream "
                                         "is busy", rows, vocab, calls[0])
               << "the call failed: " << first_line_of(e));
    return;
  }
  for (std::size_t c = 0; c < got_tokens.size(); ++c) {
    for (int r = 0; r < rows; ++r) {
      const int token = got_tokens[c][r];
      const int want = planted_column(r, vocab, planted.salt);
      if (token == want && close_to(got_confidence[c][r], planted.planted_p(), kConfidenceRtol)) continue;
      FAIL_CHECK(failure_head(Step::Fused, "a greedy call on a non-blocking stream while the legacy default stream "
                                           "is busy", rows, vocab, calls[c])
                 << "row " << r << " gave token " << token
                 << (token == ch07::testing::kPoisonToken ? " (never written when the call's stream read it)" : "")
                 << " with confidence " << got_confidence[c][r] << ", expected token " << want << " with confidence "
                 << planted.planted_p() << " (every row is 0 but one logit of " << planted.value
                 << "). While the legacy default stream was busy with a 200 ms kernel, the greedy call ran on a "
                    "stream made with cudaStreamNonBlocking and its results were read back on that stream."
                    "\nrule 7: sample_fused enqueues everything on the caller's stream, greedy calls (T = 0 or "
                    "top_k = 1) as well as sampled ones (the sampled calls' own case passed or comes next)."
                    "\nhint: a launch without its stream goes to the legacy default stream, which a non-blocking "
                    "stream does not wait for: set config.stream = stream in every cudaLaunchConfig_t (a "
                    "zero-initialized config launches on stream 0), and pass the stream in every <<<grid, block, "
                    "shared, stream>>>.");
      return;
    }
  }
}

// ---------------------------------------------------------------------------------------
// sampler.cuh asks for logits in device memory, not for aligned logits: a caller may hand a
// view (the logits of one sequence inside a batch's buffer). Every other test's logits start on
// a 256-byte boundary, and with vocab a multiple of 4 every row then starts on a 16-byte one, so
// a float4 load whose alignment was worked out from row * vocab alone passes them. Here the
// logits start one float past a 16-byte boundary, vocab 8192: no row is aligned. Greedy and
// sampled, each row's token checked against the contract. (A misaligned float4 load is a sticky
// fault: these cases come with the ones that may fault, before the "any shape" ones.)
void logits_one_float_past_a_boundary(Step step) {
  const int rows = 4, vocab = 8192;
  std::mt19937_64 rng = wb::rng_for("ch07/unaligned-logits");
  const std::vector<float> logits = peaked_rows(rows, vocab, 2.0f, 8, 3.0f, rng);
  std::vector<float> padded(1, std::nanf(""));  // the float before the view: read, it makes the row bad
  padded.insert(padded.end(), logits.begin(), logits.end());
  const wb::DeviceBuffer<float> buffer(padded);
  const float* view = buffer.data() + 1;
  const wb::testing::OwnedStream stream;
  for (const SamplingParams& params : {SamplingParams{0.0f, 0, 1.0f, 0, 0}, SamplingParams{1.0f, 40, 0.95f, 36, 0}}) {
    const std::string head = failure_head(step, "logits one float past a 16-byte boundary (a view)", rows, vocab, params);
    Draws d;
    d.tokens.assign(rows, ch07::testing::kPoisonToken);
    d.confidence.assign(rows, std::nanf(""));
    try {
      if (step == Step::SortThenCpu) {
        ch07::SortThenCpuSampler sampler(rows, vocab);
        sampler.sample(view, rows, params, d.tokens.data(), d.confidence.data(), stream.s);
      } else if (step == Step::TopCandidates) {
        ch07::TopCandidatesSampler sampler(rows, vocab);
        sampler.sample(view, rows, params, d.tokens.data(), d.confidence.data(), stream.s);
      } else {
        wb::DeviceBuffer<int> tokens(rows);
        wb::DeviceBuffer<float> confidence(rows);
        WB_CUDA(cudaMemsetAsync(tokens.data(), 0x7F, tokens.bytes(), stream.s));  // kPoisonToken
        WB_CUDA(cudaMemsetAsync(confidence.data(), 0xFF, confidence.bytes(), stream.s));
        wb::DeviceBuffer<unsigned char> workspace(ch07::fused_sampler_workspace_bytes(rows, vocab));
        ch07::sample_fused(view, rows, vocab, params, tokens.data(), confidence.data(), workspace.data(),
                           workspace.bytes(), stream.s);
        WB_CUDA(cudaStreamSynchronize(stream.s));
        d.tokens = tokens.download();
        d.confidence = confidence.download();
      }
      WB_CUDA(cudaStreamSynchronize(stream.s));
    } catch (const wb::NotImplemented&) {
      throw;
    } catch (const std::exception& e) {
      FAIL_CHECK(head << "the call failed: " << first_line_of(e)
                      << "\nrule: logits may start at any float in device memory (a view into a larger "
                         "buffer).\nhint: a float4 load needs a 16-byte aligned address: work out each row's "
                         "alignment from its own address, reinterpret_cast<uintptr_t>(logits + row * vocab) % 16, "
                         "not from row * vocab alone, and load the floats before the first boundary one by one.");
      return;
    }
    const std::string failure = check_draws(logits, vocab, params, expected_rows(logits, rows, vocab, params), d);
    if (!failure.empty()) {
      FAIL_CHECK(head << failure);
      return;
    }
  }
}

// ---------------------------------------------------------------------------------------
// Any shape: steps 2 and 3 take any max_rows (max_rows x vocab within an int, CUB's item
// count); step 4 has no max_rows and no limit on rows x vocab. These are last in the file
// (before the kernel coverage): a fault is a sticky CUDA error that ends every later test of
// the process.

// 65537 rows (an odd vocab: every alignment), more than a grid's y or z dimension holds
// (65535): a launch that puts the rows on blockIdx.y fails.
void more_rows_than_grid_y(Step step) {
  if (wb::coverage::quick()) {
    wb::testing::mark_skipped("skipped: the 65537-row case is left out under compute-sanitizer / WB_QUICK");
    return;
  }
  const Shape s{65537, 33};
  const std::vector<float>& logits = batch_logits("ch07/more-rows-than-grid-y", s, 2.0f, 3, 0, 0.0f);
  Runner runner(step, logits, s.rows, s.vocab);
  const std::string rule =
      "rule: any shape: this call has 65537 rows, more than a grid's y or z dimension holds "
      "(65535 blocks).\nhint: put the rows on gridDim.x (up to 2^31 - 1 blocks: rows x the "
      "blocks of a row, a cluster's blocks consecutive), or loop over the rows.";
  for (const SamplingParams params : {SamplingParams{0.0f, 0, 1.0f, 1, 0}, SamplingParams{0.8f, 5, 0.9f, 9, 2}}) {
    const std::string head = failure_head(step, "more rows than a grid's y dimension holds", s.rows,
                                          s.vocab, params);
    Draws d;
    try {
      d = runner.run(params);
    } catch (const wb::NotImplemented&) {
      throw;
    } catch (const std::exception& e) {
      (void)cudaGetLastError();  // a launch error is not sticky: clear it for the next test
      FAIL_CHECK(head << "the call failed: " << first_line_of(e) << "\n" << rule);
      return;
    }
    const std::string failure =
        check_draws(logits, s.vocab, params, expected_rows(logits, s.rows, s.vocab, params), d);
    if (!failure.empty()) {
      const int row = std::atoi(failure.c_str() + 4);  // check_draws says "row R: ..."
      FAIL_CHECK(head << failure << (row >= 65535 ? "\n" + rule : std::string()));
      return;
    }
  }
  check_integrity(runner, step, "more rows than a grid's y dimension holds");
}

// 14144 x 151936 = 2148982784 logits (8.6 GB): row * vocab passes 2^31 from row 14135 on. Each
// row's logits are uniform in [-8, 8) but one, planted at 18: the argmax, and with top_k 50 +
// top_p 0.9 the only token kept (e^18 is 99.8% of the top 50's mass), so every row's token
// is known; the confidence is checked on some rows against double precision. Last, a second
// maximum in every row: each row's draw then shows which rule-4 number it used.
void fused_more_than_2_31_logits() {
  if (wb::coverage::quick()) {
    wb::testing::mark_skipped("skipped: the 2^31-logit case is left out under compute-sanitizer / WB_QUICK");
    return;
  }
  const int rows = 14144, vocab = 151936, salt = 5;
  const float planted = 18.0f;
  const std::size_t count = static_cast<std::size_t>(rows) * vocab;
  const int boundary = static_cast<int>(((1ull << 31) + vocab - 1) / vocab);  // 14135
  const std::size_t workspace_bytes = ch07::fused_sampler_workspace_bytes(rows, vocab);
  {
    const std::size_t need = count * sizeof(float) + workspace_bytes + (1ull << 30);
    std::size_t free_bytes = 0, total_bytes = 0;
    WB_CUDA(cudaMemGetInfo(&free_bytes, &total_bytes));
    if (free_bytes < need) {
      wb::testing::mark_skipped("skipped: the 2^31-logit case needs " + std::to_string((need >> 30) + 1) +
                                " GB of free device memory, this GPU has " + std::to_string(free_bytes >> 30) +
                                " GB");
      return;
    }
  }
  const std::string what = "more than 2^31 logits (" + std::to_string(count) + ")";
  const std::string rule =
      "rule: any shape: sample_fused has no limit on rows x vocab, and row * vocab passes 2^31 from row " +
      std::to_string(boundary) + " on here.\nhint: compute offsets in 64 bits, logits + "
      "static_cast<size_t>(row) * vocab; an int product wraps around to a negative offset.";
  std::string head = failure_head(Step::Fused, what, rows, vocab, SamplingParams{0.0f, 0, 1.0f, 0, 0});
  try {
    wb::DeviceBuffer<float> logits(count);
    wb::GuardedBuffer<int> tokens(rows);
    wb::GuardedBuffer<float> confidence(rows);
    wb::DeviceBuffer<unsigned char> workspace(workspace_bytes);
    wb::testing::OwnedStream stream;
    wb::testing::fill_hashed_uniform<<<4096, 256, 0, stream.s>>>(logits.data(), count, wb::base_seed(), -8.0f,
                                                                 8.0f);
    WB_CHECK_LAUNCH("fill_hashed_uniform");
    plant_one_per_row<<<(rows + 255) / 256, 256, 0, stream.s>>>(logits.data(), rows, vocab, salt, planted);
    WB_CHECK_LAUNCH("plant_one_per_row");
    // The confidence of some rows (the first and last, both sides of the boundary, some in
    // between) is checked against double precision: Z = sum exp(x - max), the max the planted 18.
    std::vector<int> some = {0, 1, boundary - 1, boundary, boundary + 1, rows - 2, rows - 1};
    for (int i = 1; i <= 6; ++i) some.push_back(rows * i / 7);
    std::map<int, double> want_p;
    {
      std::vector<float> row(vocab);
      for (const int r : some) {
        WB_CUDA(cudaMemcpyAsync(row.data(), logits.data() + static_cast<std::size_t>(r) * vocab,
                                vocab * sizeof(float), cudaMemcpyDeviceToHost, stream.s));
        WB_CUDA(cudaStreamSynchronize(stream.s));
        double z = 0;
        for (const float x : row) z += std::exp(static_cast<double>(x) - planted);
        want_p[r] = 1.0 / z;
      }
    }
    for (const SamplingParams params : {SamplingParams{0.0f, 0, 1.0f, 0, 0}, SamplingParams{1.0f, 50, 0.9f, 61, 0}}) {
      head = failure_head(Step::Fused, what, rows, vocab, params);
      WB_CUDA(cudaMemsetAsync(tokens.data(), 0x7F, tokens.bytes(), stream.s));  // kPoisonToken
      confidence.poison(stream.s);
      ch07::sample_fused(logits.data(), rows, vocab, params, tokens.data(), confidence.data(),
                         workspace.data(), workspace.bytes(), stream.s);
      WB_CUDA(cudaStreamSynchronize(stream.s));
      const std::vector<int> got = tokens.download();
      const std::vector<float> conf = confidence.download();
      int wrong = 0, first = -1;
      for (int r = 0; r < rows; ++r)
        if (got[r] != planted_column(r, vocab, salt) && wrong++ == 0) first = r;
      if (wrong > 0) {
        std::ostringstream s;
        s << head << wrong << " rows gave another token than their planted maximum; the first is row "
          << first << ": token " << got[first]
          << (got[first] == ch07::testing::kPoisonToken ? " (never written)" : "") << ", expected "
          << planted_column(first, vocab, salt) << " (logit " << planted << ", every other one in [-8, 8)).";
        if (first >= boundary)
          s << " The rows before row " << boundary << " are right.\n" << rule;
        else
          s << "\nhint: wrong before row " << boundary << " too, so not (only) the 64-bit offsets.";
        FAIL_CHECK(s.str());
        return;
      }
      for (const auto& [r, want] : want_p) {
        if (close_to(conf[r], want, kConfidenceRtol)) continue;
        FAIL_CHECK(head << "row " << r << " gave the right token with confidence " << conf[r]
                        << ", expected " << want << " (under the softmax of its whole row)."
                        << (r >= boundary ? " The rows checked before row " + std::to_string(boundary) +
                                                " are right.\n" + rule
                                          : std::string()));
        return;
      }
      const std::string overrun = tokens.overrun("tokens") + confidence.overrun("confidence");
      if (!overrun.empty()) {
        FAIL_CHECK(head << "sample_fused " << overrun
                        << "\nhint: write tokens[r] and confidence[r] only for r < rows.");
        return;
      }
    }
    // Rule 4 at this size: a second 18 beside every row's planted one (two equal maxima, the only
    // tokens top_k 50 + top_p 0.9 keep), so each row's token shows which side of 1/2 its number
    // fell on, as in draws_use_the_rule4_number. A call launched as several batches of rows (to keep
    // int offsets within each) must still draw row r with draw_uniform(seed, step, r), r its row
    // in the CALL; with this seed, 6 of the 10 rows past a batch boundary at row 14134 fall on
    // the other side of 1/2 than the rows 0 to 9 whose numbers a batch-local index would reuse.
    const SamplingParams params{1.0f, 50, 0.9f, 61, 0};
    head = failure_head(Step::Fused, what + ", two equal maxima in every row", rows, vocab, params);
    plant_one_per_row<<<(rows + 255) / 256, 256, 0, stream.s>>>(logits.data(), rows, vocab, salt + 1, planted);
    WB_CHECK_LAUNCH("plant_one_per_row");
    WB_CUDA(cudaMemsetAsync(tokens.data(), 0x7F, tokens.bytes(), stream.s));  // kPoisonToken
    ch07::sample_fused(logits.data(), rows, vocab, params, tokens.data(), confidence.data(),
                       workspace.data(), workspace.bytes(), stream.s);
    wb::DeviceBuffer<float> numbers(rows);
    rule4_numbers<<<(rows + 255) / 256, 256, 0, stream.s>>>(params.seed, params.step, rows, numbers.data());
    WB_CHECK_LAUNCH("rule4_numbers");
    WB_CUDA(cudaStreamSynchronize(stream.s));
    const std::vector<int> got = tokens.download();
    const std::vector<float> u = numbers.download();
    // wrong[0]: rows against a walk that draws the lower column for u <= 1/2; wrong[1]: the higher.
    int wrong[2] = {0, 0}, example[2] = {-1, -1};
    for (int r = 0; r < rows; ++r) {
      const int a = planted_column(r, vocab, salt), b = planted_column(r, vocab, salt + 1);
      if (got[r] != a && got[r] != b) {
        FAIL_CHECK(head << "row " << r << " gave token " << got[r] << ", not one of its two maxima (columns " << a
                        << " and " << b << ", logit " << planted << ", the only tokens kept)."
                        << (r >= boundary ? "\n" + rule : std::string()));
        return;
      }
      if (std::abs(u[r] - 0.5f) < 1e-3f) continue;  // how u * mass rounds there is the sampler's
      for (int first = 0; first < 2; ++first)
        if (got[r] != ((u[r] <= 0.5f) == (first == 0) ? std::min(a, b) : std::max(a, b)) && wrong[first]++ == 0)
          example[first] = r;
    }
    if (wrong[0] > 0 && wrong[1] > 0) {
      const int first = wrong[0] <= wrong[1] ? 0 : 1, r = example[first];
      FAIL_CHECK(head << "rule 4: row r of a call draws with u = draw_uniform(seed, step, r). Every row here "
                         "holds two equal maxima, so a walk that puts the " << (first == 0 ? "lower" : "higher")
                      << " column first draws it for u <= 1/2 and the other above, yet " << wrong[first] << " of "
                      << rows << " rows drew the other one; the first is row " << r << " (token " << got[r]
                      << ", u = " << u[r] << ").\nhint: r is the row's index in the whole call: a call "
                         "launched as several batches of rows passes each batch's first row to its kernel "
                         "and draws with draw_uniform(seed, step, first_row + row).");
    }
  } catch (const wb::NotImplemented&) {
    throw;
  } catch (const std::exception& e) {
    FAIL_CHECK(head << "the call failed: " << first_line_of(e) << "\n" << rule);
    // A fault is sticky: nothing more can run on this device (this case is last for that).
  }
}

}  // namespace

// ---------------------------------------------------------------------------------------
// The test cases: each check, once per step it applies to.

namespace {
// racecheck looks for hazards in shared memory, and step 1 (the CPU sampler) launches no
// kernel: under racecheck its cases would check nothing and take minutes.
bool skip_cpu_step_under_racecheck() {
  if (!wb::coverage::racecheck()) return false;
  wb::testing::mark_skipped("skipped under racecheck: step 1 runs on the CPU (no shared memory to check)");
  return true;
}

// Step 1 (sample_cpu) is given code: its cases check the oracle that steps 2-4 are held to,
// in every build but the student's, where they would earn points for code the student did
// not write (and a fresh clone would read "in progress" instead of "to do").
bool skip_given_step_for_student() {
  if (wb::coverage::this_build() != "student") return false;
  wb::testing::mark_skipped("skipped: step 1 (sample_cpu) is given code, not graded; the reference build checks it");
  return true;
}
}  // namespace

#define WB_CH07_FOR_EVERY_STEP(title, function)                                  \
  TEST_CASE("step 1 (CPU sampler): " title) {                                    \
    WB_REQUIRE_GPU();                                                            \
    if (skip_given_step_for_student() || skip_cpu_step_under_racecheck()) return; \
    function(Step::Cpu);                                                         \
  }                                                                              \
  TEST_CASE("step 2 (sort, then the CPU): " title) {                             \
    WB_REQUIRE_GPU();                                                            \
    function(Step::SortThenCpu);                                                 \
  }                                                                              \
  TEST_CASE("step 3 (top candidates): " title) {                                 \
    WB_REQUIRE_GPU();                                                            \
    function(Step::TopCandidates);                                               \
  }                                                                              \
  TEST_CASE("step 4 (fused): " title) {                                          \
    WB_REQUIRE_GPU();                                                            \
    function(Step::Fused);                                                       \
  }

WB_CH07_FOR_EVERY_STEP("greedy and top_k = 1 return the argmax, lowest index on ties, on every shape",
                       greedy_on_every_shape)
WB_CH07_FOR_EVERY_STEP("greedy finds a max in the first or last columns of a 50257-wide row",
                       greedy_at_the_ends_of_a_row)
WB_CH07_FOR_EVERY_STEP("greedy keeps the lowest index of two equal maxima 1 to 4096 columns apart",
                       greedy_ties_close_together)
WB_CH07_FOR_EVERY_STEP("sampling on every shape stays in the kept set, with the right confidence",
                       sampling_on_every_shape)
WB_CH07_FOR_EVERY_STEP("no token outside the exact top_k / top_p set", membership)
WB_CH07_FOR_EVERY_STEP("top_k = 1024 (step 3's kMaxCandidates) is sampled exactly, not refused",
                       top_k_at_the_candidate_limit)
WB_CH07_FOR_EVERY_STEP("top_k >= vocab keeps every token, as top_k = 0 does", top_k_at_or_past_vocab)
WB_CH07_FOR_EVERY_STEP("a one-token vocabulary: rule 5 still holds (vocab = 1)", rows_of_one_token)
WB_CH07_FOR_EVERY_STEP("draws follow the exact distribution (chi-square)", distributions)
WB_CH07_FOR_EVERY_STEP("the draw never steps past the last kept token", draw_never_steps_past_the_kept_set)
WB_CH07_FOR_EVERY_STEP("the same (seed, step) gives the same tokens, whatever the batch", determinism)
WB_CH07_FOR_EVERY_STEP("rows, steps and seeds draw independently", independence)
WB_CH07_FOR_EVERY_STEP("row r draws with draw_uniform(seed, step, r) itself", draws_use_the_rule4_number)
WB_CH07_FOR_EVERY_STEP("a call reads the logits as they are (overwritten in place, same pointer)",
                       logits_read_at_every_call)
WB_CH07_FOR_EVERY_STEP("bad rows: NaN, +inf, all -inf", bad_rows)
WB_CH07_FOR_EVERY_STEP("bad arguments throw std::invalid_argument naming them", bad_arguments)

TEST_CASE("step 2 (sort, then the CPU): bytes copied to the host per row") {
  WB_REQUIRE_GPU();
  bytes_to_host(Step::SortThenCpu);
}
TEST_CASE("step 3 (top candidates): bytes copied to the host per row") {
  WB_REQUIRE_GPU();
  bytes_to_host(Step::TopCandidates);
}
TEST_CASE("step 4 (fused): only tokens and confidences leave the device") {
  WB_REQUIRE_GPU();
  bytes_to_host(Step::Fused);
}
TEST_CASE("step 4 (fused): rule 7, no sync, allocation or copy inside; capturable in a CUDA graph") {
  WB_REQUIRE_GPU();
  fused_rule7_and_graphs();
}
TEST_CASE("step 4 (fused): rule 7, two calls at once on two streams each get their own answers") {
  WB_REQUIRE_GPU();
  fused_two_calls_at_once();
}
TEST_CASE("step 1 (CPU sampler): the result does not depend on the number of threads") {
  WB_REQUIRE_GPU();
  if (skip_given_step_for_student()) return;
  const int rows = 37, vocab = 5000;
  std::mt19937_64 rng = wb::rng_for("ch07/threads");
  std::vector<float> logits;
  for (int r = 0; r < rows; ++r) {
    const std::vector<float> row = normal_row(vocab, 2.0f, rng);
    logits.insert(logits.end(), row.begin(), row.end());
  }
  const SamplingParams params{0.9f, 100, 0.8f, 8, 8};
  Runner one(Step::Cpu, logits, rows, vocab, 1), many(Step::Cpu, logits, rows, vocab, 7);
  const Draws a = one.run(params), b = many.run(params);
  CHECK_MESSAGE(a.tokens == b.tokens, "ch07 sample_cpu: 1 thread and 7 threads drew different tokens");
}

// Before the "any shape" cases: a constructor whose kernels had not run can fault (see
// first_call_after_the_constructor).
TEST_CASE("step 2 (sort, then the CPU): the first call after the constructor sees what it set up, on any stream") {
  WB_REQUIRE_GPU();
  first_call_after_the_constructor(Step::SortThenCpu);
}
TEST_CASE("step 3 (top candidates): the first call after the constructor sees what it set up, on any stream") {
  WB_REQUIRE_GPU();
  first_call_after_the_constructor(Step::TopCandidates);
}

TEST_CASE("step 2 (sort, then the CPU): a call on a non-blocking stream draws with its own numbers while the legacy stream is busy") {
  WB_REQUIRE_GPU();
  draws_while_the_legacy_stream_is_busy(Step::SortThenCpu);
}
TEST_CASE("step 3 (top candidates): a call on a non-blocking stream draws with its own numbers while the legacy stream is busy") {
  WB_REQUIRE_GPU();
  draws_while_the_legacy_stream_is_busy(Step::TopCandidates);
}
TEST_CASE("step 4 (fused): a call on a non-blocking stream draws with its own numbers while the legacy stream is busy") {
  WB_REQUIRE_GPU();
  draws_while_the_legacy_stream_is_busy(Step::Fused);
}
TEST_CASE("step 4 (fused): a greedy call on a non-blocking stream returns its own argmax while the legacy stream is busy") {
  WB_REQUIRE_GPU();
  fused_greedy_while_the_legacy_stream_is_busy();
}

TEST_CASE("step 2 (sort, then the CPU): logits one float past a 16-byte boundary (a view)") {
  WB_REQUIRE_GPU();
  logits_one_float_past_a_boundary(Step::SortThenCpu);
}
TEST_CASE("step 3 (top candidates): logits one float past a 16-byte boundary (a view)") {
  WB_REQUIRE_GPU();
  logits_one_float_past_a_boundary(Step::TopCandidates);
}
TEST_CASE("step 4 (fused): logits one float past a 16-byte boundary (a view)") {
  WB_REQUIRE_GPU();
  logits_one_float_past_a_boundary(Step::Fused);
}

// Any shape: after every other case, since a fault here would be sticky (see
// more_rows_than_grid_y).
TEST_CASE("step 2 (sort, then the CPU): more rows than a grid's y dimension holds (65537 rows)") {
  WB_REQUIRE_GPU();
  more_rows_than_grid_y(Step::SortThenCpu);
}
TEST_CASE("step 3 (top candidates): more rows than a grid's y dimension holds (65537 rows)") {
  WB_REQUIRE_GPU();
  more_rows_than_grid_y(Step::TopCandidates);
}
TEST_CASE("step 4 (fused): more rows than a grid's y dimension holds (65537 rows)") {
  WB_REQUIRE_GPU();
  more_rows_than_grid_y(Step::Fused);
}
TEST_CASE("step 4 (fused): more than 2^31 logits (14144 x 151936, 64-bit offsets)") {
  WB_REQUIRE_GPU();
  fused_more_than_2_31_logits();
}

// Last: every kernel of the three reference steps (the fused sampler's sampling and greedy
// kernels, and the scaling and gathering kernels of steps 2 and 3) must have run above.
// doctest runs the test cases in the order of their lines, so this one stays at the end of
// the file.
TEST_CASE("kernel coverage: every kernel of the reference ran in this suite") {
  WB_REQUIRE_GPU();
  kernel_coverage_test::check_reference("_ZN4ch07", "07");
}
