// Chapter 03 correctness: the kernel, matmuls on weights uploaded once, the transfer rule
// (enforced by counting CUDA API calls and bytes), and the whole model.
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "ch03_adapters.hpp"
#include "wb/api_counter.hpp"
#include "wb/model/backend_check.hpp"
#include "wb/model/data.hpp"
#include "wb/model/ladder.hpp"
#include "wb/model/synthetic.hpp"
#include "wb/model/transformer.hpp"
#include "wb/random.hpp"
#include "wb/testing.hpp"

namespace {

struct Shape {
  int d, n;
};

bool api_counting_or_skip() {
  if (wb::ApiCounter::available()) return true;
  wb::testing::mark_skipped("skipped: CUDA API counting is unavailable (" + wb::ApiCounter::unavailable_reason() + ")");
  return false;
}

}  // namespace

TEST_CASE("launch_matvec: your chapter 01 kernel, on every kind of shape") {
  WB_REQUIRE_GPU();
  auto rng = wb::rng_for("ch03/matvec/random-shapes");
  std::uniform_int_distribution<int> size(1, 4500);
  std::vector<Shape> shapes = {{1, 1}, {7, 13}, {288, 288}, {2048, 768}, {32000, 288}, {4099, 4097}, {172, 64}};
  shapes.push_back({size(rng), size(rng)});
  for (const Shape& s : shapes) {
    CAPTURE(s.d);
    CAPTURE(s.n);
    WB_CHECK_RESULT(wb::model::check_device_matvec(
        ch03_adapters::kLaunch, s.n, s.d,
        {"03", "launch_matvec", "this is chapter 01's kernel: run chapter 01's tests on it first."}));
  }
}

TEST_CASE("PersistentMatvec: matrices anywhere inside the loaded weights") {
  WB_REQUIRE_GPU();
  // One array with several matrices one after another, like a model's weights: offsets
  // that are multiples of 4 floats, as in every llama2.c checkpoint with even sizes.
  const std::vector<Shape> shapes = {{64, 48}, {2048, 768}, {1, 4}, {288, 288}, {172, 64}, {32000, 288}};
  std::vector<std::size_t> offsets;
  std::size_t total = 12;  // something before the first matrix
  for (const Shape& s : shapes) {
    offsets.push_back(total);
    total += std::size_t(s.d) * std::size_t(s.n) + 4;
  }
  const std::vector<float> weights = wb::random_uniform(total, -1.0f, 1.0f, "ch03/persistent/weights");
  ch03::PersistentMatvec p;
  p.load(weights.data(), weights.size());
  for (std::size_t i = 0; i < shapes.size(); ++i) {
    const Shape s = shapes[i];
    CAPTURE(s.d);
    CAPTURE(s.n);
    CAPTURE(offsets[i]);
    const float* W = weights.data() + offsets[i];
    const std::vector<float> x = wb::random_uniform(std::size_t(s.n), -1.0f, 1.0f, "ch03/persistent/x" + std::to_string(i));
    std::vector<float> out(std::size_t(s.d), std::numeric_limits<float>::quiet_NaN());
    p.matvec(out.data(), x.data(), W, s.n, s.d);
    const auto expected = wb::model::matvec_reference({W, std::size_t(s.d) * std::size_t(s.n)}, x, s.n, s.d);
    WB_CHECK_RESULT(wb::compare(out, expected,
                                {.chapter = "03",
                                 .what = "PersistentMatvec::matvec of the matrix at offset " + std::to_string(offsets[i]),
                                 .shape = {std::size_t(s.d)},
                                 .tol = wb::model::matvec_tolerance(s.n),
                                 .hint = "the device copy has the host array's layout: the matrix starts at "
                                         "d_weights_ + (W - host_weights_), not at d_weights_."}));
  }
}

