// Chapter 05 test support: double-precision GELU and the checks behind the messages.
#include "reference.hpp"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <functional>
#include <random>
#include <sstream>
#include <thread>

#include "wb/random.hpp"

namespace ch05::reference {
namespace {

// Runs body(begin, end) over [0, n) split across the host's cores (2^27 elements of double
// tanh take seconds on one core).
void parallel_for(std::size_t n, const std::function<void(std::size_t, std::size_t)>& body) {
  const std::size_t workers =
      std::clamp<std::size_t>(std::thread::hardware_concurrency(), 1, 32);
  if (n < (1u << 16) || workers == 1) return body(0, n);
  std::vector<std::thread> threads;
  const std::size_t step = (n + workers - 1) / workers;
  for (std::size_t begin = 0; begin < n; begin += step)
    threads.emplace_back(body, begin, std::min(n, begin + step));
  for (auto& t : threads) t.join();
}

template <typename F>
std::vector<double> map(std::span<const float> x, F f) {
  std::vector<double> y(x.size());
  parallel_for(x.size(), [&](std::size_t begin, std::size_t end) {
    for (std::size_t i = begin; i < end; ++i) y[i] = f(static_cast<double>(x[i]));
  });
  return y;
}

// The pattern DeviceBuffer::poison leaves in a float: all bits set.
bool is_poison(float v) { return std::bit_cast<std::uint32_t>(v) == 0xFFFFFFFFu; }

std::string number(double v) {
  std::ostringstream s;
  s.precision(9);
  s << v;
  return s.str();
}

}  // namespace

std::vector<double> gelu_tanh(std::span<const float> x) {
  const double k = std::sqrt(2.0 / M_PI);
  return map(x, [k](double v) { return 0.5 * v * (1.0 + std::tanh(k * (v + 0.044715 * v * v * v))); });
}

std::vector<double> gelu_erf(std::span<const float> x) {
  return map(x, [](double v) { return 0.5 * v * (1.0 + std::erf(v / std::sqrt(2.0))); });
}

std::vector<float> random_inputs(std::size_t n, const std::string& label) {
  return wb::random_uniform(n, -6.0f, 6.0f, label);
}

std::vector<float> saturating_inputs(std::size_t n, const std::string& label) {
  std::mt19937_64 rng = wb::rng_for(label);
  std::uniform_real_distribution<double> exponent(std::log10(3.0), 30.0);
  std::vector<float> x(n);
  for (float& v : x) v = static_cast<float>((rng() & 1 ? 1.0 : -1.0) * std::pow(10.0, exponent(rng)));
  return x;
}

std::string check_gelu(std::span<const float> x, std::span<const float> got,
                       std::span<const double> expected, const std::string& what) {
  const std::size_t n = got.size();
  const std::string where = "ch05 " + what + ", n = " + std::to_string(n) + ", seed " +
                            std::to_string(wb::base_seed()) + ": ";

  // 1. Outputs never written still hold the poison pattern.
  std::size_t unwritten = 0, first_unwritten = 0;
  for (std::size_t i = 0; i < n; ++i)
    if (is_poison(got[i]) && unwritten++ == 0) first_unwritten = i;
  if (unwritten > 0)
    return where + std::to_string(unwritten) + " of " + std::to_string(n) +
           " outputs were not written (they still hold the NaN the test filled y with); the "
           "first is y[" + std::to_string(first_unwritten) + "].\nhint: every element must be "
           "written. n = " + std::to_string(n) + " leaves " + std::to_string(n % 4) +
           " element(s) after the last float4: handle that tail with scalars; and check that "
           "the grid (or the grid-stride loop) covers all of n.";

  wb::CompareSpec spec;
  spec.chapter = "05";
  spec.what = what;
  spec.shape = {n};
  spec.tol = kGeluTol;
  spec.hint = "gelu(x) = 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))), sqrt(2/pi) = "
              "0.7978845608";
  const wb::CompareResult result = wb::compare(got, expected, spec);
  if (result.ok) return "";

  // 2. What the mismatch looks like, most telling first.
  std::ostringstream diagnosis;
  std::size_t non_finite = 0, first_non_finite = 0;
  for (std::size_t i = 0; i < n; ++i)
    if (!std::isfinite(got[i]) && std::isfinite(expected[i]) && non_finite++ == 0)
      first_non_finite = i;
  std::size_t worst = 0;
  double worst_excess = -1;  // error beyond the tolerance, relative to it
  for (std::size_t i = 0; i < n; ++i) {
    if (!std::isfinite(got[i])) continue;
    const double allowed = kGeluTol.atol + kGeluTol.rtol * std::abs(expected[i]);
    const double excess = std::abs(got[i] - expected[i]) / allowed;
    if (excess > worst_excess) worst_excess = excess, worst = i;
  }
  const std::vector<double> erf = gelu_erf(x);
  const wb::CompareResult vs_erf = wb::compare(got, erf, {.chapter = "05", .what = what,
                                                          .shape = {n}, .tol = {1e-5, 1e-4}});
  if (non_finite > 0) {
    const std::size_t i = first_non_finite;
    diagnosis << where << non_finite << " outputs are inf or NaN where GELU is a number (the "
              << "first is y[" << i << "] = " << got[i] << " for x = " << x[i] << ")";
    if (std::abs(x[i]) > 8)
      diagnosis << ": tanh saturates there, and the formula does not survive it.\nhint: "
                << "(exp(2u) - 1) / (exp(2u) + 1) is inf / inf = NaN once exp(2u) overflows "
                << "(u > 44); tanhf(u) saturates correctly, and so does the identity "
                << "0.5 x (1 + tanh(u)) = x / (1 + exp(-2u)), which tends to x and to 0 by "
                << "itself.\n";
    else
      diagnosis << ".\nhint: for such x every step of the formula is finite: look for a value "
                << "read before it was written (the tests fill y and the scratch buffer with "
                << "NaN).\n";
  } else if (vs_erf.ok) {
    diagnosis << where << "the outputs match the exact GELU x * Phi(x) = 0.5 x (1 + erf(x / "
              << "sqrt(2))), not its tanh approximation.\nhint: this chapter computes "
              << "0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))) (GPT-2's GELU, PyTorch's "
              << "approximate=\"tanh\"); the two differ by up to 3e-4.\n";
  } else if (worst_excess > 1) {
    diagnosis << where << "largest error at x = " << number(x[worst]) << ": got "
              << number(got[worst]) << ", expected " << number(expected[worst]) << " ("
              << number(worst_excess) << " times the tolerance).\nhint: check each constant "
              << "and factor against gelu(x) = 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))): "
              << "sqrt(2/pi) = 0.7978845608 (not sqrt(2 pi)), 0.044715 to all its digits, x "
              << "cubed, the 0.5.\n";
  }
  if (diagnosis.tellp() == 0) diagnosis << where << "outputs differ from the reference.\n";
  return diagnosis.str() + result.message;
}

}  // namespace ch05::reference
