#pragma once
// A llama2.c model: its configuration and weights, read from (and written to) the legacy
// llama2.c checkpoint format.
//
// The format (llama2.c's export "version 0"):
//   7 x int32   dim, hidden_dim, n_layers, n_heads, n_kv_heads, vocab_size, seq_len
//               (a negative vocab_size means the classifier is stored separately at the end;
//                a positive one means it is the token embedding table, "shared")
//   float32     token_embedding[vocab][dim]
//               rms_att[layer][dim]
//               wq[layer][dim][dim]            (rows = outputs, row-major: out = W x)
//               wk[layer][kv_dim][dim]
//               wv[layer][kv_dim][dim]
//               wo[layer][dim][dim]
//               rms_ffn[layer][dim]
//               w1[layer][hidden][dim]
//               w2[layer][dim][hidden]
//               w3[layer][hidden][dim]
//               rms_final[dim]
//               freq_cis_real[seq_len][head_size/2]   (unused: RoPE is computed)
//               freq_cis_imag[seq_len][head_size/2]   (unused)
//               classifier[vocab][dim]                (only when vocab_size < 0)
//
// All weights stay in ONE contiguous float array, in file order. Chapter 03 relies on that:
// it uploads the whole array once and finds each matrix on the device by its offset.
#include <cstddef>
#include <filesystem>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

namespace wb::model {

// Every error about a model file or its contents: the message names the file (or the
// model) and says what is wrong.
class ModelError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

struct Config {
  int dim = 0;          // width of the residual stream
  int hidden_dim = 0;   // width of the feed-forward layer
  int n_layers = 0;
  int n_heads = 0;      // query heads
  int n_kv_heads = 0;   // key/value heads (fewer than n_heads: grouped-query attention)
  int vocab_size = 0;
  int seq_len = 0;      // longest sequence (size of the KV cache)
  bool shared_classifier = true;  // the classifier is the token embedding table

  int head_size() const { return dim / n_heads; }
  int kv_dim() const { return head_size() * n_kv_heads; }
  // Floats after the header, in file order (what load_checkpoint expects to find).
  std::size_t payload_floats() const;
  // Parameters used by one forward pass (no RoPE tables), e.g. ~110M for the synthetic default.
  std::size_t parameter_count() const;
  // Throws ModelError naming `where` when the numbers cannot describe a model.
  void validate(const std::string& where) const;
  std::string summary() const;  // "dim 768, hidden 2048, 12 layers, 12 heads (12 kv), vocab 32000, seq 256"
};

// Views into the weight array of a Model (no ownership).
struct LayerWeights {
  const float* rms_att;  // [dim]
  const float* wq;       // [dim][dim]
  const float* wk;       // [kv_dim][dim]
  const float* wv;       // [kv_dim][dim]
  const float* wo;       // [dim][dim]
  const float* rms_ffn;  // [dim]
  const float* w1;       // [hidden][dim]
  const float* w2;       // [dim][hidden]
  const float* w3;       // [hidden][dim]
};

struct Weights {
  const float* token_embedding;  // [vocab][dim]
  std::vector<LayerWeights> layers;
  const float* rms_final;        // [dim]
  const float* classifier;       // [vocab][dim]
};

class Model {
 public:
  Model(Config config, std::vector<float> payload, std::string origin);

  const Config& config() const { return config_; }
  const Weights& weights() const { return weights_; }
  // Every float of the checkpoint after its header, contiguous and in file order: all
  // weights (and the two small unused RoPE tables).
  std::span<const float> payload() const { return payload_; }
  // Where the model came from: a file path or "synthetic (seed 1234)".
  const std::string& origin() const { return origin_; }

  Model(Model&&) noexcept = default;
  Model& operator=(Model&&) noexcept = default;
  Model(const Model&) = delete;
  Model& operator=(const Model&) = delete;

 private:
  Config config_;
  std::vector<float> payload_;
  Weights weights_;
  std::string origin_;
};

// Reads a llama2.c checkpoint. Throws ModelError for a missing file, a header that does
// not describe a model, or a file whose size does not match its header.
Model load_checkpoint(const std::filesystem::path& path);
// Writes `model` in the same format (the synthetic model can then be run by llama2.c's run.c).
void save_checkpoint(const Model& model, const std::filesystem::path& path);

}  // namespace wb::model
