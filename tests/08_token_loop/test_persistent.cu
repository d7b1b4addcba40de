// Chapter 08's persistent step (persistent_step.hpp: the whole forward pass as one kernel, the
// decoder's own code, none of the student's) against the CPU engine, as test_model.cu checks
// the student's decoder. Reference build only (tests/CMakeLists.txt registers it as
// 08.persistent.solution): a student's submission changes nothing here, so it is not graded.
//
//   - teacher-forced logits at every position match the CPU engine's (model_checks.hpp's
//     tolerance) on five models (grouped KV heads; head sizes 48, 8, 16, 4 and 32), in both plans:
//     the grid plan with grids of one block per SM and of 1, 2, 3 and 7 blocks (rows of every
//     matrix split unevenly; blocks with no attention head; a block with every head), and the
//     cluster plan where a cluster holds the model (all but synthetic small, whose refusal is
//     checked instead: two query heads per block, uneven shares, one KV head among them);
//   - the grid plan's logits are the same bit for bit whatever the grid (every sum has one
//     fixed order): a value read before its writer wrote it, or a stage that overwrites shared
//     memory another warp still reads, shows up here as a difference;
//   - greedy decoding gives the CPU engine's tokens over 256 steps for several prompts, and
//     llama2.c's text for stories260K, in both plans;
//   - per token one kernel launch (plus the sampler's), no allocation, no synchronization but
//     the decoder's own waits, 4 bytes back, in both plans; in greedy decoding both plans pick
//     the token themselves (one launch) and write it into the host's pinned slot (no copy), by
//     chapter 07's greedy rule on the same logits (ties to the lower index, on a model where
//     every argmax is a tie), and a NaN logit gives the same error as chapter 07's sampler;
//   - the default plan is the cluster where a cluster can hold the model; a model none can hold
//     is refused that plan with the reason; a model it cannot run at all is refused with the
//     reason, and the other modes still run it.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstring>
#include <limits>
#include <optional>
#include <sstream>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "gpu_decoder.hpp"
#include "model_checks.hpp"
#include "sampler.cuh"
#include "wb/api_counter.hpp"
#include "wb/kernel_coverage.hpp"
#include "wb/model/checkpoint.hpp"
#include "wb/model/data.hpp"
#include "wb/model/synthetic.hpp"
#include "wb/model/tokenizer.hpp"
#include "wb/testing.hpp"

