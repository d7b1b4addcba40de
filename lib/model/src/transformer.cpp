// The llama2 forward pass (see wb/model/transformer.hpp). Written after llama2.c's run.c:
// the same arithmetic in the same order, so a checkpoint generates the same text.
#include "wb/model/transformer.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <string>

#include "wb/nvtx.hpp"

namespace wb::model {

namespace {
double now_us() {
  using namespace std::chrono;
  return duration<double, std::micro>(steady_clock::now().time_since_epoch()).count();
}
}  // namespace

void rmsnorm(float* out, const float* x, const float* weight, int size) {
  float sum_of_squares = 0.0f;
  for (int i = 0; i < size; ++i) sum_of_squares += x[i] * x[i];
  const float scale = 1.0f / std::sqrt(sum_of_squares / float(size) + 1e-5f);
  for (int i = 0; i < size; ++i) out[i] = weight[i] * (scale * x[i]);
}

void softmax(float* x, int size) {
  const float max = *std::max_element(x, x + size);  // exp() of the shifted values cannot overflow
  float sum = 0.0f;
  for (int i = 0; i < size; ++i) {
    x[i] = std::exp(x[i] - max);
    sum += x[i];
  }
  for (int i = 0; i < size; ++i) x[i] /= sum;
}

void rope(float* vec, int size, int head_size, int pos) {
  for (int i = 0; i < size; i += 2) {
    const int pair_in_head = i % head_size;
    const float frequency = 1.0f / std::pow(10000.0f, float(pair_in_head) / float(head_size));
    const float angle = float(pos) * frequency;
    const float c = std::cos(angle), s = std::sin(angle);
    const float a = vec[i], b = vec[i + 1];
    vec[i] = a * c - b * s;
    vec[i + 1] = a * s + b * c;
  }
}

Transformer::Transformer(const Model& model, Matmul& matmul, int threads)
    : model_(model), matmul_(matmul), threads_(threads > 0 ? threads : max_threads()) {
  const Config& c = model.config();
  const std::size_t cache = std::size_t(c.n_layers) * std::size_t(c.seq_len) * std::size_t(c.kv_dim());
  x_.assign(std::size_t(c.dim), 0.0f);
  xb_.assign(std::size_t(c.dim), 0.0f);
  xb2_.assign(std::size_t(c.dim), 0.0f);
  hb_.assign(std::size_t(c.hidden_dim), 0.0f);
  hb2_.assign(std::size_t(c.hidden_dim), 0.0f);
  q_.assign(std::size_t(c.dim), 0.0f);
  att_.assign(std::size_t(c.n_heads) * std::size_t(c.seq_len), 0.0f);
  logits_.assign(std::size_t(c.vocab_size), 0.0f);
  key_cache_.assign(cache, 0.0f);
  value_cache_.assign(cache, 0.0f);
  matmul_.load_weights(model.payload());
}

void Transformer::timed_matmul(float* out, const float* x, const float* W, int n, int d) {
  const double t0 = now_us();
  matmul_.matmul(out, x, W, n, d);
  profile_.matmul_us += now_us() - t0;
  profile_.matmul_calls++;
}

std::span<const float> Transformer::forward(int token, int pos) {
  const Config& c = model_.config();
  if (token < 0 || token >= c.vocab_size)
    throw ModelError(model_.origin() + ": token " + std::to_string(token) +
                     " is outside the vocabulary (0.." + std::to_string(c.vocab_size - 1) + ")");
  if (pos < 0 || pos >= c.seq_len)
    throw ModelError(model_.origin() + ": position " + std::to_string(pos) +
                     " is outside the context (0.." + std::to_string(c.seq_len - 1) + ")");
  const wb::NvtxRange range("forward");  // one range per token on the profiler's timeline
  const double t0 = now_us();
  const Weights& w = model_.weights();
  const int dim = c.dim;

  std::copy_n(w.token_embedding + std::size_t(token) * std::size_t(dim), dim, x_.data());
  for (int l = 0; l < c.n_layers; ++l) {
    const LayerWeights& lw = w.layers[std::size_t(l)];
    rmsnorm(xb_.data(), x_.data(), lw.rms_att, dim);
    {
      const wb::NvtxRange attention_range("attention");
      attention(l, pos);
    }
    for (int i = 0; i < dim; ++i) x_[std::size_t(i)] += xb2_[std::size_t(i)];  // residual
    rmsnorm(xb_.data(), x_.data(), lw.rms_ffn, dim);
    {
      const wb::NvtxRange ffn_range("feed-forward");
      feed_forward(lw);
    }
    for (int i = 0; i < dim; ++i) x_[std::size_t(i)] += xb_[std::size_t(i)];   // residual
  }
  rmsnorm(x_.data(), x_.data(), w.rms_final, dim);
  {
    const wb::NvtxRange classifier_range("classifier");
    timed_matmul(logits_.data(), x_.data(), w.classifier, dim, c.vocab_size);
  }

  profile_.total_us += now_us() - t0;
  profile_.tokens++;
  return logits_;
}

// Self-attention of one token over positions 0..pos. Reads xb_ (normalized input),
// writes xb2_ (the attention block's output, before the residual).
void Transformer::attention(int layer, int pos) {
  const Config& c = model_.config();
  const LayerWeights& lw = model_.weights().layers[std::size_t(layer)];
  const int dim = c.dim, kv_dim = c.kv_dim(), head_size = c.head_size();
  // With grouped-query attention, `group` query heads share one key/value head.
  const int group = c.n_heads / c.n_kv_heads;
  const std::size_t layer_offset = std::size_t(layer) * std::size_t(c.seq_len) * std::size_t(kv_dim);
  float* k = key_cache_.data() + layer_offset + std::size_t(pos) * std::size_t(kv_dim);
  float* v = value_cache_.data() + layer_offset + std::size_t(pos) * std::size_t(kv_dim);

  // This token's query, key and value; key and value go straight into the cache.
  timed_matmul(q_.data(), xb_.data(), lw.wq, dim, dim);
  timed_matmul(k, xb_.data(), lw.wk, dim, kv_dim);
  timed_matmul(v, xb_.data(), lw.wv, dim, kv_dim);
  rope(q_.data(), dim, head_size, pos);
  rope(k, kv_dim, head_size, pos);

  const float sqrt_head_size = std::sqrt(float(head_size));
#pragma omp parallel for num_threads(threads_) schedule(static)
  for (int h = 0; h < c.n_heads; ++h) {
    const float* q = q_.data() + std::size_t(h) * std::size_t(head_size);
    float* scores = att_.data() + std::size_t(h) * std::size_t(c.seq_len);
    const std::size_t kv_offset = std::size_t(h / group) * std::size_t(head_size);
    for (int t = 0; t <= pos; ++t) {
      const float* key = key_cache_.data() + layer_offset + std::size_t(t) * std::size_t(kv_dim) + kv_offset;
      float dot = 0.0f;
      for (int i = 0; i < head_size; ++i) dot += q[i] * key[i];
      scores[t] = dot / sqrt_head_size;
    }
    softmax(scores, pos + 1);
    float* out = xb_.data() + std::size_t(h) * std::size_t(head_size);
    std::fill_n(out, head_size, 0.0f);
    for (int t = 0; t <= pos; ++t) {
      const float* value = value_cache_.data() + layer_offset + std::size_t(t) * std::size_t(kv_dim) + kv_offset;
      for (int i = 0; i < head_size; ++i) out[i] += scores[t] * value[i];
    }
  }
  timed_matmul(xb2_.data(), xb_.data(), lw.wo, dim, dim);
}

// SwiGLU feed-forward: xb_ <- W2 (silu(W1 xb_) * (W3 xb_)).
void Transformer::feed_forward(const LayerWeights& lw) {
  const Config& c = model_.config();
  timed_matmul(hb_.data(), xb_.data(), lw.w1, c.dim, c.hidden_dim);
  timed_matmul(hb2_.data(), xb_.data(), lw.w3, c.dim, c.hidden_dim);
  for (int i = 0; i < c.hidden_dim; ++i) {
    const float gate = hb_[std::size_t(i)];
    const float silu = gate * (1.0f / (1.0f + std::exp(-gate)));  // silu(g) = g * sigmoid(g)
    hb_[std::size_t(i)] = silu * hb2_[std::size_t(i)];
  }
  timed_matmul(xb_.data(), hb_.data(), lw.w2, c.hidden_dim, c.dim);
}

}  // namespace wb::model
