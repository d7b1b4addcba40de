// Chapter 08's persistent step (persistent_step.hpp: the whole forward pass as one kernel, the
// decoder's own code, none of the student's) against the CPU engine, as test_model.cu checks
// the student's decoder. Reference build only (tests/CMakeLists.txt registers it as
// 08.persistent.solution): a student's submission changes nothing here, so it is not graded.
//
//   - teacher-forced logits at every position match the CPU engine's (model_checks.hpp's
//     tolerance) on three models (grouped KV heads; head sizes 48, 8 and 16), with grids of
//     one block per SM and of 1, 2, 3 and 7 blocks (rows of every matrix split unevenly; blocks
//     with no attention head; a block with every head);
//   - the logits are the same bit for bit whatever the grid (every sum has one fixed order):
//     a value read before its writer wrote it, or a stage that overwrites shared memory
//     another warp still reads, shows up here as a difference;
//   - greedy decoding gives the CPU engine's tokens over 256 steps for several prompts, and
//     llama2.c's text for stories260K;
//   - per token one kernel launch (plus the sampler's), no allocation, no synchronization but
//     the decoder's own waits, 4 bytes back;
//   - a model it cannot run is refused with the reason, and the other modes still run it.
#include <cuda_runtime.h>

#include <cstring>
#include <optional>
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

void check_every_grid(const Model& m, const std::vector<int>& tokens, const std::string& what) {
  for (int blocks : kGrids) {
    const std::string grid = blocks == 0 ? std::string("one block per SM") : std::to_string(blocks) + " block(s)";
    check_teacher_forced(m, tokens, ch08::StepMode::Persistent, what + ", " + grid,
                         [blocks](ch08::GpuDecoder& dec) { dec.set_persistent_blocks(blocks); });
  }
}

// Teacher-forced logits of `tokens`, every position, with a grid of `blocks`.
std::vector<std::vector<float>> persistent_logits(ch08::GpuDecoder& dec, const std::vector<int>& tokens,
                                                  int blocks) {
  dec.set_mode(ch08::StepMode::Persistent);
  dec.set_persistent_blocks(blocks);
  dec.reset();
  std::vector<std::vector<float>> rows;
  for (int t : tokens) rows.push_back(dec.forward_logits(t));
  return rows;
}

}  // namespace

TEST_CASE("persistent step: teacher-forced logits match the CPU engine (synthetic small, every grid)") {
  WB_REQUIRE_GPU();
  const Model m = wb::model::make_synthetic(wb::model::synthetic_small());
  if (!persistent_runs_here(m)) return;
  const std::vector<int> tokens =
      random_sequence(m, steps_for(m.config().seq_len), "ch08/persistent/teacher/synthetic");
  check_every_grid(m, tokens, "synthetic small, persistent");
}

TEST_CASE("persistent step: teacher-forced logits match the CPU engine (stories260K, every grid)") {
  WB_REQUIRE_GPU();
  const auto stories = stories_or_skip_here();
  if (!stories) return;
  const auto& [m, tok] = *stories;
  const std::vector<int> tokens = stories_teacher_sequence(m, tok, steps_for(256), "ch08/persistent/teacher/stories");
  check_every_grid(m, tokens, "stories260K, persistent");
}

TEST_CASE("persistent step: a short context to its last position, then a step past it throws") {
  WB_REQUIRE_GPU();
  const Model m = short_context_model();
  if (!persistent_runs_here(m)) return;
  const std::vector<int> tokens = random_sequence(m, m.config().seq_len, "ch08/persistent/short");
  check_every_grid(m, tokens, "short context (head size 16), persistent");
  ch08::GpuModel gm(m);
  ch08::GpuDecoder dec(gm);
  dec.set_mode(ch08::StepMode::Persistent);
  for (int t : tokens) (void)dec.forward_logits(t);
  CHECK_THROWS_AS((void)dec.forward_logits(5), std::out_of_range);
}