namespace {

using namespace ch08::model_checks;

// The grids every model is checked with (0 = one block per SM, the bench's).
const std::vector<int> kGrids{0, 1, 2, 3, 7};

// Skips (and says so) where the persistent step cannot run: a GPU older than Hopper.
bool persistent_runs_here(const Model& m) {
  ch08::GpuModel gm(m);
  ch08::GpuDecoder dec(gm);
  if (dec.persistent_step()) return true;
  wb::testing::mark_skipped("the persistent step cannot run here: " + dec.persistent_unavailable());
  return false;
}

// Under compute-sanitizer the tests decode steps_for(full) steps (model_checks.hpp); under
// racecheck, those on synthetic models decode kRacecheckSteps (stories260K's prompt is longer
// than that). There the grid plan's weight ring makes racecheck record, on every access of
// every piece, the races it cannot tell from real ones (the bulk copies: .ci/sanitize-suites,
// .ci/racecheck-excused.awk); at 12 steps, three of these cases did not finish in 480 s (on an
// H200, 14 runs at a time). Positions 0 to 3 still run every access pattern of the step (no
// cache history, then some).
constexpr int kRacecheckSteps = 4;
int persistent_steps(int full) {
  return wb::coverage::racecheck() ? std::min(full, kRacecheckSteps) : steps_for(full);
}

struct Stories {
  Model model;
  Tokenizer tok;
};

// stories260K and its tokenizer, or nothing (the case marked skipped) where WB_DATA_DIR lacks
// them or the persistent step cannot run here.
std::optional<Stories> stories_or_skip_here() {
  const auto files = stories_or_skip();
  if (!files) return std::nullopt;
  Model m = wb::model::load_checkpoint(files->model);
  if (!persistent_runs_here(m)) return std::nullopt;
  Tokenizer tok = Tokenizer::load(files->tokenizer, m.config().vocab_size);
  return Stories{std::move(m), std::move(tok)};
}

// Small models that a cluster holds, shaped to reach the cluster plan's corners: two query
// heads per block (32 heads on 16 blocks: the second head's cache rows come from device memory),
// head size 4 (one 16-byte piece per row), uneven shares of hidden units and classifier rows;
// and one KV head for four query heads of size 32, exactly one group of four units per block.
Model cluster_corners_model(int variant) {
  wb::model::SyntheticSpec s = wb::model::synthetic_small();
  s.dim = 128;
  s.n_layers = 2;
  s.seq_len = 64;
  if (variant == 0) {
    s.hidden_dim = 200;
    s.n_heads = 32;
    s.n_kv_heads = 8;
    s.vocab_size = 300;
  } else {
    s.hidden_dim = 64;
    s.n_heads = 4;
    s.n_kv_heads = 1;
    s.vocab_size = 260;
  }
  return wb::model::make_synthetic(s);
}

// m with every classifier row 2k + 1 replaced by a copy of row 2k.
Model tie_classifier_pairs(const Model& m) {
  std::vector<float> payload(m.payload().begin(), m.payload().end());
  const std::size_t first = std::size_t(m.weights().classifier - m.payload().data()), dim = m.config().dim;
  for (std::size_t row = 1; row < std::size_t(m.config().vocab_size); row += 2)
    std::copy_n(payload.begin() + std::ptrdiff_t(first + (row - 1) * dim), dim,
                payload.begin() + std::ptrdiff_t(first + row * dim));
  return Model(m.config(), std::move(payload), "classifier rows tied in pairs");
}

// Chapter 07's greedy rule, by chapter 07's CPU sampler: the largest logit, the lowest index
// among equal ones; -1 when a logit is NaN or +inf, or every one is -inf.
int greedy_rule(const std::vector<float>& logits) {
  int token = -1;
  float confidence = 0.0f;
  ch07::sample_cpu(logits.data(), 1, int(logits.size()), kGreedy, nullptr, &token, &confidence);
  return token;
}

// The Grid plan with every grid of kGrids, then the Cluster plan where a cluster can hold the
// model (the reason is checked where it cannot: synthetic small's 37 MB classifier).
void check_every_plan(const Model& m, const std::vector<int>& tokens, const std::string& what) {
  for (int blocks : kGrids) {
    const std::string grid = blocks == 0 ? std::string("one block per SM") : std::to_string(blocks) + " block(s)";
    check_teacher_forced(m, tokens, ch08::StepMode::Persistent, what + ", grid plan, " + grid,
                         [blocks](ch08::GpuDecoder& dec) {
                           dec.set_persistent_plan(ch08::PersistentPlan::Grid);
                           dec.set_persistent_blocks(blocks);
                         });
  }
  ch08::GpuModel gm(m);
  ch08::GpuDecoder probe(gm);
  if (!probe.persistent_step()->cluster_unavailable().empty()) {
    CHECK_MESSAGE(probe.persistent_step()->cluster_unavailable().find("no cluster can hold") != std::string::npos,
                  "the reason given: " << probe.persistent_step()->cluster_unavailable());
    return;
  }
  check_teacher_forced(m, tokens, ch08::StepMode::Persistent, what + ", cluster plan",
                       [](ch08::GpuDecoder& dec) { dec.set_persistent_plan(ch08::PersistentPlan::Cluster); });
}

// Teacher-forced logits of `tokens`, every position, with a grid of `blocks`.
std::vector<std::vector<float>> persistent_logits(ch08::GpuDecoder& dec, const std::vector<int>& tokens,
                                                  int blocks) {
  dec.set_mode(ch08::StepMode::Persistent);
  dec.set_persistent_plan(ch08::PersistentPlan::Grid);
  dec.set_persistent_blocks(blocks);
  dec.reset();
  std::vector<std::vector<float>> rows;
  for (int t : tokens) rows.push_back(dec.forward_logits(t));
  return rows;
}

// Where the first logit of `got` differs from `want` in any bit (a NaN's too), with both
// values; empty when every bit is the same.
std::string first_bit_difference(const std::vector<std::vector<float>>& got, const std::vector<std::vector<float>>& want) {
  for (std::size_t pos = 0; pos < want.size(); ++pos)
    for (std::size_t i = 0; i < want[pos].size(); ++i)
      if (std::memcmp(&got[pos][i], &want[pos][i], sizeof(float)) != 0) {
        std::ostringstream where;
        where.precision(std::numeric_limits<float>::max_digits10);  // one ulp apart must read apart
        where << "logit " << i << " at position " << pos << " is " << got[pos][i] << ", with one block per SM "
              << want[pos][i];
        return where.str();
      }
  return {};
}

}  // namespace

