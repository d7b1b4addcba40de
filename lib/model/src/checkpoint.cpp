// Reading and writing llama2.c checkpoints (format: see wb/model/checkpoint.hpp).
#include "wb/model/checkpoint.hpp"

#include <array>
#include <cstdint>
#include <fstream>
#include <sstream>
#include <system_error>

namespace wb::model {

namespace {
constexpr std::size_t kHeaderInts = 7;
constexpr std::size_t kHeaderBytes = kHeaderInts * sizeof(std::int32_t);

std::string quoted(const std::filesystem::path& p) { return "'" + p.string() + "'"; }
}  // namespace

std::size_t Config::payload_floats() const {
  const std::size_t d = std::size_t(dim), h = std::size_t(hidden_dim), L = std::size_t(n_layers);
  const std::size_t v = std::size_t(vocab_size), kv = std::size_t(kv_dim());
  const std::size_t rope_tables = std::size_t(seq_len) * std::size_t(head_size() / 2) * 2;
  return v * d                          // token embedding
         + L * d                        // rms_att
         + L * d * d + 2 * L * kv * d   // wq, wk, wv
         + L * d * d                    // wo
         + L * d                        // rms_ffn
         + 3 * L * h * d                // w1, w2, w3
         + d                            // rms_final
         + rope_tables                  // freq_cis_real, freq_cis_imag
         + (shared_classifier ? 0 : v * d);
}

std::size_t Config::parameter_count() const {
  const std::size_t rope_tables = std::size_t(seq_len) * std::size_t(head_size() / 2) * 2;
  return payload_floats() - rope_tables;
}

void Config::validate(const std::string& where) const {
  std::ostringstream problems;
  auto require = [&](bool ok, const std::string& what) {
    if (!ok) problems << "\n  - " << what;
  };
  require(dim > 0, "dim must be positive (got " + std::to_string(dim) + ")");
  require(hidden_dim > 0, "hidden_dim must be positive (got " + std::to_string(hidden_dim) + ")");
  require(n_layers > 0, "n_layers must be positive (got " + std::to_string(n_layers) + ")");
  require(n_heads > 0, "n_heads must be positive (got " + std::to_string(n_heads) + ")");
  require(n_kv_heads > 0, "n_kv_heads must be positive (got " + std::to_string(n_kv_heads) + ")");
  require(vocab_size > 0, "vocab_size must not be 0");
  require(seq_len > 0, "seq_len must be positive (got " + std::to_string(seq_len) + ")");
  if (dim > 0 && n_heads > 0)
    require(dim % n_heads == 0, "dim (" + std::to_string(dim) + ") must be a multiple of n_heads (" +
                                    std::to_string(n_heads) + ")");
  if (n_heads > 0 && n_kv_heads > 0)
    require(n_heads % n_kv_heads == 0, "n_heads (" + std::to_string(n_heads) +
                                           ") must be a multiple of n_kv_heads (" +
                                           std::to_string(n_kv_heads) + ")");
  if (dim > 0 && n_heads > 0 && dim % n_heads == 0)
    require(head_size() % 2 == 0, "the head size dim/n_heads (" + std::to_string(head_size()) +
                                      ") must be even (RoPE rotates pairs)");
  // Sizes that cannot be real: a corrupt header read as integers gives huge values.
  constexpr int kLimit = 1 << 20;
  require(dim <= kLimit && hidden_dim <= kLimit && n_layers <= 4096 && vocab_size <= 4 * kLimit &&
              seq_len <= kLimit,
          "the sizes are implausibly large (is this really a llama2.c checkpoint?)");
  const std::string list = problems.str();
  if (!list.empty())
    throw ModelError(where + ": the header does not describe a llama2 model:" + list +
                     "\n  header: " + summary());
}

std::string Config::summary() const {
  std::ostringstream s;
  s << "dim " << dim << ", hidden " << hidden_dim << ", " << n_layers << " layers, " << n_heads
    << " heads (" << n_kv_heads << " kv), vocab " << vocab_size << ", seq " << seq_len
    << (shared_classifier ? ", shared classifier" : ", separate classifier");
  return s.str();
}

Model::Model(Config config, std::vector<float> payload, std::string origin)
    : config_(config), payload_(std::move(payload)), origin_(std::move(origin)) {
  config_.validate(origin_);
  if (payload_.size() != config_.payload_floats())
    throw ModelError(origin_ + ": " + std::to_string(payload_.size()) + " weight floats given, " +
                     std::to_string(config_.payload_floats()) + " expected for " + config_.summary());
  // Lay the views over the array in file order.
  const std::size_t d = std::size_t(config_.dim), h = std::size_t(config_.hidden_dim);
  const std::size_t kv = std::size_t(config_.kv_dim()), L = std::size_t(config_.n_layers);
  const float* p = payload_.data();
  auto take = [&p](std::size_t count) {
    const float* start = p;
    p += count;
    return start;
  };
  weights_.token_embedding = take(std::size_t(config_.vocab_size) * d);
  weights_.layers.resize(L);
  for (auto& l : weights_.layers) l.rms_att = take(d);
  for (auto& l : weights_.layers) l.wq = take(d * d);
  for (auto& l : weights_.layers) l.wk = take(kv * d);
  for (auto& l : weights_.layers) l.wv = take(kv * d);
  for (auto& l : weights_.layers) l.wo = take(d * d);
  for (auto& l : weights_.layers) l.rms_ffn = take(d);
  for (auto& l : weights_.layers) l.w1 = take(h * d);
  for (auto& l : weights_.layers) l.w2 = take(d * h);
  for (auto& l : weights_.layers) l.w3 = take(h * d);
  weights_.rms_final = take(d);
  take(std::size_t(config_.seq_len) * std::size_t(config_.head_size() / 2) * 2);  // RoPE tables
  weights_.classifier = config_.shared_classifier ? weights_.token_embedding
                                                  : take(std::size_t(config_.vocab_size) * d);
}

Model load_checkpoint(const std::filesystem::path& path) {
  std::error_code ec;
  if (!std::filesystem::exists(path, ec))
    throw ModelError("model file " + quoted(path) +
                     " does not exist\nhint: pass the path of a llama2.c checkpoint (.bin), e.g. "
                     "stories260K.bin from https://huggingface.co/karpathy/tinyllamas");
  if (std::filesystem::is_directory(path, ec))
    throw ModelError("model file " + quoted(path) + " is a directory, not a llama2.c checkpoint");
  const std::uintmax_t file_bytes = std::filesystem::file_size(path, ec);
  if (ec) throw ModelError("model file " + quoted(path) + ": cannot read its size: " + ec.message());
  std::ifstream in(path, std::ios::binary);
  if (!in) throw ModelError("model file " + quoted(path) + " cannot be opened for reading");
  if (file_bytes < kHeaderBytes)
    throw ModelError("model file " + quoted(path) + " is " + std::to_string(file_bytes) +
                     " bytes: too short for the 28-byte llama2.c header (truncated or not a "
                     "checkpoint)");

  std::array<std::int32_t, kHeaderInts> h{};
  in.read(reinterpret_cast<char*>(h.data()), kHeaderBytes);
  Config c;
  c.dim = h[0];
  c.hidden_dim = h[1];
  c.n_layers = h[2];
  c.n_heads = h[3];
  c.n_kv_heads = h[4];
  c.shared_classifier = h[5] > 0;  // negative: a separate classifier follows the weights
  c.vocab_size = h[5] < 0 ? -h[5] : h[5];
  c.seq_len = h[6];
  c.validate("model file " + quoted(path));

  const std::uintmax_t expected = kHeaderBytes + c.payload_floats() * sizeof(float);
  if (file_bytes != expected) {
    std::ostringstream msg;
    msg << "model file " << quoted(path) << " is " << file_bytes << " bytes but its header ("
        << c.summary() << ") needs exactly " << expected << " bytes: "
        << (file_bytes < expected ? "the file is truncated or the header is wrong"
                                  : "there are extra bytes after the weights (a different "
                                    "format version, or a corrupt header)");
    throw ModelError(msg.str());
  }
  std::vector<float> payload(c.payload_floats());
  in.read(reinterpret_cast<char*>(payload.data()), std::streamsize(payload.size() * sizeof(float)));
  if (!in)
    throw ModelError("model file " + quoted(path) + ": reading the weights failed after " +
                     std::to_string(in.gcount()) + " bytes");
  return Model(c, std::move(payload), path.string());
}

void save_checkpoint(const Model& model, const std::filesystem::path& path) {
  const Config& c = model.config();
  const std::array<std::int32_t, kHeaderInts> h{c.dim,     c.hidden_dim, c.n_layers,
                                               c.n_heads, c.n_kv_heads,
                                               c.shared_classifier ? c.vocab_size : -c.vocab_size,
                                               c.seq_len};
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  if (!out) throw ModelError("cannot write model file " + quoted(path));
  out.write(reinterpret_cast<const char*>(h.data()), kHeaderBytes);
  out.write(reinterpret_cast<const char*>(model.payload().data()),
            std::streamsize(model.payload().size_bytes()));
  if (!out) throw ModelError("writing model file " + quoted(path) + " failed (disk full?)");
}

}  // namespace wb::model
