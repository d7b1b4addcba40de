// Host tests of the seeded inputs: reproducible per label, different across labels.
#include <algorithm>
#include <cmath>
#include <numeric>

#include "wb/random.hpp"
#include "wb/testing.hpp"

TEST_CASE("the same label gives the same inputs, another label different ones") {
  const auto a = wb::random_uniform(1000, -1.0f, 1.0f, "test/a");
  const auto a2 = wb::random_uniform(1000, -1.0f, 1.0f, "test/a");
  const auto b = wb::random_uniform(1000, -1.0f, 1.0f, "test/b");
  CHECK(a == a2);
  CHECK(a != b);
}

TEST_CASE("uniform inputs stay in range and are not constant") {
  const auto v = wb::random_uniform(10000, -3.0f, 5.0f, "test/range");
  CHECK(*std::min_element(v.begin(), v.end()) >= -3.0f);
  CHECK(*std::max_element(v.begin(), v.end()) < 5.0f);
  CHECK(*std::min_element(v.begin(), v.end()) < -2.9f);
  CHECK(*std::max_element(v.begin(), v.end()) > 4.9f);
}

TEST_CASE("normal inputs have the asked mean and spread") {
  const auto v = wb::random_normal(100001, 2.0f, 0.5f, "test/normal");
  const double mean = std::accumulate(v.begin(), v.end(), 0.0) / double(v.size());
  double var = 0;
  for (float x : v) var += (x - mean) * (x - mean);
  var /= double(v.size());
  CHECK(mean == doctest::Approx(2.0).epsilon(0.01));
  CHECK(std::sqrt(var) == doctest::Approx(0.5).epsilon(0.02));
}
