// Greedy and temperature sampling (see wb/model/sampler.hpp).
#include "wb/model/sampler.hpp"

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>

#include "wb/model/transformer.hpp"  // softmax

namespace wb::model {

int argmax(std::span<const float> values) {
  if (values.empty()) throw std::invalid_argument("argmax of an empty vector");
  return int(std::max_element(values.begin(), values.end()) - values.begin());
}

Sampler::Sampler(float temperature, std::uint64_t seed)
    : temperature_(temperature), state_(seed ? seed : 0x2545F4914F6CDD1Dull) {
  if (!(temperature >= 0.0f) || !std::isfinite(temperature))
    throw std::invalid_argument("sampler: temperature must be a finite number >= 0 (got " +
                                std::to_string(temperature) + ")");
}

// xorshift64*: small, fast and good enough to draw tokens.
float Sampler::uniform01() {
  state_ ^= state_ >> 12;
  state_ ^= state_ << 25;
  state_ ^= state_ >> 27;
  const std::uint64_t bits = state_ * 0x2545F4914F6CDD1Dull;
  return float(bits >> 40) / 16777216.0f;  // 24 random bits
}

int Sampler::next(std::span<const float> logits) {
  if (temperature_ == 0.0f) return argmax(logits);
  probs_.assign(logits.begin(), logits.end());
  for (float& p : probs_) p /= temperature_;
  softmax(probs_.data(), int(probs_.size()));
  // Walk the cumulative distribution to where a uniform draw falls.
  const float u = uniform01();
  float cumulative = 0.0f;
  for (std::size_t i = 0; i < probs_.size(); ++i) {
    cumulative += probs_[i];
    if (u < cumulative) return int(i);
  }
  return int(probs_.size()) - 1;  // rounding left the total just below u
}

}  // namespace wb::model
