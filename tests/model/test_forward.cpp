// The CPU forward pass: its building blocks against double-precision formulas, the whole
// pass against an independent double-precision implementation, and the real checkpoint's
// greedy text.
#include <cmath>
#include <complex>
#include <random>
#include <vector>

#include "model_test_support.hpp"
#include "wb/model/data.hpp"
#include "wb/model/generate.hpp"
#include "wb/model/matmul.hpp"
#include "wb/model/synthetic.hpp"
#include "wb/model/tokenizer.hpp"
#include "wb/model/transformer.hpp"
#include "wb/random.hpp"
#include "wb/testing.hpp"

using wb::model::Model;

namespace {

wb::CompareSpec spec(const std::string& what, std::size_t n, wb::Tolerance tol = {1e-6, 1e-5}) {
  return {.chapter = "model", .what = what, .shape = {n}, .tol = tol};
}

// An independent, plain double-precision llama2 forward pass: written from the model's
// equations (complex rotations for RoPE, explicit head groups), not from transformer.cpp.
class DoubleReference {
 public:
  explicit DoubleReference(const Model& m) : m_(m), c_(m.config()) {
    keys_.assign(std::size_t(c_.n_layers), {});
    values_.assign(std::size_t(c_.n_layers), {});
  }

  std::vector<double> forward(int token, int pos) {
    const auto& w = m_.weights();
    const int dim = c_.dim, hs = c_.head_size();
    std::vector<double> x(w.token_embedding + std::size_t(token) * dim, w.token_embedding + std::size_t(token + 1) * dim);
    for (int l = 0; l < c_.n_layers; ++l) {
      const auto& lw = w.layers[std::size_t(l)];
      const auto h = norm(x, lw.rms_att);
      auto q = matvec(lw.wq, h, dim), k = matvec(lw.wk, h, c_.kv_dim()), v = matvec(lw.wv, h, c_.kv_dim());
      rotate(q, pos);
      rotate(k, pos);
      keys_[std::size_t(l)].push_back(k);
      values_[std::size_t(l)].push_back(v);
      std::vector<double> att_out(std::size_t(dim), 0.0);
      const int heads_per_kv = c_.n_heads / c_.n_kv_heads;
      for (int head = 0; head < c_.n_heads; ++head) {
        const int kv_head = head / heads_per_kv;
        std::vector<double> scores;
        for (int t = 0; t <= pos; ++t) {
          double s = 0;
          for (int i = 0; i < hs; ++i)
            s += q[std::size_t(head * hs + i)] * keys_[std::size_t(l)][std::size_t(t)][std::size_t(kv_head * hs + i)];
          scores.push_back(s / std::sqrt(double(hs)));
        }
        double max = scores[0], total = 0;
        for (double s : scores) max = std::max(max, s);
        for (double& s : scores) total += (s = std::exp(s - max));
        for (int t = 0; t <= pos; ++t)
          for (int i = 0; i < hs; ++i)
            att_out[std::size_t(head * hs + i)] +=
                scores[std::size_t(t)] / total * values_[std::size_t(l)][std::size_t(t)][std::size_t(kv_head * hs + i)];
      }
      const auto o = matvec(lw.wo, att_out, dim);
      for (int i = 0; i < dim; ++i) x[std::size_t(i)] += o[std::size_t(i)];
      const auto h2 = norm(x, lw.rms_ffn);
      const auto gate = matvec(lw.w1, h2, c_.hidden_dim), up = matvec(lw.w3, h2, c_.hidden_dim);
      std::vector<double> act(gate.size());
      for (std::size_t i = 0; i < act.size(); ++i) act[i] = gate[i] / (1 + std::exp(-gate[i])) * up[i];
      const auto down = matvec(lw.w2, act, dim);
      for (int i = 0; i < dim; ++i) x[std::size_t(i)] += down[std::size_t(i)];
    }
    return matvec(w.classifier, norm(x, w.rms_final), c_.vocab_size);
  }