TEST_CASE("persistent step: teacher-forced logits match the CPU engine (synthetic small, both plans, every grid)") {
  WB_REQUIRE_GPU();
  const Model m = wb::model::make_synthetic(wb::model::synthetic_small());
  if (!persistent_runs_here(m)) return;
  const std::vector<int> tokens =
      random_sequence(m, persistent_steps(m.config().seq_len), "ch08/persistent/teacher/synthetic");
  check_every_plan(m, tokens, "synthetic small, persistent");
}

TEST_CASE("persistent step: teacher-forced logits match the CPU engine (stories260K, both plans, every grid)") {
  WB_REQUIRE_GPU();
  const auto stories = stories_or_skip_here();
  if (!stories) return;
  const auto& [m, tok] = *stories;
  const std::vector<int> tokens = stories_teacher_sequence(m, tok, steps_for(256), "ch08/persistent/teacher/stories");
  check_every_plan(m, tokens, "stories260K, persistent");
}

TEST_CASE("persistent step: teacher-forced logits match the CPU engine (the cluster plan's corners, both plans)") {
  WB_REQUIRE_GPU();
  for (int variant : {0, 1}) {
    const Model m = cluster_corners_model(variant);
    if (!persistent_runs_here(m)) return;
    {
      ch08::GpuModel gm(m);
      ch08::GpuDecoder dec(gm);
      REQUIRE_MESSAGE(dec.persistent_step()->cluster_unavailable().empty(),
                      "a cluster must hold " << m.config().summary() << ": "
                                             << dec.persistent_step()->cluster_unavailable());
    }
    const std::vector<int> tokens =
        random_sequence(m, wb::coverage::racecheck() ? kRacecheckSteps : m.config().seq_len,  // memcheck: all
                        "ch08/persistent/cluster/" + std::to_string(variant));
    check_every_plan(m, tokens, "cluster corners " + std::to_string(variant) + ", persistent");
  }
}

// The grid plan's weight ring at its edges: W2's rows (hidden 4608 floats, 18 KB) longer than a
// ring slot's default 16 KB, so a slot holds one such row and many of the short ones; a context
// longer than the cache rows a head block keeps in shared memory, so attention also reads rows
// from device memory; and a block's share of the token's weights many times the ring.
TEST_CASE("persistent step: teacher-forced logits match the CPU engine (long rows, long context: the grid plan's ring and history)") {
  WB_REQUIRE_GPU();
  const Model m = dim64_model(4608, 2, 300, 1024);
  const int seq_len = m.config().seq_len;
  if (!persistent_runs_here(m)) return;
  {
    ch08::GpuModel gm(m);
    ch08::GpuDecoder dec(gm);
    REQUIRE_MESSAGE(dec.persistent_step()->history_rows() < seq_len - 1,
                    "the test must reach positions whose cache rows are read from device memory: "
                        << dec.persistent_step()->history_rows() << " rows kept in shared memory");
  }
  const std::vector<int> tokens = random_sequence(m, persistent_steps(seq_len), "ch08/persistent/ring");
  for (int blocks : {1, 7, 0}) {
    check_teacher_forced(m, tokens, ch08::StepMode::Persistent, "long rows, grid of " + std::to_string(blocks),
                         [blocks](ch08::GpuDecoder& dec) {
                           dec.set_persistent_plan(ch08::PersistentPlan::Grid);
                           dec.set_persistent_blocks(blocks);
                         });
  }
}

