// Chapter 07 timing: the report's story as ratios measured in one run, at its shape (a block of
// 16 masked positions over a 151936-token vocabulary; top_k 50, top_p 0.9):
//   - step 2 (sort on the GPU, softmax and draw on the CPU) is SLOWER than the CPU sampler
//     (step 1, all threads): moving the sort to the GPU does not help while the whole row
//     still crosses PCIe and the CPU still touches every logit;
//   - step 3 (softmax and selection on the GPU, only candidates copied) is faster than step 2;
//   - step 4 (fused, sort-free) is much faster than step 2 (the pass mark: data/rubric.json).
// Steps 1 to 3 synchronize (their CPU half needs the data), so every step is timed with the
// harness's host clock (Clock::Host: the device is idle at both clock reads), cold L2, the
// median of a stable sample. Each timing ends by re-checking the sampler on fresh logits.
//
// And greedy (T = 0), at 16x151936 and 256x151936: step 4's argmax and its confidence are no
// slower than chapter 04's reference fused softmax of the same logits (linked through the
// manifest's "uses"), which reads the row and also writes it back. Both are GPU-only, so
// both are timed on the device clock (events), cold L2, in the same run.
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <memory>
#include <random>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "reference.hpp"
#include "sampler.cuh"
#include "softmax.cuh"  // chapter 04's API: its reference, linked through "uses" (chapter.json)
#include "wb/buffer.hpp"
#include "wb/check.hpp"
#include "wb/random.hpp"
#include "wb/rubric.hpp"
#include "wb/testing.hpp"
#include "wb/timing.hpp"

namespace {

using ch07::SamplingParams;

constexpr int kRows = 16, kVocab = 151936;
const SamplingParams kParams{1.0f, 50, 0.9f, 2024, 0};

// Pass marks (ratios in one run; they hold on any GPU): data/rubric.json.
const double kFusedOverStep2 = wb::pass_mark("07", "step2_over_fused");
const double kStep2OverStep3 = wb::pass_mark("07", "step2_over_step3");

std::vector<float> report_logits(const std::string& label) {
  // Logits shaped like a language model's: a head of likely tokens over a long tail.
  std::mt19937_64 rng = wb::rng_for(label);
  std::normal_distribution<float> normal(0.0f, 2.0f);
  std::uniform_int_distribution<int> pick(0, kVocab - 1);
  std::vector<float> logits(static_cast<std::size_t>(kRows) * kVocab);
  for (float& x : logits) x = normal(rng);
  for (int r = 0; r < kRows; ++r)
    for (int i = 0; i < 40; ++i) logits[static_cast<std::size_t>(r) * kVocab + pick(rng)] += 8.0f;
  return logits;
}

// Every token in its row's exact kept set (rule 2); used after each timing (the harness's
// rule 7: a sampler that skips work or replays an answer fails here).
void check_tokens(const std::vector<float>& logits, const std::vector<int>& tokens,
                  const std::string& what) {
  for (int r = 0; r < kRows; ++r) {
    const float* row = logits.data() + static_cast<std::size_t>(r) * kVocab;
    SamplingParams loose = kParams;
    loose.top_p = std::min(1.0f, kParams.top_p * 1.0001f);
    const ch07::reference::KeptSet kept = ch07::reference::kept_set(row, kVocab, loose);
    if (std::find(kept.tokens.begin(), kept.tokens.end(), tokens[r]) == kept.tokens.end())
      FAIL("ch07 timing, " << what << " (re-checked after timing): row " << r << " drew token "
                           << tokens[r] << ", outside the exact top_k / top_p set; the "
                              "correctness tests say more.");
  }
}

wb::BenchOptions host_timed(const std::string& name) {
  wb::BenchOptions o;
  o.name = name;
  o.clock = wb::Clock::Host;  // steps 1-3 synchronize inside: events cannot time them
  o.cache = wb::Cache::Cold;
  o.min_samples = 10;
  o.min_time_ms = 200;
  o.max_time_ms = 2000;
  o.noise_target = 0.02;
  o.check_floor = false;  // no byte count: the CPU half is not a memory floor
  return o;
}

// The four steps, each with what it needs allocated before timing.
struct Problem {
  std::vector<float> host_logits = report_logits("ch07/timing/logits");
  wb::DeviceBuffer<float> logits{host_logits.size()};
  wb::DeviceBuffer<int> tokens{kRows};
  wb::DeviceBuffer<float> confidence{kRows};
  std::vector<int> host_tokens = std::vector<int>(kRows);
  std::vector<float> host_confidence = std::vector<float>(kRows);

