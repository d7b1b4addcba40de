// The llama2.c checkpoint reader and writer, and the synthetic model.
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <numeric>

#include "model_test_support.hpp"
#include "wb/model/checkpoint.hpp"
#include "wb/model/data.hpp"
#include "wb/testing.hpp"

using wb::model::Config;
using wb::model::Model;
using wb::model::ModelError;

namespace {
// The message of the ModelError `f` throws ("" when it throws nothing).
template <typename F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const ModelError& e) {
    return e.what();
  }
  return "";
}

std::string header_bytes(std::initializer_list<std::int32_t> ints) {
  std::string s;
  for (std::int32_t v : ints) s.append(reinterpret_cast<const char*>(&v), sizeof v);
  return s;
}

bool contains(const std::string& haystack, const std::string& needle) {
  return haystack.find(needle) != std::string::npos;
}
}  // namespace

TEST_CASE("a model survives a save and load round trip") {
  model_test::TempDir dir;
  for (bool shared : {true, false}) {
    CAPTURE(shared);
    auto spec = model_test::tiny_spec();
    spec.shared_classifier = shared;
    const Model original = wb::model::make_synthetic(spec);
    wb::model::save_checkpoint(original, dir / "tiny.bin");
    const Model loaded = wb::model::load_checkpoint(dir / "tiny.bin");
    CHECK(loaded.config().summary() == original.config().summary());
    CHECK(loaded.config().shared_classifier == shared);
    REQUIRE(loaded.payload().size() == original.payload().size());
    CHECK(std::memcmp(loaded.payload().data(), original.payload().data(), loaded.payload().size_bytes()) == 0);
  }
}

TEST_CASE("the weight views follow llama2.c's file order") {
  auto spec = model_test::tiny_spec();
  spec.shared_classifier = false;
  const Model m = wb::model::make_synthetic(spec);
  const Config& c = m.config();
  const float* base = m.payload().data();
  const std::size_t d = 48, h = 100, kv = 24, L = 2, v = 300;
  const auto& w = m.weights();
  CHECK(w.token_embedding == base);
  CHECK(w.layers[0].rms_att == base + v * d);
  CHECK(w.layers[1].rms_att == base + v * d + d);
  CHECK(w.layers[0].wq == base + v * d + L * d);
  CHECK(w.layers[0].wk == w.layers[0].wq + L * d * d);
  CHECK(w.layers[1].wk == w.layers[0].wk + kv * d);
  CHECK(w.layers[0].wv == w.layers[0].wk + L * kv * d);
  CHECK(w.layers[0].wo == w.layers[0].wv + L * kv * d);
  CHECK(w.layers[0].rms_ffn == w.layers[0].wo + L * d * d);
  CHECK(w.layers[0].w1 == w.layers[0].rms_ffn + L * d);
  CHECK(w.layers[0].w2 == w.layers[0].w1 + L * h * d);
  CHECK(w.layers[0].w3 == w.layers[0].w2 + L * d * h);
  CHECK(w.rms_final == w.layers[0].w3 + L * h * d);
  // Then the two RoPE tables (seq_len * head_size/2 each), then the separate classifier.
  CHECK(w.classifier == w.rms_final + d + 2 * std::size_t(c.seq_len) * std::size_t(c.head_size() / 2));
  CHECK(w.classifier + v * d == base + m.payload().size());
}

TEST_CASE("a shared classifier is the embedding table") {
  const Model m = wb::model::make_synthetic(model_test::tiny_spec());
  CHECK(m.weights().classifier == m.weights().token_embedding);
}

TEST_CASE("a missing model file is named in the error") {
  const std::string msg = error_of([] { wb::model::load_checkpoint("/nonexistent/dir/model.bin"); });
  CHECK(contains(msg, "'/nonexistent/dir/model.bin'"));
  CHECK(contains(msg, "does not exist"));
}

TEST_CASE("a truncated checkpoint is reported with both sizes") {
  model_test::TempDir dir;
  const Model m = wb::model::make_synthetic(model_test::tiny_spec());
  wb::model::save_checkpoint(m, dir / "full.bin");
  const std::string bytes = model_test::read_bytes(dir / "full.bin");
  model_test::write_bytes(dir / "cut.bin", bytes.substr(0, bytes.size() - 1000));
  const std::string msg = error_of([&] { wb::model::load_checkpoint(dir / "cut.bin"); });
  CHECK(contains(msg, (dir / "cut.bin").string()));
  CHECK(contains(msg, std::to_string(bytes.size() - 1000) + " bytes"));
  CHECK(contains(msg, "needs exactly " + std::to_string(bytes.size()) + " bytes"));
  CHECK(contains(msg, "truncated"));
}

TEST_CASE("extra bytes after the weights are rejected") {
  model_test::TempDir dir;
  const Model m = wb::model::make_synthetic(model_test::tiny_spec());
  wb::model::save_checkpoint(m, dir / "full.bin");
  model_test::write_bytes(dir / "long.bin", model_test::read_bytes(dir / "full.bin") + std::string(64, '\0'));
  const std::string msg = error_of([&] { wb::model::load_checkpoint(dir / "long.bin"); });
  CHECK(contains(msg, "extra bytes"));
}

TEST_CASE("a file shorter than the header is not a checkpoint") {
  model_test::TempDir dir;
  model_test::write_bytes(dir / "short.bin", "abc");
  const std::string msg = error_of([&] { wb::model::load_checkpoint(dir / "short.bin"); });
  CHECK(contains(msg, "3 bytes"));
  CHECK(contains(msg, "header"));
}

