// Text generation: prompts, stopping, speed measurement.
#include <string>

#include "model_test_support.hpp"
#include "wb/model/data.hpp"
#include "wb/model/generate.hpp"
#include "wb/model/synthetic.hpp"
#include "wb/model/tokenizer.hpp"
#include "wb/testing.hpp"

using namespace wb::model;

TEST_CASE("generation on the synthetic model: BOS first, steps capped by seq_len, text from the pieces") {
  const Model m = make_synthetic(model_test::tiny_spec());
  const Tokenizer tok = Tokenizer::synthetic(m.config().vocab_size, 3);
  CpuMatmul cpu;
  Transformer t(m, cpu);
  std::string streamed;
  const Generation g = generate(t, tok, {.prompt = "", .steps = 1000}, [&](std::string_view piece) { streamed += piece; });
  CHECK(g.tokens.front() == Tokenizer::kBos);
  CHECK(g.forward_passes <= m.config().seq_len);  // 16
  CHECK(g.text == streamed);
  CHECK(g.text == tok.decode_all(g.tokens));
  if (g.forward_passes > 1) CHECK(g.tokens_per_s > 0);
}

TEST_CASE("a vocabulary that does not fit the model is an error") {
  const Model m = make_synthetic(model_test::tiny_spec());
  const Tokenizer tok = Tokenizer::synthetic(512, 3);
  CpuMatmul cpu;
  Transformer t(m, cpu);
  CHECK_THROWS_WITH_AS(generate(t, tok, {}), doctest::Contains("the tokenizer has 512 entries but the model's vocabulary is 300"),
                       ModelError);
}

TEST_CASE("measure_throughput times all passes but the first and splits matmul from the rest") {
  const Model m = make_synthetic(model_test::tiny_spec());
  CpuMatmul cpu;
  Transformer t(m, cpu);
  const Throughput r = measure_throughput(t, 10);
  CHECK(r.tokens_timed == 9);
  CHECK(r.tokens.size() == 11);
  CHECK(r.tokens_per_s > 0);
  CHECK(r.matmul_us_per_token > 0);
  CHECK(r.other_us_per_token > 0);
  CHECK(t.profile().tokens == 9);
}

TEST_CASE("stories260K: a prompt is forced, then the story continues") {
  std::string why;
  const auto files = tiny_stories_from_env(&why);
  if (!files) {
    wb::testing::mark_skipped(why);
    return;
  }
  const Model m = load_checkpoint(files->model);
  const Tokenizer tok = Tokenizer::load(files->tokenizer, m.config().vocab_size);
  CpuMatmul cpu;
  Transformer t(m, cpu);
  const Generation g = generate(t, tok, {.prompt = "Once upon a time, there was a dog", .steps = 60});
  CHECK(g.text.rfind("Once upon a time, there was a dog", 0) == 0);
  CHECK(g.text.size() > 40);
  // With a temperature the text changes with the seed but stays reproducible.
  Transformer t2(m, cpu), t3(m, cpu);
  const auto a = generate(t2, tok, {.prompt = "", .steps = 40, .temperature = 1.0f, .seed = 5});
  const auto b = generate(t3, tok, {.prompt = "", .steps = 40, .temperature = 1.0f, .seed = 5});
  CHECK(a.text == b.text);
}
