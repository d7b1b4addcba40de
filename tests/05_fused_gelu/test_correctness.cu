// Chapter 05 correctness: the unfused and fused GELU against a double-precision CPU
// reference, on fresh random inputs (seeded: WB_SEED reproduces a run), with y and the
// scratch buffer filled with NaN before each call so that an element never written cannot
// pass; sizes that leave every possible tail after the last float4, inputs where tanh
// saturates, and views that are not 16-byte aligned.
#include <cuda_runtime.h>

#include <functional>
#include <stdexcept>
#include <string>
#include <vector>

#include "gelu.cuh"
#include "reference.hpp"
#include "wb/buffer.hpp"
#include "wb/check.hpp"
#include "wb/guarded_buffer.hpp"
#include "wb/not_implemented.hpp"
#include "wb/random.hpp"
#include "wb/testing.hpp"

namespace {

using ch05::reference::check_gelu;
using ch05::reference::gelu_tanh;

enum class Impl { Unfused, Fused };
const char* name_of(Impl impl) { return impl == Impl::Fused ? "fused" : "unfused"; }

// A store outside y (or the scratch buffer) is wrong even when every output is right: the
// buffers sit between guard bands, and this fails the test when a band changed.
void check_no_overrun(const wb::GuardedBuffer<float>& buffer, const std::string& name,
                      Impl impl, std::size_t n) {
  const std::string overrun = buffer.overrun(name);
  if (overrun.empty()) return;
  FAIL_CHECK("ch05 " << name_of(impl) << " GELU, n = " << n << ", seed " << wb::base_seed()
             << ": rule: write only your own elements. The kernel " << overrun
             << ".\nhint: a grid rounded up has threads past n: guard every store with "
                "if (i < n). With float4 stores, only the n / 4 whole packs go four at a "
                "time; the last n % 4 elements are stored one by one.");
}

// x is an input: the kernel may only read it (GELU computed in place still returns the
// right y).
void check_input_unchanged(const wb::GuardedBuffer<float>& x_buf, std::size_t x_offset,
                           const std::vector<float>& x, Impl impl) {
  const std::string change = x_buf.input_change(x, "x", x_offset);
  if (change.empty()) return;
  FAIL_CHECK("ch05 " << name_of(impl) << " GELU, n = " << x.size() << ", seed "
             << wb::base_seed() << ": rule: inputs are read-only. The kernel " << change
             << ".\nhint: x is a const float*: the unfused steps write their temporaries to "
                "scratch and the last one to y, never to x.");
}

// Runs one GELU on the GPU and returns y. x starts `x_offset` floats and y `y_offset` floats
// past the start of their allocations: an offset of 1 makes a view that is not 16-byte
// aligned. Every buffer sits between guard bands: a store past the end fails the test, and
// so does a change to x.
std::vector<float> run_gelu(Impl impl, const std::vector<float>& x, std::size_t x_offset = 0,
                            std::size_t y_offset = 0) {
  const std::size_t n = x.size();
  wb::GuardedBuffer<float> x_buf(n + x_offset), y_buf(n + y_offset);
  wb::GuardedBuffer<float> scratch(ch05::gelu_unfused_scratch_count(n));
  cudaStream_t stream = nullptr;
  WB_CUDA(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  struct StreamGuard {
    cudaStream_t s;
    ~StreamGuard() { cudaStreamDestroy(s); }
  } guard{stream};

  WB_CUDA(cudaMemcpy(x_buf.data() + x_offset, x.data(), n * sizeof(float),
                     cudaMemcpyHostToDevice));
  y_buf.poison(stream);
  scratch.poison(stream);
  if (impl == Impl::Fused)
    ch05::gelu_fused(x_buf.data() + x_offset, y_buf.data() + y_offset, n, stream);
  else
    ch05::gelu_unfused(x_buf.data() + x_offset, y_buf.data() + y_offset, scratch.data(), n,
                       stream);
  // Read back on the same (non-blocking) stream: work that escaped it races with this copy.
  std::vector<float> y(n);
  WB_CUDA(cudaMemcpyAsync(y.data(), y_buf.data() + y_offset, n * sizeof(float),
                          cudaMemcpyDeviceToHost, stream));
  WB_CUDA(cudaStreamSynchronize(stream));
  check_no_overrun(y_buf, "y", impl, n);
  check_input_unchanged(x_buf, x_offset, x, impl);
  if (impl == Impl::Unfused) check_no_overrun(scratch, "scratch", impl, n);
  return y;
}

void check_sizes(Impl impl, const std::vector<std::size_t>& sizes) {
  for (const std::size_t n : sizes) {
    const std::string what = std::string(name_of(impl)) + " GELU";
    const std::vector<float> x =
        ch05::reference::random_inputs(n, "ch05/" + what + "/" + std::to_string(n));
    const std::string failure = check_gelu(x, run_gelu(impl, x), gelu_tanh(x), what);
    if (!failure.empty()) FAIL_CHECK(failure);
  }
}

// Every remainder mod 4 (the float4 tail) and mod the block size, 1, and large.
const std::vector<std::size_t> kSizes = {1,    2,    3,     4,      5,         7,
                                         8,    31,   255,   256,    257,       1000,
                                         1023, 4097, 65537, 1 << 20, (1 << 20) + 3,
                                         (1 << 24) + 1, (1 << 24) + 2};

TEST_CASE("fused GELU matches the double reference on every size") {
  WB_REQUIRE_GPU();
  check_sizes(Impl::Fused, kSizes);
}

TEST_CASE("unfused GELU matches the double reference on every size") {
  WB_REQUIRE_GPU();
  check_sizes(Impl::Unfused, kSizes);
}

void check_saturation(Impl impl) {
  for (const std::size_t n : {std::size_t(4099), std::size_t(1 << 20)}) {
    const std::string what =
        std::string(name_of(impl)) + " GELU where tanh saturates (|x| from 3 to 1e30)";
    const std::vector<float> x =
        ch05::reference::saturating_inputs(n, "ch05/saturation/" + std::to_string(n));
    const std::string failure = check_gelu(x, run_gelu(impl, x), gelu_tanh(x), what);
    if (!failure.empty()) FAIL_CHECK(failure);
  }
}

TEST_CASE("fused GELU where tanh saturates: large |x|") {
  WB_REQUIRE_GPU();
  check_saturation(Impl::Fused);
}

TEST_CASE("unfused GELU where tanh saturates: large |x|") {
  WB_REQUIRE_GPU();
  check_saturation(Impl::Unfused);
}

// Expects `call` to throw std::invalid_argument whose message contains `needle`. A
// NotImplemented from a starter passes through, so the test reads as "to do".
void expect_invalid_argument(const std::function<void()>& call, const std::string& needle,
                             const std::string& what) {
  try {
    call();
  } catch (const wb::NotImplemented&) {
    throw;
  } catch (const std::invalid_argument& e) {
    const std::string message = e.what();
    CHECK_MESSAGE(message.find(needle) != std::string::npos,
                  "ch05 " << what << ": the error should name '" << needle
                          << "', got: " << message);
    return;
  }
  FAIL_CHECK("ch05 " << what << ": expected std::invalid_argument, nothing was thrown\n"
             << "hint: keep the check_gelu_args(...) line at the top of each entry point");
}

TEST_CASE("bad arguments are rejected with a message that names them") {
  WB_REQUIRE_GPU();
  wb::DeviceBuffer<float> x(8), y(8), scratch(ch05::gelu_unfused_scratch_count(8));
  // A valid call first: a starter's NotImplemented surfaces here, as "to do".
  ch05::gelu_fused(x.data(), y.data(), 8, nullptr);
  ch05::gelu_unfused(x.data(), y.data(), scratch.data(), 8, nullptr);
  WB_CUDA(cudaDeviceSynchronize());

  expect_invalid_argument([&] { ch05::gelu_fused(nullptr, y.data(), 8, nullptr); }, "null",
                          "gelu_fused(x = nullptr)");
  expect_invalid_argument(
      [&] { ch05::gelu_unfused(x.data(), nullptr, scratch.data(), 8, nullptr); }, "null",
      "gelu_unfused(y = nullptr)");
  // n == 0 is not an error: nothing to do, whatever the pointers.
  ch05::gelu_fused(nullptr, nullptr, 0, nullptr);
  WB_CUDA(cudaDeviceSynchronize());
}

// Last in the file: a float4 access to a misaligned address is a sticky CUDA error that
// ends every later test of this process.
TEST_CASE("GELU of views that are not 16-byte aligned (x + 1, y + 3)") {
  WB_REQUIRE_GPU();
  for (const Impl impl : {Impl::Fused, Impl::Unfused}) {
    for (const auto [x_offset, y_offset] : {std::pair<int, int>{1, 1}, {1, 3}, {0, 2}}) {
      const std::size_t n = 100003;
      const std::string what = std::string(name_of(impl)) + " GELU of views x + " +
                               std::to_string(x_offset) + ", y + " + std::to_string(y_offset);
      const std::vector<float> x = ch05::reference::random_inputs(n, "ch05/view");
      const std::string failure =
          check_gelu(x, run_gelu(impl, x, x_offset, y_offset), gelu_tanh(x), what);
      if (!failure.empty()) FAIL_CHECK(failure);
    }
  }
}

}  // namespace
