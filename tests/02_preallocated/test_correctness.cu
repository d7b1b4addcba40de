// Chapter 02 correctness: the kernel, the preallocated wrapper over shapes that grow and
// shrink, the allocation rule (enforced by counting CUDA API calls), and the whole model.
#include <algorithm>
#include <random>
#include <string>
#include <vector>

#include "ch02_adapters.hpp"
#include "wb/api_counter.hpp"
#include "wb/model/backend_check.hpp"
#include "wb/model/data.hpp"
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
  auto rng = wb::rng_for("ch02/matvec/random-shapes");
  std::uniform_int_distribution<int> size(1, 4500);
  std::vector<Shape> shapes = {{1, 1}, {7, 13}, {288, 288}, {2048, 768}, {32000, 288}, {4099, 4097}, {172, 64}};
  shapes.push_back({size(rng), size(rng)});
  for (const Shape& s : shapes) {
    CAPTURE(s.d);
    CAPTURE(s.n);
    WB_CHECK_RESULT(wb::model::check_device_matvec(
        ch02_adapters::kLaunch, s.n, s.d,
        {"02", "launch_matvec", "this is chapter 01's kernel: run chapter 01's tests on it first."}));
  }
}

// First among the wrapper tests: a buffer that never grows can break the CUDA context for
// the tests after it, and this one names the rule.
TEST_CASE("rule: grow the buffers when a larger call comes, keep them for smaller ones") {
  WB_REQUIRE_GPU();
  const std::string rule = "chapter 02: rule: grow the buffers when a larger call comes";
  ch02::PreallocatedMatvec p;
  const wb::model::HostMatvec call = [&p](float* out, const float* x, const float* W, int n, int d) {
    p.matvec(out, x, W, n, d);
  };
  const wb::model::MatvecCheck check{"02", "PreallocatedMatvec::matvec",
                                     "the call before this one was smaller: did the buffers grow?"};
  WB_CHECK_RESULT(wb::model::check_host_matvec(call, 768, 2048, check));
  const std::size_t w1 = p.w_capacity(), x1 = p.x_capacity(), y1 = p.y_capacity();
  CHECK_MESSAGE((w1 >= 768u * 2048u && x1 >= 768u && y1 >= 2048u),
                rule << ": after a 2048x768 call the capacities are W " << w1 << ", x " << x1 << ", y "
                     << y1 << " floats\nhint: ensure_capacity must record the capacity it allocated.");
  WB_CHECK_RESULT(wb::model::check_host_matvec(call, 288, 288, check));
  CHECK_MESSAGE((p.w_capacity() == w1 && p.x_capacity() == x1 && p.y_capacity() == y1),
                "chapter 02: a smaller call must reuse the buffers, but the capacities changed from W "
                    << w1 << ", x " << x1 << ", y " << y1 << " to W " << p.w_capacity() << ", x "
                    << p.x_capacity() << ", y " << p.y_capacity()
                    << "\nhint: ensure_capacity does nothing when the buffer is already big enough.");
  try {
    WB_CHECK_RESULT(wb::model::check_host_matvec(call, 4097, 4099, check));
  } catch (const std::exception& e) {
    FAIL_CHECK(rule << ": a 4099x4097 call after smaller ones failed: " << e.what()
                    << "\nhint: when *capacity < count, free the old buffer and allocate count floats.");
  }
  CHECK_MESSAGE((p.w_capacity() >= 4097u * 4099u && p.x_capacity() >= 4097u && p.y_capacity() >= 4099u),
                rule << ": after a 4099x4097 call the capacities are W " << p.w_capacity() << ", x "
                     << p.x_capacity() << ", y " << p.y_capacity()
                     << " floats\nhint: when *capacity < count, free the old buffer and allocate count floats.");
}

