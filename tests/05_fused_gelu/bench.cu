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
#include "wb/fusion_bench.hpp"
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
  wb::FusionBench bench("bench_05", "gelu", writer);

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

      // Rule 7: each variant's output is re-checked on fresh inputs after timing.
      const auto verify_with = [&](const std::string& variant,
                                   const std::function<void(cudaStream_t)>& work) {
        return [&, variant, work](cudaStream_t stream) {
          const std::vector<float> fresh = ch05::reference::random_inputs(
              n, "ch05/bench/verify/" + variant + "/" + size.name());
          x.upload(fresh);
          y.poison(stream);
          scratch.poison(stream);
          work(stream);
          WB_CUDA(cudaStreamSynchronize(stream));
          const std::string failure = ch05::reference::check_gelu(
              fresh, y.download(), ch05::reference::gelu_tanh(fresh), variant + " GELU (bench)");
          if (!failure.empty()) throw std::runtime_error(failure);
        };
      };
      const nlohmann::json extra = {{"n", n}};
      const auto copy = [&](cudaStream_t s) {
        WB_CUDA(cudaMemcpyAsync(y.data(), x.data(), n * sizeof(float), cudaMemcpyDeviceToDevice,
                                s));
      };
      const auto unfused = [&](cudaStream_t s) {
        ch05::gelu_unfused(x.data(), y.data(), scratch.data(), n, s);
      };
      const auto fused = [&](cudaStream_t s) { ch05::gelu_fused(x.data(), y.data(), n, s); };
      bench.measure("copy", "baseline", size.name(), options, copy, {}, extra);
      bench.measure("unfused", build, size.name(), options, unfused,
                    verify_with("unfused", unfused), extra);
      bench.measure("fused", build, size.name(), options, fused, verify_with("fused", fused),
                    extra);
    }
  } catch (const std::exception& e) {
    std::cerr << "bench_05: " << e.what() << "\n";
    return 1;
  }

  bench.print_table("chapter 05 GELU (" + build + " build)", "n");
  const std::string path = out.empty() ? writer.default_path().string() : out;
  writer.write(path);
  std::cerr << "bench_05: wrote " << path << "\n";
  return 0;
}
