// Host tests of the statistics the harness reports.
#include <vector>

#include "wb/testing.hpp"
#include "wb/timing.hpp"

TEST_CASE("median of odd and even counts") {
  CHECK(wb::median_of({3, 1, 2}) == 2);
  CHECK(wb::median_of({4, 1, 3, 2}) == 2.5);
  CHECK(wb::median_of({}) == 0);
}

TEST_CASE("summarize: a skewed sequence has median far from the mean") {
  // The chapter 00 trap: a few slow outliers drag the mean, not the median.
  std::vector<double> s;
  for (int i = 0; i < 3; ++i) s.insert(s.end(), {100, 100, 80, 120, 900});
  const wb::Stats st = wb::summarize("skewed", s, 1e6);
  CHECK(st.median_us == 100);
  CHECK(st.min_us == 80);
  CHECK(st.max_us == 900);
  CHECK(st.mean_us == doctest::Approx(260));
  CHECK(st.samples == 15);
  CHECK(st.gbps == doctest::Approx(1e6 / (100 * 1e3)));
  CHECK(st.noise > 0);
}

TEST_CASE("summarize: identical samples have zero noise") {
  const wb::Stats st = wb::summarize("flat", std::vector<double>(50, 7.0), 0);
  CHECK(st.noise == 0);
  CHECK(st.p25_us == 7.0);
  CHECK(st.p75_us == 7.0);
}
