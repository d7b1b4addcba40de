// Chapter 04 test support: double-precision softmax and the checks behind the messages.
#include "reference.hpp"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
#include <random>
#include <sstream>
#include <thread>

#include "wb/random.hpp"

namespace ch04::reference {
namespace {

constexpr double kNegInf = -std::numeric_limits<double>::infinity();

// Runs body(begin, end) over [0, n) split across the host's cores (the references of the
// largest shapes take seconds on one core).
void parallel_for(std::size_t n, const std::function<void(std::size_t, std::size_t)>& body) {
  const std::size_t workers =
      std::clamp<std::size_t>(std::thread::hardware_concurrency(), 1, 32);
  if (n < 4096 || workers == 1) return body(0, n);
  std::vector<std::thread> threads;
  const std::size_t step = (n + workers - 1) / workers;
  for (std::size_t begin = 0; begin < n; begin += step)
    threads.emplace_back(body, begin, std::min(n, begin + step));
  for (auto& t : threads) t.join();
}

// The pattern DeviceBuffer::poison leaves in a float: all bits set.
bool is_poison(float v) { return std::bit_cast<std::uint32_t>(v) == 0xFFFFFFFFu; }

std::string at(std::size_t index, int cols) {
  return "y[" + std::to_string(index / cols) + ", " + std::to_string(index % cols) + "]";
}

}  // namespace

std::vector<double> softmax_rows(std::span<const float> x, int rows, int cols) {
  std::vector<double> y(x.size());
  parallel_for(rows, [&](std::size_t first_row, std::size_t end_row) {
    for (std::size_t r = first_row; r < end_row; ++r) {
      const float* in = x.data() + r * cols;
      double* out = y.data() + r * cols;
      double m = kNegInf;
      for (int c = 0; c < cols; ++c) m = std::max(m, static_cast<double>(in[c]));
      if (m == kNegInf) {  // all -inf: no distribution, NaN everywhere (documented)
        std::fill(out, out + cols, std::numeric_limits<double>::quiet_NaN());
        continue;
      }
      double sum = 0;
      for (int c = 0; c < cols; ++c) sum += out[c] = std::exp(static_cast<double>(in[c]) - m);
      for (int c = 0; c < cols; ++c) out[c] /= sum;
    }
  });
  return y;
}

std::vector<float> random_logits(std::size_t count, const std::string& label) {
  return wb::random_normal(count, 0.0f, 4.0f, label);
}

std::vector<float> edge_logits(int rows, int cols, const std::string& label) {
  std::mt19937_64 rng = wb::rng_for(label);
  std::uniform_real_distribution<float> big(-1e4f, 1e4f);
  std::normal_distribution<float> normal(0.0f, 4.0f);
  std::uniform_int_distribution<int> column(0, cols - 1);
  const float neg_inf = -std::numeric_limits<float>::infinity();
  std::vector<float> x(static_cast<std::size_t>(rows) * cols);
  for (int r = 0; r < rows; ++r) {
    float* row = x.data() + static_cast<std::size_t>(r) * cols;
    switch (r % 5) {
      case 0:
        for (int c = 0; c < cols; ++c) row[c] = big(rng);
        break;
      case 1:
        for (int c = 0; c < cols; ++c) row[c] = (rng() & 1) ? normal(rng) : neg_inf;
        row[column(rng)] = normal(rng);  // at least one finite entry
        break;
      case 2:
        std::fill(row, row + cols, neg_inf);
        row[column(rng)] = big(rng);
        break;
      case 3:
        std::fill(row, row + cols, neg_inf);
        break;
      case 4:
        for (int c = 0; c < cols; ++c) row[c] = big(rng);
        row[cols - 1] = 1.5e4f;  // above every other entry
        break;
    }
  }
  return x;
}

std::string check_softmax(std::span<const float> x, std::span<const float> got,
                          std::span<const double> expected, int rows, int cols,
                          const std::string& what) {
  const std::vector<std::size_t> shape = {static_cast<std::size_t>(rows),
                                          static_cast<std::size_t>(cols)};
  const std::string where = "ch04 " + what + ", shape " + wb::shape_string(shape) +
                            ", seed " + std::to_string(wb::base_seed()) + ": ";

  // 1. Outputs never written still hold the poison pattern.
  std::size_t unwritten = 0, first_unwritten = 0;
  for (std::size_t i = 0; i < got.size(); ++i)
    if (is_poison(got[i]) && unwritten++ == 0) first_unwritten = i;
  if (unwritten > 0)
    return where + std::to_string(unwritten) + " of " + std::to_string(got.size()) +
           " outputs were not written (they still hold the NaN the test filled y with); the "
           "first is " + at(first_unwritten, cols) +
           ".\nhint: every element of y must be written. Check the end of each row (cols = " +
           std::to_string(cols) +
           " may not be a multiple of your vector width or block size), the rows past the last "
           "full block, and that the grid covers every row.";

  // 2. Rows that are all -inf must be NaN everywhere; the rest is compared with tolerance.
  std::vector<float> g(got.begin(), got.end());
  std::vector<double> e(expected.begin(), expected.end());
  for (int r = 0; r < rows; ++r) {
    const std::size_t row = static_cast<std::size_t>(r) * cols;
    if (!std::isnan(e[row])) continue;
    for (int c = 0; c < cols; ++c) {
      if (!std::isnan(g[row + c])) {
        std::ostringstream m;
        m << where << "row " << r << " is all -inf, so every output of it must be NaN (the "
          << "documented result, as torch.softmax gives), but " << at(row + c, cols) << " = "
          << g[row + c] << ".\nhint: do not special-case a row without a finite entry: with "
          << "max = -inf, exp(x - max) = exp(-inf - (-inf)) = exp(NaN) gives the NaN by itself.";
        return m.str();
      }
      g[row + c] = 0.0f;
      e[row + c] = 0.0;
    }
  }
  wb::CompareSpec spec;
  spec.chapter = "04";
  spec.what = what;
  spec.shape = shape;
  spec.tol = kSoftmaxTol;
  spec.hint = "check y = exp(x - max) / sum(exp(x - max)) over the whole row; mismatches in "
              "only some rows or columns point at the indexing (row * cols + c)";
  const wb::CompareResult result = wb::compare(g, e, spec);
  if (result.ok) return "";

  // 3. What the mismatch looks like, most telling first.
  std::ostringstream diagnosis;
  std::size_t non_finite = 0, first_non_finite = 0;
  for (std::size_t i = 0; i < g.size(); ++i)
    if (!std::isfinite(g[i]) && std::isfinite(e[i]) && non_finite++ == 0) first_non_finite = i;
  if (non_finite > 0) {
    // Could exp have overflowed in that row? Only if a finite logit is beyond log(FLT_MAX).
    const std::size_t row = first_non_finite / cols * cols;
    float largest = -std::numeric_limits<float>::infinity();
    for (int c = 0; c < cols; ++c)
      if (std::isfinite(x[row + c])) largest = std::max(largest, std::abs(x[row + c]));
    diagnosis << where << non_finite << " outputs are inf or NaN where the probability is a "
              << "number (the first is " << at(first_non_finite, cols) << " = "
              << g[first_non_finite] << ")";
    if (largest > 88.0f)
      diagnosis << ": exp overflowed?\nhint: subtract the row max before exp: this row holds "
                << "logits up to " << largest << " and expf(88.8) is already inf in float; "
                << "x - max <= 0 keeps every exp in (0, 1].\n";
    else
      diagnosis << ", in a row whose logits are all below 88 in size, so exp cannot have "
                << "overflowed: a value was read before it was written?\nhint: the tests fill "
                << "y, row_max and row_sum with NaN before each call; a kernel that reads a max "
                << "or a sum before it is computed (or accumulates into one it never reset) "
                << "gets that NaN.\n";
    // A masked entry is the other way to a NaN: a part of the row (a thread's elements, a
    // chunk, a warp's share) that holds only -inf has a partial max of -inf.
    const auto masked = [](float v) { return std::isinf(v) && v < 0; };
    if (std::any_of(x.begin() + row, x.begin() + row + cols, masked))
      diagnosis << "hint: this row also has masked (-inf) entries. A part of it that holds only "
                << "-inf (one thread's elements, a chunk, a warp's share) has a partial max of "
                << "-inf, and exp(-inf - (-inf)) = NaN: such a part must add 0 to the sum and "
                << "leave the running max alone; only a row that is all -inf gives NaN.\n";
  } else {
    for (int r = 0; r < rows; ++r) {
      const std::size_t row = static_cast<std::size_t>(r) * cols;
      double sum = 0;
      for (int c = 0; c < cols; ++c) sum += g[row + c];
      if (std::isfinite(sum) && std::abs(sum - 1.0) > 1e-3 && !std::isnan(expected[row])) {
        diagnosis << where << "row " << r << " of y sums to " << sum << ", not 1: its outputs "
                  << "were divided by the wrong sum.\nhint: divide by the sum over the whole "
                  << "row, read after every thread's part is in: a warp's or a block's partial "
                  << "sum, another row's sum, or a sum read before the reduction finished all "
                  << "give rows that do not sum to 1.\n";
        break;
      }
    }
  }
  if (diagnosis.tellp() == 0) diagnosis << where << "outputs differ from the reference.\n";
  return diagnosis.str() + result.message;
}

}  // namespace ch04::reference
