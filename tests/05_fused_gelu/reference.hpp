#pragma once
// Chapter 05 test support: double-precision GELU references and the check that turns a wrong
// answer into a message that says what went wrong. Shared by the tests and the bench.
#include <cstddef>
#include <span>
#include <string>
#include <vector>

#include "wb/compare.hpp"

namespace ch05::reference {

// float32 against double: the fused reference is accurate to a few 1e-7 relative; tanhf in
// 0.5 x (1 + tanh u) loses up to |x| * 6e-8 absolute to cancellation where tanh(u) is near
// -1, which the absolute part covers.
inline constexpr wb::Tolerance kGeluTol = wb::kFp32Tol;

// 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))), in double.
std::vector<double> gelu_tanh(std::span<const float> x);
// The exact GELU, x * Phi(x) = 0.5 x (1 + erf(x / sqrt(2))): not what the chapter asks; the
// check uses it to recognize it.
std::vector<double> gelu_erf(std::span<const float> x);

// Typical activations: uniform in [-6, 6), where GELU bends and 1 + tanh cancels.
std::vector<float> random_inputs(std::size_t n, const std::string& label);
// Where tanh saturates: random signs, magnitudes log-uniform in [3, 1e30] (x^3 overflows
// float beyond 7e12).
std::vector<float> saturating_inputs(std::size_t n, const std::string& label);

// Checks `got` (what the GPU wrote for input x) against `expected` (gelu_tanh(x)). Returns
// "" when it matches, otherwise the failure message: what the mismatch looks like (outputs
// never written, inf/NaN where tanh saturates, the erf GELU, the largest error and where)
// with a hint, then the element-wise comparison.
std::string check_gelu(std::span<const float> x, std::span<const float> got,
                       std::span<const double> expected, const std::string& what);

}  // namespace ch05::reference