TEST_CASE("persistent step: a short context to its last position, then a step past it throws") {
  WB_REQUIRE_GPU();
  const Model m = short_context_model();
  if (!persistent_runs_here(m)) return;
  const std::vector<int> tokens = random_sequence(m, m.config().seq_len, "ch08/persistent/short");
  check_every_plan(m, tokens, "short context (head size 16), persistent");
  ch08::GpuModel gm(m);
  ch08::GpuDecoder dec(gm);
  dec.set_mode(ch08::StepMode::Persistent);
  for (int t : tokens) (void)dec.forward_logits(t);
  CHECK_THROWS_AS((void)dec.forward_logits(5), std::out_of_range);
}

TEST_CASE("persistent step: the grid plan's logits are the same bit for bit whatever the grid") {
  WB_REQUIRE_GPU();
  const Model m = wb::model::make_synthetic(wb::model::synthetic_small());
  if (!persistent_runs_here(m)) return;
  const std::vector<int> tokens = random_sequence(m, persistent_steps(48), "ch08/persistent/bits");
  ch08::GpuModel gm(m);
  ch08::GpuDecoder dec(gm);
  const auto want = persistent_logits(dec, tokens, 0);
  for (int blocks : {1, 2, 5, 0}) {
    const auto got = persistent_logits(dec, tokens, blocks);
    REQUIRE(got.size() == want.size());
    const std::string differs = first_bit_difference(got, want);
    CHECK_MESSAGE(differs.empty(), "ch08 persistent step: with "
                                       << blocks << " block(s) (0 = one per SM) " << differs
                                       << ". Every sum has one fixed order, so the grid must not change a bit: a "
                                          "stage read data before its writer wrote it, or shared memory was "
                                          "overwritten while another warp still read it");
  }
}

// bench 08's --persistent-ring-slots, --persistent-copies and --persistent-wqkv-on-heads: the
// weight ring's size and its copies in flight change when weights arrive, and the Wqkv split
// which block computes a row, never a row's sum or its order. The smallest ring (W1 and W3 side
// by side), a ring of 3 with every slot in flight (no slot free while copying), a large one, the
// largest this GPU's shared memory holds, and Wqkv off the head blocks.
TEST_CASE("persistent step: the grid plan's logits are the same bit for bit whatever the weight ring and Wqkv split") {
  WB_REQUIRE_GPU();
  const Model m = wb::model::make_synthetic(wb::model::synthetic_small());
  if (!persistent_runs_here(m)) return;
  const std::vector<int> tokens = random_sequence(m, persistent_steps(24), "ch08/persistent/ring");
  ch08::GpuModel gm(m);
  ch08::GpuDecoder dec(gm);
  const auto want = persistent_logits(dec, tokens, 0);
  const int default_rows = dec.persistent_step()->history_rows();
  int largest = ch08::PersistentTuning::kMaxRingSlots;  // the largest ring that fits here
  for (;; --largest) {
    ch08::PersistentTuning t;
    t.ring_slots = largest;
    try {
      dec.set_persistent_tuning(t);
      break;
    } catch (const std::invalid_argument& e) {
      REQUIRE_MESSAGE(largest > ch08::PersistentTuning{}.ring_slots, "the default ring must fit: " << e.what());
      CHECK_MESSAGE(std::string(e.what()).find("bytes of shared memory") != std::string::npos,
                    "a ring too large is refused saying what it needs: " << e.what());
    }
  }
  CHECK_MESSAGE(dec.persistent_step()->history_rows() <= default_rows,
                "a larger ring leaves fewer cache rows in shared memory, not more");
  struct Case {
    int slots, copies;
    bool wqkv_on_heads;
  };
  for (const Case c : {Case{2, 1, true}, Case{3, 3, true}, Case{largest, 5, true}, Case{largest, largest, true},
                       Case{8, 3, false}, Case{2, 2, false}}) {
    ch08::PersistentTuning t;
    t.ring_slots = c.slots;
    t.copies_in_flight = c.copies;
    t.wqkv_on_head_blocks = c.wqkv_on_heads;
    dec.set_persistent_tuning(t);
    const auto got = persistent_logits(dec, tokens, 0);
    REQUIRE(got.size() == want.size());
    const std::string differs = first_bit_difference(got, want);
    CHECK_MESSAGE(differs.empty(), "ch08 persistent step: with a weight ring of "
                                       << c.slots << " slots, " << c.copies << " copies in flight, Wqkv "
                                       << (c.wqkv_on_heads ? "on" : "off") << " the head blocks, " << differs
                                       << ": a piece was read before its copy landed, a slot was overwritten "
                                          "while a warp still read it, or a row was left to no block");
  }
  ch08::PersistentTuning bad;
  bad.ring_slots = 4;
  bad.copies_in_flight = 5;  // more copies in flight than slots to land in
  CHECK_THROWS_AS(dec.set_persistent_tuning(bad), std::invalid_argument);
  bad = ch08::PersistentTuning{};
  bad.ring_slots = 1;
  CHECK_THROWS_AS(dec.set_persistent_tuning(bad), std::invalid_argument);
  dec.set_persistent_tuning(ch08::PersistentTuning{});
  CHECK(dec.persistent_step()->history_rows() == default_rows);
}