TEST_CASE("PreallocatedMatvec: one object, shapes that grow and shrink") {
  WB_REQUIRE_GPU();
  ch02::PreallocatedMatvec p;
  const wb::model::HostMatvec call = [&p](float* out, const float* x, const float* W, int n, int d) {
    p.matvec(out, x, W, n, d);
  };
  for (const Shape s : {Shape{7, 13}, Shape{2048, 768}, Shape{1, 1}, Shape{288, 288}, Shape{4099, 4097}, Shape{5, 3}}) {
    CAPTURE(s.d);
    CAPTURE(s.n);
    WB_CHECK_RESULT(wb::model::check_host_matvec(
        call, s.n, s.d,
        {"02", "PreallocatedMatvec::matvec after other shapes",
         "the buffers are reused across calls: a wrong size passed to ensure_capacity, or a "
         "capacity recorded before the allocation succeeded, shows up only after a change of shape."}));
  }
}

TEST_CASE("rule: no cudaMalloc/cudaFree per call after warmup") {
  WB_REQUIRE_GPU();
  if (!api_counting_or_skip()) return;
  const wb::model::Model model = wb::model::make_synthetic(wb::model::synthetic_small());
  ch02::PreallocatedMatvec p;
  auto backend = ch02_adapters::preallocated_backend(p);
  wb::model::Transformer t(model, backend);
  t.forward(1, 0);  // warmup: the first token sizes the buffers
  wb::ApiCounter counter;
  t.forward(2, 1);
  t.forward(3, 2);
  const wb::ApiCounts c = counter.counts();
  const long long calls = 2 * (7 * model.config().n_layers + 1);
  wb::testing::record_metric("mallocs_per_token", double(c.mallocs) / 2);
  wb::testing::record_metric("frees_per_token", double(c.frees) / 2);
  CHECK_MESSAGE((c.mallocs == 0 && c.frees == 0),
                "chapter 02: rule: no cudaMalloc/cudaFree per call after warmup. After one warmup "
                "token, 2 more tokens ("
                    << calls << " matmuls) made " << c.mallocs << " cudaMalloc and " << c.frees
                    << " cudaFree calls (" << c.summary()
                    << ")\nhint: allocate in ensure_capacity only when the buffer is too small; every "
                       "later call of the same size or smaller must reuse it.");
}

TEST_CASE("release frees every buffer, and twice is harmless") {
  WB_REQUIRE_GPU();
  if (!api_counting_or_skip()) return;
  std::vector<float> W(2048 * 768, 0.5f), x(768, 0.25f), out(2048);
  wb::ApiCounter counter;
  {
    ch02::PreallocatedMatvec p;
    p.matvec(out.data(), x.data(), W.data(), 768, 2048);
    p.matvec(out.data(), x.data(), W.data(), 64, 172);
    p.release();
    CHECK(p.w_capacity() == 0);
    p.release();
  }
  const wb::ApiCounts c = counter.counts();
  CHECK_MESSAGE(c.frees >= c.mallocs,
                "chapter 02: rule: free what you allocate: " << c.mallocs << " cudaMalloc but " << c.frees
                                                             << " cudaFree\nhint: release() frees all three buffers.");
}

TEST_CASE("end to end: stories260K generates llama2.c's text through PreallocatedMatvec") {
  WB_REQUIRE_GPU();
  std::string why;
  const auto files = wb::model::tiny_stories_from_env(&why);
  if (!files) {
    wb::testing::mark_skipped(why);
    return;
  }
  ch02::PreallocatedMatvec p;
  auto backend = ch02_adapters::preallocated_backend(p);
  const wb::model::TextCheck r = wb::model::check_tiny_stories_text(backend, *files, "02");
  CHECK_MESSAGE(r.ok, r.message);
}

TEST_CASE("end to end: the synthetic model's logits through PreallocatedMatvec match the CPU's") {
  WB_REQUIRE_GPU();
  const wb::model::Model model = wb::model::make_synthetic(wb::model::synthetic_small());
  ch02::PreallocatedMatvec p;
  auto backend = ch02_adapters::preallocated_backend(p);
  WB_CHECK_RESULT(wb::model::compare_logits_with_cpu(backend, model, 4, "02"));
}
