// Chapter 01 bench: how fast the matvec kernel reads W (the large shapes of a 7B model and
// the 110M model's), and where one token's matmul time goes with the naive wrapper.
//
//   build/bin/bench_01_<build> [--out FILE] [--quick]
// Writes results/01_naive_matvec-<build>.json. The whole ladder (CPU, 01, 02, 03) is
// chapter 03's bench. It also times host-to-device copies of the same bytes from pageable
// and from pinned host memory (the lesson's "pinned memory" section): variants h2d_pageable,
// h2d_pinned, h2d_registered and host_register, impl "harness" (docs/results-schema.md).
#include <CLI/CLI.hpp>

#include <algorithm>
#include <cstdio>
#include <iostream>
#include <memory>

#include "ch01_adapters.hpp"
#include "wb/check.hpp"
#include "wb/device.hpp"
#include "wb/model/bench_support.hpp"
#include "wb/model/synthetic.hpp"
#include "wb/not_implemented.hpp"

namespace {

// Host-to-device copies of one matrix of the synthetic 110M model, the same bytes from three
// kinds of host memory, each timed by the harness on the host clock (the device synchronized
// before both clock reads, as for every copy the lesson's breakdown times):
//   h2d_pageable    memory from new[]: the GPU cannot read it directly (the OS may move or
//                   swap its pages), so the driver copies it through a pinned staging buffer
//                   of its own, chunk by chunk: two copies, one of them by the CPU;
//   h2d_pinned      memory from cudaMallocHost: page-locked, the GPU's copy engine reads it
//                   over the link directly (DMA);
//   h2d_registered  the pageable buffer after cudaHostRegister: pinned where it already is;
//   host_register   cudaHostRegister + cudaHostUnregister of that buffer: what pinning costs,
//                   which is why a program pins once and reuses, never per call.
void bench_host_to_device(wb::ResultsWriter& writer, bool quick) {
  struct Matrix { const char* shape; std::size_t rows, cols; };
  std::vector<Matrix> shapes = {{"32000x768", 32000, 768}, {"768x768", 768, 768}};
  if (quick) shapes.resize(1);
  std::printf("\nhost-to-device copies, host clock (median):\n");
  for (const Matrix& m : shapes) {
    const std::size_t count = m.rows * m.cols, bytes = count * sizeof(float);
    std::unique_ptr<float[]> pageable(new float[count]);
    std::fill(pageable.get(), pageable.get() + count, 0.5f);  // touch every page
    float* pinned = nullptr;
    float* device = nullptr;
    WB_CUDA(cudaMallocHost(&pinned, bytes));
    std::fill(pinned, pinned + count, 0.5f);
    WB_CUDA(cudaMalloc(&device, bytes));
    auto time_copy = [&](const char* variant, const char* memory, const float* source) {
      wb::Bench bench({.name = std::string(variant) + " " + m.shape, .bytes = double(bytes),
                       .cache = wb::Cache::Hot, .clock = wb::Clock::Host,
                       .check_floor = false});  // the floor is device memory's; this is the link
      const wb::Stats s = bench.run([&](cudaStream_t stream) {
        WB_CUDA(cudaMemcpyAsync(device, source, bytes, cudaMemcpyHostToDevice, stream));
      });
      writer.add(variant, "harness", m.shape, s, {{"host_memory", memory}, {"direction", "h2d"}});
      std::printf("  %-15s %-10s %9.1f us  %6.1f GB/s\n", variant, m.shape, s.median_us, s.gbps);
    };
    time_copy("h2d_pageable", "pageable", pageable.get());
    time_copy("h2d_pinned", "pinned", pinned);
    {
      wb::Bench bench({.name = std::string("host_register ") + m.shape, .cache = wb::Cache::Hot,
                       .clock = wb::Clock::Host, .check_floor = false});
      const wb::Stats s = bench.run([&](cudaStream_t) {
        WB_CUDA(cudaHostRegister(pageable.get(), bytes, cudaHostRegisterDefault));
        WB_CUDA(cudaHostUnregister(pageable.get()));
      });
      writer.add("host_register", "harness", m.shape, s,
                 {{"host_memory", "pageable"}, {"registered_bytes", double(bytes)}});
      std::printf("  %-15s %-10s %9.1f us  (cudaHostRegister + cudaHostUnregister)\n",
                  "host_register", m.shape, s.median_us);
    }
    WB_CUDA(cudaHostRegister(pageable.get(), bytes, cudaHostRegisterDefault));
    time_copy("h2d_registered", "registered", pageable.get());
    WB_CUDA(cudaHostUnregister(pageable.get()));
    WB_CUDA(cudaFree(device));
    WB_CUDA(cudaFreeHost(pinned));
  }
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Chapter 01 bench: matvec bandwidth and the naive wrapper's per-token breakdown"};
  std::string out;
  bool quick = false;
  app.add_option("--out", out, "results file (default: results/01_naive_matvec-<build>.json)");
  app.add_flag("--quick", quick, "fewer shapes, fewer steps");
  CLI11_PARSE(app, argc, argv);
  const std::string build = ch01_build::name();
  if (!wb::has_cuda_device()) {
    std::cerr << "bench_01: skipped: no CUDA device\n";
    return 77;
  }
  try {
    wb::ResultsWriter writer("01_naive_matvec", build);
    std::printf("chapter 01 (%s build) on %s\n", build.c_str(), wb::device_info().name.c_str());
    auto shapes = wb::model::bandwidth_shapes();
    if (quick) shapes.resize(2);
    std::printf("matvec kernel, L2 flushed before each sample (cold) and not (hot):\n");
    wb::model::bench_matvec_bandwidth(writer, ch01_adapters::kLaunch, "matvec", build, wb::Cache::Cold, shapes);
    wb::model::bench_matvec_bandwidth(writer, ch01_adapters::kLaunch, "matvec", build, wb::Cache::Hot, shapes);

    std::fprintf(stderr, "generating the synthetic 110M model...\n");
    const wb::model::Model model = wb::model::make_synthetic(wb::model::synthetic_110m());
    auto backend = ch01_adapters::naive_backend();
    const auto m = wb::model::measure_rung(model, backend, wb::model::max_threads(), quick ? 8 : 32,
                                           wb::model::Protocol::AllocateEveryCall, ch01_adapters::kLaunch);
    writer.add_metrics("01_naive", build, "synthetic-110m", m);
    std::printf("\nthe naive wrapper on %s:\n", model.origin().c_str());
    wb::model::print_rung_header();
    wb::model::print_rung("01_naive", m, 0, 0);

    bench_host_to_device(writer, quick);

    const auto path = out.empty() ? writer.default_path() : std::filesystem::path(out);
    writer.write(path);
    std::printf("\nwrote %s\n", path.string().c_str());
  } catch (const wb::NotImplemented& e) {
    std::cerr << "bench_01: " << e.what() << "\nfinish the chapter's TODOs first (./workbook check 01)\n";
    return 1;
  } catch (const std::exception& e) {
    std::cerr << "bench_01: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
