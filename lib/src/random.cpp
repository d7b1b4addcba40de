#include "wb/random.hpp"

#include <chrono>
#include <cmath>
#include <cstdlib>
#include <stdexcept>
#include <string>

namespace wb {

std::uint64_t base_seed() {
  static const std::uint64_t seed = []() -> std::uint64_t {
    if (const char* env = std::getenv("WB_SEED"); env && *env) {
      char* end = nullptr;
      const unsigned long long v = std::strtoull(env, &end, 10);
      if (*end != '\0')
        throw std::invalid_argument("WB_SEED must be a decimal integer, got '" +
                                    std::string(env) + "'");
      return static_cast<std::uint64_t>(v);
    }
    // Fresh inputs on every run; the seed is printed with every failure to reproduce it.
    const auto now = std::chrono::high_resolution_clock::now().time_since_epoch().count();
    return static_cast<std::uint64_t>(now) % 1000000007ULL;
  }();
  return seed;
}

std::mt19937_64 rng_for(std::string_view label) {
  // FNV-1a over the label, mixed with the base seed: each named input has its own stream,
  // so adding an input to a test does not change the others.
  std::uint64_t h = 1469598103934665603ULL ^ base_seed();
  for (unsigned char c : label) {
    h ^= c;
    h *= 1099511628211ULL;
  }
  return std::mt19937_64(h);
}

// std:: distributions are not the same across standard libraries; these are, so a seed
// reproduces the same inputs on every machine.
namespace {
double unit(std::mt19937_64& rng) { return (rng() >> 11) * 0x1.0p-53; }
}  // namespace

std::vector<float> random_uniform(std::size_t n, float lo, float hi, std::mt19937_64& rng) {
  std::vector<float> v(n);
  for (auto& x : v) x = static_cast<float>(lo + (hi - lo) * unit(rng));
  return v;
}

std::vector<float> random_normal(std::size_t n, float mean, float stddev, std::mt19937_64& rng) {
  std::vector<float> v(n);
  for (std::size_t i = 0; i < n; i += 2) {
    // Box-Muller: two normals from two uniforms.
    const double u1 = 1.0 - unit(rng), u2 = unit(rng);
    const double r = std::sqrt(-2.0 * std::log(u1));
    v[i] = static_cast<float>(mean + stddev * r * std::cos(6.283185307179586 * u2));
    if (i + 1 < n) v[i + 1] = static_cast<float>(mean + stddev * r * std::sin(6.283185307179586 * u2));
  }
  return v;
}

std::vector<float> random_uniform(std::size_t n, float lo, float hi, std::string_view label) {
  auto rng = rng_for(label);
  return random_uniform(n, lo, hi, rng);
}

std::vector<float> random_normal(std::size_t n, float mean, float stddev, std::string_view label) {
  auto rng = rng_for(label);
  return random_normal(n, mean, stddev, rng);
}

}  // namespace wb
