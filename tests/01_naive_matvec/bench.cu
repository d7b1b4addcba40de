// Chapter 01 bench: how fast the matvec kernel reads W (the large shapes of a 7B model and
// the 110M model's), and where one token's matmul time goes with the naive wrapper.
//
//   build/bin/bench_01_<build> [--out FILE] [--quick]
// Writes results/01_naive_matvec-<build>.json. The whole ladder (CPU, 01, 02, 03) is
// chapter 03's bench.
#include <CLI/CLI.hpp>

#include <cstdio>
#include <iostream>

#include "ch01_adapters.hpp"
#include "wb/device.hpp"
#include "wb/model/bench_support.hpp"
#include "wb/model/synthetic.hpp"
#include "wb/not_implemented.hpp"

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