TEST_CASE("persistent step: the logits are the same bit for bit whatever the grid") {
  WB_REQUIRE_GPU();
  const Model m = wb::model::make_synthetic(wb::model::synthetic_small());
  if (!persistent_runs_here(m)) return;
  const std::vector<int> tokens = random_sequence(m, steps_for(48), "ch08/persistent/bits");
  ch08::GpuModel gm(m);
  ch08::GpuDecoder dec(gm);
  const auto want = persistent_logits(dec, tokens, 0);
  for (int blocks : {1, 2, 5, 0}) {
    const auto got = persistent_logits(dec, tokens, blocks);
    for (std::size_t pos = 0; pos < tokens.size(); ++pos)
      for (std::size_t i = 0; i < want[pos].size(); ++i)
        if (std::memcmp(&got[pos][i], &want[pos][i], sizeof(float)) != 0)
          FAIL("ch08 persistent step: with " << blocks << " block(s) (0 = one per SM) logit " << i << " at position "
               << pos << " is " << got[pos][i] << ", with one block per SM " << want[pos][i]
               << ". Every sum has one fixed order, so the grid must not change a bit: a stage read data "
                  "before its writer wrote it, or shared memory was overwritten while another warp still read it");
  }
}

TEST_CASE("persistent step: greedy decoding gives the CPU engine's tokens and llama2.c's text (stories260K)") {
  WB_REQUIRE_GPU();
  const auto stories = stories_or_skip_here();
  if (!stories) return;
  const auto& [m, tok] = *stories;
  ch08::GpuModel gm(m);
  ch08::GpuDecoder dec(gm);
  dec.set_mode(ch08::StepMode::Persistent);
  const std::vector<std::string> prompts = greedy_prompts();
  const int steps = steps_for(256);
  for (const std::string& prompt : prompts) {
    CAPTURE(prompt);
    const std::vector<int> want = cpu_greedy(m, tok, prompt, steps);
    const std::vector<int> got = dec.generate(tok.encode(prompt, /*bos=*/true, /*eos=*/false), steps, kGreedy);
    compare_greedy(m, want, got, "stories260K greedy, prompt '" + prompt + "', persistent");
  }
  if (wb::coverage::quick()) return;  // the text needs all 200 steps
  const std::vector<int> tokens = dec.generate(std::vector<int>{Tokenizer::kBos}, wb::model::kTinyStoriesSteps, kGreedy);
  const std::string text = decode_text(tok, tokens);
  if (text != wb::model::kTinyStoriesGreedyText)
    FAIL("ch08 persistent step: greedy decoding of stories260K (200 steps, no prompt) printed\n  "
         << text << "\nllama2.c prints\n  " << wb::model::kTinyStoriesGreedyText);
}

TEST_CASE("persistent step: per token one kernel launch, no allocation, no synchronize, 4 bytes back") {
  WB_REQUIRE_GPU();
  if (!cupti_or_skip()) return;
  const Model m = wb::model::make_synthetic(wb::model::synthetic_small());
  if (!persistent_runs_here(m)) return;
  const int steps = steps_for(48);
  const ch07::SamplingParams sampled{1.0f, 0, 1.0f, 11, 0};
  const double sampler = double(sampler_launches(m.config().vocab_size, sampled));
  ch08::GpuModel gm(m);
  ch08::GpuDecoder dec(gm);
  dec.set_mode(ch08::StepMode::Persistent);
  const auto [c, passes] = count_decode(dec, steps, sampled);
  REQUIRE(passes > 0);
  const double launches = double(c.launches) / passes;
  wb::testing::record_metric("launches_per_token_persistent", launches);
  CHECK_MESSAGE(c.mallocs + c.host_allocs == 0, "ch08 persistent step: allocations during decoding");
  CHECK_MESSAGE(c.device_syncs == 0, "ch08 persistent step: cudaDeviceSynchronize during decoding");
  CHECK_MESSAGE(c.bytes_d2h == 4ull * std::uint64_t(passes), "ch08 persistent step: " << c.bytes_d2h
                                                                 << " bytes back in " << passes << " tokens");
  CHECK_MESSAGE(c.stream_syncs + c.event_syncs <= std::uint64_t(passes) + 2,
                "ch08 persistent step: " << c.stream_syncs << " stream and " << c.event_syncs
                                         << " event synchronizations in " << passes << " tokens");
  CHECK_MESSAGE(launches == doctest::Approx(sampler + 1.0),
                "ch08 persistent step: " << launches << " kernel launches per token; the step is one, the sampler "
                                         << sampler);
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
