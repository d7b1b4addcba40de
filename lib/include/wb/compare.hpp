#pragma once
// Compare a GPU result with a double-precision CPU reference, element by element:
//   |got - ref| <= atol + rtol * |ref|,   NaN never passes (and an unwritten, poisoned
// element is NaN), a -inf/+inf reference passes only when got is the same infinity.
// The message names the chapter, what was compared, the shape, the first mismatches
// (index, got, expected) and a hint about the likely mistake.
#include <cstddef>
#include <span>
#include <string>
#include <vector>

namespace wb {

struct Tolerance {
  double atol;
  double rtol;
};
// Typical tolerances against a double reference.
inline constexpr Tolerance kFp32Tol{1e-6, 1e-5};
inline constexpr Tolerance kFp16Tol{1e-3, 1e-2};

struct CompareSpec {
  std::string chapter;         // "04"
  std::string what;            // "fused softmax"
  std::vector<std::size_t> shape;  // {rows, cols}: indices are shown as [r, c]
  Tolerance tol = kFp32Tol;
  std::string hint;            // the chapter's own hint for a mismatch (optional)
  std::size_t show = 5;        // how many mismatches to list
};

struct CompareResult {
  bool ok = false;
  std::size_t checked = 0;
  std::size_t mismatches = 0;
  std::size_t nan_count = 0;        // NaN where the reference is a number (often: not written)
  double max_abs_error = 0;
  double max_rel_error = 0;
  std::string message;              // empty when ok
};

CompareResult compare(std::span<const float> got, std::span<const double> expected,
                      const CompareSpec& spec);
CompareResult compare(std::span<const double> got, std::span<const double> expected,
                      const CompareSpec& spec);

// "16x151936"
std::string shape_string(const std::vector<std::size_t>& shape);

}  // namespace wb
