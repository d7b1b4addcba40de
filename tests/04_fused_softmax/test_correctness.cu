// Chapter 04 correctness: the unfused and fused softmax against a double-precision CPU
// reference, on fresh random logits (seeded: WB_SEED reproduces a run), with y (and the
// unfused intermediates) filled with NaN before each call so that an element never written
// cannot pass, on every shape of parallelism the row length calls for.
#include <cuda_runtime.h>

#include <cstdint>
#include <functional>
#include <stdexcept>
#include <string>
#include <vector>

#include "reference.hpp"
#include "softmax.cuh"
#include "wb/buffer.hpp"
#include "wb/check.hpp"
#include "wb/guarded_buffer.hpp"
#include "wb/not_implemented.hpp"
#include "wb/random.hpp"
#include "wb/testing.hpp"

namespace {

using ch04::reference::check_softmax;
using ch04::reference::softmax_rows;

enum class Impl { Unfused, Fused };
const char* name_of(Impl impl) { return impl == Impl::Fused ? "fused" : "unfused"; }

struct Shape {
  int rows, cols;
};
std::string shape_name(Shape s) { return std::to_string(s.rows) + "x" + std::to_string(s.cols); }

// A store outside y (or the unfused intermediates) is wrong even when every output is right:
// the buffers sit between guard bands, and this fails the test when a band changed.
void check_no_overrun(const wb::GuardedBuffer<float>& buffer, const std::string& name,
                      Impl impl, Shape s) {
  const std::string overrun = buffer.overrun(name);
  if (overrun.empty()) return;
  FAIL_CHECK("ch04 " << name_of(impl) << " softmax, " << shape_name(s) << ", seed "
             << wb::base_seed() << ": rule: write only your own elements. The kernel "
             << overrun << ".\nhint: a grid rounded up has threads (or rows) past the end: "
                           "guard every store with the row and column bounds. A thread "
                           "past the end may take part in a reduction, but must not write.");
}

// x is an input: the kernel may only read it (a softmax that leaves exp(x - max) in x can
// still return the right y).
void check_input_unchanged(const wb::GuardedBuffer<float>& x_buf, std::size_t offset,
                           const std::vector<float>& x, Impl impl, Shape s) {
  const std::string change = x_buf.input_change(x, "x", offset);
  if (change.empty()) return;
  FAIL_CHECK("ch04 " << name_of(impl) << " softmax, " << shape_name(s) << ", seed "
             << wb::base_seed() << ": rule: inputs are read-only. The kernel " << change
             << ".\nhint: x is a const float*: keep exp(x - max) in registers, or in y and the "
                "intermediates, never in x; the caller may still need its logits.");
}

// Runs one softmax on the GPU and returns y. `offset` floats of padding go before x and y,
// so offset 1 makes views that start 4 bytes past a 16-byte boundary. Every buffer sits
// between guard bands: a store past the end of y, row_max or row_sum fails the test, and
// so does a change to x.
std::vector<float> run_softmax(Impl impl, const std::vector<float>& x, Shape s,
                               std::size_t offset = 0) {
  const std::size_t count = x.size();
  wb::GuardedBuffer<float> x_buf(count + offset), y_buf(count + offset);
  wb::GuardedBuffer<float> row_max(s.rows), row_sum(s.rows);
  cudaStream_t stream = nullptr;
  WB_CUDA(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  struct StreamGuard {
    cudaStream_t s;
    ~StreamGuard() { cudaStreamDestroy(s); }
  } guard{stream};

  WB_CUDA(cudaMemcpy(x_buf.data() + offset, x.data(), count * sizeof(float),
                     cudaMemcpyHostToDevice));
  y_buf.poison(stream);
  row_max.poison(stream);  // the intermediates start as garbage, too
  row_sum.poison(stream);
  if (impl == Impl::Fused)
    ch04::softmax_fused(x_buf.data() + offset, y_buf.data() + offset, s.rows, s.cols, stream);
  else
    ch04::softmax_unfused(x_buf.data() + offset, y_buf.data() + offset, row_max.data(),
                          row_sum.data(), s.rows, s.cols, stream);
  // Read back on the same (non-blocking) stream: work that escaped it races with this copy.
  std::vector<float> y(count);
  WB_CUDA(cudaMemcpyAsync(y.data(), y_buf.data() + offset, count * sizeof(float),
                          cudaMemcpyDeviceToHost, stream));
  WB_CUDA(cudaStreamSynchronize(stream));
  check_no_overrun(y_buf, "y", impl, s);
  check_input_unchanged(x_buf, offset, x, impl, s);
  if (impl == Impl::Unfused) {
    check_no_overrun(row_max, "row_max", impl, s);
    check_no_overrun(row_sum, "row_sum", impl, s);
  }
  return y;
}

void check_random_shapes(Impl impl, const std::vector<Shape>& shapes) {
  for (const Shape s : shapes) {
    const std::string what = std::string(name_of(impl)) + " softmax";
    const std::vector<float> x = ch04::reference::random_logits(
        static_cast<std::size_t>(s.rows) * s.cols, "ch04/" + what + "/" + shape_name(s));
    const std::vector<float> y = run_softmax(impl, x, s);
    const std::string failure =
        check_softmax(x, y, softmax_rows(x, s.rows, s.cols), s.rows, s.cols, what);
    if (!failure.empty()) FAIL_CHECK(failure);
  }
}

// Short rows (a warp or part of one per row), medium rows (a block per row; more rows than
// SMs), long rows (split across blocks), and the counts that are not multiples of 4, 32 or
// a block: 1 column, 1 row, 4096 +- 1, an LLM vocabulary, a row too long for shared memory,
// and more long rows than one launch of a split kernel holds (32x151936: taken in batches).
const std::vector<Shape> kShapes = {
    {1, 1},      {1, 2},       {3, 1},      {2, 3},       {5, 7},       {4, 31},
    {33, 32},    {17, 33},     {64, 100},   {129, 128},   {7, 255},     {300, 257},
    {9, 513},    {65, 1000},   {32, 1024},  {5, 1025},    {100, 2047},  {33, 4096},
    {3, 4097},   {8, 8192},    {200, 6000}, {200, 6001},  {2, 16384},   {1, 16385},
    {20000, 3},  {70000, 1},   {64, 32000}, {1, 151936},  {16, 151936}, {3, 151937},
    {1, 700001}, {2, 1000000}, {512, 4096}, {4096, 257}, {32, 151936}};

TEST_CASE("fused softmax matches the double reference on every shape") {
  WB_REQUIRE_GPU();
  check_random_shapes(Impl::Fused, kShapes);
}

TEST_CASE("unfused softmax matches the double reference on every shape") {
  WB_REQUIRE_GPU();
  check_random_shapes(Impl::Unfused, kShapes);
}

// Launch patterns a real program has: many calls queued on one stream without a wait, two
// streams at once, and a call captured into a CUDA graph and replayed on new inputs. Any
// correct implementation passes; they catch state shared between calls that should not
// be (the reference's long-row blocks meet through slots in global memory: slots shared by
// two streams, an epoch that repeats, or a graph replaying a stale epoch would fail here).
struct Problem {
  Shape shape;
  std::size_t count = static_cast<std::size_t>(shape.rows) * shape.cols;
  wb::DeviceBuffer<float> x{count}, y{count};
  std::vector<float> x_host;

  void upload_fresh(const std::string& label, cudaStream_t stream) {
    x_host = ch04::reference::random_logits(count, label);
    WB_CUDA(cudaMemcpyAsync(x.data(), x_host.data(), count * sizeof(float),
                            cudaMemcpyHostToDevice, stream));
    y.poison(stream);
  }
  void launch(cudaStream_t stream) {
    ch04::softmax_fused(x.data(), y.data(), shape.rows, shape.cols, stream);
  }
  void check(const std::string& what) {
    const std::vector<float> got = y.download();
    const std::string failure = check_softmax(
        x_host, got, softmax_rows(x_host, shape.rows, shape.cols), shape.rows, shape.cols,
        "fused softmax (" + what + ", " + shape_name(shape) + ")");
    if (!failure.empty()) FAIL_CHECK(failure);
  }
};

std::vector<Problem> make_problems(Shape shape, int how_many) {
  std::vector<Problem> problems;
  for (int i = 0; i < how_many; ++i) problems.push_back(Problem{shape});
  return problems;
}

struct OwnedStream {
  cudaStream_t s = nullptr;
  OwnedStream() { WB_CUDA(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking)); }
  ~OwnedStream() {
    cudaStreamSynchronize(s);
    cudaStreamDestroy(s);
  }
};

const std::vector<Shape> kLaunchPatternShapes = {{1, 151936}, {16, 151936}, {3, 20000}};

TEST_CASE("fused softmax: calls queued back to back on one stream") {
  WB_REQUIRE_GPU();
  for (const Shape shape : kLaunchPatternShapes) {
    OwnedStream stream;
    std::vector<Problem> problems = make_problems(shape, 4);
    // Four inputs, then four launches with no wait between them.
    for (std::size_t i = 0; i < problems.size(); ++i)
      problems[i].upload_fresh("ch04/back-to-back/" + std::to_string(i) + "/" + shape_name(shape),
                               stream.s);
    for (Problem& p : problems) p.launch(stream.s);
    WB_CUDA(cudaStreamSynchronize(stream.s));
    for (Problem& p : problems) p.check("4 calls back to back on one stream");
  }
}

TEST_CASE("fused softmax: two streams at once") {
  WB_REQUIRE_GPU();
  for (const Shape shape : kLaunchPatternShapes) {
    OwnedStream a, b;
    std::vector<Problem> on_a = make_problems(shape, 3), on_b = make_problems(shape, 3);
    for (std::size_t i = 0; i < on_a.size(); ++i) {
      on_a[i].upload_fresh("ch04/two-streams/a" + std::to_string(i), a.s);
      on_b[i].upload_fresh("ch04/two-streams/b" + std::to_string(i), b.s);
    }
    for (std::size_t i = 0; i < on_a.size(); ++i) {  // interleaved, so the launches overlap
      on_a[i].launch(a.s);
      on_b[i].launch(b.s);
    }
    WB_CUDA(cudaStreamSynchronize(a.s));
    WB_CUDA(cudaStreamSynchronize(b.s));
    for (Problem& p : on_a) p.check("stream A of two running at once");
    for (Problem& p : on_b) p.check("stream B of two running at once");
  }
}

TEST_CASE("fused softmax: captured into a CUDA graph and replayed on new inputs") {
  WB_REQUIRE_GPU();
  for (const Shape shape : kLaunchPatternShapes) {
    OwnedStream stream;
    Problem p{shape};
    cudaGraph_t graph = nullptr;
    WB_CUDA(cudaStreamBeginCapture(stream.s, cudaStreamCaptureModeThreadLocal));
    try {
      p.launch(stream.s);
    } catch (...) {
      cudaStreamEndCapture(stream.s, &graph);
      if (graph) cudaGraphDestroy(graph);
      throw;
    }
    WB_CUDA(cudaStreamEndCapture(stream.s, &graph));
    cudaGraphExec_t exec = nullptr;
    WB_CUDA(cudaGraphInstantiate(&exec, graph, 0));
    for (int replay = 0; replay < 3; ++replay) {
      p.upload_fresh("ch04/graph/" + std::to_string(replay) + "/" + shape_name(shape), stream.s);
      WB_CUDA(cudaGraphLaunch(exec, stream.s));
      WB_CUDA(cudaStreamSynchronize(stream.s));
      p.check("CUDA graph replay " + std::to_string(replay + 1));
    }
    cudaGraphExecDestroy(exec);
    cudaGraphDestroy(graph);
  }
}

// Rows of logits in +-1e4 (exp overflows without the max subtracted), masked (-inf)
// entries, one finite entry, and all -inf (NaN by definition); see reference::edge_logits.
// Long rows come few (4: a row may get a block per SM), more (10: several blocks of
// different rows share an SM) and more than one launch holds (33: batches of rows), since a
// kernel may pick its shape from the row count.
const std::vector<Shape> kEdgeShapes = {{7, 1},      {11, 5},     {9, 37},     {12, 1000},
                                        {10, 1024},  {140, 4100}, {10, 5000},  {4, 151936},
                                        {10, 151936}, {33, 151936}, {6, 700000}, {5, 700001}};

void check_edge_rows(Impl impl) {
  for (const Shape s : kEdgeShapes) {
    const std::string what =
        std::string(name_of(impl)) + " softmax on edge rows (logits of +-1e4, -inf entries)";
    const std::vector<float> x =
        ch04::reference::edge_logits(s.rows, s.cols, "ch04/edge/" + shape_name(s));
    const std::vector<float> y = run_softmax(impl, x, s);
    const std::string failure =
        check_softmax(x, y, softmax_rows(x, s.rows, s.cols), s.rows, s.cols, what);
    if (!failure.empty()) FAIL_CHECK(failure);
  }
}

TEST_CASE("fused softmax: logits of +-1e4, -inf entries, all -inf rows") {
  WB_REQUIRE_GPU();
  check_edge_rows(Impl::Fused);
}

TEST_CASE("unfused softmax: logits of +-1e4, -inf entries, all -inf rows") {
  WB_REQUIRE_GPU();
  check_edge_rows(Impl::Unfused);
}

TEST_CASE("softmax of views that start mid-vector (x and y not 16-byte aligned)") {
  WB_REQUIRE_GPU();
  for (const Impl impl : {Impl::Fused, Impl::Unfused}) {
    for (const Shape s : {Shape{9, 4096}, Shape{300, 1000}, Shape{3, 40000}}) {
      const std::string what =
          std::string(name_of(impl)) + " softmax of a view at x + 1 (not 16-byte aligned)";
      const std::vector<float> x = ch04::reference::random_logits(
          static_cast<std::size_t>(s.rows) * s.cols, "ch04/view/" + shape_name(s));
      const std::vector<float> y = run_softmax(impl, x, s, /*offset=*/1);
      const std::string failure =
          check_softmax(x, y, softmax_rows(x, s.rows, s.cols), s.rows, s.cols, what);
      if (!failure.empty()) FAIL_CHECK(failure);
    }
  }
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
                  "ch04 " << what << ": the error should name '" << needle
                          << "', got: " << message);
    return;
  }
  FAIL_CHECK("ch04 " << what << ": expected std::invalid_argument, nothing was thrown\n"
             << "hint: keep the check_softmax_args(...) line at the top of each entry point");
}