  // Fresh logits for the re-check after timing (rule 7), made before the timing: the re-check
  // then follows the timed calls with no host pause (a device copy on the work's stream and a
  // swap of the host copy), so a sampler cannot tell it from a timed call by a gap between
  // calls (one that skips work when the same pointers come back quickly fails here).
  std::vector<float> fresh_host;
  wb::DeviceBuffer<float> fresh{host_logits.size()};

  Problem() { logits.upload(host_logits); }

  void prepare_fresh(const std::string& label) {
    fresh_host = report_logits(label);
    fresh.upload(fresh_host);
  }
  void refresh(cudaStream_t stream) {
    WB_CUDA(cudaMemcpyAsync(logits.data(), fresh.data(), host_logits.size() * sizeof(float),
                            cudaMemcpyDeviceToDevice, stream));
    std::swap(host_logits, fresh_host);  // O(1): the CPU sampler reads host_logits
  }
};

template <typename Sampler>
wb::Stats time_object(Problem& p, const std::string& name) {
  Sampler sampler(kRows, kVocab);
  wb::Bench bench(host_timed(name + " 16x151936"));
  const auto run = [&](cudaStream_t s) {
    sampler.sample(p.logits.data(), kRows, kParams, p.host_tokens.data(),
                   p.host_confidence.data(), s);
  };
  p.prepare_fresh("ch07/timing/verify/" + name);
  return bench.run(run, [&] {
    p.refresh(bench.stream());
    run(bench.stream());
    check_tokens(p.host_logits, p.host_tokens, name);
  });
}

wb::Stats time_fused(Problem& p) {
  wb::DeviceBuffer<unsigned char> workspace(ch07::fused_sampler_workspace_bytes(kRows, kVocab));
  wb::Bench bench(host_timed("step 4 (fused) 16x151936"));
  const auto run = [&](cudaStream_t s) {
    ch07::sample_fused(p.logits.data(), kRows, kVocab, kParams, p.tokens.data(),
                       p.confidence.data(), workspace.data(), workspace.bytes(), s);
  };
  p.prepare_fresh("ch07/timing/verify/fused");
  return bench.run(run, [&] {
    p.refresh(bench.stream());
    run(bench.stream());
    WB_CUDA(cudaStreamSynchronize(bench.stream()));
    check_tokens(p.host_logits, p.tokens.download(), "step 4");
  });
}

std::string ratio_message(const std::string& claim, const std::string& a, const wb::Stats& sa,
                          const std::string& b, const wb::Stats& sb, double mark,
                          const std::string& hint) {
  std::ostringstream s;
  s << "ch07 timing, 16x151936, top_k 50, top_p 0.9: " << claim << ": " << a << " "
    << sa.median_us << " us, " << b << " " << sb.median_us << " us, ratio "
    << sa.median_us / sb.median_us << ", the pass mark is " << mark << ".\nhint: " << hint;
  return s.str();
}

// (The report's first port was slower than the CPU sampler; that is a measurement of the
// reference, shown by ./workbook bench 07, not a rule: a student's step 2 that beats the CPU
// sampler is not wrong.)

TEST_CASE("step 3 is faster than step 2 at 16x151936 (only the candidates come back)") {
  WB_REQUIRE_GPU();
  Problem p;
  const wb::Stats step2 = time_object<ch07::SortThenCpuSampler>(p, "step 2 (sort, then the CPU)");
  const wb::Stats step3 = time_object<ch07::TopCandidatesSampler>(p, "step 3 (top candidates)");
  const double ratio = step2.median_us / step3.median_us;
  wb::testing::record_metric("step2_us", step2.median_us);
  wb::testing::record_metric("step3_us", step3.median_us);
  wb::testing::record_metric("step2_over_step3", ratio);
  CHECK_MESSAGE(ratio > kStep2OverStep3,
                ratio_message("step 3 should be faster than step 2", "step 2", step2, "step 3",
                              step3, kStep2OverStep3,
                              "copy back only kMaxCandidates candidates per row (not the "
                              "sorted row), and do the softmax's max and sum on the GPU."));
}

TEST_CASE("step 4 (fused) is much faster than step 2 at 16x151936 (pass mark: rubric)") {
  WB_REQUIRE_GPU();
  Problem p;
  const wb::Stats step2 = time_object<ch07::SortThenCpuSampler>(p, "step 2 (sort, then the CPU)");
  const wb::Stats fused = time_fused(p);
  const double ratio = step2.median_us / fused.median_us;
  wb::testing::record_metric("step2_us", step2.median_us);
  wb::testing::record_metric("fused_us", fused.median_us);
  wb::testing::record_metric("step2_over_fused", ratio);
  CHECK_MESSAGE(ratio >= kFusedOverStep2,
                ratio_message("the fused sampler should be at least " + std::to_string(int(kFusedOverStep2)) + "x faster than step 2",
                              "step 2", step2, "step 4", fused, kFusedOverStep2,
                              "no sort: find the top-k / top-p cut with a select (histograms of "
                              "the logits' bits) over the row while it sits in L2, and draw "
                              "on the GPU; only tokens and confidences leave."));
}

// ---------------------------------------------------------------------------------------
// Greedy against chapter 04's softmax of the same shape.
//
// Greedy selects nothing: the argmax and its confidence 1 / Z (Z = sum exp(x - max), the
// softmax's denominator) need one read of the row, and 8 bytes a row written. Chapter 04's
// fused softmax computes the same max and Z and then writes every probability back: at
// least twice the bytes. A greedy path slower than that reads the row more than once, or
// stages it somewhere first, or leaves most of the GPU idle. The pass mark (a ratio, so it
// holds on any GPU) is in data/rubric.json.

const SamplingParams kGreedy{0.0f, 0, 1.0f, 2024, 0};

// Normal logits, standard deviation 4 (as the bench's).
std::vector<float> greedy_logits(int rows, const std::string& label) {
  return wb::random_normal(static_cast<std::size_t>(rows) * kVocab, 0.0f, 4.0f, label);
}

// Rules 1 and 3 on every row, against double precision (the harness's rule 7: after timing,
// on fresh logits).
void check_greedy(const std::vector<float>& logits, int rows, const std::vector<int>& tokens,
                  const std::vector<float>& confidence, const std::string& shape) {
  for (int r = 0; r < rows; ++r) {
    const float* row = logits.data() + static_cast<std::size_t>(r) * kVocab;
    int best = 0;
    for (int i = 1; i < kVocab; ++i)
      if (row[i] > row[best]) best = i;
    double z = 0;
    for (int i = 0; i < kVocab; ++i) z += std::exp(static_cast<double>(row[i]) - row[best]);
    const double want = 1.0 / z;
    if (tokens[r] != best || !(std::abs(confidence[r] - want) <= 1e-4 * want))
      FAIL("ch07 timing, " << shape << ", greedy (re-checked after timing): row " << r
                           << " gave token " << tokens[r] << ", confidence " << confidence[r]
                           << "; expected token " << best << ", confidence " << want
                           << ". The correctness tests say more.");
  }
}

// Chapter 04's reference on fresh logits: its first rows against the double softmax (never
// expected to fail: it is the reference, not the code under test).
void check_softmax(const std::vector<float>& logits, const std::vector<float>& probs,
                   const std::string& shape) {
  for (int r = 0; r < 2; ++r) {
    const std::size_t at = static_cast<std::size_t>(r) * kVocab;
    const std::vector<double> want = ch07::reference::probabilities(logits.data() + at, kVocab, 1.0);
    for (int i = 0; i < kVocab; ++i)
      if (!(std::abs(probs[at + i] - want[i]) <= 1e-9 + 1e-3 * want[i]))
        FAIL("ch07 timing, " << shape << ": chapter 04's reference softmax (re-checked after "
                                "timing) gave " << probs[at + i] << " at row " << r << ", column "
                             << i << ", expected " << want[i] << ": the reference build is broken.");
  }
}

wb::BenchOptions device_timed(const std::string& name, double bytes) {
  wb::BenchOptions o;  // the harness's defaults: device clock (events), cold L2
  o.name = name;
  o.bytes = bytes;
  return o;
}

void greedy_no_slower_than_softmax(int rows) {
  const double mark = wb::pass_mark("07", "ch04_softmax_over_greedy");  // data/rubric.json
  const std::string shape = std::to_string(rows) + "x" + std::to_string(kVocab);
  const std::size_t count = static_cast<std::size_t>(rows) * kVocab;
  const double bytes = static_cast<double>(count) * sizeof(float);
  wb::DeviceBuffer<float> logits(count), probs(count), confidence(rows);
  wb::DeviceBuffer<int> tokens(rows);
  wb::DeviceBuffer<unsigned char> workspace(ch07::fused_sampler_workspace_bytes(rows, kVocab));
  logits.upload(greedy_logits(rows, "ch07/timing/greedy/" + shape));

  wb::Bench softmax_bench(device_timed("chapter 04 softmax_fused (reference) " + shape, 2 * bytes));
  const auto softmax = [&](cudaStream_t s) {
    ch04::softmax_fused(logits.data(), probs.data(), rows, kVocab, s);
  };
  const wb::Stats softmax_stats = softmax_bench.run(softmax, [&] {
    const std::vector<float> fresh = greedy_logits(rows, "ch07/timing/greedy/verify/softmax/" + shape);
    logits.upload(fresh);
    probs.poison(softmax_bench.stream());
    softmax(softmax_bench.stream());
    WB_CUDA(cudaStreamSynchronize(softmax_bench.stream()));
    check_softmax(fresh, probs.download(), shape);
  });

  wb::Bench greedy_bench(device_timed("step 4 greedy (T = 0) " + shape, bytes));
  const auto greedy = [&](cudaStream_t s) {
    ch07::sample_fused(logits.data(), rows, kVocab, kGreedy, tokens.data(), confidence.data(),
                       workspace.data(), workspace.bytes(), s);
  };
  const wb::Stats greedy_stats = greedy_bench.run(greedy, [&] {
    const std::vector<float> fresh = greedy_logits(rows, "ch07/timing/greedy/verify/greedy/" + shape);
    logits.upload(fresh);
    tokens.poison(greedy_bench.stream());
    confidence.poison(greedy_bench.stream());
    greedy(greedy_bench.stream());
    WB_CUDA(cudaStreamSynchronize(greedy_bench.stream()));
    check_greedy(fresh, rows, tokens.download(), confidence.download(), shape);
  });

  const double ratio = softmax_stats.median_us / greedy_stats.median_us;
  wb::testing::record_metric("greedy_us", greedy_stats.median_us);
  wb::testing::record_metric("ch04_softmax_us", softmax_stats.median_us);
  wb::testing::record_metric("ch04_softmax_over_greedy", ratio);
  std::ostringstream message;
  message << "ch07 timing, " << shape << ", greedy (T = 0): step 4's argmax and confidence took "
          << greedy_stats.median_us << " us, chapter 04's fused softmax of the same logits "
          << softmax_stats.median_us << " us (it reads every row and writes it back; greedy "
          << "only reads it): softmax time / greedy time = " << ratio << ", the pass mark is "
          << mark << " (greedy no slower).\nhint: greedy has nothing to select. Read each row "
          << "ONCE from device memory, keeping the max, its lowest index and the sum of "
          << "exp(x - max) together (chapter 04's online softmax), and write 8 bytes: no copy "
          << "of the row into shared memory first, no second pass, no histogram. And give "
          << "each row enough blocks to keep every SM loading: 16 rows on a block each leave "
          << "most of the SMs idle (split the row over a cluster of blocks, or over blocks "
          << "whose partial results are combined in a fixed order).";
  CHECK_MESSAGE(ratio >= mark, message.str());
}

// Graded at 256 rows only: at 16 rows a block per row (the plainest sort-free design, which
// must pass: tests/07_gpu_sampler/variants/block_per_row.cu) keeps 16 of the GPU's SMs busy,
// as chapter 04's reference softmax does, and how much per-element work its pass does then
// decides the race; 256 rows fill the GPU whatever the split, and a greedy pass that reads
// each row once must beat a softmax that reads it and writes it back. `./workbook bench 07`
// reports both shapes (variant ch04_softmax).
TEST_CASE("greedy + confidence is no slower than chapter 04's softmax at 256x151936") {
  WB_REQUIRE_GPU();
  greedy_no_slower_than_softmax(256);
}

}  // namespace
