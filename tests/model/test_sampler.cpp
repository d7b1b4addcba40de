// Greedy and temperature sampling, tested as statistics.
#include <cmath>
#include <stdexcept>
#include <vector>

#include "wb/model/sampler.hpp"
#include "wb/testing.hpp"

TEST_CASE("argmax picks the largest logit, the first one on a tie") {
  CHECK(wb::model::argmax(std::vector<float>{0.1f, 3.0f, -2.0f, 3.0f}) == 1);
  CHECK(wb::model::argmax(std::vector<float>{-5.0f}) == 0);
  wb::model::Sampler greedy(0.0f, 1);
  CHECK(greedy.next(std::vector<float>{1.0f, 2.0f, 9.0f, 2.0f}) == 2);
}

TEST_CASE("temperature sampling draws from softmax(logits / T)") {
  const std::vector<float> logits = {1.0f, 2.0f, 0.5f, -1.0f, 1.5f};
  for (float temperature : {1.0f, 0.5f}) {
    CAPTURE(temperature);
    std::vector<double> p(logits.size());
    double total = 0;
    for (std::size_t i = 0; i < p.size(); ++i) total += (p[i] = std::exp(logits[i] / temperature));
    for (double& v : p) v /= total;
    wb::model::Sampler sampler(temperature, 2024);
    const int draws = 200000;
    std::vector<int> counts(logits.size(), 0);
    for (int i = 0; i < draws; ++i) counts[std::size_t(sampler.next(logits))]++;
    for (std::size_t i = 0; i < p.size(); ++i) {
      const double sd = std::sqrt(draws * p[i] * (1 - p[i]));
      CAPTURE(i);
      CHECK(std::fabs(counts[i] - draws * p[i]) < 5 * sd);  // 5 standard deviations
    }
  }
}

TEST_CASE("sampling is deterministic per seed") {
  const std::vector<float> logits = {0.0f, 0.1f, 0.2f, 0.3f, 0.4f, 0.5f, 0.6f, 0.7f};
  wb::model::Sampler a(1.0f, 99), b(1.0f, 99), c(1.0f, 100);
  std::vector<int> sa, sb, sc;
  for (int i = 0; i < 64; ++i) sa.push_back(a.next(logits)), sb.push_back(b.next(logits)), sc.push_back(c.next(logits));
  CHECK(sa == sb);
  CHECK(sa != sc);
}

TEST_CASE("a negative or non-finite temperature is rejected") {
  CHECK_THROWS_WITH_AS(wb::model::Sampler(-0.5f, 1), doctest::Contains("temperature"), std::invalid_argument);
  CHECK_THROWS_AS(wb::model::Sampler(NAN, 1), std::invalid_argument);
}