TEST_CASE("bad arguments are rejected with a message that names them") {
  WB_REQUIRE_GPU();
  wb::DeviceBuffer<float> x(8), y(8), row_max(2), row_sum(2);
  // A valid call first: a starter's NotImplemented surfaces here, as "to do".
  ch04::softmax_fused(x.data(), y.data(), 2, 4, nullptr);
  ch04::softmax_unfused(x.data(), y.data(), row_max.data(), row_sum.data(), 2, 4, nullptr);
  WB_CUDA(cudaDeviceSynchronize());

  expect_invalid_argument([&] { ch04::softmax_fused(x.data(), y.data(), -1, 4, nullptr); },
                          "rows", "softmax_fused(rows = -1)");
  expect_invalid_argument([&] { ch04::softmax_fused(x.data(), y.data(), 2, 0, nullptr); },
                          "cols", "softmax_fused(cols = 0)");
  expect_invalid_argument([&] { ch04::softmax_fused(nullptr, y.data(), 2, 4, nullptr); },
                          "null", "softmax_fused(x = nullptr)");
  expect_invalid_argument(
      [&] {
        ch04::softmax_unfused(x.data(), y.data(), row_max.data(), row_sum.data(), 2, -3, nullptr);
      },
      "cols", "softmax_unfused(cols = -3)");
  // An empty matrix is not an error: nothing to do.
  ch04::softmax_fused(x.data(), y.data(), 0, 4, nullptr);
  WB_CUDA(cudaDeviceSynchronize());
}

}  // namespace
