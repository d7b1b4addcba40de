// Host tests of wb::describe_overrun: what the guard bands around a test's output report.
#include <string>
#include <vector>

#include "wb/guarded_buffer.hpp"
#include "wb/testing.hpp"

namespace {
// A band of `elements` floats, all guard pattern.
std::vector<unsigned char> band(std::size_t elements) {
  return std::vector<unsigned char>(elements * sizeof(float), wb::kGuardByte);
}
void clobber(std::vector<unsigned char>& b, std::size_t element) {
  b[element * sizeof(float) + 1] = 0x00;  // one byte is enough to count
}
bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }
}  // namespace

TEST_CASE("intact guard bands report nothing") {
  CHECK(wb::describe_overrun(band(16), band(16), sizeof(float), 1000, "y").empty());
}

TEST_CASE("writes past the end are counted and located from the end of the buffer") {
  auto after = band(16);
  clobber(after, 0);
  clobber(after, 2);
  const std::string m = wb::describe_overrun(band(16), after, sizeof(float), 257, "y");
  CHECK_MESSAGE(contains(m, "wrote 2 element(s) past the end of y"), m);
  CHECK_MESSAGE(contains(m, "y has 257"), m);
  CHECK_MESSAGE(contains(m, "the first write was y[257], the last y[259]"), m);
}

TEST_CASE("writes before the start get negative indices") {
  auto before = band(16);
  clobber(before, 15);  // the element just before y[0]
  clobber(before, 13);
  const std::string m = wb::describe_overrun(before, band(16), sizeof(float), 8, "row_max");
  CHECK_MESSAGE(contains(m, "2 element(s) before the start of row_max (row_max[-3] to row_max[-1])"), m);
  CHECK_FALSE(contains(m, "past the end"));
}

TEST_CASE("both sides are reported in one message") {
  auto before = band(4), after = band(4);
  clobber(before, 3);
  clobber(after, 3);
  const std::string m = wb::describe_overrun(before, after, sizeof(float), 5, "y");
  CHECK_MESSAGE(contains(m, "1 element(s) past the end of y (y has 5; the first write was y[8])"), m);
  CHECK_MESSAGE(contains(m, "; and 1 element(s) before the start of y (y[-1])"), m);
}

TEST_CASE("a write of the guard pattern's own bytes cannot be seen, any other value can") {
  auto after = band(4);
  after[0] = 0xFF;  // the NaN poison is not the guard pattern
  CHECK_FALSE(wb::describe_overrun(band(4), after, sizeof(float), 1, "y").empty());
}

TEST_CASE("an input left alone reports nothing; a changed one names the first change") {
  const std::vector<float> x = {1.0f, -2.0f, 3.5f, 0.0f};
  CHECK(wb::describe_input_change(x, x, "x").empty());
  std::vector<float> after = x;
  after[2] = 0.25f;
  after[3] = -0.0f;  // a different bit pattern counts, even when it compares equal
  const std::string m = wb::describe_input_change(x, after, "x");
  CHECK_MESSAGE(contains(m, "changed 2 of the 4 elements of its input x"), m);
  CHECK_MESSAGE(contains(m, "the first: x[2] was 3.5, is now 0.25"), m);
}