// bench 08's --persistent-trace: a traced launch stamps the global timer at every stage of every
// block. It must not change the step (same logits, bit for bit), and each block's stamps must
// follow its stages' order (a stamp in the wrong place would make the trace's table lie).
TEST_CASE("persistent step: a traced step gives the same logits bit for bit, each block's stamps in stage order") {
  WB_REQUIRE_GPU();
  const Model m = wb::model::make_synthetic(wb::model::synthetic_small());
  if (!persistent_runs_here(m)) return;
  const std::vector<int> tokens = random_sequence(m, persistent_steps(8), "ch08/persistent/trace");
  ch08::GpuModel gm(m);
  ch08::GpuDecoder dec(gm);
  dec.set_mode(ch08::StepMode::Persistent);
  dec.set_persistent_plan(ch08::PersistentPlan::Grid);
  std::vector<float> want, got;
  for (int t : tokens) want = dec.forward_logits(t);
  dec.reset();
  for (std::size_t i = 0; i + 1 < tokens.size(); ++i) (void)dec.forward_logits(tokens[i]);
  const ch08::StepTrace trace = dec.trace_persistent_step(tokens.back(), &got);
  const std::string differs = first_bit_difference({got}, {want});
  CHECK_MESSAGE(differs.empty(), "ch08 persistent step: the traced step's logits differ from the untraced: " << differs);
  REQUIRE(trace.ns.size() == std::size_t(trace.blocks) *
                                 std::size_t(ch08::kStampsPerLayer * trace.n_layers + ch08::kFinalStamps));
  using S = ch08::StepStamp;
  for (int b = 0; b < trace.blocks; ++b) {
    std::vector<unsigned long long> order;  // this block's stamps in the order its stages run
    for (int l = 0; l < trace.n_layers; ++l)
      for (S s : {S::QkvIn, S::QkvOut, S::AttentionIn, S::AttentionScores, S::AttentionOut, S::WoIn, S::WoOut, S::W13In,
                  S::W13Out, S::W2In, S::W2Out})
        order.push_back(trace.at(b, l, s));
    order.push_back(trace.at(b, trace.n_layers, S::QkvIn));
    order.push_back(trace.at(b, trace.n_layers, S::QkvOut));
    CAPTURE(b);
    CHECK(order.front() > 0);
    CHECK(std::is_sorted(order.begin(), order.end()));
  }
  CHECK(ch08::trace_table(trace).size() == 11);  // a header, eight rows, Wqkv's last block, the totals
  dec.set_mode(ch08::StepMode::Graph);
  CHECK_THROWS_AS((void)dec.trace_persistent_step(tokens.front()), std::logic_error);
}

