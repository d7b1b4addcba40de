// bench_04_<build>: the chapter 04 softmax, unfused and fused, over the shapes the lesson
// talks about (LLM vocabularies, square, many short rows), next to a device copy of the
// same bytes (the ceiling at that size). Writes results/04_fused_softmax-<build>.json.
//
//   build/bin/bench_04_solution [--out FILE] [--quick]
#include <cuda_runtime.h>

#include <CLI/CLI.hpp>
#include <cstdio>
#include <functional>
#include <iostream>
#include <string>
#include <vector>

#include "reference.hpp"
#include "softmax.cuh"
#include "wb/buffer.hpp"
#include "wb/check.hpp"
#include "wb/device.hpp"
#include "wb/fusion_bench.hpp"
#include "wb/results.hpp"
#include "wb/timing.hpp"

namespace {

struct Shape {
  int rows, cols;
  std::string name() const { return std::to_string(rows) + "x" + std::to_string(cols); }
};

// The shapes of the PyTorch anchors (../shared/anchors) and of the timing tests.
const std::vector<Shape> kShapes = {{16, 151936}, {1, 151936},  {64, 32000},
                                    {4096, 4096}, {8192, 1024}, {32768, 256}};
const std::vector<Shape> kQuickShapes = {{16, 151936}, {1, 151936}, {4096, 4096}};

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Chapter 04 bench: unfused vs fused softmax, with a device copy as the ceiling"};
  std::string out;
  bool quick = false;
  app.add_option("--out", out, "results file (default: results/04_fused_softmax-<build>.json)");
  app.add_flag("--quick", quick, "fewer shapes, fewer samples");
  CLI11_PARSE(app, argc, argv);

  if (!wb::has_cuda_device()) {
    std::cerr << "bench_04: skipped: no CUDA device\n";
    return 77;
  }
  const std::string build = WB_BUILD_NAME;
  wb::ResultsWriter writer("04_fused_softmax", build);
  wb::FusionBench bench("bench_04", "softmax", writer);

  try {
    for (const Shape& shape : quick ? kQuickShapes : kShapes) {
      const std::size_t count = static_cast<std::size_t>(shape.rows) * shape.cols;
      wb::DeviceBuffer<float> x(count), y(count), row_max(shape.rows), row_sum(shape.rows);
      x.upload(ch04::reference::random_logits(count, "ch04/bench/" + shape.name()));

      wb::BenchOptions options;
      options.bytes = 2.0 * count * sizeof(float);  // x in, y out: what a softmax must move
      if (quick) {
        options.min_samples = 10;
        options.min_time_ms = 10;
        options.max_time_ms = 500;
      }

      // Rule 7: each variant's output is re-checked on fresh logits after timing.
      const auto verify_with = [&](const std::string& variant,
                                   const std::function<void(cudaStream_t)>& work) {
        return [&, variant, work](cudaStream_t stream) {
          const std::vector<float> fresh = ch04::reference::random_logits(
              count, "ch04/bench/verify/" + variant + "/" + shape.name());
          x.upload(fresh);
          y.poison(stream);
          row_max.poison(stream);
          row_sum.poison(stream);
          work(stream);
          WB_CUDA(cudaStreamSynchronize(stream));
          const std::string failure = ch04::reference::check_softmax(
              fresh, y.download(), ch04::reference::softmax_rows(fresh, shape.rows, shape.cols),
              shape.rows, shape.cols, variant + " softmax (bench)");
          if (!failure.empty()) throw std::runtime_error(failure);
        };
      };
      const nlohmann::json extra = {{"rows", shape.rows}, {"cols", shape.cols}};
      const auto copy = [&](cudaStream_t s) {
        WB_CUDA(cudaMemcpyAsync(y.data(), x.data(), count * sizeof(float),
                                cudaMemcpyDeviceToDevice, s));
      };
      const auto unfused = [&](cudaStream_t s) {
        ch04::softmax_unfused(x.data(), y.data(), row_max.data(), row_sum.data(), shape.rows,
                              shape.cols, s);
      };
      const auto fused = [&](cudaStream_t s) {
        ch04::softmax_fused(x.data(), y.data(), shape.rows, shape.cols, s);
      };
      bench.measure("copy", "baseline", shape.name(), options, copy, {}, extra);
      bench.measure("unfused", build, shape.name(), options, unfused,
                    verify_with("unfused", unfused), extra);
      bench.measure("fused", build, shape.name(), options, fused, verify_with("fused", fused),
                    extra);
    }
  } catch (const std::exception& e) {
    std::cerr << "bench_04: " << e.what() << "\n";
    return 1;
  }

  bench.print_table("chapter 04 softmax (" + build + " build)", "shape");
  const std::string path = out.empty() ? writer.default_path().string() : out;
  writer.write(path);
  std::cerr << "bench_04: wrote " << path << "\n";
  return 0;
}