TEST_CASE("a header that cannot describe a model lists what is wrong") {
  model_test::TempDir dir;
  // dim 50 is not a multiple of 4 heads; 4 heads are not a multiple of 3 kv heads.
  model_test::write_bytes(dir / "bad.bin", header_bytes({50, 100, 2, 4, 3, 300, 16}) + std::string(1000, '\0'));
  const std::string msg = error_of([&] { wb::model::load_checkpoint(dir / "bad.bin"); });
  CHECK(contains(msg, "bad.bin"));
  CHECK(contains(msg, "dim (50) must be a multiple of n_heads (4)"));
  CHECK(contains(msg, "n_heads (4) must be a multiple of n_kv_heads (3)"));

  model_test::write_bytes(dir / "neg.bin", header_bytes({-5, 100, 0, 4, 4, 300, 16}));
  const std::string neg = error_of([&] { wb::model::load_checkpoint(dir / "neg.bin"); });
  CHECK(contains(neg, "dim must be positive (got -5)"));
  CHECK(contains(neg, "n_layers must be positive (got 0)"));

  // Text read as integers: huge values.
  model_test::write_bytes(dir / "text.bin", std::string("this is not a checkpoint at all, just text\n"));
  CHECK(contains(error_of([&] { wb::model::load_checkpoint(dir / "text.bin"); }), "implausibly large"));
}

TEST_CASE("a negative vocab_size means a separate classifier at the end") {
  model_test::TempDir dir;
  auto spec = model_test::tiny_spec();
  const Config c = spec.config();
  // Build the file by hand: header with -vocab, payload of a separate-classifier model.
  spec.shared_classifier = false;
  const Model m = wb::model::make_synthetic(spec);
  std::string bytes = header_bytes({c.dim, c.hidden_dim, c.n_layers, c.n_heads, c.n_kv_heads, -c.vocab_size, c.seq_len});
  bytes.append(reinterpret_cast<const char*>(m.payload().data()), m.payload().size_bytes());
  model_test::write_bytes(dir / "sep.bin", bytes);
  const Model loaded = wb::model::load_checkpoint(dir / "sep.bin");
  CHECK_FALSE(loaded.config().shared_classifier);
  CHECK(loaded.config().vocab_size == c.vocab_size);
  CHECK(loaded.weights().classifier != loaded.weights().token_embedding);
  CHECK(std::memcmp(loaded.weights().classifier, m.weights().classifier, sizeof(float) * 300 * 48) == 0);
}

TEST_CASE("stories260K: the real checkpoint's header") {
  std::string why;
  const auto files = wb::model::tiny_stories_from_env(&why);
  if (!files) {
    wb::testing::mark_skipped(why);
    return;
  }
  const Model m = wb::model::load_checkpoint(files->model);
  const Config& c = m.config();
  CHECK(c.dim == 64);
  CHECK(c.hidden_dim == 172);
  CHECK(c.n_layers == 5);
  CHECK(c.n_heads == 8);
  CHECK(c.n_kv_heads == 4);
  CHECK(c.vocab_size == 512);
  CHECK(c.seq_len == 512);
  CHECK(c.shared_classifier);
}

TEST_CASE("the synthetic model is deterministic per seed") {
  auto spec = model_test::tiny_spec();
  const Model a = wb::model::make_synthetic(spec);
  const Model b = wb::model::make_synthetic(spec);
  CHECK(std::memcmp(a.payload().data(), b.payload().data(), a.payload().size_bytes()) == 0);
  spec.seed += 1;
  const Model other = wb::model::make_synthetic(spec);
  std::size_t differ = 0;
  for (std::size_t i = 0; i < a.payload().size(); ++i) differ += a.payload()[i] != other.payload()[i];
  CHECK(differ > a.payload().size() / 2);
}

TEST_CASE("the synthetic 110M model: size, scales and generation time") {
  const auto t0 = std::chrono::steady_clock::now();
  const Model m = wb::model::make_synthetic(wb::model::synthetic_110m());
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  wb::testing::record_metric("generate_seconds", seconds);
  const Config& c = m.config();
  CHECK(c.dim == 768);
  CHECK(c.hidden_dim == 2048);
  CHECK(c.n_layers == 12);
  CHECK(c.n_heads == 12);
  CHECK(c.vocab_size == 32000);
  // 32000*768 + 12*(2*768 + 4*768^2 + 3*768*2048) + 768 = 109,529,856 parameters.
  CHECK(c.parameter_count() == 109529856u);
  // wq has variance 1/dim (uniform with half-width sqrt(3/dim)): unit-scale activations.
  const float* wq = m.weights().layers[3].wq;
  const std::size_t count = 768 * 768;
  double sum = 0, sum_sq = 0;
  for (std::size_t i = 0; i < count; ++i) sum += wq[i], sum_sq += double(wq[i]) * wq[i];
  const double mean = sum / count, var = sum_sq / count - mean * mean;
  CHECK(std::fabs(mean) < 3e-4);  // the mean of 589,824 draws: standard error 4.7e-5
  CHECK(var == doctest::Approx(1.0 / 768).epsilon(0.01));
  // Norm weights are around one.
  for (int i = 0; i < 768; ++i) {
    const float g = m.weights().rms_final[i];
    REQUIRE((g >= 0.8f && g <= 1.2f));
  }
}
