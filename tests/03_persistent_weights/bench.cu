// Chapter 03 bench: the transfer ladder. The synthetic 110M model decodes greedily through
//   cpu_1thread       the CPU baseline on one thread
//   cpu_all_threads   the CPU baseline on every OpenMP thread
//   01_naive          chapter 01: allocate, copy W and x, launch, copy back, free, per call
//   02_preallocated   chapter 02: buffers kept, W still copied per call
//   03_persistent     chapter 03: weights uploaded once, only activations move
// (the same build of chapters 01-03: bench_03_solution runs the references, bench_03_student
// your code), each with tokens/s and one token's breakdown (alloc, h2d, kernel, d2h, free),
// then this chapter's kernel's bandwidth on the large shapes.
//
//   build/bin/bench_03_<build> [--out FILE] [--quick] [--steps N] [--only a,b]
//   build/bin/bench_03_<build> generate [--backend cpu|01|02|03] [--model F] [--tokenizer F]
//                                       [--prompt TEXT] [--steps N] [--temperature T] [--seed S]
// Writes results/03_persistent_weights-<build>.json.
#include <CLI/CLI.hpp>

#include <cstdio>
#include <functional>
#include <iostream>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "ch03_adapters.hpp"
#include "wb/device.hpp"
#include "wb/model/bench_support.hpp"
#include "wb/model/generate_cli.hpp"
#include "wb/model/synthetic.hpp"
#include "wb/not_implemented.hpp"

#ifdef WB_LADDER_HAS_01_02
#include "ch01_adapters.hpp"
#include "ch02_adapters.hpp"
#endif

