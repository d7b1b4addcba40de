#pragma once
// Text generation: encode the prompt, then one forward pass per position; the prompt's
// tokens are forced, later tokens come from the sampler. Stops after `steps` forward
// passes or when the model produces BOS (llama2.c's convention for "end of story").
#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "wb/model/tokenizer.hpp"
#include "wb/model/transformer.hpp"

namespace wb::model {

struct GenerateOptions {
  std::string prompt;          // may be empty
  int steps = 256;             // forward passes, capped at the model's seq_len
  float temperature = 0.0f;    // 0: greedy
  std::uint64_t seed = 42;     // for temperature > 0
  // When set, picks every generated token instead of the built-in Sampler: it gets the
  // logits and the position (a step counter for counter-based generators such as chapter
  // 07's). `./workbook generate --sampler cpu|07` plugs chapter 07's samplers in here.
  std::function<int(std::span<const float> logits, int position)> pick;
};

struct Generation {
  std::vector<int> tokens;     // every token fed or produced, starting with BOS
  std::string text;            // what was printed (prompt included)
  int forward_passes = 0;
  // Throughput over every forward pass but the first (the first one pays one-time costs:
  // lazy CUDA initialization, first allocations), like llama2.c's "achieved tok/s".
  double seconds_timed = 0;
  double tokens_per_s = 0;
};

// `on_text` (optional) receives each printed piece as soon as it is produced.
Generation generate(Transformer& transformer, const Tokenizer& tokenizer,
                    const GenerateOptions& options,
                    const std::function<void(std::string_view)>& on_text = {});

// Decoding speed of a backend: greedy decoding from BOS for `steps` forward passes (no
// tokenizer needed). The first pass is not timed; the rest give tokens/s and the split
// between the matmuls and everything else (from the Transformer's ForwardProfile).
struct Throughput {
  int tokens_timed = 0;
  double seconds = 0;
  double tokens_per_s = 0;
  double matmul_us_per_token = 0;
  double other_us_per_token = 0;
  std::vector<int> tokens;  // what was decoded (to compare backends)
};
Throughput measure_throughput(Transformer& transformer, int steps);

}  // namespace wb::model
