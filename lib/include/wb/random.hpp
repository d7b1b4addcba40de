#pragma once
// Seeded random inputs. Every input is drawn from a seed derived from one base seed and a
// label, so a failure can be reproduced exactly (the seed is printed in every failure) and a
// grader can hide the base seed (WB_SEED) so answers cannot be precomputed.
//
// Base seed: WB_SEED from the environment when set, otherwise fresh for every process.
#include <cstdint>
#include <random>
#include <string_view>
#include <vector>

namespace wb {

std::uint64_t base_seed();
// A generator for one named input, e.g. rng_for("ch04/softmax/16x151936/x").
std::mt19937_64 rng_for(std::string_view label);

// Uniform in [lo, hi) and normal(mean, stddev) floats. Never constant, never all zero.
std::vector<float> random_uniform(std::size_t n, float lo, float hi, std::mt19937_64& rng);
std::vector<float> random_normal(std::size_t n, float mean, float stddev, std::mt19937_64& rng);
std::vector<float> random_uniform(std::size_t n, float lo, float hi, std::string_view label);
std::vector<float> random_normal(std::size_t n, float mean, float stddev, std::string_view label);

}  // namespace wb
