// Chapter 08 test support: the double-precision references (kernel_reference.hpp).
#include "kernel_reference.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <sstream>

namespace ch08::reference {

float rope_angle(int i, int head_size, int pos, bool per_head) {
  const int place = per_head ? i % head_size : i;
  const float frequency = 1.0f / std::pow(10000.0f, float(place) / float(head_size));
  return float(pos) * frequency;
}

std::vector<double> rope(std::span<const float> x, int head_size, int pos, bool per_head) {
  std::vector<double> out(x.size());
  for (std::size_t i = 0; i + 1 < x.size(); i += 2) {
    const double angle = rope_angle(int(i), head_size, pos, per_head);
    const double c = std::cos(angle), s = std::sin(angle);
    const double a = x[i], b = x[i + 1];
    out[i] = a * c - b * s;
    out[i + 1] = a * s + b * c;
  }
  return out;
}

std::vector<double> rope_tolerance(std::span<const float> x, int head_size, int pos) {
  std::vector<double> tol(x.size());
  constexpr double kUlp = 1.0 / (1 << 23);  // float's relative spacing, 2^-23
  for (std::size_t i = 0; i + 1 < x.size(); i += 2) {
    const double r = std::hypot(double(x[i]), double(x[i + 1]));
    const double angle = std::fabs(double(rope_angle(int(i), head_size, pos)));
    // rotation: 4 ulp of r; angle: 8 ulp of the angle (see the header) plus sincosf's error.
    const double t = 1e-7 + r * (4 * kUlp + 8 * kUlp * angle + 2 * kUlp);
    tol[i] = tol[i + 1] = t;
  }
  return tol;
}

std::vector<double> attention(const AttentionProblem& p, AttentionMistake mistake) {
  const int hs = p.head_size, kv_dim = p.kv_dim();
  const int group = p.n_heads / p.n_kv_heads;
  std::vector<double> out(std::size_t(p.n_heads) * hs, 0.0);
  std::vector<double> s(std::size_t(p.pos) + 1);
  for (int h = 0; h < p.n_heads; ++h) {
    const int g = mistake == AttentionMistake::GroupByModulo ? h % p.n_kv_heads : h / group;
    const float* q = p.q.data() + std::size_t(h) * hs;
    for (int t = 0; t <= p.pos; ++t) {
      const float* k = p.key_cache.data() + std::size_t(t) * kv_dim + std::size_t(g) * hs;
      double dot = 0;
      for (int i = 0; i < hs; ++i) dot += double(q[i]) * double(k[i]);
      s[std::size_t(t)] = mistake == AttentionMistake::NoScale ? dot : dot / std::sqrt(double(hs));
    }
    const double m = *std::max_element(s.begin(), s.end());
    double sum = 0;
    for (double& v : s) {
      v = std::exp(v - m);
      sum += v;
    }
    double* o = out.data() + std::size_t(h) * hs;
    for (int t = 0; t <= p.pos; ++t) {
      const double a = s[std::size_t(t)] / sum;
      const float* v = p.value_cache.data() + std::size_t(t) * kv_dim + std::size_t(g) * hs;
      for (int i = 0; i < hs; ++i) o[i] += a * double(v[i]);
    }
  }
  return out;
}

std::string describe(const AttentionProblem& p) {
  return std::to_string(p.n_heads) + " heads / " + std::to_string(p.n_kv_heads) +
         " KV heads x head_size " + std::to_string(p.head_size) + ", seq_len " +
         std::to_string(p.seq_len) + ", pos " + std::to_string(p.pos);
}

std::vector<double> swiglu(std::span<const float> gate, std::span<const float> up, bool swapped) {
  std::vector<double> out(gate.size());
  for (std::size_t i = 0; i < gate.size(); ++i) {
    const double g = swapped ? up[i] : gate[i], u = swapped ? gate[i] : up[i];
    const double silu = g == -std::numeric_limits<double>::infinity() ? 0.0 : g / (1.0 + std::exp(-g));
    out[i] = silu * u;
  }
  return out;
}

namespace {

bool element_ok(double got, double expected, double allowed) {
  if (std::isnan(expected)) return std::isnan(got);
  if (std::isnan(got)) return false;
  if (std::isinf(expected)) return got == expected;
  if (std::isinf(got)) return false;
  return std::fabs(got - expected) <= allowed;
}

std::string number(double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.9g", v);
  return buf;
}

}  // namespace

bool matches(std::span<const float> got, std::span<const double> expected,
             const std::function<double(std::size_t)>& allowed) {
  if (got.size() != expected.size()) return false;
  for (std::size_t i = 0; i < got.size(); ++i)
    if (!element_ok(got[i], expected[i], allowed(i))) return false;
  return true;
}

std::string mismatches(std::span<const float> got, std::span<const double> expected,
                       const std::function<double(std::size_t)>& allowed,
                       const std::function<std::string(std::size_t)>& index_name,
                       std::size_t show) {
  if (got.size() != expected.size())
    return "the output has " + std::to_string(got.size()) + " elements, expected " +
           std::to_string(expected.size());
  std::vector<std::size_t> bad;
  std::size_t nan_count = 0;
  double max_error = 0;
  for (std::size_t i = 0; i < got.size(); ++i) {
    if (std::isnan(got[i]) && !std::isnan(expected[i])) ++nan_count;
    if (std::isfinite(got[i]) && std::isfinite(expected[i]))
      max_error = std::max(max_error, std::fabs(double(got[i]) - expected[i]));
    if (!element_ok(got[i], expected[i], allowed(i))) bad.push_back(i);
  }
  if (bad.empty()) return "";
  std::ostringstream msg;
  msg << bad.size() << " of " << got.size() << " elements differ from the double reference ("
      << nan_count << " NaN where a number was expected)\n  first mismatches:";
  for (std::size_t k = 0; k < std::min(show, bad.size()); ++k) {
    const std::size_t i = bad[k];
    msg << "\n    " << index_name(i) << " got " << number(got[i]) << ", expected "
        << number(expected[i]) << " (allowed error " << number(allowed(i)) << ")";
  }
  msg << "\n  largest error where both are finite: " << number(max_error);
  return msg.str();
}

}  // namespace ch08::reference
