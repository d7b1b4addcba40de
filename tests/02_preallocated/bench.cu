// Chapter 02 bench: one token's matmul time, step by step, when every call allocates
// (chapter 01's protocol) and when the buffers are kept (this chapter), with this
// chapter's kernel; and tokens/s of the model through PreallocatedMatvec.
//
//   build/bin/bench_02_<build> [--out FILE] [--quick]
// Writes results/02_preallocated-<build>.json. The whole ladder is chapter 03's bench.
#include <CLI/CLI.hpp>

#include <cstdio>
#include <iostream>

#include "ch02_adapters.hpp"
#include "wb/device.hpp"
#include "wb/model/bench_support.hpp"
#include "wb/model/synthetic.hpp"
#include "wb/not_implemented.hpp"

int main(int argc, char** argv) {
  CLI::App app{"Chapter 02 bench: preallocated buffers against allocating on every call"};
  std::string out;
  bool quick = false;
  app.add_option("--out", out, "results file (default: results/02_preallocated-<build>.json)");
  app.add_flag("--quick", quick, "fewer steps");
  CLI11_PARSE(app, argc, argv);
  const std::string build = ch02_build::name();
  if (!wb::has_cuda_device()) {
    std::cerr << "bench_02: skipped: no CUDA device\n";
    return 77;
  }
  try {
    wb::ResultsWriter writer("02_preallocated", build);
    std::printf("chapter 02 (%s build) on %s\n", build.c_str(), wb::device_info().name.c_str());
    std::fprintf(stderr, "generating the synthetic 110M model...\n");
    const wb::model::Model model = wb::model::make_synthetic(wb::model::synthetic_110m());

    // Chapter 01's protocol with this chapter's kernel: the rung below.
    const wb::model::Breakdown naive =
        wb::model::replay_token(model, wb::model::Protocol::AllocateEveryCall, ch02_adapters::kLaunch);
    writer.add_metrics("allocate_every_call_replay", build, "synthetic-110m",
                       {{"breakdown_us", naive.to_json()}, {"total_us", naive.total_us()}});

    ch02::PreallocatedMatvec p;
    auto backend = ch02_adapters::preallocated_backend(p);
    const auto m = wb::model::measure_rung(model, backend, wb::model::max_threads(), quick ? 8 : 32,
                                           wb::model::Protocol::Preallocated, ch02_adapters::kLaunch);
    writer.add_metrics("02_preallocated", build, "synthetic-110m", m);

    std::printf("\none token's matmuls on %s (replayed, ms):\n", model.origin().c_str());
    std::printf("  %-22s %9s %9s %9s %9s %9s %9s\n", "protocol", "alloc", "h2d", "kernel", "d2h", "free", "total");
    auto row = [](const char* name, const wb::model::Breakdown& b) {
      std::printf("  %-22s %9.2f %9.2f %9.2f %9.2f %9.2f %9.2f\n", name, b.alloc_us / 1e3, b.h2d_us / 1e3,
                  b.kernel_us / 1e3, b.d2h_us / 1e3, b.free_us / 1e3, b.total_us() / 1e3);
    };
    row("allocate every call", naive);
    const auto& b = m.at("breakdown_us");
    row("preallocated", {b.at("alloc").get<double>(), b.at("h2d").get<double>(), b.at("kernel").get<double>(),
                         b.at("d2h").get<double>(), b.at("free").get<double>()});
    std::printf("\nthe model through PreallocatedMatvec:\n");
    wb::model::print_rung_header();
    wb::model::print_rung("02_preallocated", m, 0, 0);

    const auto path = out.empty() ? writer.default_path() : std::filesystem::path(out);
    writer.write(path);
    std::printf("\nwrote %s\n", path.string().c_str());
  } catch (const wb::NotImplemented& e) {
    std::cerr << "bench_02: " << e.what() << "\nfinish the chapter's TODOs first (./workbook check 02)\n";
    return 1;
  } catch (const std::exception& e) {
    std::cerr << "bench_02: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