TEST_CASE("persistent step: greedy decoding gives the CPU engine's tokens and llama2.c's text (stories260K)") {
  WB_REQUIRE_GPU();
  const auto stories = stories_or_skip_here();
  if (!stories) return;
  const auto& [m, tok] = *stories;
  ch08::GpuModel gm(m);
  ch08::GpuDecoder dec(gm);
  dec.set_mode(ch08::StepMode::Persistent);
  CHECK_MESSAGE(dec.persistent_step()->plan() == ch08::PersistentPlan::Cluster,
                "ch08 persistent step: stories260K's weights fit one thread-block cluster's shared memory, so "
                "its default plan is the cluster; it got "
                    << ch08::plan_name(dec.persistent_step()->plan()));
  const std::vector<std::string> prompts = greedy_prompts();
  const int steps = steps_for(256);
  for (ch08::PersistentPlan plan : {ch08::PersistentPlan::Cluster, ch08::PersistentPlan::Grid}) {
    dec.set_persistent_plan(plan);
    const std::string name = std::string(ch08::plan_name(plan)) + " plan";
    for (const std::string& prompt : prompts) {
      CAPTURE(prompt);
      const std::vector<int> want = cpu_greedy(m, tok, prompt, steps);
      const std::vector<int> got = dec.generate(tok.encode(prompt, /*bos=*/true, /*eos=*/false), steps, kGreedy);
      compare_greedy(m, want, got, "stories260K greedy, prompt '" + prompt + "', persistent, " + name);
    }
    if (wb::coverage::quick()) continue;  // the text needs all 200 steps
    const std::vector<int> tokens =
        dec.generate(std::vector<int>{Tokenizer::kBos}, wb::model::kTinyStoriesSteps, kGreedy);
    const std::string text = decode_text(tok, tokens);
    if (text != wb::model::kTinyStoriesGreedyText)
      FAIL("ch08 persistent step (" << name << "): greedy decoding of stories260K (200 steps, no prompt) printed\n  "
                                    << text << "\nllama2.c prints\n  " << wb::model::kTinyStoriesGreedyText);
  }
}

TEST_CASE("persistent step: per token one kernel launch, no allocation, no synchronize, 4 bytes back") {
  WB_REQUIRE_GPU();
  if (!cupti_or_skip()) return;
  const int steps = persistent_steps(48);
  const ch07::SamplingParams sampled{1.0f, 0, 1.0f, 11, 0};
  // The grid plan on synthetic small; the cluster plan on a model a cluster holds.
  for (ch08::PersistentPlan plan : {ch08::PersistentPlan::Grid, ch08::PersistentPlan::Cluster}) {
    const Model m = plan == ch08::PersistentPlan::Grid ? wb::model::make_synthetic(wb::model::synthetic_small())
                                                       : cluster_corners_model(1);
    if (!persistent_runs_here(m)) return;
    const double sampler = double(sampler_launches(m.config().vocab_size, sampled));
    ch08::GpuModel gm(m);
    ch08::GpuDecoder dec(gm);
    dec.set_mode(ch08::StepMode::Persistent);
    dec.set_persistent_plan(plan);
    const std::string name = std::string("ch08 persistent step (") + ch08::plan_name(plan) + " plan): ";
    const auto [c, passes] = count_decode(dec, steps, sampled);
    REQUIRE(passes > 0);
    const double launches = double(c.launches) / passes;
    wb::testing::record_metric(std::string("launches_per_token_persistent_") + ch08::plan_name(plan), launches);
    CHECK_MESSAGE(c.mallocs + c.host_allocs == 0, name << "allocations during decoding");
    CHECK_MESSAGE(c.device_syncs == 0, name << "cudaDeviceSynchronize during decoding");
    CHECK_MESSAGE(c.bytes_d2h == 4ull * std::uint64_t(passes), name << c.bytes_d2h << " bytes back in " << passes
                                                                      << " tokens");
    CHECK_MESSAGE(c.stream_syncs + c.event_syncs <= std::uint64_t(passes) + 2,
                  name << c.stream_syncs << " stream and " << c.event_syncs << " event synchronizations in " << passes
                       << " tokens");
    CHECK_MESSAGE(launches == doctest::Approx(sampler + 1.0),
                  name << launches << " kernel launches per token; the step is one, the sampler " << sampler);
    // Greedy: the step picks the token itself, so no sampler launch (its rule: the next case),
    const auto [greedy, greedy_passes] = count_decode(dec, steps, kGreedy);
    REQUIRE(greedy_passes > 0);
    CHECK_MESSAGE(double(greedy.launches) / greedy_passes == doctest::Approx(1.0),
                  name << double(greedy.launches) / greedy_passes
                       << " kernel launches per greedy token; the step picks the token itself: one");
    // and no copy: the step writes the token into the host's pinned slot itself (mapped memory).
    CHECK_MESSAGE(greedy.bytes_d2h == 0, name << greedy.bytes_d2h << " bytes copied back in " << greedy_passes
                                              << " greedy tokens; the step writes its pick into pinned host memory");
  }
}

