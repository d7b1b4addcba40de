// workbook generate: text from a llama2.c model, with the matmuls on the CPU or on a
// chapter's GPU code (01 naive, 02 preallocated, 03 persistent weights).
//
//   ./workbook generate                                   # synthetic 110M model, CPU
//   ./workbook generate --model stories260K.bin --tokenizer tok512.bin --backend 03
//   ./workbook generate --backend 01 --build student --prompt "Once upon a time"
//   ./workbook generate --save-synthetic synthetic110m.bin  # for llama2.c's run.c
//   ./workbook generate --sampler 07 --temperature 0.8 --top-k 50 --top-p 0.9 --seed 7
//                                                          # chapter 07's samplers pick
//   ./workbook generate --backend 08 --temperature 0.8 --top-p 0.9
//                                                          # chapter 08: the whole token loop on the GPU
//   ./workbook generate --backend 08 --step persistent     # chapter 08's decoder as one persistent kernel
//   ./workbook generate --backend 08 --step persistent --plan grid   # ... spread over every SM
//
// The CPU backend runs here (wb::model). The GPU backends live in the chapters' libraries,
// which only chapter 03's bench program links (all three chapters, one build): this
// command builds build/bin/bench_03_<build> and runs its `generate` subcommand. Backend 08 (the
// whole forward pass and the sampler on the GPU, the step as a CUDA graph) is chapter 08's bench
// program, build/bin/bench_08_<build> generate.
#include <iostream>
#include <string>
#include <vector>

#include "commands.hpp"
#include "grader/build.hpp"
#include "grader/process.hpp"

#ifdef WB_HAVE_MODEL
#include "wb/model/checkpoint.hpp"
#include "wb/model/generate_cli.hpp"
#include "wb/model/matmul.hpp"
#include "wb/model/synthetic.hpp"
#endif