 private:
  std::vector<double> norm(const std::vector<double>& x, const float* g) const {
    double ms = 0;
    for (double v : x) ms += v * v;
    const double scale = 1 / std::sqrt(ms / double(x.size()) + 1e-5);
    std::vector<double> out(x.size());
    for (std::size_t i = 0; i < x.size(); ++i) out[i] = x[i] * scale * g[i];
    return out;
  }
  std::vector<double> matvec(const float* W, const std::vector<double>& x, int rows) const {
    std::vector<double> out(std::size_t(rows), 0.0);
    for (int r = 0; r < rows; ++r)
      for (std::size_t j = 0; j < x.size(); ++j) out[std::size_t(r)] += double(W[std::size_t(r) * x.size() + j]) * x[j];
    return out;
  }
  // Each head's consecutive pairs (x0 + i x1) turn by pos * 10000^(-2p / head_size).
  void rotate(std::vector<double>& v, int pos) const {
    const int hs = c_.head_size();
    for (std::size_t i = 0; i < v.size(); i += 2) {
      const int p = int(i % std::size_t(hs)) / 2;
      const double theta = pos * std::pow(10000.0, -2.0 * p / hs);
      const std::complex<double> z = std::complex<double>(v[i], v[i + 1]) * std::polar(1.0, theta);
      v[i] = z.real();
      v[i + 1] = z.imag();
    }
  }

  const Model& m_;
  const wb::model::Config& c_;
  std::vector<std::vector<std::vector<double>>> keys_, values_;  // [layer][pos][kv_dim]
};

}  // namespace

TEST_CASE("rmsnorm matches x / sqrt(mean(x^2) + 1e-5) * weight") {
  for (int n : {1, 7, 768}) {
    const auto x = wb::random_uniform(std::size_t(n), -3.0f, 3.0f, "model/rmsnorm/x" + std::to_string(n));
    const auto g = wb::random_uniform(std::size_t(n), 0.5f, 1.5f, "model/rmsnorm/g" + std::to_string(n));
    double ms = 0;
    for (float v : x) ms += double(v) * v;
    const double scale = 1 / std::sqrt(ms / n + 1e-5);
    std::vector<double> expected(static_cast<std::size_t>(n));
    for (int i = 0; i < n; ++i) expected[std::size_t(i)] = x[std::size_t(i)] * scale * g[std::size_t(i)];
    std::vector<float> out(static_cast<std::size_t>(n));
    wb::model::rmsnorm(out.data(), x.data(), g.data(), n);
    WB_CHECK_RESULT(wb::compare(out, expected, spec("rmsnorm", std::size_t(n))));
  }
}

TEST_CASE("softmax is exact and does not overflow on large logits") {
  auto x = wb::random_uniform(1000, -20.0f, 20.0f, "model/softmax/x");
  x[17] = 1000.0f;  // exp(1000) overflows; exp(1000 - max) does not
  std::vector<double> expected(x.size());
  double total = 0;
  for (std::size_t i = 0; i < x.size(); ++i) total += (expected[i] = std::exp(double(x[i]) - 1000.0));
  for (double& e : expected) e /= total;
  wb::model::softmax(x.data(), int(x.size()));
  WB_CHECK_RESULT(wb::compare(x, expected, spec("softmax", x.size())));
}

TEST_CASE("rope rotates each pair of every head by pos * 10000^(-i/head_size)") {
  const int size = 96, head_size = 32, pos = 37;
  auto v = wb::random_uniform(std::size_t(size), -1.0f, 1.0f, "model/rope/v");
  std::vector<double> expected(v.begin(), v.end());
  for (int i = 0; i < size; i += 2) {
    const double theta = pos * std::pow(10000.0, -double(i % head_size) / head_size);
    const std::complex<double> z = std::complex<double>(expected[std::size_t(i)], expected[std::size_t(i) + 1]) * std::polar(1.0, theta);
    expected[std::size_t(i)] = z.real();
    expected[std::size_t(i) + 1] = z.imag();
  }
  wb::model::rope(v.data(), size, head_size, pos);
  WB_CHECK_RESULT(wb::compare(v, expected, spec("rope", std::size_t(size), {1e-5, 1e-4})));
}

TEST_CASE("the forward pass matches an independent double-precision implementation") {
  const Model m = wb::model::make_synthetic(model_test::tiny_spec());
  wb::model::CpuMatmul cpu;
  wb::model::Transformer t(m, cpu);
  DoubleReference ref(m);
  auto rng = wb::rng_for("model/forward/tokens");
  std::uniform_int_distribution<int> token(0, m.config().vocab_size - 1);
  for (int pos = 0; pos < m.config().seq_len; ++pos) {  // the whole context: the KV cache fills up
    CAPTURE(pos);
    const int tok = token(rng);
    const auto expected = ref.forward(tok, pos);
    const auto got = t.forward(tok, pos);
    WB_REQUIRE_RESULT(wb::compare(got, expected, spec("logits at position " + std::to_string(pos),
                                                      expected.size(), {1e-4, 1e-4})));
  }
}