TEST_CASE("rule: no weight bytes host-to-device per token (only activations move)") {
  WB_REQUIRE_GPU();
  if (!api_counting_or_skip()) return;
  const wb::model::Model model = wb::model::make_synthetic(wb::model::synthetic_small());
  ch03::PersistentMatvec p;
  auto backend = ch03_adapters::persistent_backend(p);
  wb::ApiCounter at_load;
  wb::model::Transformer t(model, backend);  // load(): the weights go up here, once
  const wb::ApiCounts load = at_load.counts();
  CHECK_MESSAGE(load.bytes_h2d >= model.payload().size_bytes(),
                "chapter 03: load() must upload the model's weights (" << model.payload().size_bytes()
                    << " bytes) but moved " << load.bytes_h2d << " bytes host-to-device ("
                    << load.summary() << ")\nhint: one cudaMemcpy of count floats in load().");
  t.forward(1, 0);  // warmup: the activation buffers get their size
  wb::ApiCounter counter;
  t.forward(2, 1);
  t.forward(3, 2);
  const wb::ApiCounts c = counter.counts();
  // What the activations need: x up (n floats) and out down (d floats), per matmul.
  std::size_t x_bytes = 0, out_bytes = 0;
  for (const auto& call : wb::model::token_matmuls(model)) {
    x_bytes += 2 * std::size_t(call.n) * sizeof(float);
    out_bytes += 2 * std::size_t(call.d) * sizeof(float);
  }
  wb::testing::record_metric("h2d_bytes_per_token", double(c.bytes_h2d) / 2);
  wb::testing::record_metric("activation_bytes_per_token", double(x_bytes) / 2);
  CHECK_MESSAGE(c.bytes_h2d <= x_bytes,
                "chapter 03: rule: no weight bytes host-to-device per token. 2 tokens moved "
                    << c.bytes_h2d << " bytes host-to-device; their activations (x of every matmul) are "
                    << x_bytes << " bytes (" << c.summary()
                    << ")\nhint: the weights were uploaded by load(); matvec copies only x up and out down, "
                       "and finds W on the device at d_weights_ + offset.");
  CHECK_MESSAGE(c.bytes_d2h <= out_bytes,
                "chapter 03: 2 tokens moved " << c.bytes_d2h << " bytes device-to-host, more than their outputs ("
                                              << out_bytes << " bytes)\nhint: copy back only the d floats of out.");
  CHECK_MESSAGE((c.mallocs == 0 && c.frees == 0),
                "chapter 03: rule: no cudaMalloc/cudaFree per call after warmup (as in chapter 02): 2 tokens made "
                    << c.mallocs << " cudaMalloc and " << c.frees << " cudaFree calls");
}

TEST_CASE("matvec with a W outside the loaded weights is an error") {
  WB_REQUIRE_GPU();
  const std::vector<float> weights = wb::random_uniform(1000, -1.0f, 1.0f, "ch03/outside/weights");
  const std::vector<float> other = wb::random_uniform(100, -1.0f, 1.0f, "ch03/outside/other");
  const std::vector<float> x = wb::random_uniform(10, -1.0f, 1.0f, "ch03/outside/x");
  std::vector<float> out(10);
  ch03::PersistentMatvec p;
  p.load(weights.data(), weights.size());
  CHECK_THROWS_AS(p.matvec(out.data(), x.data(), other.data(), 10, 10), std::invalid_argument);
  CHECK_THROWS_AS(p.matvec(out.data(), x.data(), weights.data() + 995, 10, 10), std::invalid_argument);  // runs past the end
  CHECK_NOTHROW(p.matvec(out.data(), x.data(), weights.data() + 900, 10, 10));  // the last 100 floats
}

TEST_CASE("release frees every buffer, and twice is harmless") {
  WB_REQUIRE_GPU();
  if (!api_counting_or_skip()) return;
  const std::vector<float> weights = wb::random_uniform(2048 * 768, -1.0f, 1.0f, "ch03/release/weights");
  const std::vector<float> x = wb::random_uniform(768, -1.0f, 1.0f, "ch03/release/x");
  std::vector<float> out(2048);
  wb::ApiCounter counter;
  {
    ch03::PersistentMatvec p;
    p.load(weights.data(), weights.size());
    p.matvec(out.data(), x.data(), weights.data(), 768, 2048);
    p.load(weights.data(), weights.size());  // loading again replaces the weights
    p.matvec(out.data(), x.data(), weights.data(), 768, 2048);
    p.release();
    p.release();
  }
  const wb::ApiCounts c = counter.counts();
  CHECK_MESSAGE(c.frees >= c.mallocs, "chapter 03: rule: free what you allocate: " << c.mallocs << " cudaMalloc but "
                                                                                   << c.frees << " cudaFree");
}

TEST_CASE("end to end: stories260K generates llama2.c's text through PersistentMatvec") {
  WB_REQUIRE_GPU();
  std::string why;
  const auto files = wb::model::tiny_stories_from_env(&why);
  if (!files) {
    wb::testing::mark_skipped(why);
    return;
  }
  ch03::PersistentMatvec p;
  auto backend = ch03_adapters::persistent_backend(p);
  const wb::model::TextCheck r = wb::model::check_tiny_stories_text(backend, *files, "03");
  CHECK_MESSAGE(r.ok, r.message);
}

TEST_CASE("end to end: the synthetic model's logits through PersistentMatvec match the CPU's") {
  WB_REQUIRE_GPU();
  const wb::model::Model model = wb::model::make_synthetic(wb::model::synthetic_small());
  ch03::PersistentMatvec p;
  auto backend = ch03_adapters::persistent_backend(p);
  WB_CHECK_RESULT(wb::model::compare_logits_with_cpu(backend, model, 4, "03"));
}