namespace wb::cli {
namespace {

// Runs argv (no shell) through the grader's process runner and returns its exit status.
// A build echoes its lines to stderr (only when it builds something); the generator writes
// straight to our stdout and stderr, so `./workbook generate > story.txt` holds the story only.
int run_and_wait(const std::vector<std::string>& args, bool is_build) {
  grader::ProcessSpec spec;
  spec.argv = args;
  spec.env = grader::inherited_environment({});
  spec.limits.output_bytes = 1u << 20;
  if (is_build)
    spec.on_line = [](const std::string& line) {
      if (!grader::is_idle_build_line(line)) std::cerr << line << "\n";
    };
  else
    spec.inherit_output = true;
  const grader::ProcessResult r = grader::run_process(spec);
  if (!r.started) {
    std::cerr << "workbook generate: " << args[0] << " " << r.describe() << "\n";
    return 127;
  }
  return r.signal ? 128 + r.signal : r.exit_code;
}

struct Options {
  std::string backend = "cpu";
  std::string build = "solution";
  std::string model, tokenizer, prompt, save_synthetic;
  int steps = 256;
  float temperature = 0.0f;
  unsigned long long seed = 42;
  int threads = 0;
  std::string sampler;  // "" = the model engine's own; cpu or 07 = chapter 07's
  int top_k = 0;
  float top_p = 1.0f;
  std::string step = "graph";  // backend 08: graph, step_by_step or persistent
  std::string plan = "auto";   // backend 08 --step persistent: auto, grid or cluster
};

// The GPU generators live in chapter bench programs (each links its chapter libraries): build
// bench_<chapter>_<build>, then run its `generate` subcommand with `args` and the model options.
// `needs` says what must be configured when the build fails; `no_gpu` what to say on exit 77.
int build_and_generate(const Options& o, const std::string& chapter, const std::string& what,
                       const std::string& needs, std::vector<std::string> args, const std::string& no_gpu) {
  grader::install_interrupt_handlers();  // Ctrl-C stops the generator's process group too
  const std::string target = "bench_" + chapter + "_" + o.build;
  const std::string binary_dir = WB_BINARY_DIR;
  std::cerr << "workbook generate: building " << target << " (" << what << ", " << o.build << " build)\n";
  if (run_and_wait({"cmake", "--build", binary_dir, "--target", target}, true) != 0) {
    std::cerr << "workbook generate: building " << target << " failed (see above)\nhint: " << needs
              << (o.build == "student" ? " and your chapter files compiling" : "") << "; `./workbook check "
              << chapter << "` shows what is missing.\n";
    return 2;
  }
  args.insert(args.begin(), {binary_dir + "/bin/" + target, "generate"});
  args.insert(args.end(), {"--steps", std::to_string(o.steps), "--temperature", std::to_string(o.temperature),
                           "--seed", std::to_string(o.seed)});
  if (!o.model.empty()) args.insert(args.end(), {"--model", o.model});
  if (!o.tokenizer.empty()) args.insert(args.end(), {"--tokenizer", o.tokenizer});
  if (!o.prompt.empty()) args.insert(args.end(), {"--prompt", o.prompt});
  const int code = run_and_wait(args, false);
  if (code == 77) std::cerr << "workbook generate: " << no_gpu << "\n";
  return code;
}

// Chapter 07's samplers (--sampler cpu|07) live in chapter 07's library, which its bench
// program links.
int generate_with_chapter_sampler(const Options& o) {
  return build_and_generate(o, "07", "chapter 07", "--sampler needs chapter 07 configured",
                            {"--sampler", o.sampler, "--top-k", std::to_string(o.top_k), "--top-p",
                             std::to_string(o.top_p), "--threads", std::to_string(o.threads)},
                            "--sampler " + o.sampler + " needs a CUDA device");
}

// Backend 08: chapter 08's decoder, with chapter 07's fused sampler on the GPU (so --top-k and
// --top-p apply) and the step as a CUDA graph. Chapter 08 links the earlier chapters'
// references itself (manifest "uses").
int generate_with_chapter_08(const Options& o) {
  return build_and_generate(o, "08", "chapter 08", "backend 08 needs chapter 08 configured",
                            {"--top-k", std::to_string(o.top_k), "--top-p", std::to_string(o.top_p), "--step",
                             o.step, "--plan", o.plan},
                            "backend 08 needs a CUDA device; try --backend cpu");
}

// The matmul backends 01-03: chapter 03's bench program links chapters 01, 02 and 03.
int generate_on_gpu(const Options& o) {
  return build_and_generate(o, "03", "chapters 01-03",
                            "backend " + o.backend + " needs chapters 01, 02 and 03 configured",
                            {"--backend", o.backend, "--threads", std::to_string(o.threads)},
                            "backend " + o.backend + " needs a CUDA device; try --backend cpu");
}

}  // namespace

void register_generate(CLI::App& app) {
  auto options = std::make_shared<Options>();
  auto* cmd = app.add_subcommand(
      "generate",
      "Generate text with a llama2.c model; the matmuls run on the CPU or on chapter 01/02/03's GPU code. "
      "Without --model: WB_DATA_DIR's stories260K.bin, else the synthetic 110M model.");
  cmd->add_option("--backend", options->backend,
                  "where the matmuls run: cpu, 01, 02 or 03; 08: the whole token loop on the GPU (chapter 08)")
      ->check(CLI::IsMember({"cpu", "01", "02", "03", "08"}))
      ->capture_default_str();
  cmd->add_option("--build", options->build, "GPU backends: the reference (solution) or your code (student)")
      ->check(CLI::IsMember({"solution", "student"}))
      ->capture_default_str();
  cmd->add_option("--model", options->model, "llama2.c checkpoint (.bin)");
  cmd->add_option("--tokenizer", options->tokenizer, "llama2.c tokenizer (default: tok<vocab>.bin or tokenizer.bin next to the model)");
  cmd->add_option("--prompt", options->prompt, "text to start from");
  cmd->add_option("--steps", options->steps, "forward passes (capped at the model's context)")->capture_default_str();
  cmd->add_option("--temperature", options->temperature, "0 = greedy")->capture_default_str();
  cmd->add_option("--seed", options->seed, "sampling seed (with --temperature > 0)")->capture_default_str();
  cmd->add_option("--threads", options->threads, "CPU threads (0 = all)")->capture_default_str();
  cmd->add_option("--sampler", options->sampler,
                  "pick tokens with chapter 07's samplers: cpu (step 1) or 07 (the fused GPU sampler); "
                  "reproducible with --seed")
      ->check(CLI::IsMember({"cpu", "07"}));
  cmd->add_option("--top-k", options->top_k,
                  "with --sampler or --backend 08: keep the k most probable tokens (0 = off)")
      ->capture_default_str();
  cmd->add_option("--top-p", options->top_p, "with --sampler or --backend 08: keep the nucleus of this mass (1 = off)")
      ->capture_default_str();
  cmd->add_option("--step", options->step,
                  "with --backend 08: graph (the step as one CUDA graph), step_by_step (kernel by kernel) or "
                  "persistent (the decoder's own persistent kernel, Hopper GPUs)")
      ->check(CLI::IsMember({"graph", "step_by_step", "persistent"}))
      ->capture_default_str();
  cmd->add_option("--plan", options->plan,
                  "with --backend 08 --step persistent: auto (cluster where the model fits one), grid (one block "
                  "per SM) or cluster (one thread-block cluster holding the weights, for models as small as "
                  "stories260K)")
      ->check(CLI::IsMember({"auto", "grid", "cluster"}))
      ->capture_default_str();
  cmd->add_option("--save-synthetic", options->save_synthetic,
                  "write the synthetic 110M model as a llama2.c checkpoint to this file and exit");
  cmd->callback([options] {
#ifdef WB_HAVE_MODEL
    const Options& o = *options;
    if (!o.save_synthetic.empty()) {
      try {
        const wb::model::Model m = wb::model::make_synthetic(wb::model::synthetic_110m());
        wb::model::save_checkpoint(m, o.save_synthetic);
        std::cerr << "wrote " << m.origin() << " to " << o.save_synthetic << "\n";
        set_exit_code(0);
      } catch (const std::exception& e) {
        std::cerr << "workbook generate: " << e.what() << "\n";
        set_exit_code(2);
      }
      return;
    }
    if (!o.sampler.empty()) {
      if (o.backend != "cpu") {
        std::cerr << "workbook generate: --sampler runs with the CPU matmuls (--backend cpu)\n";
        set_exit_code(2);
        return;
      }
      set_exit_code(generate_with_chapter_sampler(o));
      return;
    }
    if (o.backend == "08") {  // chapter 08 samples on the GPU itself (chapter 07's fused sampler)
      set_exit_code(generate_with_chapter_08(o));
      return;
    }
    if (o.top_k != 0 || o.top_p != 1.0f) {
      std::cerr << "workbook generate: --top-k and --top-p need --sampler cpu, --sampler 07 or --backend 08\n";
      set_exit_code(2);
      return;
    }
    if (o.backend != "cpu") {
      set_exit_code(generate_on_gpu(o));
      return;
    }
    wb::model::GenerateRequest request;
    request.model_path = o.model;
    request.tokenizer_path = o.tokenizer;
    request.prompt = o.prompt;
    request.steps = o.steps;
    request.temperature = o.temperature;
    request.seed = o.seed;
    request.threads = o.threads;
    wb::model::CpuMatmul cpu(o.threads);
    set_exit_code(wb::model::run_generate(request, cpu, std::cout, std::cerr));
#else
    (void)options;
    std::cerr << "workbook generate: this build has no model engine (lib/model was not configured)\n";
    set_exit_code(2);
#endif
  });
}

}  // namespace wb::cli
