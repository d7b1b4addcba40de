// The synthetic model generator (see wb/model/synthetic.hpp).
#include "wb/model/synthetic.hpp"

#include <cmath>
#include <string>
#include <vector>

namespace wb::model {

namespace {

// splitmix64's finalizer: a strong 64-bit mix, so consecutive counters give independent bits.
std::uint64_t mix(std::uint64_t z) {
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

// Uniform in [-1, 1) from (seed, tensor, index): the same value on any machine, in any
// order, on any number of threads.
float uniform_pm1(std::uint64_t tensor_key, std::uint64_t index) {
  const std::uint64_t bits = mix(tensor_key + index * 0x9E3779B97F4A7C15ull);
  return float(bits >> 40) * (2.0f / 16777216.0f) - 1.0f;  // 24 bits -> [-1, 1)
}

// values[i] = center + half_width * uniform(-1, 1)
void fill(float* values, std::size_t count, std::uint64_t seed, int tensor, float center,
          float half_width) {
  const std::uint64_t key = mix(seed ^ mix(std::uint64_t(tensor) + 1));
  const long long n = static_cast<long long>(count);
#pragma omp parallel for schedule(static)
  for (long long i = 0; i < n; ++i)
    values[i] = center + half_width * uniform_pm1(key, std::uint64_t(i));
}

// Uniform weights with variance 1/fan_in: a unit-scale input gives a unit-scale output.
float half_width_for_fan_in(int fan_in) { return std::sqrt(3.0f / float(fan_in)); }

}  // namespace

Config SyntheticSpec::config() const {
  Config c;
  c.dim = dim;
  c.hidden_dim = hidden_dim;
  c.n_layers = n_layers;
  c.n_heads = n_heads;
  c.n_kv_heads = n_kv_heads;
  c.vocab_size = vocab_size;
  c.seq_len = seq_len;
  c.shared_classifier = shared_classifier;
  return c;
}

SyntheticSpec synthetic_110m() { return SyntheticSpec{}; }

SyntheticSpec synthetic_small() {
  SyntheticSpec s;
  s.dim = 288;
  s.hidden_dim = 768;
  s.n_layers = 4;
  s.n_heads = 6;
  s.n_kv_heads = 2;
  s.vocab_size = 32000;
  s.seq_len = 128;
  return s;
}

Model make_synthetic(const SyntheticSpec& spec) {
  const Config c = spec.config();
  const std::string origin = "synthetic model (" + c.summary() + ", seed " + std::to_string(spec.seed) + ")";
  c.validate(origin);
  std::vector<float> payload(c.payload_floats());

  const std::size_t d = std::size_t(c.dim), h = std::size_t(c.hidden_dim);
  const std::size_t kv = std::size_t(c.kv_dim()), L = std::size_t(c.n_layers);
  const std::size_t v = std::size_t(c.vocab_size);
  float* p = payload.data();
  int tensor = 0;
  // Fills the next `count` floats of the payload (file order) and moves on.
  auto next = [&](std::size_t count, float center, float half_width) {
    fill(p, count, spec.seed, tensor++, center, half_width);
    p += count;
  };
  // The embedding is also the (shared) classifier: entries of size ~2/sqrt(dim) give
  // logits of size ~2 from the unit-scale final hidden state.
  const float embedding_width = 2.0f * std::sqrt(3.0f / float(c.dim));
  next(v * d, 0.0f, embedding_width);                      // token embedding
  next(L * d, 1.0f, 0.2f);                                 // rms_att: ones, +-20%
  next(L * d * d, 0.0f, half_width_for_fan_in(c.dim));     // wq
  next(L * kv * d, 0.0f, half_width_for_fan_in(c.dim));    // wk
  next(L * kv * d, 0.0f, half_width_for_fan_in(c.dim));    // wv
  next(L * d * d, 0.0f, half_width_for_fan_in(c.dim));     // wo
  next(L * d, 1.0f, 0.2f);                                 // rms_ffn
  next(L * h * d, 0.0f, half_width_for_fan_in(c.dim));     // w1
  next(L * d * h, 0.0f, half_width_for_fan_in(c.hidden_dim));  // w2
  next(L * h * d, 0.0f, half_width_for_fan_in(c.dim));     // w3
  next(d, 1.0f, 0.2f);                                     // rms_final
  // The legacy RoPE tables (llama2.c ignores them; filled with their true values).
  const int half = c.head_size() / 2;
  for (int which = 0; which < 2; ++which) {
    for (int pos = 0; pos < c.seq_len; ++pos) {
      for (int i = 0; i < half; ++i) {
        const double angle = pos / std::pow(10000.0, 2.0 * i / c.head_size());
        *p++ = float(which == 0 ? std::cos(angle) : std::sin(angle));
      }
    }
  }
  if (!c.shared_classifier) next(v * d, 0.0f, half_width_for_fan_in(c.dim));  // classifier
  return Model(c, std::move(payload), origin);
}

}  // namespace wb::model