TEST_CASE("one thread and all threads compute the same logits, bit for bit") {
  const Model m = wb::model::make_synthetic(wb::model::synthetic_small());
  wb::model::CpuMatmul one(1), all(0);
  wb::model::Transformer a(m, one, 1), b(m, all, 0);
  for (int pos = 0; pos < 3; ++pos) {
    const auto la = a.forward(7 + pos, pos);
    const auto lb = b.forward(7 + pos, pos);
    CHECK(std::equal(la.begin(), la.end(), lb.begin()));
  }
}

TEST_CASE("the synthetic 110M model gives finite, O(1) logits") {
  const Model m = wb::model::make_synthetic(wb::model::synthetic_110m());
  wb::model::CpuMatmul cpu;
  wb::model::Transformer t(m, cpu);
  for (int pos = 0; pos < 3; ++pos) {
    const auto logits = t.forward(pos == 0 ? 1 : 1000 * pos, pos);
    double sum = 0, sum_sq = 0;
    for (float v : logits) {
      REQUIRE(std::isfinite(v));
      sum += v, sum_sq += double(v) * v;
    }
    const double mean = sum / logits.size(), sd = std::sqrt(sum_sq / logits.size() - mean * mean);
    wb::testing::record_metric("logit_sd_pos" + std::to_string(pos), sd);
    CHECK(sd > 0.3);
    CHECK(sd < 10.0);
  }
  CHECK(t.profile().tokens == 3);
  CHECK(t.profile().matmul_calls == 3 * (7 * 12 + 1));
  CHECK(t.profile().matmul_us > 0);
  CHECK(t.profile().matmul_us < t.profile().total_us);
}

TEST_CASE("the backend gets the weights once, and every W it sees lies inside them") {
  const Model m = wb::model::make_synthetic(model_test::tiny_spec());
  wb::model::CpuMatmul cpu;
  int loads = 0, calls = 0, outside = 0;
  const float* base = nullptr;
  std::size_t count = 0;
  wb::model::FunctionMatmul spy(
      "spy",
      [&](float* out, const float* x, const float* W, int n, int d) {
        ++calls;
        if (W < base || W + std::size_t(n) * std::size_t(d) > base + count) ++outside;
        cpu.matmul(out, x, W, n, d);
      },
      [&](std::span<const float> weights) {
        ++loads;
        base = weights.data();
        count = weights.size();
      });
  wb::model::Transformer t(m, spy);
  t.forward(1, 0);
  t.forward(2, 1);
  CHECK(loads == 1);
  CHECK(base == m.payload().data());
  CHECK(calls == 2 * (7 * 2 + 1));
  CHECK(outside == 0);
}

TEST_CASE("forward rejects a token or position outside the model") {
  const Model m = wb::model::make_synthetic(model_test::tiny_spec());
  wb::model::CpuMatmul cpu;
  wb::model::Transformer t(m, cpu);
  CHECK_THROWS_WITH_AS(t.forward(300, 0), doctest::Contains("token 300 is outside the vocabulary"), wb::model::ModelError);
  CHECK_THROWS_WITH_AS(t.forward(1, 16), doctest::Contains("position 16 is outside the context"), wb::model::ModelError);
}

TEST_CASE("stories260K: CPU greedy decoding prints llama2.c's text exactly (1 thread and all)") {
  std::string why;
  const auto files = wb::model::tiny_stories_from_env(&why);
  if (!files) {
    wb::testing::mark_skipped(why);
    return;
  }
  const Model m = wb::model::load_checkpoint(files->model);
  const auto tok = wb::model::Tokenizer::load(files->tokenizer, m.config().vocab_size);
  for (int threads : {1, 0}) {
    CAPTURE(threads);
    wb::model::CpuMatmul cpu(threads);
    wb::model::Transformer t(m, cpu, threads);
    const auto g = wb::model::generate(t, tok, {.prompt = "", .steps = wb::model::kTinyStoriesSteps});
    CHECK(g.text == std::string(wb::model::kTinyStoriesGreedyText));
    CHECK(g.forward_passes == wb::model::kTinyStoriesSteps);
  }
}