TEST_CASE("persistent step: both plans pick greedy decoding's token by chapter 07's rule, ties to the lower index") {
  WB_REQUIRE_GPU();
  // Every classifier row 2k + 1 a copy of row 2k: every argmax is a tie of two logits with the
  // same bits (a row's dot product has one fixed order wherever it is computed), and the pair
  // straddles a block boundary wherever a share ends on an even row.
  for (ch08::PersistentPlan plan : {ch08::PersistentPlan::Grid, ch08::PersistentPlan::Cluster}) {
    const Model m = tie_classifier_pairs(plan == ch08::PersistentPlan::Grid
                                             ? wb::model::make_synthetic(wb::model::synthetic_small())
                                             : cluster_corners_model(1));
    if (!persistent_runs_here(m)) return;
    ch08::GpuModel gm(m);
    ch08::GpuDecoder dec(gm);
    dec.set_mode(ch08::StepMode::Persistent);
    dec.set_persistent_plan(plan);
    for (int blocks : plan == ch08::PersistentPlan::Grid ? kGrids : std::vector<int>{0}) {
      if (plan == ch08::PersistentPlan::Grid) dec.set_persistent_blocks(blocks);
      dec.reset();
      int ties = 0;
      for (int pos = 0; pos < persistent_steps(16); ++pos) {
        const std::vector<float> logits = dec.forward_logits(pos == 0 ? Tokenizer::kBos : 3 + 7 * pos);
        const int want = greedy_rule(logits);
        ties += want >= 0 && want + 1 < int(logits.size()) && logits[std::size_t(want) + 1] == logits[std::size_t(want)];
        const int got = dec.token_on_device();
        CHECK_MESSAGE(got == want, "ch08 persistent step (" << ch08::plan_name(plan) << " plan, grid " << blocks
                                                            << "): at position " << pos << " it picked token " << got
                                                            << "; chapter 07's greedy rule on the same logits picks "
                                                            << want << " (the largest logit, the lower index of equal ones)");
      }
      CHECK_MESSAGE(ties > 0, "the tied classifier rows gave no tied argmax: this case tests no tie");
    }
  }
}

TEST_CASE("persistent step: a greedy pick over logits that hold NaN says so, as chapter 07's sampler does (both plans)") {
  WB_REQUIRE_GPU();
  for (ch08::PersistentPlan plan : {ch08::PersistentPlan::Grid, ch08::PersistentPlan::Cluster}) {
    const Model clean = plan == ch08::PersistentPlan::Grid ? wb::model::make_synthetic(wb::model::synthetic_small())
                                                           : cluster_corners_model(1);
    if (!persistent_runs_here(clean)) return;
    // The same model with one NaN in the classifier: every token's logit of that row is NaN.
    std::vector<float> payload(clean.payload().begin(), clean.payload().end());
    const std::size_t at = std::size_t(clean.weights().classifier - clean.payload().data()) + 5;
    payload[at] = std::numeric_limits<float>::quiet_NaN();
    const Model poisoned(clean.config(), std::move(payload), "a NaN in the classifier");
    ch08::GpuModel gm(poisoned);
    ch08::GpuDecoder dec(gm);
    dec.set_mode(ch08::StepMode::Persistent);
    dec.set_persistent_plan(plan);
    CAPTURE(ch08::plan_name(plan));
    CHECK_THROWS_AS((void)dec.generate(std::vector<int>{Tokenizer::kBos}, 4, kGreedy), wb::model::ModelError);
    dec.set_mode(ch08::StepMode::Graph);  // chapter 07's greedy sampler: the same verdict
    CHECK_THROWS_AS((void)dec.generate(std::vector<int>{Tokenizer::kBos}, 4, kGreedy), wb::model::ModelError);
  }
}