namespace {

using wb::model::Matmul;

// One rung: how to build its backend, the CPU threads it uses, and its transfer protocol.
struct Rung {
  std::string variant;
  std::string impl;  // "cpu" or the build
  int threads;
  std::optional<wb::model::Protocol> protocol;
  wb::model::DeviceMatvec kernel;
  std::function<std::unique_ptr<Matmul>()> make_backend;
};

// Keeps a chapter's wrapper object alive as long as the backend that calls it.
template <typename Object>
std::unique_ptr<Matmul> owning_backend(std::function<wb::model::FunctionMatmul(Object&)> adapt) {
  struct Owner final : Matmul {
    Object object;
    std::unique_ptr<wb::model::FunctionMatmul> inner;
    std::string name() const override { return inner->name(); }
    void load_weights(std::span<const float> w) override { inner->load_weights(w); }
    void matmul(float* out, const float* x, const float* W, int n, int d) override { inner->matmul(out, x, W, n, d); }
  };
  auto owner = std::make_unique<Owner>();
  owner->inner = std::make_unique<wb::model::FunctionMatmul>(adapt(owner->object));
  return owner;
}

std::vector<Rung> ladder(const std::string& build) {
  const int all = wb::model::max_threads();
  std::vector<Rung> rungs;
  rungs.push_back({"cpu_1thread", "cpu", 1, std::nullopt, {},
                   [] { return std::make_unique<wb::model::CpuMatmul>(1); }});
  rungs.push_back({"cpu_all_threads", "cpu", all, std::nullopt, {},
                   [all] { return std::make_unique<wb::model::CpuMatmul>(all); }});
#ifdef WB_LADDER_HAS_01_02
  rungs.push_back({"01_naive", build, all, wb::model::Protocol::AllocateEveryCall, ch01_adapters::kLaunch,
                   [] { return std::make_unique<wb::model::FunctionMatmul>(ch01_adapters::naive_backend()); }});
  rungs.push_back({"02_preallocated", build, all, wb::model::Protocol::Preallocated, ch02_adapters::kLaunch, [] {
                     return owning_backend<ch02::PreallocatedMatvec>(ch02_adapters::preallocated_backend);
                   }});
#endif
  rungs.push_back({"03_persistent", build, all, wb::model::Protocol::Persistent, ch03_adapters::kLaunch, [] {
                     return owning_backend<ch03::PersistentMatvec>(ch03_adapters::persistent_backend);
                   }});
  return rungs;
}

int run_ladder(const std::string& build, const std::string& out, bool quick, int steps,
               const std::set<std::string>& only) {
  wb::ResultsWriter writer("03_persistent_weights", build);
  std::printf("the transfer ladder (%s build) on %s, %d CPU threads\n", build.c_str(),
              wb::device_info().name.c_str(), wb::model::max_threads());
  std::fprintf(stderr, "generating the synthetic 110M model...\n");
  const wb::model::Model model = wb::model::make_synthetic(wb::model::synthetic_110m());
  std::printf("model: %s\ngreedy decoding, %d steps (the first one untimed)\n\n", model.origin().c_str(), steps);
  wb::model::print_rung_header();
  double cpu1 = 0, cpu_all = 0;
  for (const Rung& rung : ladder(build)) {
    if (!only.empty() && !only.count(rung.variant)) continue;
    std::fprintf(stderr, "running %s...\n", rung.variant.c_str());
    try {
      auto backend = rung.make_backend();
      const nlohmann::json m = wb::model::measure_rung(model, *backend, rung.threads, steps, rung.protocol, rung.kernel);
      writer.add_metrics(rung.variant, rung.impl, "synthetic-110m", m);
      if (rung.variant == "cpu_1thread") cpu1 = m["tokens_per_s"];
      if (rung.variant == "cpu_all_threads") cpu_all = m["tokens_per_s"];
      wb::model::print_rung(rung.variant, m, cpu1, cpu_all);
    } catch (const wb::NotImplemented& e) {
      std::printf("  %-16s to do: %s\n", rung.variant.c_str(), e.what());
    }
  }
#ifndef WB_LADDER_HAS_01_02
  std::printf("  (01_naive and 02_preallocated: configure with chapters 01 and 02 to include them)\n");
#endif
  if (only.empty() || only.count("matvec")) {
    auto shapes = wb::model::bandwidth_shapes();
    if (quick) shapes.resize(2);
    std::printf("\nchapter 03's matvec kernel:\n");
    try {
      wb::model::bench_matvec_bandwidth(writer, ch03_adapters::kLaunch, "matvec", build, wb::Cache::Cold, shapes);
      wb::model::bench_matvec_bandwidth(writer, ch03_adapters::kLaunch, "matvec", build, wb::Cache::Hot, shapes);
    } catch (const wb::NotImplemented& e) {
      std::printf("  to do: %s\n", e.what());
    }
  }
  const auto path = out.empty() ? writer.default_path() : std::filesystem::path(out);
  writer.write(path);
  std::printf("\nwrote %s\n", path.string().c_str());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  const std::string build = ch03_build::name();
  CLI::App app{"Chapter 03 bench: the transfer ladder (CPU, 01, 02, 03) on the synthetic 110M model"};
  std::string out, only_list;
  bool quick = false;
  int steps = 0;
  app.add_option("--out", out, "results file (default: results/03_persistent_weights-<build>.json)");
  app.add_flag("--quick", quick, "32 steps and two matvec shapes instead of 256 and four");
  app.add_option("--steps", steps, "forward passes per rung (default 256, like the llama2.c anchors)");
  app.add_option("--only", only_list, "comma-separated variants (cpu_1thread,...,03_persistent,matvec)");

  wb::model::GenerateRequest request;
  std::string backend_name = "03";
  auto* gen = app.add_subcommand("generate", "generate text with one backend (what ./workbook generate runs)");
  gen->add_option("--backend", backend_name, "cpu, 01, 02 or 03")->check(CLI::IsMember({"cpu", "01", "02", "03"}));
  gen->add_option("--model", request.model_path, "llama2.c checkpoint (default: WB_DATA_DIR, else synthetic)");
  gen->add_option("--tokenizer", request.tokenizer_path, "llama2.c tokenizer (default: next to the model)");
  gen->add_option("--prompt", request.prompt, "text to start from");
  gen->add_option("--steps", request.steps, "forward passes (default 256)");
  gen->add_option("--temperature", request.temperature, "0 = greedy (default)");
  gen->add_option("--seed", request.seed, "sampling seed");
  gen->add_option("--threads", request.threads, "CPU threads (default: all)");
  CLI11_PARSE(app, argc, argv);

  if (!wb::has_cuda_device() && !(gen->parsed() && backend_name == "cpu")) {
    std::cerr << "bench_03: skipped: no CUDA device\n";
    return 77;
  }
  try {
    if (gen->parsed()) {
      std::unique_ptr<Matmul> backend;
      if (backend_name == "cpu") {
        backend = std::make_unique<wb::model::CpuMatmul>(request.threads);
      } else {
        for (const Rung& rung : ladder(build))
          if (rung.variant.rfind(backend_name + "_", 0) == 0) backend = rung.make_backend();
      }
      if (!backend) {
        std::cerr << "bench_03: backend " << backend_name
                  << " is not built into this program (configure with chapters 01, 02 and 03)\n";
        return 2;
      }
      return wb::model::run_generate(request, *backend, std::cout, std::cerr);
    }
    std::set<std::string> only;
    for (std::size_t start = 0; start < only_list.size();) {
      const std::size_t comma = std::min(only_list.find(',', start), only_list.size());
      only.insert(only_list.substr(start, comma - start));
      start = comma + 1;
    }
    return run_ladder(build, out, quick, steps > 0 ? steps : (quick ? 32 : 256), only);
  } catch (const wb::NotImplemented& e) {
    std::cerr << "bench_03: " << e.what() << "\nfinish the chapter's TODOs first (./workbook check 03)\n";
    return 1;
  } catch (const std::exception& e) {
    std::cerr << "bench_03: " << e.what() << "\n";
    return 1;
  }
}
