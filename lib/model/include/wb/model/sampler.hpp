#pragma once
// Picking the next token from the logits: greedy (the arg max) or sampling from
// softmax(logits / temperature) with a seeded generator, so a run can be repeated.
#include <cstdint>
#include <span>
#include <vector>

namespace wb::model {

// Index of the largest value (the first one on a tie).
int argmax(std::span<const float> values);

class Sampler {
 public:
  // temperature 0 means greedy.
  Sampler(float temperature, std::uint64_t seed);
  int next(std::span<const float> logits);
  float temperature() const { return temperature_; }

 private:
  float uniform01();  // [0, 1)
  float temperature_;
  std::uint64_t state_;
  std::vector<float> probs_;
};

}  // namespace wb::model
