// bench_05_<build>: the chapter 05 GELU, unfused and fused, from 1 M to 128 M elements, next
// to a device copy of the same bytes (the ceiling at that size). Writes
// results/05_fused_gelu-<build>.json.
//
//   build/bin/bench_05_solution [--out FILE] [--quick]
#include <cuda_runtime.h>

#include <CLI/CLI.hpp>
#include <cstdio>
#include <functional>
#include <iostream>
#include <string>
#include <vector>

#include "gelu.cuh"
#include "reference.hpp"
#include "wb/buffer.hpp"
#include "wb/check.hpp"
#include "wb/device.hpp"
#include "wb/not_implemented.hpp"
#include "wb/results.hpp"
#include "wb/timing.hpp"

namespace {

struct Size {
  int log2;
  std::size_t n() const { return std::size_t(1) << log2; }
  std::string name() const { return "2^" + std::to_string(log2); }
};

// The sizes of the PyTorch anchors (../shared/anchors) and of the timing tests.
const std::vector<Size> kSizes = {{20}, {24}, {26}, {27}};
const std::vector<Size> kQuickSizes = {{24}, {26}};

struct Row {
  std::string size, variant;
  wb::Stats stats;
  double vs_copy;  // time of a device copy of the same bytes / this time
};

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Chapter 05 bench: unfused vs fused GELU, with a device copy as the ceiling"};
  std::string out;
  bool quick = false;
  app.add_option("--out", out, "results file (default: results/05_fused_gelu-<build>.json)");
  app.add_flag("--quick", quick, "fewer sizes, fewer samples");
  CLI11_PARSE(app, argc, argv);

  if (!wb::has_cuda_device()) {
    std::cerr << "bench_05: skipped: no CUDA device\n";
    return 77;
  }
  const std::string build = WB_BUILD_NAME;
  wb::ResultsWriter writer("05_fused_gelu", build);
  std::vector<Row> table;

  try {
    for (const Size& size : quick ? kQuickSizes : kSizes) {
      const std::size_t n = size.n();
      wb::DeviceBuffer<float> x(n), y(n), scratch(ch05::gelu_unfused_scratch_count(n));
      x.upload(ch05::reference::random_inputs(n, "ch05/bench/" + size.name()));

      wb::BenchOptions options;
      options.bytes = 2.0 * n * sizeof(float);  // x in, y out: what a GELU must move
      if (quick) {
        options.min_samples = 10;
        options.min_time_ms = 10;
        options.max_time_ms = 500;
      }

      double copy_us = 0, unfused_us = 0;
      const auto measure = [&](const std::string& variant, const std::string& impl,
                               const std::function<void(cudaStream_t)>& work, bool check) {
        std::cerr << "bench_05: " << variant << " " << size.name() << "\n";
        options.name = "gelu " + variant + " " + size.name();
        wb::Bench bench(options);
        // Rule 7: the output is re-checked on fresh inputs after timing.
        const auto verify = [&] {
          const std::vector<float> fresh =
              ch05::reference::random_inputs(n, "ch05/bench/verify/" + variant + "/" + size.name());
          x.upload(fresh);
          y.poison(bench.stream());
          scratch.poison(bench.stream());
          work(bench.stream());
          WB_CUDA(cudaStreamSynchronize(bench.stream()));
          const std::string failure = ch05::reference::check_gelu(
              fresh, y.download(), ch05::reference::gelu_tanh(fresh), variant + " GELU (bench)");
          if (!failure.empty()) throw std::runtime_error(failure);
        };
        try {
          const wb::Stats s = check ? bench.run(work, verify) : bench.run(work);
          nlohmann::json extra = {{"n", n}};
          if (variant == "copy") copy_us = s.median_us;
          if (variant == "unfused") unfused_us = s.median_us;
          if (variant == "fused" && unfused_us > 0)
            extra["speedup_vs_unfused"] = unfused_us / s.median_us;
          // The ceiling at this size: a device copy of the same bytes, timed the same way.
          if (variant != "copy" && copy_us > 0)
            extra["fraction_of_same_size_copy"] = copy_us / s.median_us;
          writer.add(variant, impl, size.name(), s, extra);
          table.push_back({size.name(), variant, s, copy_us / s.median_us});
        } catch (const wb::NotImplemented& e) {
          std::cerr << "bench_05: " << variant << ": " << e.what() << " (skipped)\n";
        }
      };

      measure("copy", "baseline", [&](cudaStream_t s) {
        WB_CUDA(cudaMemcpyAsync(y.data(), x.data(), n * sizeof(float), cudaMemcpyDeviceToDevice,
                                s));
      }, false);
      measure("unfused", build, [&](cudaStream_t s) {
        ch05::gelu_unfused(x.data(), y.data(), scratch.data(), n, s);
      }, true);
      measure("fused", build, [&](cudaStream_t s) { ch05::gelu_fused(x.data(), y.data(), n, s); },
              true);
    }
  } catch (const std::exception& e) {
    std::cerr << "bench_05: " << e.what() << "\n";
    return 1;
  }

  const double copy_gbps = wb::measured_ceilings().copy_gbps;
  std::printf("chapter 05 GELU (%s build), cold L2; measured copy ceiling %.0f GB/s\n",
              build.c_str(), copy_gbps);
  std::printf("%-6s %-8s %10s %10s %8s %13s\n", "n", "variant", "median us", "GB/s",
              "% ceiling", "vs same copy");
  for (const Row& r : table)
    std::printf("%-6s %-8s %10.2f %10.0f %8.1f%% %12.1f%%\n", r.size.c_str(), r.variant.c_str(),
                r.stats.median_us, r.stats.gbps, 100.0 * r.stats.gbps / copy_gbps,
                100.0 * r.vs_copy);
  const std::string path = out.empty() ? writer.default_path().string() : out;
  writer.write(path);
  std::cerr << "bench_05: wrote " << path << "\n";
  return 0;
}
