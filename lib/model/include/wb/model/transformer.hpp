#pragma once
// The llama2 forward pass on the CPU, with the matmuls delegated to a backend.
//
// One token at position `pos` goes through: embedding lookup; per layer: RMSNorm, the
// q/k/v projections, RoPE, grouped-query attention over the KV cache, the output
// projection and residual; RMSNorm, the SwiGLU feed-forward and residual; then a final
// RMSNorm and the classifier, which gives one logit per vocabulary entry.
#include <span>
#include <vector>

#include "wb/model/checkpoint.hpp"
#include "wb/model/matmul.hpp"

namespace wb::model {

// Where one token's time went (host clock). The matmul share is what the chapters move.
struct ForwardProfile {
  long long tokens = 0;
  long long matmul_calls = 0;
  double matmul_us = 0;   // inside Matmul::matmul
  double total_us = 0;    // whole forward()
  double other_us() const { return total_us - matmul_us; }
  void reset() { *this = ForwardProfile{}; }
};

class Transformer {
 public:
  // `threads` is for the work that stays on the CPU (attention, norms); <= 0 means all
  // of OpenMP's threads. The model and the backend must outlive the Transformer. Calls
  // matmul.load_weights(model.payload()) once.
  Transformer(const Model& model, Matmul& matmul, int threads = 0);

  // Runs token `token` at position `pos` (0 <= pos < seq_len; positions must come in
  // order from 0: the KV cache of earlier positions is used) and returns the logits.
  std::span<const float> forward(int token, int pos);

  const Config& config() const { return model_.config(); }
  const Model& model() const { return model_; }
  Matmul& matmul() { return matmul_; }
  ForwardProfile& profile() { return profile_; }

 private:
  void attention(int layer, int pos);
  void feed_forward(const LayerWeights& w);
  void timed_matmul(float* out, const float* x, const float* W, int n, int d);

  const Model& model_;
  Matmul& matmul_;
  int threads_;
  ForwardProfile profile_;
  // Activations for the current token.
  std::vector<float> x_;        // residual stream [dim]
  std::vector<float> xb_;       // normalized input / attention output [dim]
  std::vector<float> xb2_;      // projection output [dim]
  std::vector<float> hb_;       // feed-forward gate [hidden]
  std::vector<float> hb2_;      // feed-forward up [hidden]
  std::vector<float> q_;        // queries [dim]
  std::vector<float> att_;      // attention scores [n_heads][seq_len]
  std::vector<float> logits_;   // [vocab]
  // The KV cache: [layer][seq_len][kv_dim].
  std::vector<float> key_cache_;
  std::vector<float> value_cache_;
};

// The building blocks, exposed for tests.
// out = x / sqrt(mean(x^2) + 1e-5) * weight
void rmsnorm(float* out, const float* x, const float* weight, int size);
// In place, numerically stable (subtracts the max first).
void softmax(float* x, int size);
// Rotates each consecutive pair (x[i], x[i+1]) of every head by pos * 10000^(-(i % head_size) / head_size).
void rope(float* vec, int size, int head_size, int pos);

}  // namespace wb::model
