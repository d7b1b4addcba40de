// Text generation and decoding speed (see wb/model/generate.hpp).
#include "wb/model/generate.hpp"

#include <algorithm>
#include <chrono>

#include "wb/model/sampler.hpp"

namespace wb::model {

namespace {
using Clock = std::chrono::steady_clock;
double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}
}  // namespace

Generation generate(Transformer& transformer, const Tokenizer& tokenizer,
                    const GenerateOptions& options,
                    const std::function<void(std::string_view)>& on_text) {
  const Config& c = transformer.config();
  if (tokenizer.vocab_size() != c.vocab_size)
    throw ModelError("the tokenizer has " + std::to_string(tokenizer.vocab_size()) +
                     " entries but the model's vocabulary is " + std::to_string(c.vocab_size) +
                     "\nhint: use the tokenizer the model was trained with");
  const std::vector<int> prompt = tokenizer.encode(options.prompt, /*bos=*/true, /*eos=*/false);
  const int steps = std::min(options.steps, c.seq_len);
  if (int(prompt.size()) > steps)
    throw ModelError("the prompt is " + std::to_string(prompt.size()) + " tokens, more than the " +
                     std::to_string(steps) + " steps asked for");

  Sampler sampler(options.temperature, options.seed);
  Generation g;
  g.tokens.push_back(prompt[0]);
  int token = prompt[0];
  Clock::time_point timer_start;
  for (int pos = 0; pos < steps; ++pos) {
    const std::span<const float> logits = transformer.forward(token, pos);
    g.forward_passes++;
    if (pos == 0) timer_start = Clock::now();  // the first pass pays one-time costs
    // Inside the prompt the next token is forced; after it, the sampler picks.
    const int next = pos + 1 < int(prompt.size()) ? prompt[std::size_t(pos) + 1]
                     : options.pick                 ? options.pick(logits, pos)
                                                    : sampler.next(logits);
    if (next == Tokenizer::kBos) break;  // llama2.c's models emit BOS to end a story
    const std::string piece = tokenizer.decode(token, next);
    if (!is_unprintable_piece(piece)) {
      g.text += piece;
      if (on_text) on_text(piece);
    }
    g.tokens.push_back(next);
    token = next;
  }
  if (g.forward_passes > 1) {
    g.seconds_timed = seconds_since(timer_start);
    g.tokens_per_s = double(g.forward_passes - 1) / g.seconds_timed;
  }
  return g;
}

Throughput measure_throughput(Transformer& transformer, int steps) {
  steps = std::clamp(steps, 2, transformer.config().seq_len);
  Throughput t;
  int token = Tokenizer::kBos;
  t.tokens.push_back(token);
  Clock::time_point start;
  for (int pos = 0; pos < steps; ++pos) {
    const std::span<const float> logits = transformer.forward(token, pos);
    if (pos == 0) {  // untimed: lazy initialization, first allocations
      transformer.profile().reset();
      start = Clock::now();
    }
    token = argmax(logits);
    t.tokens.push_back(token);
  }
  t.seconds = seconds_since(start);
  t.tokens_timed = steps - 1;
  t.tokens_per_s = t.tokens_timed / t.seconds;
  const ForwardProfile& p = transformer.profile();
  t.matmul_us_per_token = p.matmul_us / double(p.tokens);
  t.other_us_per_token = p.other_us() / double(p.tokens);
  return t;
}

}  // namespace wb::model
