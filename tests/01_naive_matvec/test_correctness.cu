// Chapter 01 correctness: the matvec kernel on every kind of shape, the naive wrapper, and
// the whole model running on it.
#include <random>
#include <string>
#include <vector>

#include "ch01_adapters.hpp"
#include "wb/api_counter.hpp"
#include "wb/model/backend_check.hpp"
#include "wb/model/data.hpp"
#include "wb/model/synthetic.hpp"
#include "wb/random.hpp"
#include "wb/testing.hpp"

namespace {

struct Shape {
  int d, n;  // d rows of n columns: "d x n"
};

const std::string kKernelHint =
    "compare your loop bounds with n and d, and check that every thread's partial sum "
    "reaches the reduction.";

void check_kernel_shapes(const std::vector<Shape>& shapes, const std::string& extra_hint = "") {
  for (const Shape& s : shapes) {
    CAPTURE(s.d);
    CAPTURE(s.n);
    WB_CHECK_RESULT(wb::model::check_device_matvec(
        ch01_adapters::kLaunch, s.n, s.d, {"01", "launch_matvec", extra_hint.empty() ? kKernelHint : extra_hint}));
  }
}

}  // namespace

TEST_CASE("launch_matvec: the model's shapes (multiples of 32 columns)") {
  WB_REQUIRE_GPU();
  check_kernel_shapes({{288, 288}, {2048, 768}, {768, 2048}, {32000, 288}, {512, 64}});
}

TEST_CASE("launch_matvec: the tail (n and d that are not multiples of the block size)") {
  WB_REQUIRE_GPU();
  check_kernel_shapes(
      {{1, 1}, {7, 13}, {5, 1}, {1, 5000}, {3, 1023}, {33, 1025}, {172, 64}, {64, 172}, {4099, 4097}},
      "rule: every column counts. When n is not a multiple of your block size (or of 4 with "
      "float4 loads), the last columns of each row (the tail) still have to be added; when d "
      "is not a multiple of your rows per block, round the grid up and guard the extra rows.");
}

TEST_CASE("launch_matvec: random shapes from the seed") {
  WB_REQUIRE_GPU();
  auto rng = wb::rng_for("ch01/matvec/random-shapes");
  std::uniform_int_distribution<int> size(1, 4500);
  std::vector<Shape> shapes;
  for (int i = 0; i < 4; ++i) shapes.push_back({size(rng), size(rng)});
  check_kernel_shapes(shapes);
}

TEST_CASE("matvec_naive: out = W x from host memory") {
  WB_REQUIRE_GPU();
  for (const Shape s : {Shape{1, 1}, Shape{7, 13}, Shape{2048, 768}, Shape{4099, 4097}}) {
    CAPTURE(s.d);
    CAPTURE(s.n);
    WB_CHECK_RESULT(wb::model::check_host_matvec(
        ch01_adapters::kNaive, s.n, s.d,
        {"01", "matvec_naive", "the kernel passes on its own, so look at the copies: W is d*n "
                               "floats, x is n floats, out is d floats."}));
  }
}

TEST_CASE("matvec_naive frees every buffer it allocates") {
  WB_REQUIRE_GPU();
  if (!wb::ApiCounter::available()) {
    wb::testing::mark_skipped("skipped: CUDA API counting is unavailable (" +
                              wb::ApiCounter::unavailable_reason() + ")");
    return;
  }
  std::vector<float> W(768 * 2048, 0.5f), x(768, 0.25f), out(2048);
  ch01::matvec_naive(out.data(), x.data(), W.data(), 768, 2048);  // warm up: CUDA context
  wb::ApiCounter counter;
  for (int call = 0; call < 3; ++call) ch01::matvec_naive(out.data(), x.data(), W.data(), 768, 2048);
  const wb::ApiCounts c = counter.counts();
  wb::testing::record_metric("mallocs_per_call", double(c.mallocs) / 3);
  wb::testing::record_metric("frees_per_call", double(c.frees) / 3);
  CHECK_MESSAGE(c.frees == c.mallocs,
                "chapter 01: rule: free what you allocate. 3 calls of matvec_naive made "
                    << c.mallocs << " cudaMalloc and " << c.frees << " cudaFree calls ("
                    << c.summary() << ")\nhint: every call allocates W, x and out and must "
                                      "cudaFree all three before returning, or each token "
                                      "leaks the size of the model.");
  CHECK_MESSAGE(c.bytes_h2d >= 3 * W.size() * sizeof(float),
                "chapter 01: the naive wrapper copies W on every call; 3 calls moved only "
                    << c.bytes_h2d << " bytes host-to-device\nhint: cudaMemcpy W (d*n floats) "
                                      "and x (n floats) to the device on every call.");
}

TEST_CASE("end to end: stories260K generates llama2.c's text through matvec_naive") {
  WB_REQUIRE_GPU();
  std::string why;
  const auto files = wb::model::tiny_stories_from_env(&why);
  if (!files) {
    wb::testing::mark_skipped(why);
    return;
  }
  auto backend = ch01_adapters::naive_backend();
  const wb::model::TextCheck r = wb::model::check_tiny_stories_text(backend, *files, "01");
  CHECK_MESSAGE(r.ok, r.message);
}

TEST_CASE("end to end: the synthetic model's logits through matvec_naive match the CPU's") {
  WB_REQUIRE_GPU();
  const wb::model::Model model = wb::model::make_synthetic(wb::model::synthetic_small());
  auto backend = ch01_adapters::naive_backend();
  WB_CHECK_RESULT(wb::model::compare_logits_with_cpu(backend, model, 4, "01"));
}
