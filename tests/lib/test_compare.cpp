// Host tests of wb::compare: the rules every correctness test relies on.
#include <cmath>
#include <limits>
#include <vector>

#include "wb/compare.hpp"
#include "wb/testing.hpp"

namespace {
const double kNaN = std::numeric_limits<double>::quiet_NaN();
const double kInf = std::numeric_limits<double>::infinity();
wb::CompareSpec spec_2d(std::size_t rows, std::size_t cols) {
  return {.chapter = "99", .what = "unit test", .shape = {rows, cols}, .tol = wb::kFp32Tol};
}
}  // namespace

TEST_CASE("compare accepts values within atol + rtol*|ref|") {
  const std::vector<double> ref = {1.0, -2.0, 1e-8, 1000.0};
  const std::vector<float> got = {1.000009f, -2.00001f, 0.0f, 1000.009f};
  const auto r = wb::compare(got, ref, spec_2d(1, 4));
  CHECK_MESSAGE(r.ok, r.message);
  CHECK(r.mismatches == 0);
  CHECK(r.checked == 4);
}

TEST_CASE("compare rejects values outside the tolerance and lists them") {
  const std::vector<double> ref = {1.0, 2.0, 3.0, 4.0};
  const std::vector<float> got = {1.0f, 2.1f, 3.0f, 4.5f};
  const auto r = wb::compare(got, ref, spec_2d(2, 2));
  CHECK_FALSE(r.ok);
  CHECK(r.mismatches == 2);
  CHECK(r.message.find("[0, 1] got 2.0999999") != std::string::npos);
  CHECK(r.message.find("[1, 1]") != std::string::npos);
  CHECK(r.message.find("WB_SEED=") != std::string::npos);
  CHECK(r.message.find("shape 2x2") != std::string::npos);
}

TEST_CASE("NaN never passes, even against a NaN reference") {
  const std::vector<double> ref = {1.0, kNaN};
  const std::vector<float> got = {std::nanf(""), std::nanf("")};
  const auto r = wb::compare(got, ref, spec_2d(1, 2));
  CHECK_FALSE(r.ok);
  CHECK(r.mismatches == 2);
}

TEST_CASE("infinities must match exactly") {
  const std::vector<double> ref = {kInf, -kInf, 1.0};
  CHECK(wb::compare(std::vector<float>{INFINITY, -INFINITY, 1.0f}, ref, spec_2d(1, 3)).ok);
  CHECK_FALSE(wb::compare(std::vector<float>{INFINITY, INFINITY, 1.0f}, ref, spec_2d(1, 3)).ok);
  CHECK_FALSE(wb::compare(std::vector<float>{1.0f, -INFINITY, INFINITY}, ref, spec_2d(1, 3)).ok);
}

TEST_CASE("an untouched (poisoned) output gets the 'nothing was written' hint") {
  const std::vector<double> ref(10, 0.5);
  const std::vector<float> got(10, std::nanf(""));
  const auto r = wb::compare(got, ref, spec_2d(2, 5));
  CHECK_FALSE(r.ok);
  CHECK(r.nan_count == 10);
  CHECK(r.message.find("hint: nothing was written") != std::string::npos);
}

TEST_CASE("a missing tail gets the tail hint") {
  std::vector<double> ref(100, 0.25);
  std::vector<float> got(100, 0.25f);
  for (int i = 96; i < 100; ++i) got[i] = std::nanf("");
  const auto r = wb::compare(got, ref, {.chapter = "99", .what = "tail", .shape = {100}});
  CHECK_FALSE(r.ok);
  CHECK(r.message.find("the last 4 elements were never written") != std::string::npos);
}

TEST_CASE("a size mismatch is reported, not compared") {
  const auto r = wb::compare(std::vector<float>(3, 1.0f), std::vector<double>(4, 1.0), spec_2d(1, 4));
  CHECK_FALSE(r.ok);
  CHECK(r.message.find("3 elements, expected 4") != std::string::npos);
}

TEST_CASE("the chapter's own hint is appended") {
  auto spec = spec_2d(1, 2);
  spec.hint = "subtract the row max before exp()";
  const auto r = wb::compare(std::vector<float>{1.0f, 9.0f}, std::vector<double>{1.0, 2.0}, spec);
  CHECK(r.message.find("hint: subtract the row max") != std::string::npos);
}

// Chapter 04's and 05's failure messages stream names returned as `const char*`; a GPU run
// printed them as addresses ("ch04 0x55e1bfea40b0 softmax") until wb/testing.hpp said otherwise.
TEST_CASE("a failure message prints a C string held in a pointer as its text") {
  const char* name = "fused";
  char buffer[] = "unfused";
  char* mutable_name = buffer;
  CHECK(doctest::toString(name) == doctest::String("fused"));
  CHECK(doctest::toString(mutable_name) == doctest::String("unfused"));
  CHECK(doctest::toString(static_cast<const char*>(nullptr)) == doctest::String("(null)"));
}
