#include "wb/compare.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <sstream>

#include "wb/random.hpp"

namespace wb {

std::string shape_string(const std::vector<std::size_t>& shape) {
  std::string s;
  for (std::size_t i = 0; i < shape.size(); ++i) s += (i ? "x" : "") + std::to_string(shape[i]);
  return s.empty() ? "?" : s;
}

namespace {

// [r, c] for a 2-D shape, [i] otherwise.
std::string index_string(std::size_t i, const std::vector<std::size_t>& shape) {
  if (shape.size() == 2 && shape[1] > 0)
    return "[" + std::to_string(i / shape[1]) + ", " + std::to_string(i % shape[1]) + "]";
  return "[" + std::to_string(i) + "]";
}

std::string number(double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.9g", v);
  return buf;
}

bool element_ok(double got, double ref, Tolerance tol) {
  if (std::isnan(got)) return false;  // NaN never passes, whatever the reference says
  if (std::isinf(ref)) return got == ref;
  if (std::isinf(got)) return false;
  return std::fabs(got - ref) <= tol.atol + tol.rtol * std::fabs(ref);
}

// Guesses the mistake from where the bad elements are.
std::string pattern_hint(const std::vector<std::size_t>& bad, std::size_t nan_count,
                         std::size_t total, const std::vector<std::size_t>& shape) {
  if (bad.empty()) return "";
  if (nan_count == total)
    return "nothing was written (every output is still the NaN poison): did the kernel "
           "launch at all? Check the grid size and that you launch on the stream you were "
           "given, and that nothing returns early.";
  if (nan_count == bad.size() && bad.front() > 0 && bad.back() == total - 1 &&
      bad.size() == bad.back() - bad.front() + 1)
    return "the last " + std::to_string(bad.size()) +
           " elements were never written: the tail (a size that is not a multiple of the "
           "block size or of the vector width) is not handled.";
  if (nan_count == bad.size())
    return std::to_string(nan_count) +
           " elements were never written (still NaN poison): some threads or blocks skip "
           "their part, or the grid does not cover the whole output.";
  if (nan_count > 0)
    return "some outputs are NaN: an exp() overflowed (subtract the row max first?), a "
           "division by zero, or an element that was never written.";
  if (shape.size() == 2 && shape[0] > 1) {
    const std::size_t cols = shape[1];
    const bool first_row_only = bad.back() < cols;
    if (!first_row_only && bad.front() >= cols)
      return "row 0 is right but later rows are wrong: check the row offset (row * cols) "
             "and the per-row indexing.";
  }
  return "";
}

template <typename T>
CompareResult compare_impl(std::span<const T> got, std::span<const double> expected,
                           const CompareSpec& spec) {
  CompareResult r;
  std::ostringstream msg;
  const std::string where = "chapter " + spec.chapter + ", " + spec.what + ", shape " +
                            shape_string(spec.shape);
  if (got.size() != expected.size()) {
    msg << where << ": the output has " << got.size() << " elements, expected "
        << expected.size() << "\nhint: check the size you allocate and copy back.";
    r.message = msg.str();
    return r;
  }
  std::vector<std::size_t> bad;
  for (std::size_t i = 0; i < got.size(); ++i) {
    const double g = static_cast<double>(got[i]), e = expected[i];
    ++r.checked;
    if (std::isnan(g) && !std::isnan(e)) ++r.nan_count;
    if (std::isfinite(g) && std::isfinite(e)) {
      const double abs_err = std::fabs(g - e);
      r.max_abs_error = std::max(r.max_abs_error, abs_err);
      if (e != 0) r.max_rel_error = std::max(r.max_rel_error, abs_err / std::fabs(e));
    }
    if (!element_ok(g, e, spec.tol)) bad.push_back(i);
  }
  r.mismatches = bad.size();
  r.ok = bad.empty();
  if (r.ok) return r;

  msg << where << ": " << bad.size() << " of " << got.size()
      << " elements differ from the double-precision reference (tolerance " << spec.tol.atol
      << " + " << spec.tol.rtol << "*|expected|";
  msg << "; " << r.nan_count << " NaN)\n  first mismatches:";
  for (std::size_t k = 0; k < std::min(spec.show, bad.size()); ++k) {
    const std::size_t i = bad[k];
    msg << "\n    " << index_string(i, spec.shape) << " got " << number(got[i]) << ", expected "
        << number(expected[i]);
  }
  msg << "\n  largest error where both are finite: " << number(r.max_abs_error)
      << " (relative " << number(r.max_rel_error) << ")";
  msg << "\n  reproduce with WB_SEED=" << base_seed();
  if (const auto h = pattern_hint(bad, r.nan_count, got.size(), spec.shape); !h.empty())
    msg << "\nhint: " << h;
  if (!spec.hint.empty()) msg << "\nhint: " << spec.hint;
  r.message = msg.str();
  return r;
}

}  // namespace

CompareResult compare(std::span<const float> got, std::span<const double> expected,
                      const CompareSpec& spec) {
  return compare_impl(got, expected, spec);
}

CompareResult compare(std::span<const double> got, std::span<const double> expected,
                      const CompareSpec& spec) {
  return compare_impl(got, expected, spec);
}

}  // namespace wb
