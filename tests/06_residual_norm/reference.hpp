#pragma once
// Chapter 06 test support: the double-precision reference of residual add + norm, the
// inputs the tests draw, and the checks that turn a wrong answer into a message that says
// which rule broke. Shared by the tests and the bench.
#include <cstddef>
#include <span>
#include <string>
#include <vector>

#include "add_norm.cuh"
#include "wb/compare.hpp"

namespace ch06::reference {

// One problem: rows x dim, the residual stream x, the sublayer output delta (already
// rounded to the kernel's delta type and widened back to float, so that it is exactly what
// the kernel reads), the norm's weight and bias.
struct Problem {
  int rows = 0, dim = 0;
  Norm norm = Norm::LayerNorm;
  float eps = 1e-5f;
  std::vector<float> x, delta, weight, bias;
  // RMSNorm: the call is handed the bias anyway (add_norm.cuh: ignored, may be null), which h
  // must not show. LayerNorm always gets it.
  bool rmsnorm_gets_bias = false;
};

enum class Data {
  Typical,        // x ~ N(0, 2), delta ~ N(0, 1): activations of a trained model
  LargeMean,      // x ~ 1e4 + N(0, 1): the mean dwarfs the spread (catastrophic cancellation)
  ConstantRows,   // every row constant (a different constant per row): variance exactly 0
};

// Fresh random inputs from the label's seed (WB_SEED reproduces them). `round_delta` is
// applied to every delta value (e.g. a round trip through half precision).
Problem make_problem(int rows, int dim, Norm norm, Data data, const std::string& label,
                     float (*round_delta)(float) = nullptr);

// r = x + delta rounded once to float: the exact bits every kernel must store.
std::vector<float> residual(const Problem& p);
// h = norm(r) in double, from the float r above.
std::vector<double> normalized(const Problem& p, std::span<const float> r);

// Tolerances for h against the double reference, by output type.
inline constexpr wb::Tolerance kHFp32Tol{1e-5, 1e-5};
inline constexpr wb::Tolerance kHFp16Tol{2e-3, 2e-3};   // half: 11 significant bits
inline constexpr wb::Tolerance kHBf16Tol{1.6e-2, 1.6e-2};  // bf16: 8 significant bits

// "" when r is bit for bit x + delta, else the failure message (first mismatches, and what
// the pattern suggests: not written, rounded to half precision, the wrong inputs added).
std::string check_residual(const Problem& p, std::span<const float> got, const std::string& what);
// "" when h matches, else the failure message with a hint recognizing the usual mistakes
// (E[r^2] - E[r]^2, eps dropped, dim - 1, post-LN order, RMSNorm centering).
std::string check_normalized(const Problem& p, std::span<const float> r,
                             std::span<const float> got, wb::Tolerance tol,
                             const std::string& what);

std::string describe(const Problem& p);  // "LayerNorm 5x2560"
const char* norm_name(Norm norm);

}  // namespace ch06::reference