TEST_CASE("persistent step: a model it cannot run is refused with the reason; the other modes still run it") {
  WB_REQUIRE_GPU();
  wb::model::SyntheticSpec s = wb::model::synthetic_small();
  s.dim = 36;  // 6 heads of 6: rows are not whole 16-byte units
  s.hidden_dim = 68;
  s.n_heads = 6;
  s.n_kv_heads = 3;
  s.vocab_size = 300;
  s.seq_len = 8;
  const Model m = wb::model::make_synthetic(s);
  ch08::GpuModel gm(m);
  ch08::GpuDecoder dec(gm);
  CHECK(dec.persistent_step() == nullptr);
  CHECK_MESSAGE(dec.persistent_unavailable().find("multiples of 4") != std::string::npos,
                "the reason given: " << dec.persistent_unavailable());
  CHECK_THROWS_AS(dec.set_mode(ch08::StepMode::Persistent), std::invalid_argument);
  CHECK_THROWS_AS(dec.set_persistent_blocks(1), std::invalid_argument);
  dec.set_mode(ch08::StepMode::Graph);
  const std::vector<float> logits = dec.forward_logits(1);
  CHECK(logits.size() == std::size_t(s.vocab_size));
}

TEST_CASE("persistent step: a grid that cannot be resident at once is refused") {
  WB_REQUIRE_GPU();
  const Model m = short_context_model();
  if (!persistent_runs_here(m)) return;
  ch08::GpuModel gm(m);
  ch08::GpuDecoder dec(gm);
  const int most = dec.persistent_step()->max_blocks();
  CHECK_THROWS_AS(dec.set_persistent_blocks(-1), std::invalid_argument);
  CHECK_THROWS_AS(dec.set_persistent_blocks(most + 1), std::invalid_argument);
  CHECK_NOTHROW(dec.set_persistent_blocks(most));
  dec.set_mode(ch08::StepMode::Persistent);
  CHECK(dec.forward_logits(1).size() == std::size_t(m.config().vocab_size));
}

TEST_CASE("persistent step: the cluster plan where a cluster holds the model; one that none can hold is refused with the reason") {
  WB_REQUIRE_GPU();
  const Model small = short_context_model();
  if (!persistent_runs_here(small)) return;
  {
    ch08::GpuModel gm(small);
    ch08::GpuDecoder dec(gm);
    CHECK_MESSAGE(dec.persistent_step()->plan() == ch08::PersistentPlan::Cluster,
                  "a model of " << gm.weight_bytes_per_token() << " weight bytes per token runs in a cluster by "
                                << "default; " << dec.persistent_step()->cluster_unavailable());
  }
  {
    const Model big = wb::model::make_synthetic(wb::model::synthetic_small());  // its classifier alone is 37 MB
    ch08::GpuModel gm(big);
    ch08::GpuDecoder dec(gm);
    CHECK_MESSAGE(dec.persistent_step()->plan() == ch08::PersistentPlan::Grid,
                  "a model of " << gm.weight_bytes_per_token() << " weight bytes per token, more than 16 blocks' "
                                << "shared memory, runs on the grid by default");
  }
  // A head's cache rows over 16384 positions: 2 MiB, more than a block's shared memory.
  const Model long_context = dim64_model(96, 1, 256, 16384);
  ch08::GpuModel gm(long_context);
  ch08::GpuDecoder dec(gm);
  REQUIRE(dec.persistent_step() != nullptr);
  CHECK(dec.persistent_step()->plan() == ch08::PersistentPlan::Grid);
  CHECK_MESSAGE(dec.persistent_step()->cluster_unavailable().find("no cluster can hold") != std::string::npos,
                "the reason given: " << dec.persistent_step()->cluster_unavailable());
  CHECK_THROWS_AS(dec.set_persistent_plan(ch08::PersistentPlan::Cluster), std::invalid_argument);
  dec.set_mode(ch08::StepMode::Persistent);
  CHECK(dec.forward_logits(1).size() == std::size_t(long_context.config().vocab_size));  // the grid plan still runs it
}
