// Chapter 06 reference: residual add + LayerNorm / RMSNorm in double, and the checks.
#include "reference.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <sstream>

#include "wb/random.hpp"

namespace ch06::reference {
namespace {

// One row's statistics in double: the mean (0 for RMSNorm) and 1 / sqrt(var + eps).
struct Stats {
  double center, scale;
};

enum class Variance { Biased, Unbiased };

Stats row_stats(const float* r, int dim, Norm norm, double eps, Variance variance,
                bool with_eps = true) {
  double mean = 0;
  for (int i = 0; i < dim; ++i) mean += norm == Norm::LayerNorm ? r[i] : double(r[i]) * r[i];
  mean /= dim;
  const double e = with_eps ? eps : 0.0;
  if (norm == Norm::RMSNorm) return {0.0, 1.0 / std::sqrt(mean + e)};
  double squares = 0;
  for (int i = 0; i < dim; ++i) squares += (r[i] - mean) * (r[i] - mean);
  const double var = squares / (variance == Variance::Biased ? dim : std::max(dim - 1, 1));
  return {mean, 1.0 / std::sqrt(var + e)};
}

// h of one problem, with the choices a wrong kernel might make.
struct Choices {
  Norm norm;
  Variance variance = Variance::Biased;
  bool with_eps = true;
  bool post_ln = false;       // h = norm(x) + delta instead of norm(x + delta)
  bool naive_float = false;   // var = E[r^2] - E[r]^2 in float
  bool bias = true;           // LayerNorm adds the bias (a centered RMSNorm would not)
  bool rms_bias = false;      // RMSNorm adds the bias it was handed (it must ignore it)
};

std::vector<double> normalize_with(const Problem& p, std::span<const float> r, Choices c) {
  std::vector<double> h(r.size());
  for (int row = 0; row < p.rows; ++row) {
    const std::size_t start = std::size_t(row) * p.dim;
    const float* source = c.post_ln ? p.x.data() + start : r.data() + start;
    Stats s = row_stats(source, p.dim, c.norm, p.eps, c.variance, c.with_eps);
    if (c.naive_float && c.norm == Norm::LayerNorm) {
      float sum = 0, sum_sq = 0;
      for (int i = 0; i < p.dim; ++i) {
        sum += source[i];
        sum_sq += source[i] * source[i];
      }
      const float mean = sum / p.dim, var = sum_sq / p.dim - mean * mean;
      s = {mean, 1.0 / std::sqrt(double(var) + p.eps)};
    }
    for (int i = 0; i < p.dim; ++i) {
      double out = (source[i] - s.center) * s.scale * p.weight[i];
      if (c.norm == Norm::LayerNorm ? c.bias : c.rms_bias) out += p.bias[i];
      if (c.post_ln) out += p.delta[start + i];
      h[start + i] = out;
    }
  }
  return h;
}

bool close_to(std::span<const float> got, const std::vector<double>& alt, wb::Tolerance tol) {
  for (std::size_t i = 0; i < got.size(); ++i) {
    if (!std::isfinite(got[i]) || !std::isfinite(alt[i])) return false;
    if (std::abs(got[i] - alt[i]) > tol.atol + tol.rtol * std::abs(alt[i])) return false;
  }
  return !got.empty();
}

std::uint32_t bits(float f) {
  std::uint32_t b;
  std::memcpy(&b, &f, sizeof b);
  return b;
}

// True when some row's mean is over 100 times its standard deviation.
bool large_mean(const Problem& p, std::span<const float> r) {
  for (int row = 0; row < p.rows; ++row) {
    const Stats s = row_stats(r.data() + std::size_t(row) * p.dim, p.dim, Norm::LayerNorm, 0.0,
                              Variance::Biased, false);
    if (std::isfinite(s.scale) && std::abs(s.center) * s.scale > 100.0) return true;
  }
  return false;
}

// True when some row has all its values equal (variance exactly 0).
bool has_constant_row(const Problem& p, std::span<const float> r) {
  for (int row = 0; row < p.rows; ++row) {
    const float* v = r.data() + std::size_t(row) * p.dim;
    if (std::all_of(v, v + p.dim, [&](float e) { return e == v[0]; })) return true;
  }
  return false;
}

}  // namespace

const char* norm_name(Norm norm) { return norm == Norm::LayerNorm ? "LayerNorm" : "RMSNorm"; }

std::string describe(const Problem& p) {
  return std::string(norm_name(p.norm)) + " " + std::to_string(p.rows) + "x" +
         std::to_string(p.dim);
}

Problem make_problem(int rows, int dim, Norm norm, Data data, const std::string& label,
                     float (*round_delta)(float)) {
  Problem p;
  p.rows = rows;
  p.dim = dim;
  p.norm = norm;
  const std::size_t n = std::size_t(rows) * dim;
  auto rng = wb::rng_for(label);
  switch (data) {
    case Data::Typical:
      p.x = wb::random_normal(n, 0.0f, 2.0f, rng);
      p.delta = wb::random_normal(n, 0.0f, 1.0f, rng);
      break;
    case Data::LargeMean:
      p.x = wb::random_normal(n, 1e4f, 1.0f, rng);
      p.delta = wb::random_normal(n, 0.0f, 0.5f, rng);
      break;
    case Data::ConstantRows: {
      // x + delta is the same constant c in every column of a row, while x and delta
      // themselves vary: x = c - d and delta = d, with c a multiple of 1/4 and d a nonzero
      // multiple of 1/16 in [-4, 4], so every value and the sum are exact in float, half
      // and bf16.
      const std::vector<float> c = wb::random_uniform(rows, -50.0f, 50.0f, rng);
      const std::vector<float> d = wb::random_uniform(n, -4.0f, 4.0f, rng);
      p.x.resize(n);
      p.delta.resize(n);
      for (std::size_t i = 0; i < n; ++i) {
        const float c_row = std::round(c[i / dim] * 4.0f) / 4.0f;   // a multiple of 1/4
        const float d_i = std::round(d[i] * 16.0f) / 16.0f;         // a multiple of 1/16
        p.delta[i] = d_i == 0.0f ? 0.0625f : d_i;
        p.x[i] = c_row - p.delta[i];  // exact: small multiples of 1/16
      }
      break;
    }
  }
  if (round_delta)
    for (float& v : p.delta) v = round_delta(v);
  p.weight = wb::random_uniform(dim, 0.5f, 1.5f, rng);
  p.bias = wb::random_uniform(dim, -1.0f, 1.0f, rng);
  return p;
}

std::vector<float> residual(const Problem& p) {
  std::vector<float> r(p.x.size());
  for (std::size_t i = 0; i < r.size(); ++i) r[i] = p.x[i] + p.delta[i];
  return r;
}

std::vector<double> normalized(const Problem& p, std::span<const float> r) {
  return normalize_with(p, r, {p.norm});
}

std::string check_residual(const Problem& p, std::span<const float> got, const std::string& what) {
  const std::vector<float> expected = residual(p);
  std::size_t bad = 0, unwritten = 0, first = 0;
  std::size_t rounded_to_half = 0;
  for (std::size_t i = 0; i < expected.size(); ++i) {
    if (bits(got[i]) == bits(expected[i])) continue;
    if (bad++ == 0) first = i;
    if (std::isnan(got[i])) ++unwritten;
    else if (std::abs(got[i] - expected[i]) <= std::abs(expected[i]) * 1.0e-3) ++rounded_to_half;
  }
  if (bad == 0) return "";
  std::ostringstream m;
  m << "ch06 " << what << ", " << describe(p) << ", seed " << wb::base_seed()
    << ": rule: r is x + delta rounded once to fp32, bit for bit. " << bad << " of "
    << expected.size() << " values of r differ; the first at [" << first / p.dim << ", "
    << first % p.dim << "]: got " << got[first] << ", expected " << expected[first] << ".\n";
  if (unwritten == bad)
    m << "hint: those elements of r were never written (they still hold the NaN poison): "
         "the residual stream is an output too; store r[i] = x[i] + delta[i] for every i.";
  else if (rounded_to_half == bad)
    m << "hint: r is close but not exact, as if it had passed through half precision: the "
         "residual stream must stay fp32 (convert delta to float, add, store a float). 32 "
         "layers of adds in half precision drift away from the model (the numerics test "
         "measures it).";
  else
    m << "hint: r must be exactly x + delta (one float add per element, no other terms).";
  return m.str();
}

std::string check_normalized(const Problem& p, std::span<const float> r,
                             std::span<const float> got, wb::Tolerance tol,
                             const std::string& what) {
  const std::vector<double> expected = normalized(p, r);
  wb::CompareSpec spec;
  spec.chapter = "06";
  spec.what = what + " (h)";
  spec.shape = {std::size_t(p.rows), std::size_t(p.dim)};
  spec.tol = tol;
  const wb::CompareResult result = wb::compare(got, expected, spec);
  if (result.ok) return "";

  std::string hint;
  const auto like = [&](Choices c) { return close_to(got, normalize_with(p, r, c), tol); };
  const std::string eps_hint =
      "NaN or inf in h: a constant row has variance 0; eps inside the square root "
      "(rsqrtf(var + eps)) keeps it finite, and the row then gives h = bias.";
  if (result.nan_count > 0 && has_constant_row(p, r))
    hint = eps_hint;
  else if (result.nan_count == got.size())
    hint = "no element of h was written (or all are NaN): store h for every element.";
  else if (p.norm == Norm::LayerNorm && like({p.norm, Variance::Biased, true, true}))
    hint = "this is norm(x) + delta, the post-LN order: the pre-LN block needs "
           "h = norm(x + delta). A fused \"LN(x) + residual\" kernel can be correct and fast "
           "in a micro-benchmark and still not fit the model it was written for.";
  else if (p.norm == Norm::LayerNorm && like({p.norm, Variance::Unbiased}))
    hint = "the variance was divided by dim - 1: LayerNorm uses the biased variance "
           "(divide by dim), as torch.nn.LayerNorm does.";
  else if (p.norm == Norm::LayerNorm && like({p.norm, Variance::Biased, true, false, true}))
    hint = "this is E[r^2] - E[r]^2 in float: when the mean is large against the spread the "
           "two terms cancel and the variance loses every digit. Subtract the mean first "
           "(two passes over the row in registers, or Welford's update).";
  else if (p.norm == Norm::RMSNorm && p.rmsnorm_gets_bias &&
           like({Norm::RMSNorm, Variance::Biased, true, false, false, true, /*rms_bias=*/true}))
    hint = "this is RMSNorm plus the bias: RMSNorm has no bias, and add_norm.cuh says "
           "NormParams::bias is ignored for it, null or not (this call was handed one, as a "
           "caller that switches one NormParams between the two norms does). Add the bias when "
           "params.norm is LayerNorm, not when params.bias is non-null.";
  else if (p.norm == Norm::RMSNorm &&
           like({Norm::LayerNorm, Variance::Biased, true, false, false, /*bias=*/false}))
    hint = "RMSNorm does not subtract the mean (and has no bias): h = r / sqrt(mean(r^2) + "
           "eps) * weight.";
  else if (p.norm == Norm::LayerNorm && large_mean(p, r))
    hint = "these rows have a mean far larger than their spread (1e4 against 1, or 50 against "
           "0.01: the ratio counts, not the size), where E[r^2] - E[r]^2 in float cancels to "
           "noise and a float sum of values near the mean loses the spread: sum the values "
           "relative to a pivot taken from the row of r itself (e.g. r[0] = x[0] + delta[0]; "
           "x[0] alone is far from the row when delta carries the mean), subtract the mean "
           "before squaring (two passes over the row in registers, or Welford's update), and "
           "never add the mean back to the pivot.";
  else if (result.nan_count > 0)
    hint = eps_hint;
  else
    hint = "compare your mean, variance and the order of the operations with the formula in "
           "add_norm.cuh; check that every thread uses the statistics of its own row.";
  return result.message + "\nhint: " + hint;
}

}  // namespace ch06::reference
