// Chapter 04 correctness: the unfused and fused softmax against a double-precision CPU
// reference, on fresh random logits (seeded: WB_SEED reproduces a run), with y (and the
// unfused intermediates) filled with NaN before each call so that an element never written
// cannot pass, on every shape of parallelism the row length calls for.
#include <cuda_runtime.h>

#include <algorithm>
#include <bit>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <exception>
#include <functional>
#include <limits>
#include <memory>
#include <random>
#include <sstream>
#include <utility>
#include <stdexcept>
#include <string>
#include <vector>

#include "../lib/captured_graph.hpp"
#include "../lib/kernel_coverage_test.hpp"
#include "../lib/owned_stream.hpp"
#include "../lib/enqueue_only.hpp"
#include "../lib/hashed_fill.cuh"
#include "../lib/poisoned_shared_memory.cuh"
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

// Runs one softmax on the GPU and returns y. x starts `x_offset` floats and y `y_offset`
// floats past the start of their allocations (an offset of 1 makes a view that is not
// 16-byte aligned; the two are chosen independently). Every buffer sits between guard bands:
// a store past the end of y, row_max or row_sum fails the test, and so does a change to x.
std::vector<float> run_softmax(Impl impl, const std::vector<float>& x, Shape s,
                               std::size_t x_offset = 0, std::size_t y_offset = 0) {
  const std::size_t count = x.size();
  wb::GuardedBuffer<float> x_buf(count + x_offset), y_buf(count + y_offset);
  wb::GuardedBuffer<float> row_max(s.rows), row_sum(s.rows);
  cudaStream_t stream = nullptr;
  WB_CUDA(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  struct StreamGuard {
    cudaStream_t s;
    ~StreamGuard() { cudaStreamDestroy(s); }
  } guard{stream};

  // On the work's stream: a cudaMemcpy from pageable memory may return before its last bytes
  // land, and nothing orders it before work on a non-blocking stream (the softmax would then
  // read the guard buffer's NaN poison now and then: a verdict that depends on the load).
  WB_CUDA(cudaMemcpyAsync(x_buf.data() + x_offset, x.data(), count * sizeof(float),
                          cudaMemcpyHostToDevice, stream));
  y_buf.poison(stream);
  row_max.poison(stream);  // the intermediates start as garbage, too
  row_sum.poison(stream);
  wb::testing::poison_shared_memory(stream);  // a shared read before its write gets 0xFF bytes
  if (impl == Impl::Fused)
    ch04::softmax_fused(x_buf.data() + x_offset, y_buf.data() + y_offset, s.rows, s.cols,
                        stream);
  else
    ch04::softmax_unfused(x_buf.data() + x_offset, y_buf.data() + y_offset, row_max.data(),
                          row_sum.data(), s.rows, s.cols, stream);
  // Read back on the same (non-blocking) stream: work that escaped it races with this copy.
  std::vector<float> y(count);
  WB_CUDA(cudaMemcpyAsync(y.data(), y_buf.data() + y_offset, count * sizeof(float),
                          cudaMemcpyDeviceToHost, stream));
  WB_CUDA(cudaStreamSynchronize(stream));
  check_no_overrun(y_buf, "y", impl, s);
  check_input_unchanged(x_buf, x_offset, x, impl, s);
  if (impl == Impl::Unfused) {
    check_no_overrun(row_max, "row_max", impl, s);
    check_no_overrun(row_sum, "row_sum", impl, s);
  }
  return y;
}

// The first line of an exception's message: a CudaError carries a generic "hint:" line of
// its own, and the test's hint (the rule this case probes) must be the first one.
std::string first_line(const std::exception& e) {
  const std::string text = e.what();
  return text.substr(0, text.find('\n'));
}

std::string offsets_name(std::size_t x_offset, std::size_t y_offset) {
  const auto view = [](const char* name, std::size_t offset) {
    return std::string(name) + " + " + std::to_string(offset) +
           (offset % 4 == 0 ? " (16-byte aligned)" : " (not 16-byte aligned)");
  };
  return view("x", x_offset) + ", " + view("y", y_offset);
}

// A call that throws (a CUDA error from a launch or a fault, a logic_error) fails the test
// with the shape, the views and the rule the error points at, instead of ending the test
// case with a bare exception.
std::string explain_error(const std::exception& e, Impl impl, Shape s, std::size_t x_offset,
                          std::size_t y_offset) {
  const std::string error = first_line(e);
  std::ostringstream m;
  m << "ch04 " << name_of(impl) << " softmax, " << shape_name(s) << ", "
    << offsets_name(x_offset, y_offset) << ", seed " << wb::base_seed()
    << ": the call failed: " << error << "\n";
  if (error.find("misaligned") != std::string::npos)
    m << "rule: x and y may be any float pointers, their alignments chosen independently, and "
         "cols need not be a multiple of 4.\nhint: a float4 access needs its address 16-byte "
         "aligned: take the vector path only when x AND y are 16-byte aligned AND cols % 4 == 0 "
         "(otherwise row r starts at r * cols floats, off the 16-byte grid); else use scalars.";
  else if ((error.find("configuration") != std::string::npos ||
            error.find("invalid argument") != std::string::npos) && s.rows > 65535)
    m << "rule: any number of rows: this matrix has more rows (" << s.rows
      << ") than a grid's y dimension holds (65535).\nhint: gridDim.y and gridDim.z are at most "
         "65535; put the rows on gridDim.x (up to 2^31 - 1 blocks) or loop over rows.";
  else if (error.find("illegal") != std::string::npos || error.find("out of bounds") != std::string::npos)
    m << "rule: read and write only your own elements.\nhint: guard every load and every store "
         "with the row and column bounds, and compute row * cols in 64 bits (size_t).";
  else
    m << "hint: the entry points must enqueue valid launches for any shape.";
  return m.str();
}

std::vector<float> run_softmax_checked(Impl impl, const std::vector<float>& x, Shape s,
                                       std::size_t x_offset, std::size_t y_offset, bool* ok) {
  *ok = false;
  try {
    std::vector<float> y = run_softmax(impl, x, s, x_offset, y_offset);
    *ok = true;
    return y;
  } catch (const wb::NotImplemented&) {
    throw;
  } catch (const std::exception& e) {
    FAIL_CHECK(explain_error(e, impl, s, x_offset, y_offset));
    (void)cudaGetLastError();  // a launch error is not sticky: the next shapes still run
  }
  return {};
}

// One shape and one data set: "" when the output is right, else the failure (already
// reported).
bool check_one(Impl impl, Shape s, bool edge, std::size_t x_offset = 0, std::size_t y_offset = 0) {
  const std::string data = edge ? "edge rows (logits of +-1e4, -inf entries)" : "random logits";
  const std::string what = std::string(name_of(impl)) + " softmax on " + data +
                           (x_offset || y_offset ? ", " + offsets_name(x_offset, y_offset) : "");
  const std::size_t count = static_cast<std::size_t>(s.rows) * s.cols;
  const std::string label = std::string("ch04/") + (edge ? "edge/" : "random/") + shape_name(s);
  const std::vector<float> x = edge ? ch04::reference::edge_logits(s.rows, s.cols, label)
                                    : ch04::reference::random_logits(count, label);
  bool ran = false;
  const std::vector<float> y = run_softmax_checked(impl, x, s, x_offset, y_offset, &ran);
  if (!ran) return false;
  const std::string failure =
      check_softmax(x, y, softmax_rows(x, s.rows, s.cols), s.rows, s.cols, what);
  if (failure.empty()) return true;
  FAIL_CHECK(failure);
  return false;
}

// Runs every shape with one data set. When some shapes fail and others pass, says so: the
// mistake is then in one dispatch path (or one range of shapes), not in the formula.
void check_shapes(Impl impl, const std::vector<Shape>& shapes, bool edge) {
  std::vector<std::string> failed, passed;
  for (const Shape s : shapes) (check_one(impl, s, edge) ? passed : failed).push_back(shape_name(s));
  if (failed.empty() || passed.empty()) return;
  std::ostringstream m;
  m << "ch04 " << name_of(impl) << " softmax, seed " << wb::base_seed() << ": the "
    << (edge ? "edge rows (logits of +-1e4, -inf entries, all -inf rows)" : "random logits")
    << " fail on some shapes and pass on others. Failed:";
  for (const auto& f : failed) m << " " << f;
  m << "; passed:";
  for (const auto& p : passed) m << " " << p;
  m << ".\nrule: every path handles every input: a kernel chosen for short rows, long rows, "
       "many or few rows must all subtract the max, mask -inf and return NaN for all -inf "
       "rows.\nhint: compare the failing shapes with the passing ones: a mistake in one branch "
       "of a dispatch, in the tail of a row or in the last block fails a pattern of shapes (a "
       "formula mistake fails every shape that has the rows it needs: the all -inf rows come "
       "from 4 rows on).";
  FAIL_CHECK(m.str());
}

int sm_count() {
  int device = 0, count = 0;
  WB_CUDA(cudaGetDevice(&device));
  WB_CUDA(cudaDeviceGetAttribute(&count, cudaDevAttrMultiProcessorCount, device));
  return count;
}

// The shapes every implementation must handle, whatever its design: 1 column, 1 row, counts
// that are not multiples of 4, 32 or a block, more rows than a grid's y dimension holds,
// an LLM vocabulary, a row too long for shared memory. Each row length comes twice: cols % 4
// == 0 (a kernel may take 16-byte accesses) and cols % 4 != 0 (it may not).
//   short rows:  every power-of-two bucket from 1 to 1024 columns;
//   medium rows: up to 16384 columns, with few rows and with a row per SM;
//   long rows:   1 to 33 rows of 8192 to 1000000 columns (few rows of an LLM's vocabulary
//                leave SMs idle with a block per row: a kernel may split them, batch them).
std::vector<Shape> every_shape() {
  const int sms = sm_count();
  std::vector<Shape> shapes = {
      // short rows, cols % 4 == 0 and != 0
      {1, 1}, {3, 1}, {70000, 1}, {1, 2}, {2, 3}, {37, 4}, {5, 7}, {33, 8}, {6, 13}, {4, 16},
      {17, 31}, {11, 127},
      {33, 32}, {17, 33}, {9, 64}, {64, 100}, {129, 128}, {7, 255}, {40, 256}, {300, 257},
      {9, 512}, {9, 513}, {65, 1000}, {32, 1024}, {20000, 3}, {4096, 257},
      // medium rows: a block per row, few rows and a row per SM
      {5, 1025}, {3, 2048}, {100, 2047}, {7, 4095}, {33, 4096}, {3, 4097}, {512, 4096}, {200, 6001},
      {2, 8192}, {3, 8191}, {sms, 8192}, {sms + 1, 8191}, {2, 16384}, {1, 16385},
      {sms, 16384}, {sms + 1, 16383},
      // long rows: few of them, some, and more than a row per SM's share
      {8, 32000}, {8, 32001}, {64, 32000}, {1, 151936}, {3, 151937}, {10, 151936},
      {10, 151937}, {16, 151936}, {16, 151937}, {32, 151936}, {33, 151937}, {1, 400000},
      {1, 400001}, {1, 700000}, {1, 700001}, {6, 700000}, {5, 700001}, {2, 1000000}};
  if (wb::coverage::quick()) {  // under compute-sanitizer: the short and medium rows, and
    std::vector<Shape> quick;   // one long-row shape of each kind
    for (const Shape s : shapes)
      if (static_cast<std::size_t>(s.rows) * s.cols <= (1u << 21) || s.rows <= 16) quick.push_back(s);
    return quick;
  }
  return shapes;
}

// The unfused softmax has one design in every version seen so far; its own subset.
std::vector<Shape> unfused_shapes() {
  std::vector<Shape> shapes;
  for (const Shape s : every_shape())
    if (static_cast<std::size_t>(s.rows) * s.cols <= 700001 || s.rows == 16) shapes.push_back(s);
  return shapes;
}

TEST_CASE("fused softmax matches the double reference on every shape") {
  WB_REQUIRE_GPU();
  check_shapes(Impl::Fused, every_shape(), /*edge=*/false);
}

TEST_CASE("unfused softmax matches the double reference on every shape") {
  WB_REQUIRE_GPU();
  check_shapes(Impl::Unfused, unfused_shapes(), /*edge=*/false);
}

// Rows of logits in +-1e4 (exp overflows without the max subtracted), masked (-inf)
// entries, one finite entry, and all -inf (NaN by definition); see reference::edge_logits.
// Through every shape above: a kernel may pick its design from the shape, and every design
// must handle them.
TEST_CASE("fused softmax: logits of +-1e4, -inf entries, all -inf rows, on every shape") {
  WB_REQUIRE_GPU();
  check_shapes(Impl::Fused, every_shape(), /*edge=*/true);
}

TEST_CASE("unfused softmax: logits of +-1e4, -inf entries, all -inf rows, on every shape") {
  WB_REQUIRE_GPU();
  check_shapes(Impl::Unfused, unfused_shapes(), /*edge=*/true);
}

// Finite logits of any size, up to FLT_MAX (3.4e38): the softmax is defined, and x - max <= 0
// (the subtraction the header asks for, done first) keeps every exp in [0, 1]. At this size a
// row's distribution is one-hot, or shared between equal maxima. Row r is of kind r % 3:
//   0: zeros, and 3e38 in one random column (probability 1 there);
//   1: uniform in (-3.4e38, 3.4e38), some entries -inf;
//   2: -3e38 everywhere except 3e38 in 3 random columns (ties: 1/3 each, or 1/2, or 1).
std::vector<float> huge_logits(Shape s, const std::string& label) {
  std::mt19937_64 rng = wb::rng_for(label);
  std::uniform_real_distribution<float> unit(-1.0f, 1.0f);
  std::uniform_int_distribution<int> column(0, s.cols - 1);
  std::vector<float> x(static_cast<std::size_t>(s.rows) * s.cols);
  for (int r = 0; r < s.rows; ++r) {
    float* row = x.data() + static_cast<std::size_t>(r) * s.cols;
    switch (r % 3) {
      case 0:
        std::fill(row, row + s.cols, 0.0f);
        row[column(rng)] = 3e38f;
        break;
      case 1:
        for (int c = 0; c < s.cols; ++c)
          row[c] = (rng() % 8 == 0) ? -std::numeric_limits<float>::infinity() : 3.4e38f * unit(rng);
        row[column(rng)] = 3e38f;  // at least one finite entry
        break;
      case 2:
        std::fill(row, row + s.cols, -3e38f);
        for (int k = 0; k < 3; ++k) row[column(rng)] = 3e38f;
        break;
    }
  }
  return x;
}

TEST_CASE("softmax of finite logits up to 3.4e38 (subtract the max before anything else)") {
  WB_REQUIRE_GPU();
  for (const Impl impl : {Impl::Fused, Impl::Unfused})
    for (const Shape s : {Shape{3, 7}, Shape{6, 1000}, Shape{3, 8193}, Shape{3, 20001}, Shape{2, 151936}}) {
      const std::vector<float> x = huge_logits(s, "ch04/huge/" + shape_name(s));
      bool ran = false;
      const std::vector<float> y = run_softmax_checked(impl, x, s, 0, 0, &ran);
      if (!ran) continue;
      const std::string failure = check_softmax(x, y, softmax_rows(x, s.rows, s.cols), s.rows, s.cols,
                                                std::string(name_of(impl)) + " softmax on logits up to 3.4e38");
      if (failure.empty()) continue;
      FAIL_CHECK("rule: finite logits of any size (the header's +-1e4 is an example, not a limit): the row "
                 "max is subtracted before anything else, x - max <= 0, so no step overflows. Rows of "
                 "zeros with one 3e38, of logits up to 3.4e38 in size, of -3e38 with 3e38 tied in three "
                 "columns (one-hot, or shared between the ties).\nhint: compute exp(x - max) from x - max; "
                 "a form that scales first, exp2(x * log2(e) - max * log2(e)), overflows max * log2(e) to "
                 "inf once max > FLT_MAX / log2(e) = 2.36e38 (and loses x - max to rounding long before: "
                 "max * log2(e) is off by up to half an ulp, 2^103 at 3e38).\n"
                 << failure);
    }
}

// Masked logits: softmax.cuh promises an entry of -inf probability *exactly* 0. The comparison
// above has an absolute tolerance of 1e-9, so a masked entry that comes out as a tiny number
// (exp of a clamped exponent, exp(-87) ~ 1.6e-38; an epsilon added somewhere) passes it; here
// every masked output must be 0. Every row is masked: even rows have about half their entries
// -inf (the first and last column always), odd rows all but one. Through one shape of each
// path: short rows, every register bucket, a tail, long rows, few and many of them.
std::vector<float> masked_logits(Shape s, const std::string& label) {
  std::mt19937_64 rng = wb::rng_for(label);
  std::normal_distribution<float> normal(0.0f, 4.0f);
  std::uniform_int_distribution<int> column(0, s.cols - 1);
  const float neg_inf = -std::numeric_limits<float>::infinity();
  std::vector<float> x(static_cast<std::size_t>(s.rows) * s.cols);
  for (int r = 0; r < s.rows; ++r) {
    float* row = x.data() + static_cast<std::size_t>(r) * s.cols;
    for (int c = 0; c < s.cols; ++c) row[c] = (r % 2 == 0 && (rng() & 1)) ? normal(rng) : neg_inf;
    if (r % 2 == 0) row[0] = row[s.cols - 1] = neg_inf;
    row[column(rng)] = normal(rng);  // at least one finite entry: a distribution exists
  }
  return x;
}

TEST_CASE("softmax: a masked (-inf) logit gets probability exactly 0, not a tiny number") {
  WB_REQUIRE_GPU();
  const std::vector<Shape> shapes = {{3, 2},    {6, 13},   {64, 100},  {40, 256},  {9, 513},
                                     {5, 1025}, {3, 2048}, {7, 4095},  {3, 8191},  {2, 8192},
                                     {1, 16385}, {8, 32001}, {3, 151937}, {16, 151936}};
  for (const Impl impl : {Impl::Fused, Impl::Unfused})
    for (const Shape s : shapes) {
      const std::vector<float> x = masked_logits(s, "ch04/masked/" + shape_name(s));
      bool ran = false;
      const std::vector<float> y = run_softmax_checked(impl, x, s, 0, 0, &ran);
      if (!ran) continue;
      const std::string what = std::string(name_of(impl)) + " softmax on masked rows";
      const std::string failure = check_softmax(x, y, softmax_rows(x, s.rows, s.cols), s.rows, s.cols, what);
      if (!failure.empty()) {
        FAIL_CHECK(failure);
        break;
      }
      std::size_t nonzero = 0, first = 0;
      for (std::size_t i = 0; i < x.size(); ++i)
        if (std::isinf(x[i]) && x[i] < 0 && y[i] != 0.0f && nonzero++ == 0) first = i;
      if (nonzero == 0) continue;
      FAIL_CHECK("ch04 " << name_of(impl) << " softmax, " << shape_name(s) << ", seed " << wb::base_seed()
                 << ": rule: a masked logit (-inf) gets probability exactly 0 (softmax.cuh), not merely a "
                    "tiny number. "
                 << nonzero << " masked outputs are not 0; the first is y[" << first / s.cols << ", "
                 << first % s.cols << "] = " << y[first] << " where x is -inf (rows with some masked "
                 << "entries and at least one finite one; every other output is within tolerance).\nhint: "
                    "compute exp(x - max) from x - max as it is: exp(-inf) is exactly 0. A clamp of the "
                    "exponent (max(x - max, -87), to keep exp off its subnormal path), an epsilon in the sum "
                    "or a floor on the output turns a mask into a tiny probability, which the 1e-9 tolerance "
                    "of the other tests hides but a mask (causal attention, banned tokens) must not have.");
      break;
    }
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

  // Every other input is the edge rows (+-1e4, -inf entries, all -inf rows): the paths a
  // launch pattern takes (graph capture, back to back) must handle them too.
  void upload_fresh(const std::string& label, cudaStream_t stream, bool edge) {
    x_host = edge ? ch04::reference::edge_logits(shape.rows, shape.cols, label)
                  : ch04::reference::random_logits(count, label);
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

using wb::testing::OwnedStream;

// Long rows with cols % 4 == 0 and != 0, and short rows.
const std::vector<Shape> kLaunchPatternShapes = {{1, 151936}, {16, 151936}, {3, 20001}, {300, 100}};

TEST_CASE("fused softmax: calls queued back to back on one stream") {
  WB_REQUIRE_GPU();
  for (const Shape shape : kLaunchPatternShapes) {
    OwnedStream stream;
    std::vector<Problem> problems = make_problems(shape, 4);
    // Four inputs, then four launches with no wait between them.
    for (std::size_t i = 0; i < problems.size(); ++i)
      problems[i].upload_fresh("ch04/back-to-back/" + std::to_string(i) + "/" + shape_name(shape),
                               stream.s, i % 2 == 1);
    for (Problem& p : problems) p.launch(stream.s);
    WB_CUDA(cudaStreamSynchronize(stream.s));
    for (Problem& p : problems) p.check("4 calls back to back on one stream");
  }
}

// A decode loop: the same x, y (and intermediates) and stream on every call, with x rewritten
// on the stream in between (by a kernel, as the model's previous layer does), nothing waited
// for. Each call must compute y from the x of its turn: the last y is the softmax of the last
// x. At the timed shape and a vocabulary row.
TEST_CASE("softmax: the same buffers called back to back, x rewritten on the stream between calls") {
  WB_REQUIRE_GPU();
  constexpr int kCalls = 10;
  for (const Impl impl : {Impl::Fused, Impl::Unfused})
    for (const Shape s : {Shape{4096, 4096}, Shape{1, 151936}}) {
      if (wb::coverage::quick() && s.rows > 16) continue;  // under compute-sanitizer: the long row only
      const std::size_t count = static_cast<std::size_t>(s.rows) * s.cols;
      wb::DeviceBuffer<float> x(count);
      wb::GuardedBuffer<float> y(count), row_max(s.rows), row_sum(s.rows);
      WB_CUDA(cudaDeviceSynchronize());  // their poison (on the legacy stream) is in before the calls
      OwnedStream stream;
      for (int call = 0; call < kCalls; ++call) {
        wb::testing::fill_hashed_uniform<<<1024, 256, 0, stream.s>>>(x.data(), count, wb::base_seed() + call,
                                                                   -8.0f, 8.0f);
        WB_CHECK_LAUNCH("fill_hashed_uniform");
        if (impl == Impl::Fused)
          ch04::softmax_fused(x.data(), y.data(), s.rows, s.cols, stream.s);
        else
          ch04::softmax_unfused(x.data(), y.data(), row_max.data(), row_sum.data(), s.rows, s.cols, stream.s);
      }
      WB_CUDA(cudaStreamSynchronize(stream.s));
      for (const int r : {0, s.rows / 3, s.rows - 1}) {
        const std::size_t offset = static_cast<std::size_t>(r) * s.cols;
        std::vector<float> x_row(s.cols), y_row(s.cols);
        WB_CUDA(cudaMemcpy(x_row.data(), x.data() + offset, s.cols * sizeof(float), cudaMemcpyDeviceToHost));
        WB_CUDA(cudaMemcpy(y_row.data(), y.data() + offset, s.cols * sizeof(float), cudaMemcpyDeviceToHost));
        const std::string failure = check_softmax(
            x_row, y_row, softmax_rows(x_row, 1, s.cols), 1, s.cols,
            std::string(name_of(impl)) + " softmax, row " + std::to_string(r) + " of " + shape_name(s) +
                " after " + std::to_string(kCalls) + " calls on the same buffers");
        if (failure.empty()) continue;
        FAIL_CHECK("rule: every call computes all of y from the x it is given. " << kCalls << " calls with the "
                   "same x, y and stream, x rewritten by a kernel on the stream before each, queued without a "
                   "wait (a decode loop): the last y is not the softmax of the last x.\nhint: keep no state "
                   "between calls: the same pointers and shape do not mean the same logits (x changes in "
                   "place), so never skip a call or return a remembered answer.\n"
                   << failure);
        break;
      }
    }
}

// Both versions on x at the timed shape s (4096x4096), each against the double softmax: a wrong
// answer fails the case with `rows` (what x holds), the rule that the timed shape is computed like
// any other, `hint`, and what came out wrong.
void check_at_timed_shape(const std::vector<float>& x, Shape s, const std::string& rows, const std::string& why,
                          const std::string& hint) {
  const std::vector<double> expected = softmax_rows(x, s.rows, s.cols);
  for (const Impl impl : {Impl::Fused, Impl::Unfused}) {
    bool ran = false;
    const std::vector<float> y = run_softmax_checked(impl, x, s, 0, 0, &ran);
    if (!ran) continue;
    const std::string failure = check_softmax(x, y, expected, s.rows, s.cols,
                                              std::string(name_of(impl)) + " softmax on " + rows + " at the timed shape");
    if (failure.empty()) continue;
    FAIL_CHECK("ch04 " << name_of(impl) << " softmax, " << shape_name(s) << ", seed " << wb::base_seed()
               << ": rule: the shape the timing tests time is computed like any other. " << why << "\nhint: "
               << hint << "\n" << failure);
  }
}

// The timed shape itself, 4096x4096, on the edge rows. The shapes above have 33x4096 and
// 512x4096 but not this one, and the calls that do run it (the decode loop above, the timing
// tests' re-check) give it small logits (uniform in [-8, 8), normal with sd 4), where exp(x)
// cannot overflow even without the max subtracted: a branch taken only at the timed shape that
// drops a step there (the max, to save a reduction) would pass all of them.
TEST_CASE("softmax at the timed shape, 4096x4096: logits of +-1e4, -inf entries, all -inf rows") {
  WB_REQUIRE_GPU();
  const Shape s{4096, 4096};
  if (wb::coverage::quick()) {
    wb::testing::mark_skipped("skipped: the 4096x4096 edge rows are left out under compute-sanitizer / WB_QUICK");
    return;
  }
  check_at_timed_shape(
      ch04::reference::edge_logits(s.rows, s.cols, "ch04/timed-shape/" + shape_name(s)), s, "edge rows",
      "Edge rows (logits of +-1e4, -inf entries, all -inf rows) come out wrong at exactly 4096x4096, the timed "
      "shape, whose timed inputs are small logits (normal, sd 4) that hide a missing step.",
      "let the shape choose only how the work is laid out (registers, a warp or a block per row), never which "
      "steps run: every path subtracts the row max before exp (exp(1e4) is inf), gives -inf entries 0 and an all "
      "-inf row NaN.");
}

// The timed shape again, on the logits up to 3.4e38 of the test above (which runs five other
// shapes): a branch taken only at 4096x4096 that computes the exponent in a faster form there,
// exp2(x * log2(e) - max * log2(e)) as one FFMA, gets the small timed logits and the +-1e4 edge
// rows right (the constant max * log2(e) cancels in the division) and is inf - inf = NaN here.
TEST_CASE("softmax at the timed shape, 4096x4096: finite logits up to 3.4e38") {
  WB_REQUIRE_GPU();
  const Shape s{4096, 4096};
  if (wb::coverage::quick()) {
    wb::testing::mark_skipped("skipped: the 4096x4096 logits up to 3.4e38 are left out under compute-sanitizer / WB_QUICK");
    return;
  }
  check_at_timed_shape(
      huge_logits(s, "ch04/timed-shape-huge/" + shape_name(s)), s, "logits up to 3.4e38",
      "Finite logits of any size too: rows of zeros with one 3e38, of logits up to 3.4e38 in size, of -3e38 with "
      "3e38 tied in three columns come out wrong at exactly 4096x4096 (the test of logits up to 3.4e38 checks the "
      "same rows at 3x7, 6x1000, 3x8193, 3x20001 and 2x151936).",
      "let the shape choose only how the work is laid out, never the arithmetic: compute exp(x - max) from x - max "
      "on every path; a form that scales first, exp2(x * log2(e) - max * log2(e)), overflows max * log2(e) to inf "
      "once max > FLT_MAX / log2(e) = 2.36e38.");
}

TEST_CASE("fused softmax: two streams at once") {
  WB_REQUIRE_GPU();
  for (const Shape shape : kLaunchPatternShapes) {
    OwnedStream a, b;
    std::vector<Problem> on_a = make_problems(shape, 3), on_b = make_problems(shape, 3);
    for (std::size_t i = 0; i < on_a.size(); ++i) {
      on_a[i].upload_fresh("ch04/two-streams/a" + std::to_string(i), a.s, i % 2 == 1);
      on_b[i].upload_fresh("ch04/two-streams/b" + std::to_string(i), b.s, i % 2 == 0);
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
      p.upload_fresh("ch04/graph/" + std::to_string(replay) + "/" + shape_name(shape), stream.s,
                     replay % 2 == 1);
      WB_CUDA(cudaGraphLaunch(exec, stream.s));
      WB_CUDA(cudaStreamSynchronize(stream.s));
      p.check("CUDA graph replay " + std::to_string(replay + 1));
    }
    cudaGraphExecDestroy(exec);
    cudaGraphDestroy(graph);
  }
}

// The unfused version's three kernels, captured into a CUDA graph on a blocking stream and
// replayed on new inputs (tests/lib/captured_graph.hpp): one of them launched without the
// stream goes to the legacy default stream, which breaks the capture. The other tests run it
// on non-blocking streams, where such a kernel only races with the others and may win.
TEST_CASE("unfused softmax captured into a CUDA graph: all three kernels on the given stream") {
  WB_REQUIRE_GPU();
  if (wb::debug_sync_enabled()) {
    wb::testing::mark_skipped("skipped: WB_DEBUG_SYNC=1 synchronizes after every launch, which a graph capture forbids");
    return;
  }
  for (const Shape s : {Shape{300, 100}, Shape{16, 151936}}) {
    const std::size_t count = static_cast<std::size_t>(s.rows) * s.cols;
    const std::string what = "ch04 unfused softmax captured into a CUDA graph, " + shape_name(s) + ", seed " +
                             std::to_string(wb::base_seed());
    wb::GuardedBuffer<float> x_buf(count), y_buf(count), row_max(s.rows), row_sum(s.rows);
    WB_CUDA(cudaDeviceSynchronize());  // the buffers' poison (on the legacy stream) is in
    const OwnedStream owned(cudaStreamDefault);  // blocking: a legacy-stream launch breaks the capture
    std::unique_ptr<wb::testing::CapturedGraph> graph;
    try {
      graph = std::make_unique<wb::testing::CapturedGraph>(owned.s, [&](cudaStream_t stream) {
        ch04::softmax_unfused(x_buf.data(), y_buf.data(), row_max.data(), row_sum.data(), s.rows, s.cols, stream);
      });
    } catch (const wb::NotImplemented&) {
      throw;
    } catch (const std::exception& e) {
      FAIL_CHECK(what << ": capturing the call failed: " << first_line(e) << "\n"
                      << wb::testing::kEverythingOnStreamHint);
      return;
    }
    for (int replay = 1; replay <= 2; ++replay) {
      const std::string label = "ch04/unfused-graph/" + std::to_string(replay) + "/" + shape_name(s);
      const std::vector<float> x = replay == 2 ? ch04::reference::edge_logits(s.rows, s.cols, label)
                                               : ch04::reference::random_logits(count, label);
      WB_CUDA(cudaMemcpyAsync(x_buf.data(), x.data(), count * sizeof(float), cudaMemcpyHostToDevice, owned.s));
      y_buf.poison(owned.s);
      row_max.poison(owned.s);
      row_sum.poison(owned.s);
      graph->replay(owned.s);
      std::vector<float> y(count);
      WB_CUDA(cudaMemcpyAsync(y.data(), y_buf.data(), count * sizeof(float), cudaMemcpyDeviceToHost, owned.s));
      WB_CUDA(cudaStreamSynchronize(owned.s));
      const std::string failure = check_softmax(x, y, softmax_rows(x, s.rows, s.cols), s.rows, s.cols,
                                                "unfused softmax, CUDA graph replay " + std::to_string(replay));
      if (!failure.empty()) {
        FAIL_CHECK(what << ": replay " << replay << " is wrong. The graph holds only what the call enqueued "
                           "on `stream`: work that went elsewhere ran once, while the call was captured, and "
                           "not in the replay.\n"
                        << wb::testing::kEverythingOnStreamHint << "\n" << failure);
        return;
      }
    }
  }
}

// softmax.cuh: enqueue on `stream` and return, no synchronization, no allocation, no copies
// (tests/lib/enqueue_only.hpp), on a short, a medium and a long shape, and a tiny one: small
// enough that a CPU shortcut would still give the right values.
TEST_CASE("rule: a call only enqueues work (no allocation, synchronization or host copy; counted with CUPTI)") {
  WB_REQUIRE_GPU();
  for (const Shape s : std::vector<Shape>{{4, 50}, {33, 4096}, {2, 151936}}) {
    const std::size_t count = static_cast<std::size_t>(s.rows) * s.cols;
    wb::DeviceBuffer<float> x(count), y(count), row_max(s.rows), row_sum(s.rows);
    x.upload(ch04::reference::random_logits(count, "ch04/enqueue-only/" + shape_name(s)));
    OwnedStream stream;
    for (const Impl impl : {Impl::Fused, Impl::Unfused}) {
      const std::string broke = wb::testing::enqueue_only_violation([&] {
        if (impl == Impl::Fused)
          ch04::softmax_fused(x.data(), y.data(), s.rows, s.cols, stream.s);
        else
          ch04::softmax_unfused(x.data(), y.data(), row_max.data(), row_sum.data(), s.rows, s.cols, stream.s);
      });
      WB_CUDA(cudaStreamSynchronize(stream.s));
      if (!broke.empty())
        FAIL_CHECK("ch04 " << name_of(impl) << " softmax, " << shape_name(s)
                           << ": rule: enqueue all the work on `stream` and return without waiting: no "
                              "synchronization, no allocation, no copies. Of two calls in a row, one or both "
                           << broke << ".\n" << wb::testing::kEnqueueOnlyHint);
    }
  }
}

// Before the big and faulting cases below: a misaligned float4 access or an illegal address
// is a sticky CUDA error that ends every later test of this process.
TEST_CASE("softmax of views: x and y alignments chosen independently") {
  WB_REQUIRE_GPU();
  // (x offset, y offset) in floats: both off, x aligned with y off, the reverse, and two
  // different misalignments.
  const std::vector<std::pair<std::size_t, std::size_t>> views = {{1, 1}, {0, 1}, {1, 0}, {2, 3},
                                                                  {3, 0}};
  for (const Impl impl : {Impl::Fused, Impl::Unfused})
    for (const auto [x_offset, y_offset] : views)
      for (const Shape s : {Shape{4, 8}, Shape{300, 1000}, Shape{9, 4096}, Shape{3, 40000},
                            Shape{16, 151936}})
        check_one(impl, s, /*edge=*/x_offset == 2, x_offset, y_offset);
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

// ------------------------------------------------------------------------------------------
// Limits a student can hit: more rows than gridDim.y holds, a read past the end of x, more
// than 2^31 elements. Last in the file: each can end in a sticky CUDA error.

TEST_CASE("softmax of more rows than a grid's y dimension holds (an LLM classifier's rows)") {
  WB_REQUIRE_GPU();
  for (const Impl impl : {Impl::Fused, Impl::Unfused})
    for (const Shape s : {Shape{151936, 1}, Shape{128256, 5}, Shape{151936, 64}})
      check_one(impl, s, /*edge=*/s.cols == 5);
}

// x ends exactly where mapped device memory ends (wb::InputAtEnd): reading even one float
// past the last row is an illegal address here, where a guard band would have hidden it.
void check_input_at_end(Impl impl, Shape s) {
  const std::size_t count = static_cast<std::size_t>(s.rows) * s.cols;
  const std::vector<float> x = ch04::reference::edge_logits(s.rows, s.cols, "ch04/at-end/" + shape_name(s));
  std::vector<float> y(count);
  try {
    wb::InputAtEnd x_buf(count);
    x_buf.upload(x);
    wb::GuardedBuffer<float> y_buf(count), row_max(s.rows), row_sum(s.rows);
    if (impl == Impl::Fused)
      ch04::softmax_fused(x_buf.data(), y_buf.data(), s.rows, s.cols, nullptr);
    else
      ch04::softmax_unfused(x_buf.data(), y_buf.data(), row_max.data(), row_sum.data(), s.rows,
                            s.cols, nullptr);
    WB_CUDA(cudaDeviceSynchronize());
    y = y_buf.download();
  } catch (const wb::NotImplemented&) {
    throw;
  } catch (const std::exception& e) {
    FAIL_CHECK("ch04 " << name_of(impl) << " softmax, " << shape_name(s) << ", seed "
               << wb::base_seed() << ": rule: read only your own elements. In this test x ends "
               << "exactly where mapped device memory ends, and the call failed (" << first_line(e)
               << "): the kernel read past the end of x.\nhint: guard every load with the bounds "
               << "(c < cols, row < rows), not only the stores; a float4 load needs all 4 floats "
               << "inside the row, and a thread past the end must not load \"just in case\".");
    return;
  }
  const std::string failure = check_softmax(x, y, softmax_rows(x, s.rows, s.cols), s.rows, s.cols,
                                            std::string(name_of(impl)) + " softmax, x at the end of its allocation");
  if (!failure.empty()) FAIL_CHECK(failure);
}

TEST_CASE("softmax with x at the very end of its allocation (a read past the end faults)") {
  WB_REQUIRE_GPU();
  const int sms = sm_count();
  for (const Impl impl : {Impl::Fused, Impl::Unfused})
    for (const Shape s : {Shape{7, 37}, Shape{3, 1000}, Shape{5, 1001}, Shape{sms + 1, 8191},
                          Shape{2, 151936}, Shape{16, 151937}, Shape{1, 700001}})
      check_input_at_end(impl, s);
}

// How many of y's elements still hold the poison (all bits set), and the first of them.
__global__ void count_unwritten(const float* y, std::size_t count, unsigned long long* how_many,
                                unsigned long long* first) {
  for (std::size_t i = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x; i < count;
       i += static_cast<std::size_t>(gridDim.x) * blockDim.x)
    if (__float_as_uint(y[i]) == 0xFFFFFFFFu) {
      atomicAdd(how_many, 1ull);
      atomicMin(first, static_cast<unsigned long long>(i));
    }
}

// One row of 2^26 columns (256 MiB of logits from fill_hashed_uniform, in [-8, 8)): 65536
// tiles of 1024 columns, one more than a grid's y dimension holds (65535). A kernel that gives each tile of
// a row its own blockIdx.y, with no loop, fails to launch here or leaves the last tiles
// unwritten or undivided. Every column is checked against the row's max and sum in double, to
// 1%: a float sum of 2^26 terms drifts by up to about 2e-3 in a sane order (32 lanes that add
// 2^21 terms each), while a tile never written (NaN) or never divided by the sum is off by far
// more.
void check_long_row(Impl impl) {
  const Shape s{1, 1 << 26};
  const std::size_t count = s.cols;
  constexpr std::size_t kGridYReach = 65535ull * 1024;  // columns 65535 tiles of 1024 cover
  std::ostringstream where;
  where << "ch04 " << name_of(impl) << " softmax, " << shape_name(s)
        << " (a row of 2^26 columns), seed " << wb::base_seed() << ": ";
  const std::string rule =
      "rule: any shape: this row has 2^26 = 67108864 columns, more than 65535 tiles of 1024 "
      "columns cover (" + std::to_string(kGridYReach) + "), and a grid's y dimension is at most "
      "65535.\nhint: with a tile of the row per blockIdx.y, cap gridDim.y at 65535 and loop over "
      "the tiles, for (int c0 = blockIdx.y * kTile; c0 < cols; c0 += gridDim.y * kTile); or let a "
      "block walk the row (c += blockDim.x).";
  std::vector<float> x, y;
  try {
    wb::DeviceBuffer<float> x_buf(count);
    wb::GuardedBuffer<float> y_buf(count), row_max(s.rows), row_sum(s.rows);
    wb::testing::fill_hashed_uniform<<<4096, 256>>>(x_buf.data(), count, wb::base_seed(), -8.0f, 8.0f);
    WB_CHECK_LAUNCH("fill_hashed_uniform");
    if (impl == Impl::Fused)
      ch04::softmax_fused(x_buf.data(), y_buf.data(), s.rows, s.cols, nullptr);
    else
      ch04::softmax_unfused(x_buf.data(), y_buf.data(), row_max.data(), row_sum.data(), s.rows,
                            s.cols, nullptr);
    WB_CUDA(cudaDeviceSynchronize());
    x = x_buf.download();
    y = y_buf.download();
    check_no_overrun(y_buf, "y", impl, s);
  } catch (const wb::NotImplemented&) {
    throw;
  } catch (const std::exception& e) {
    FAIL_CHECK(where.str() << "the call failed: " << first_line(e) << "\n" << rule);
    (void)cudaGetLastError();  // a launch error is not sticky: the next version still runs
    return;
  }
  double max_x = -INFINITY, sum = 0;  // the row's max and sum of exponentials, in double
  for (const float v : x) max_x = std::max(max_x, static_cast<double>(v));
  for (const float v : x) sum += std::exp(v - max_x);
  std::size_t wrong = 0, first = 0;
  for (std::size_t c = 0; c < count; ++c) {
    const double want = std::exp(x[c] - max_x) / sum;
    if (!(std::abs(y[c] - want) <= 1e-2 * want) && wrong++ == 0) first = c;
  }
  if (wrong == 0) return;
  const bool never_written = std::bit_cast<std::uint32_t>(y[first]) == 0xFFFFFFFFu;
  std::ostringstream message;
  message << where.str() << wrong << " of " << count << " outputs are wrong; the first is y[0, "
          << first << "] = " << y[first]
          << (never_written ? " (never written: still the NaN poison)" : "")
          << ", expected " << std::exp(x[first] - max_x) / sum << ".\n";
  if (first >= kGridYReach)  // right up to the reach of 65535 tiles: the grid, not the formula
    message << "Every column before " << kGridYReach << " is right.\n" << rule;
  else
    message << "hint: wrong before column " << kGridYReach << " too, so not (only) the grid's "
               "reach: look at what grows with the row (an int index, a sum over 2^26 terms).";
  FAIL_CHECK(message.str());
}

TEST_CASE("softmax of a row of 2^26 columns (more tiles of 1024 than a grid's y dimension holds)") {
  WB_REQUIRE_GPU();
  if (wb::coverage::quick()) {
    wb::testing::mark_skipped("skipped: the 2^26-column row is left out under compute-sanitizer / WB_QUICK");
    return;
  }
  for (const Impl impl : {Impl::Fused, Impl::Unfused}) check_long_row(impl);
}

// The big cases' run: x filled on the device with logits uniform in [lo, hi)
// (fill_hashed_uniform), `impl` run on it into y (poisoned), and the outputs still holding the
// poison counted: how many, and the first one's index.
struct Unwritten {
  unsigned long long count, first;
};

Unwritten run_on_hashed_logits(Impl impl, Shape s, float lo, float hi, wb::DeviceBuffer<float>& x,
                               wb::GuardedBuffer<float>& y) {
  const std::size_t count = static_cast<std::size_t>(s.rows) * s.cols;
  wb::GuardedBuffer<float> row_max(s.rows), row_sum(s.rows);
  wb::testing::fill_hashed_uniform<<<4096, 256>>>(x.data(), count, wb::base_seed(), lo, hi);
  WB_CHECK_LAUNCH("fill_hashed_uniform");
  if (impl == Impl::Fused)
    ch04::softmax_fused(x.data(), y.data(), s.rows, s.cols, nullptr);
  else
    ch04::softmax_unfused(x.data(), y.data(), row_max.data(), row_sum.data(), s.rows, s.cols, nullptr);
  WB_CUDA(cudaDeviceSynchronize());
  wb::DeviceBuffer<unsigned long long> stats(2);
  const unsigned long long init[2] = {0, ~0ull};
  WB_CUDA(cudaMemcpy(stats.data(), init, sizeof init, cudaMemcpyHostToDevice));
  count_unwritten<<<4096, 256>>>(y.data(), count, stats.data(), stats.data() + 1);
  WB_CHECK_LAUNCH("count_unwritten");
  const std::vector<unsigned long long> unwritten = stats.download();
  return {unwritten[0], unwritten[1]};
}

// A matrix too big to check in full against the CPU: filled on the device, every output
// checked for being written, and some rows checked against the double reference (the first and
// last, those on both sides of `boundary_row`, and six in between). `rule` is what a wrong row
// from `boundary_row` on means; a row before it is only reported as wrong.
void check_big_matrix(Shape s, int boundary_row, const std::string& what, const std::string& rule) {
  const std::size_t count = static_cast<std::size_t>(s.rows) * s.cols;
  for (const Impl impl : {Impl::Fused, Impl::Unfused}) {
    std::ostringstream where;
    where << "ch04 " << name_of(impl) << " softmax, " << shape_name(s) << " (" << count
          << " elements, " << what << "), seed " << wb::base_seed() << ": ";
    try {
      wb::DeviceBuffer<float> x(count);
      wb::GuardedBuffer<float> y(count);
      const Unwritten unwritten = run_on_hashed_logits(impl, s, -8.0f, 8.0f, x, y);
      if (unwritten.count > 0) {
        FAIL_CHECK(where.str() << unwritten.count << " outputs were not written, the first is y["
                   << unwritten.first / s.cols << ", " << unwritten.first % s.cols << "].\n" << rule);
        continue;
      }
      // Rows on both sides of the boundary, the first and last rows, and some in between.
      std::vector<int> rows = {0, 1, boundary_row - 1, boundary_row, boundary_row + 1, s.rows - 2,
                               s.rows - 1};
      for (int i = 1; i <= 6; ++i) rows.push_back(static_cast<int>(static_cast<long long>(s.rows) * i / 7));
      std::erase_if(rows, [&s](int r) { return r < 0 || r >= s.rows; });  // a boundary at the last row
      for (const int r : rows) {
        const std::size_t offset = static_cast<std::size_t>(r) * s.cols;
        std::vector<float> x_row(s.cols), y_row(s.cols);
        WB_CUDA(cudaMemcpy(x_row.data(), x.data() + offset, s.cols * sizeof(float), cudaMemcpyDeviceToHost));
        WB_CUDA(cudaMemcpy(y_row.data(), y.data() + offset, s.cols * sizeof(float), cudaMemcpyDeviceToHost));
        const std::string failure = check_softmax(x_row, y_row, softmax_rows(x_row, 1, s.cols), 1, s.cols,
                                                  std::string(name_of(impl)) + " softmax, row " + std::to_string(r) +
                                                      " of " + shape_name(s));
        if (!failure.empty()) {
          if (r < boundary_row)  // wrong before the boundary: not what `rule` is about
            FAIL_CHECK(failure);
          else
            FAIL_CHECK(where.str() << "row " << r << " is wrong (the rows before row " << boundary_row
                       << " are right).\n" << rule << "\n" << failure);
          break;
        }
      }
      const std::string overrun = y.overrun("y");
      if (!overrun.empty()) FAIL_CHECK(where.str() << "the kernel " << overrun << ".\n" << rule);
    } catch (const wb::NotImplemented&) {
      throw;
    } catch (const std::exception& e) {
      FAIL_CHECK(where.str() << "the call failed: " << first_line(e) << "\n" << rule);
      return;  // a fault is sticky: nothing more can run on this device
    }
  }
}

// Free device memory for x, y, the unfused row_max and row_sum and a gigabyte to spare, or the
// case is skipped (for no points).
bool room_for(Shape s, const char* name) {
  const std::size_t bytes =
      2 * (static_cast<std::size_t>(s.rows) * s.cols + s.rows) * sizeof(float) + (1ull << 30);
  std::size_t free_bytes = 0, total_bytes = 0;
  WB_CUDA(cudaMemGetInfo(&free_bytes, &total_bytes));
  if (free_bytes >= bytes) return true;
  wb::testing::mark_skipped(std::string("skipped: the ") + name + " case needs " + std::to_string((bytes >> 30) + 1) +
                            " GB of free device memory, this GPU has " + std::to_string(free_bytes >> 30) + " GB");
  return false;
}

TEST_CASE("softmax of more than 65536 rows of more than 8192 columns (4.3 GB)") {
  WB_REQUIRE_GPU();
  const Shape s{65537, 8193};  // one row past 2^16, one column past the register kernel's 8192
  if (wb::coverage::quick()) {
    wb::testing::mark_skipped("skipped: the 65537x8193 case is left out under compute-sanitizer / WB_QUICK");
    return;
  }
  if (!room_for(s, "65537x8193")) return;
  check_big_matrix(s, 65536, "65537 long rows",
                   "rule: any shape: more rows than 65536 and longer than 8192 columns, here the last row is "
                   "number 65536.\nhint: nothing in the kernel may be sized for the shapes you tried: a grid's "
                   "y dimension stops at 65535, and a fixed-size array of per-row values (a max and a sum per "
                   "row) runs out; loop over the rows, or size the scratch from the call.");
}

TEST_CASE("softmax of a matrix of more than 2^31 elements (64-bit offsets)") {
  WB_REQUIRE_GPU();
  const Shape s{140000, 16000};  // 2.24e9 elements: row 134217 reaches past 2^31
  if (wb::coverage::quick()) {
    wb::testing::mark_skipped("skipped: the 2^31-element case is left out under compute-sanitizer / WB_QUICK");
    return;
  }
  if (!room_for(s, "2^31-element")) return;
  const int boundary_row = static_cast<int>((1ull << 31) / s.cols);
  check_big_matrix(s, boundary_row, "more than 2^31",
                   "rule: any shape: row * cols passes 2^31 from row " + std::to_string(boundary_row) +
                       " on here.\nhint: compute offsets in 64 bits, size_t offset = static_cast<size_t>(row) * "
                       "cols; an int product wraps around to a negative offset.");
}

// 2^27 + 1 rows of 32 columns, 2^32 + 32 elements (17 GB per matrix): row 2^26 starts at 2^31,
// where an int offset wraps negative, and the last row at 2^32, where an offset computed in
// 32-bit unsigned wraps to 0 (blockIdx.x * cols: cols is converted to blockIdx.x's unsigned),
// so the last row's softmax lands on row 0 and its own is never written. The 2^31 case above
// has 16000 columns: neither its row count (below 2^32 elements) nor its row length (not a
// short-row path, such as a warp per row) reaches these.
TEST_CASE("softmax of a matrix of more than 2^32 elements (short rows, 32-bit offsets)") {
  WB_REQUIRE_GPU();
  const Shape s{(1 << 27) + 1, 32};
  if (wb::coverage::quick()) {
    wb::testing::mark_skipped("skipped: the 2^32-element case is left out under compute-sanitizer / WB_QUICK");
    return;
  }
  if (!room_for(s, "2^32-element")) return;
  check_big_matrix(s, 1 << 26, "more than 2^32",
                   "rule: any shape: row * cols passes 2^31 at row 67108864 and 2^32 at row 134217728 (the last) "
                   "here.\nhint: compute every row offset in 64 bits, size_t offset = static_cast<size_t>(row) * "
                   "cols, in every kernel (the one for short rows too): an int product wraps negative past 2^31, "
                   "and an unsigned one, such as blockIdx.x * cols, wraps to 0 past 2^32.");
}

// 65537 rows of 65537 columns, 2^32 + 2^17 + 1 elements (17 GB per matrix), rows long enough
// for a long-row path (the reference's streaming kernel, past 8192 columns). Row 65535 starts
// at 2^32 - 1 and row 65536, the last, at 2^32 + 65536: an offset computed in 32-bit unsigned
// (blockIdx.x * cols) wraps there to 65536, so the last row's softmax lands on the end of row 0
// and the start of row 1, and its own outputs are never written. The case above reaches 2^32
// with rows of 32 columns only, and the 2^31 one stays below 2^32 (140000 x 16000 = 2.24e9):
// a kernel for long rows with the unsigned product passes both.
TEST_CASE("softmax of a matrix of more than 2^32 elements (long rows, 32-bit offsets)") {
  WB_REQUIRE_GPU();
  const Shape s{65537, 65537};
  if (wb::coverage::quick()) {
    wb::testing::mark_skipped("skipped: the 65537x65537 case is left out under compute-sanitizer / WB_QUICK");
    return;
  }
  if (!room_for(s, "65537x65537")) return;
  check_big_matrix(s, 1 << 16, "more than 2^32, in rows of 65537 columns",
                   "rule: any shape: row * cols passes 2^32 at row 65536 (the last) here, in rows of 65537 "
                   "columns, which take a kernel for long rows.\nhint: compute every row offset in 64 bits, "
                   "size_t offset = static_cast<size_t>(blockIdx.x) * cols, in every kernel (the one for long "
                   "rows too): blockIdx.x * cols is computed in 32-bit unsigned (cols is converted to "
                   "blockIdx.x's type) and wraps to 65536 for the last row, widening it afterwards is too late.");
}

// The max of x (exact in float) and the sum of exp(x - max) in double, one value per block of
// 256 threads (the host combines the blocks'): the reference for a row too long to copy back.
__global__ void block_max_of(const float* x, std::size_t count, float* out) {
  __shared__ float part[256];
  float m = -INFINITY;
  for (std::size_t i = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x; i < count;
       i += static_cast<std::size_t>(gridDim.x) * blockDim.x)
    m = fmaxf(m, x[i]);
  part[threadIdx.x] = m;
  __syncthreads();
  for (unsigned half = blockDim.x / 2; half > 0; half /= 2) {
    if (threadIdx.x < half) part[threadIdx.x] = fmaxf(part[threadIdx.x], part[threadIdx.x + half]);
    __syncthreads();
  }
  if (threadIdx.x == 0) out[blockIdx.x] = part[0];
}

__global__ void block_exp_sum_of(const float* x, std::size_t count, float max_x, double* out) {
  __shared__ double part[256];
  double sum = 0;
  for (std::size_t i = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x; i < count;
       i += static_cast<std::size_t>(gridDim.x) * blockDim.x)
    sum += exp(static_cast<double>(x[i]) - max_x);
  part[threadIdx.x] = sum;
  __syncthreads();
  for (unsigned half = blockDim.x / 2; half > 0; half /= 2) {
    if (threadIdx.x < half) part[threadIdx.x] += part[threadIdx.x + half];
    __syncthreads();
  }
  if (threadIdx.x == 0) out[blockIdx.x] = part[0];
}

// One row of 2^31 - 1 columns, the most an int holds (8 GiB of logits from
// fill_hashed_uniform, in [-16, 16)). A column counter that steps by the block,
// for (int c = threadIdx.x; c < cols; c += blockDim.x), passes the largest int on its last
// step here: an int wraps negative and the loop goes on far outside the row (a fault, or
// outputs never written). The row's max and sum are computed in double on the device; all of
// y is checked for being written, and 9 stretches of 1024 columns (the first, the last, 7 in
// between) against them, to 1%: a float sum of 2^23 terms per thread (a block of 256 threads)
// drifts by about 0.4%, a wrong or missing stretch by far more.
//
// A design that is slow on one long row (a thread or a warp per row) could take minutes here,
// past the suite's time limit: each version is first timed on a row of 2^24 columns, and one
// that would need more than kIntMaxRowBudgetSeconds for this row is left out, saying so.
constexpr double kIntMaxRowBudgetSeconds = 60;

// Seconds one call of `impl` takes on one row of `cols` columns, after a call on a row of a
// quarter of that (which loads its kernels).
double seconds_for_row(Impl impl, int cols) {
  const std::size_t count = static_cast<std::size_t>(cols);
  wb::DeviceBuffer<float> x(count), y(count), row_max(1), row_sum(1);
  wb::testing::fill_hashed_uniform<<<1024, 256>>>(x.data(), count, wb::base_seed(), -16.0f, 16.0f);
  WB_CHECK_LAUNCH("fill_hashed_uniform");
  const auto call = [&](int c) {
    if (impl == Impl::Fused)
      ch04::softmax_fused(x.data(), y.data(), 1, c, nullptr);
    else
      ch04::softmax_unfused(x.data(), y.data(), row_max.data(), row_sum.data(), 1, c, nullptr);
    WB_CUDA(cudaDeviceSynchronize());
  };
  call(cols / 4);
  const auto start = std::chrono::steady_clock::now();
  call(cols);
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

enum class RowCheck { Done, TooSlow, Faulted };

RowCheck check_int_max_row(Impl impl) {
  const Shape s{1, std::numeric_limits<int>::max()};
  const std::size_t count = static_cast<std::size_t>(s.cols);
  std::ostringstream where;
  where << "ch04 " << name_of(impl) << " softmax, " << shape_name(s)
        << " (one row of 2^31 - 1 columns, the largest int), seed " << wb::base_seed() << ": ";
  const std::string rule =
      "rule: any shape: cols may be any int, up to 2^31 - 1.\nhint: a loop counter that steps "
      "past the end of the row, for (int c = threadIdx.x; c < cols; c += blockDim.x), passes the "
      "largest int on its last step when cols > INT_MAX - blockDim.x: an int wraps negative and "
      "the loop reads and writes outside the row. Count columns in unsigned (c + blockDim.x < 2^32 "
      "cannot wrap) or in 64 bits; a rounded-up count, (cols + kTile - 1) / kTile, overflows too: "
      "write (cols - 1) / kTile + 1.";
  constexpr int kBlocks = 1024, kThreadsPerBlock = 256, kStretch = 1024;
  try {
    const double estimate = seconds_for_row(impl, 1 << 24) * (static_cast<double>(count) / (1 << 24));
    if (estimate > kIntMaxRowBudgetSeconds) {
      wb::testing::record_note(std::string("the ") + name_of(impl) + " softmax is left out of this case: a row of "
                               "2^24 columns took it " + std::to_string(estimate / 128) + " s, so this row would "
                               "take about " + std::to_string(static_cast<int>(estimate)) + " s");
      return RowCheck::TooSlow;
    }
    wb::DeviceBuffer<float> x(count);
    wb::GuardedBuffer<float> y(count);
    const Unwritten unwritten = run_on_hashed_logits(impl, s, -16.0f, 16.0f, x, y);
    if (unwritten.count > 0) {
      FAIL_CHECK(where.str() << unwritten.count << " outputs were not written, the first is y[0, "
                 << unwritten.first << "].\n" << rule);
      return RowCheck::Done;
    }
    wb::DeviceBuffer<float> block_max(kBlocks);
    wb::DeviceBuffer<double> block_sum(kBlocks);
    block_max_of<<<kBlocks, kThreadsPerBlock>>>(x.data(), count, block_max.data());
    WB_CHECK_LAUNCH("block_max_of");
    float max_x = -INFINITY;
    for (const float m : block_max.download()) max_x = std::max(max_x, m);
    block_exp_sum_of<<<kBlocks, kThreadsPerBlock>>>(x.data(), count, max_x, block_sum.data());
    WB_CHECK_LAUNCH("block_exp_sum_of");
    double sum = 0;
    for (const double b : block_sum.download()) sum += b;
    std::vector<std::size_t> starts = {0, count - kStretch};
    for (int i = 1; i <= 7; ++i) starts.push_back(count / 8 * i);
    for (const std::size_t start : starts) {
      std::vector<float> x_part(kStretch), y_part(kStretch);
      WB_CUDA(cudaMemcpy(x_part.data(), x.data() + start, kStretch * sizeof(float), cudaMemcpyDeviceToHost));
      WB_CUDA(cudaMemcpy(y_part.data(), y.data() + start, kStretch * sizeof(float), cudaMemcpyDeviceToHost));
      for (int i = 0; i < kStretch; ++i) {
        const double want = std::exp(static_cast<double>(x_part[i]) - max_x) / sum;
        if (std::abs(y_part[i] - want) <= 1e-2 * want) continue;
        FAIL_CHECK(where.str() << "y[0, " << start + i << "] = " << y_part[i] << ", expected " << want
                   << " (x = " << x_part[i] << ", the row's max " << max_x << ", its sum of exp(x - max) "
                   << sum << ", in double).\n" << rule);
        return RowCheck::Done;
      }
    }
    const std::string overrun = y.overrun("y");
    if (!overrun.empty()) FAIL_CHECK(where.str() << "the kernel " << overrun << ".\n" << rule);
  } catch (const wb::NotImplemented&) {
    throw;
  } catch (const std::exception& e) {
    FAIL_CHECK(where.str() << "the call failed: " << first_line(e) << "\n" << rule);
    return RowCheck::Faulted;
  }
  return RowCheck::Done;
}

TEST_CASE("softmax of one row of 2^31 - 1 columns (column counters past the largest int)") {
  WB_REQUIRE_GPU();
  if (wb::coverage::quick()) {
    wb::testing::mark_skipped("skipped: the 2^31 - 1-column row is left out under compute-sanitizer / WB_QUICK");
    return;
  }
  if (!room_for(Shape{1, std::numeric_limits<int>::max()}, "1x2147483647")) return;
  int too_slow = 0;
  for (const Impl impl : {Impl::Fused, Impl::Unfused}) {
    const RowCheck result = check_int_max_row(impl);
    if (result == RowCheck::Faulted) return;  // a fault is sticky: nothing more can run
    too_slow += result == RowCheck::TooSlow;
  }
  if (too_slow == 2)
    wb::testing::mark_skipped("skipped: both versions would take more than " +
                              std::to_string(static_cast<int>(kIntMaxRowBudgetSeconds)) +
                              " s on a row of 2^31 - 1 columns (timed on a row of 2^24)");
}

// Last: every kernel of the reference (solution and fast builds) must have run above.
TEST_CASE("kernel coverage: every kernel of the reference ran in this suite") {
  WB_REQUIRE_GPU();
  kernel_coverage_test::check_reference("_ZN4ch04", "04");
}

}  // namespace
