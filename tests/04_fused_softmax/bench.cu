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
#include "wb/not_implemented.hpp"
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

struct Row {
  std::string shape, variant;
  wb::Stats stats;
  double vs_copy;  // time of a device copy of the same bytes / this time
};

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
  std::vector<Row> table;

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

      double copy_us = 0, unfused_us = 0;
      const auto measure = [&](const std::string& variant, const std::string& impl,
                               const std::function<void(cudaStream_t)>& work, bool check) {
        std::cerr << "bench_04: " << variant << " " << shape.name() << "\n";
        options.name = "softmax " + variant + " " + shape.name();
        wb::Bench bench(options);
        // Rule 7: the output is re-checked on fresh logits after timing.
        const auto verify = [&] {
          const std::vector<float> fresh = ch04::reference::random_logits(
              count, "ch04/bench/verify/" + variant + "/" + shape.name());
          x.upload(fresh);
          y.poison(bench.stream());
          row_max.poison(bench.stream());
          row_sum.poison(bench.stream());
          work(bench.stream());
          WB_CUDA(cudaStreamSynchronize(bench.stream()));
          const std::string failure = ch04::reference::check_softmax(
              fresh, y.download(), ch04::reference::softmax_rows(fresh, shape.rows, shape.cols),
              shape.rows, shape.cols, variant + " softmax (bench)");
          if (!failure.empty()) throw std::runtime_error(failure);
        };
        try {
          const wb::Stats s = check ? bench.run(work, verify) : bench.run(work);
          nlohmann::json extra = {{"rows", shape.rows}, {"cols", shape.cols}};
          if (variant == "copy") copy_us = s.median_us;
          if (variant == "unfused") unfused_us = s.median_us;
          if (variant == "fused" && unfused_us > 0)
            extra["speedup_vs_unfused"] = unfused_us / s.median_us;
          // The ceiling at this size: a device copy of the same bytes, timed the same way.
          if (variant != "copy" && copy_us > 0)
            extra["fraction_of_same_size_copy"] = copy_us / s.median_us;
          writer.add(variant, impl, shape.name(), s, extra);
          table.push_back({shape.name(), variant, s, copy_us / s.median_us});
        } catch (const wb::NotImplemented& e) {
          std::cerr << "bench_04: " << variant << ": " << e.what() << " (skipped)\n";
        }
      };

      measure("copy", "baseline", [&](cudaStream_t s) {
        WB_CUDA(cudaMemcpyAsync(y.data(), x.data(), count * sizeof(float),
                                cudaMemcpyDeviceToDevice, s));
      }, false);
      measure("unfused", build, [&](cudaStream_t s) {
        ch04::softmax_unfused(x.data(), y.data(), row_max.data(), row_sum.data(), shape.rows,
                              shape.cols, s);
      }, true);
      measure("fused", build, [&](cudaStream_t s) {
        ch04::softmax_fused(x.data(), y.data(), shape.rows, shape.cols, s);
      }, true);
    }
  } catch (const std::exception& e) {
    std::cerr << "bench_04: " << e.what() << "\n";
    return 1;
  }

  const double copy_gbps = wb::measured_ceilings().copy_gbps;
  std::printf("chapter 04 softmax (%s build), cold L2; measured copy ceiling %.0f GB/s\n",
              build.c_str(), copy_gbps);
  std::printf("%-12s %-8s %10s %10s %8s %13s\n", "shape", "variant", "median us", "GB/s",
              "% ceiling", "vs same copy");
  for (const Row& r : table)
    std::printf("%-12s %-8s %10.2f %10.0f %8.1f%% %12.1f%%\n", r.shape.c_str(),
                r.variant.c_str(), r.stats.median_us, r.stats.gbps,
                100.0 * r.stats.gbps / copy_gbps, 100.0 * r.vs_copy);
  const std::string path = out.empty() ? writer.default_path().string() : out;
  writer.write(path);
  std::cerr << "bench_04: wrote " << path << "\n";
  return 0;
}
