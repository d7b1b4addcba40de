#pragma once
// Chapter 04 test support: the double-precision CPU softmax and the checks that turn a
// wrong answer into a message that says what went wrong. Shared by the tests and the bench.
#include <cstddef>
#include <span>
#include <string>
#include <vector>

#include "wb/compare.hpp"

namespace ch04::reference {

// float32 softmax against a double reference. exp in float (__expf) is accurate to a few
// 1e-6 relative over the range that matters (x - max > -33 here), and a sum of 151936 terms
// reduced as a tree adds about 1e-6 more; 2e-5 leaves room for any sane reduction order and
// still catches a wrong sum, which is off by far more. Probabilities below 1e-9 are compared
// absolutely (they underflow differently in float and double).
inline constexpr wb::Tolerance kSoftmaxTol{1e-9, 2e-5};

// Softmax of each row of a rows x cols row-major matrix, in double. A row whose entries are
// all -inf gives NaN in every column: the documented result (see softmax.cuh).
std::vector<double> softmax_rows(std::span<const float> x, int rows, int cols);

// Logits like an LLM's: normal(0, 4), from a seed derived from `label`.
std::vector<float> random_logits(std::size_t count, const std::string& label);

// The edge cases, row r of kind r % 5:
//   0: uniform in [-1e4, 1e4]: exp overflows unless the row max is subtracted;
//   1: normal logits with about half of the entries -inf (masked): those get probability 0;
//   2: -inf everywhere except one entry (probability 1 there);
//   3: -inf everywhere: NaN everywhere (the documented result);
//   4: uniform in [-1e4, 1e4] with the row's max in its last column (the tail).
std::vector<float> edge_logits(int rows, int cols, const std::string& label);

// Checks `got` (what the GPU wrote for input `x`) against `expected` (softmax_rows(x)).
// Returns "" when it matches, otherwise the failure message: what the mismatch looks like
// (outputs never written, an all -inf row not NaN, overflow, a value read before it was
// written, rows that do not sum to 1) with a hint, then the element-wise comparison.
std::string check_softmax(std::span<const float> x, std::span<const float> got,
                          std::span<const double> expected, int rows, int cols,
                          const std::string& what);

}  // namespace ch04::reference
