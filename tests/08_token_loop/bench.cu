// Chapter 08 bench: the whole token loop on the GPU, against the CPU engine and chapter 03.
// For each model (the synthetic 110M model; stories260K too when WB_DATA_DIR has it):
//   cpu_all_threads   the CPU engine on every OpenMP thread
//   03_persistent     chapter 03 (reference): weights resident, the rest on the CPU
//   08_step_by_step   this chapter's decoder, every kernel launched from the host
//   08_graph          the same step captured once as a CUDA graph, one launch per token
//   08_persistent     the decoder's own persistent step (persistent_step.hpp): the whole step
//                     as one kernel, none of the chapter's kernels (where the GPU can run it);
//                     its default plan (one thread-block cluster where one holds the model,
//                     stories260K; else the grid), both plans' tokens/s beside it
// greedy decoding from BOS, tokens/s over all steps but the first. The 08 entries add where
// the step's device time goes (stage_us, a graph per stage), the weight bytes a token reads and the
// roofline: tokens/s if every weight were read once per token at the measured read ceiling.
//
//   build/bin/bench_08_<build> [--out FILE] [--quick] [--steps N] [--persistent-blocks B,...]
//                              [--persistent-prefetch-ahead S,...] [--persistent-poll-ns NS,...]
//                              [--persistent-trace POS,...]
//   build/bin/bench_08_<build> generate [--model F] [--tokenizer F] [--prompt TEXT] [--steps N]
//                              [--temperature T] [--top-k K] [--top-p P] [--seed S]
//                              [--step graph|step_by_step|persistent] [--plan auto|grid|cluster]
// Writes results/08_token_loop-<build>.json, one entry per (variant, shape), shapes
// "stories260K" (when WB_DATA_DIR has it) and "synthetic-110m" (the ladder's model).
#include <CLI/CLI.hpp>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <iomanip>
#include <iostream>
#include <optional>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "gpu_decoder.hpp"
#include "persistent.hpp"  // chapter 03 (reference)
#include "wb/device.hpp"
#include "wb/model/bench_support.hpp"
#include "wb/model/checkpoint.hpp"
#include "wb/model/data.hpp"
#include "wb/model/generate_cli.hpp"
#include "wb/model/matmul.hpp"
#include "wb/model/synthetic.hpp"
#include "wb/model/tokenizer.hpp"
#include "wb/not_implemented.hpp"
#include "wb/results.hpp"
#include "wb/timing.hpp"

namespace {

namespace fs = std::filesystem;
using wb::model::Model;

nlohmann::json stage_json(const ch08::StageTimes& s) {
  return {{"embed_norm", s.embed_norm_us}, {"matvec", s.matvec_us}, {"rope", s.rope_us},
          {"attention", s.attention_us},   {"swiglu", s.swiglu_us}, {"sampler", s.sampler_us},
          {"total", s.total_us()}};
}

nlohmann::json stage_nodes_json(const ch08::StageTimes& s) {
  return {{"embed_norm", s.embed_norm_nodes}, {"matvec", s.matvec_nodes}, {"rope", s.rope_nodes},
          {"attention", s.attention_nodes},   {"swiglu", s.swiglu_nodes}, {"sampler", s.sampler_nodes}};
}

void print_row(const std::string& variant, double tps, double cpu_tps, double roofline) {
  std::printf("  %-16s %10.1f %10s %10s\n", variant.c_str(), tps,
              cpu_tps > 0 ? (std::to_string(tps / cpu_tps).substr(0, 6) + "x").c_str() : "-",
              roofline > 0 ? (std::to_string(100.0 * tps / roofline).substr(0, 5) + "%").c_str() : "-");
  std::fflush(stdout);
}

// What --persistent-blocks, --persistent-prefetch-ahead and --persistent-poll-ns ask to time,
// and --persistent-trace to trace.
struct Sweeps {
  std::vector<int> grids;
  std::vector<int> prefetch_ahead;
  std::vector<unsigned> poll_ns;
  std::vector<int> ring_slots;
  std::vector<int> copies;
  std::vector<int> wqkv_on_heads;  // 1: the default; 0: the head blocks compute no Wqkv rows
  std::vector<int> trace_positions;
};

// The persistent step's tokens/s at other grid sizes (--persistent-blocks), printed only: how
// the hand-offs between blocks and the per-SM weight stream trade off for this model.
void sweep_persistent_blocks(ch08::GpuDecoder& dec, const std::vector<int>& grids, int steps) {
  if (grids.empty() || !dec.persistent_step()) return;
  dec.set_mode(ch08::StepMode::Persistent);
  const ch08::PersistentPlan chosen = dec.persistent_step()->plan();
  dec.set_persistent_plan(ch08::PersistentPlan::Grid);
  std::printf("  persistent step (grid plan) by grid size (blocks: tok/s):");
  for (int blocks : grids) {
    if (blocks > dec.persistent_step()->max_blocks()) continue;  // more than can run (at most dim)
    dec.set_persistent_blocks(blocks);
    std::printf(" %d: %.1f", dec.persistent_step()->blocks(), dec.measure_tokens_per_s(steps));
    std::fflush(stdout);
  }
  std::printf("\n");
  dec.set_persistent_blocks(0);
  dec.set_persistent_plan(chosen);
}

// The Grid plan's tokens/s with each value of one latency knob (a PersistentTuning member),
// the other at the reference's default; printed only.
template <typename T, typename V>
void sweep_knob(ch08::GpuDecoder& dec, const char* what, const std::vector<V>& values,
                T ch08::PersistentTuning::*knob, int steps) {
  if (values.empty()) return;
  std::printf("  persistent step (grid plan) by %s:", what);
  for (const V value : values) {
    ch08::PersistentTuning tuning;
    tuning.*knob = static_cast<T>(value);
    try {
      dec.set_persistent_tuning(tuning);
    } catch (const std::invalid_argument& e) {  // a ring too large for this GPU's shared memory
      std::printf(" %s: cannot run (%s)", std::to_string(value).c_str(), e.what());
      continue;
    }
    std::printf(" %s: %.1f", std::to_string(value).c_str(), dec.measure_tokens_per_s(steps));
    std::fflush(stdout);
  }
  std::printf("\n");
  std::fflush(stdout);  // before the next progress line on stderr, in a log that holds both
}

// How far ahead the weights are asked of L2, how long a block sleeps between two polls of a
// value not yet written, the weight ring's slots and its copies in flight
// (--persistent-prefetch-ahead, --persistent-poll-ns, --persistent-ring-slots, --persistent-copies).
void sweep_persistent_tuning(ch08::GpuDecoder& dec, const Sweeps& sweeps, int steps) {
  if ((sweeps.prefetch_ahead.empty() && sweeps.poll_ns.empty() && sweeps.ring_slots.empty() && sweeps.copies.empty() &&
       sweeps.wqkv_on_heads.empty()) ||
      !dec.persistent_step())
    return;
  dec.set_mode(ch08::StepMode::Persistent);
  const ch08::PersistentPlan chosen = dec.persistent_step()->plan();
  dec.set_persistent_plan(ch08::PersistentPlan::Grid);
  sweep_knob(dec, "L2 prefetch distance (stages: tok/s)", sweeps.prefetch_ahead,
             &ch08::PersistentTuning::prefetch_ahead, steps);
  sweep_knob(dec, "sleep between polls (ns: tok/s)", sweeps.poll_ns, &ch08::PersistentTuning::poll_sleep_ns, steps);
  sweep_knob(dec, "weight ring slots (slots: tok/s)", sweeps.ring_slots, &ch08::PersistentTuning::ring_slots, steps);
  sweep_knob(dec, "ring copies in flight (copies: tok/s)", sweeps.copies, &ch08::PersistentTuning::copies_in_flight,
             steps);
  sweep_knob(dec, "Wqkv on the head blocks (1 yes, 0 no: tok/s)", sweeps.wqkv_on_heads,
             &ch08::PersistentTuning::wqkv_on_head_blocks, steps);
  dec.set_persistent_tuning(ch08::PersistentTuning{});
  dec.set_persistent_plan(chosen);
}

// Where one token's time goes inside the persistent step (grid plan), at each position asked
// (--persistent-trace): one traced launch after the positions before it, teacher-forced, as
// hand-off, work and straggle per stage (ch08::trace_table); printed only. With the default
// tuning, and also with Wqkv off the head blocks when --persistent-wqkv-on-heads asks for it.
void trace_persistent(ch08::GpuDecoder& dec, const Model& model, const Sweeps& sweeps) {
  const std::vector<int>& positions = sweeps.trace_positions;
  if (positions.empty() || !dec.persistent_step()) return;
  std::vector<std::pair<std::string, ch08::PersistentTuning>> tunings = {{"", ch08::PersistentTuning{}}};
  for (const int on : sweeps.wqkv_on_heads)
    if (on == 0) {
      ch08::PersistentTuning off;
      off.wqkv_on_head_blocks = false;
      tunings.emplace_back(", Wqkv off the head blocks", off);
    }
  dec.set_mode(ch08::StepMode::Persistent);
  const ch08::PersistentPlan chosen = dec.persistent_step()->plan();
  dec.set_persistent_plan(ch08::PersistentPlan::Grid);
  const int vocab = model.config().vocab_size, seq_len = model.config().seq_len;
  for (const auto& [label, tuning] : tunings) {
    dec.set_persistent_tuning(tuning);
    for (const int pos : positions) {
      if (pos < 0 || pos >= seq_len) {
        std::printf("  (no trace at position %d: the context is 0..%d)\n", pos, seq_len - 1);
        continue;
      }
      dec.reset();
      for (int p = 0; p < pos; ++p) (void)dec.forward_logits((1 + p) % vocab);
      const ch08::StepTrace trace = dec.trace_persistent_step((1 + pos) % vocab);
      std::printf("  persistent step (grid plan, %d blocks%s), one token traced at position %d:\n", trace.blocks,
                  label.c_str(), pos);
      for (const std::string& line : ch08::trace_table(trace)) std::printf("    %s\n", line.c_str());
      std::fflush(stdout);
    }
  }
  dec.set_persistent_tuning(ch08::PersistentTuning{});
  dec.reset();
  dec.set_persistent_plan(chosen);
}

// The persistent step's tokens/s with each plan it can run (PersistentPlan), the default's
// (`measured`, just timed) included; the decoder is left in its default plan.
nlohmann::json plan_tokens_per_s(ch08::GpuDecoder& dec, int steps, double measured) {
  const ch08::PersistentStep& ps = *dec.persistent_step();
  const ch08::PersistentPlan chosen = ps.plan();
  nlohmann::json out;
  for (ch08::PersistentPlan plan : {ch08::PersistentPlan::Grid, ch08::PersistentPlan::Cluster}) {
    if (plan == chosen) {
      out[ch08::plan_name(plan)] = measured;
    } else if (plan == ch08::PersistentPlan::Grid || ps.cluster_unavailable().empty()) {
      dec.set_persistent_plan(plan);
      out[ch08::plan_name(plan)] = dec.measure_tokens_per_s(steps);
    }
  }
  dec.set_persistent_plan(chosen);
  char cluster[32] = "cannot run";
  if (out.contains("cluster")) std::snprintf(cluster, sizeof cluster, "%.1f", out.at("cluster").get<double>());
  std::printf("  persistent step by plan (tok/s): grid %.1f, cluster %s (the bench's row: %s)\n",
              out.at("grid").get<double>(), cluster, ch08::plan_name(chosen));
  return out;
}

void bench_model(wb::ResultsWriter& writer, const std::string& build, const Model& model,
                 const std::string& shape, int steps, const Sweeps& sweeps) {
  const int all = wb::model::max_threads();
  steps = std::min(steps, model.config().seq_len - 1);
  std::printf("\n%s: %s\n  %s\n  %-16s %10s %10s %10s\n", shape.c_str(), model.origin().c_str(),
              model.config().summary().c_str(), "variant", "tok/s", "x cpu", "% roofline");
  double cpu_tps = 0;
  {
    std::fprintf(stderr, "running cpu_all_threads on %s...\n", shape.c_str());
    wb::model::CpuMatmul cpu(all);
    const nlohmann::json m = wb::model::measure_rung(model, cpu, all, steps);
    writer.add_metrics("cpu_all_threads", "cpu", shape, m);
    cpu_tps = m.at("tokens_per_s").get<double>();
    print_row("cpu_all_threads", cpu_tps, cpu_tps, 0);
  }
  {
    std::fprintf(stderr, "running 03_persistent on %s...\n", shape.c_str());
    ch03::PersistentMatvec persistent;
    wb::model::FunctionMatmul backend(
        "03_persistent",
        [&persistent](float* out, const float* x, const float* W, int n, int d) { persistent.matvec(out, x, W, n, d); },
        [&persistent](std::span<const float> w) { persistent.load(w.data(), w.size()); });
    const nlohmann::json m = wb::model::measure_rung(
        model, backend, all, steps, wb::model::Protocol::Persistent,
        [](float* y, const float* x, const float* W, int n, int d, cudaStream_t s) {
          ch03::launch_matvec(y, x, W, n, d, s);
        });
    writer.add_metrics("03_persistent", "reference", shape, m);
    print_row("03_persistent", m.at("tokens_per_s").get<double>(), cpu_tps, 0);
  }
  try {
    ch08::GpuModel gm(model);
    ch08::GpuDecoder dec(gm);
    const std::size_t bytes = gm.weight_bytes_per_token();
    const wb::Ceilings& ceil = wb::measured_ceilings();
    const bool use_read = ceil.read_gbps > 0;
    const double gbps = use_read ? ceil.read_gbps : ceil.copy_gbps;
    const double roofline = gbps * 1e9 / double(bytes);
    // The stages at the mean position of the timed run (attention's work grows with it).
    const int stage_position = steps / 2;
    std::fprintf(stderr, "measuring the stages of the step on %s (a graph per stage, at position %d)...\n",
                 shape.c_str(), stage_position);
    const ch08::StageTimes stages = dec.measure_stages(stage_position);
    std::vector<ch08::StepMode> modes{ch08::StepMode::StepByStep, ch08::StepMode::Graph};
    if (dec.persistent_step()) modes.push_back(ch08::StepMode::Persistent);
    else std::printf("  (08_persistent skipped: %s)\n", dec.persistent_unavailable().c_str());
    for (ch08::StepMode mode : modes) {
      const std::string variant = std::string("08_") + ch08::to_string(mode);
      const bool persistent = mode == ch08::StepMode::Persistent;
      std::fprintf(stderr, "running %s on %s...\n", variant.c_str(), shape.c_str());
      dec.set_mode(mode);
      const double tps = dec.measure_tokens_per_s(steps);
      // The decoder's own launch count per token (sampling, so the sampler is included).
      (void)dec.generate(std::vector<int>{wb::model::Tokenizer::kBos}, std::min(steps, 32),
                         ch07::SamplingParams{1.0f, 0, 1.0f, 1, 0});
      nlohmann::json m;
      m["tokens_per_s"] = tps;
      m["tokens_timed"] = steps - 1;
      m["steps"] = steps;
      m["mode"] = ch08::to_string(mode);
      if (persistent) {
        // One kernel: no stages to time apart. Its plan instead.
        const ch08::PersistentStep& ps = *dec.persistent_step();
        m["persistent_plan"] = ch08::plan_name(ps.plan());
        m["persistent_plan_tokens_per_s"] = plan_tokens_per_s(dec, steps, tps);
        m["persistent_picks_greedy_token"] = ps.picks_greedy_token();
        m["persistent_blocks"] = ps.blocks();  // the grid plan's
        m["persistent_shared_bytes"] = ps.shared_bytes();
        m["persistent_history_rows"] = ps.history_rows();
        m["persistent_cluster_blocks"] = ps.cluster_blocks();  // 0: no cluster holds the model
        m["persistent_cluster_shared_bytes"] = ps.cluster_shared_bytes();
      } else {
        m["stage_us"] = stage_json(stages);
        m["stage_method"] = "per stage, a CUDA graph of only that stage's launches of one step, replayed back to "
                            "back at position " + std::to_string(stage_position) +
                            " (the mean position of the timed run), event-timed; the greedy sampler likewise "
                            "(the same for both modes)";
        m["stage_position"] = stage_position;
        m["stage_nodes"] = stage_nodes_json(stages);
      }
      m["breakdown_us"] = {{"alloc", 0.0}, {"h2d", 0.0}, {"kernel", 1e6 / tps}, {"d2h", 0.0}, {"free", 0.0}};
      m["breakdown_method"] =
          persistent && dec.persistent_step()->picks_greedy_token()
              ? "the whole token (the step, which picks the greedy token itself and writes it into pinned host "
                "memory: no sampler, no copy) under 'kernel': 1e6 / tokens_per_s"
              : "the whole token (step, sampler, the 4-byte token copy back) under 'kernel': 1e6 / tokens_per_s";
      m["host_launches_per_token"] = dec.host_launches_per_step();
      m["step_nodes"] = persistent ? 1 : dec.step_nodes();
      m["sampler_nodes"] = dec.sampler_nodes();
      m["weight_bytes_per_token"] = bytes;
      m["roofline_tokens_per_s"] = roofline;
      m["roofline_ceiling"] = use_read ? "read_gbps" : "copy_gbps";
      writer.add_metrics(variant, build, shape, m);
      print_row(variant, tps, cpu_tps, roofline);
    }
    sweep_persistent_blocks(dec, sweeps.grids, steps);
    sweep_persistent_tuning(dec, sweeps, steps);
    trace_persistent(dec, model, sweeps);
    std::printf("  stages of the step as graphs (us, position %d): embed+norm %.1f, matvec %.1f, rope %.1f, attention %.1f, "
                "swiglu %.1f, sampler %.1f; roofline %.0f tok/s (%.1f MB per token at %.0f GB/s)\n",
                stage_position, stages.embed_norm_us, stages.matvec_us, stages.rope_us, stages.attention_us, stages.swiglu_us,
                stages.sampler_us, roofline, double(bytes) / 1e6, gbps);
  } catch (const wb::NotImplemented& e) {
    std::printf("  %-16s to do: %s\n", "08_*", e.what());
  }
}

int run_bench(const std::string& build, const std::string& out, int steps, const Sweeps& sweeps) {
  wb::ResultsWriter writer("08_token_loop", build);
  std::printf("chapter 08, the whole token loop on the GPU (%s build) on %s, %d CPU threads; greedy, %d steps\n",
              build.c_str(), wb::device_info().name.c_str(), wb::model::max_threads(), steps);
  std::string why;
  if (const auto files = wb::model::tiny_stories_from_env(&why)) {
    const Model m = wb::model::load_checkpoint(files->model);
    bench_model(writer, build, m, "stories260K", steps, sweeps);
  } else {
    std::printf("\n(stories260K skipped: %s)\n", why.c_str());
  }
  std::fprintf(stderr, "generating the synthetic 110M model...\n");
  const Model m = wb::model::make_synthetic(wb::model::synthetic_110m());
  bench_model(writer, build, m, "synthetic-110m", steps, sweeps);
  const auto path = out.empty() ? writer.default_path() : fs::path(out);
  writer.write(path);
  std::printf("\nwrote %s\n", path.string().c_str());
  return 0;
}

struct GenerateArgs {
  std::string model_path, tokenizer_path, prompt, step = "graph", plan = "auto";
  int steps = 256;
  float temperature = 0.0f, top_p = 1.0f;
  int top_k = 0;
  unsigned long long seed = 42;
};

std::optional<fs::path> tokenizer_next_to(const fs::path& model, int vocab) {
  for (const std::string name : {"tok" + std::to_string(vocab) + ".bin", std::string("tokenizer.bin")}) {
    std::error_code ec;
    if (fs::exists(model.parent_path() / name, ec)) return model.parent_path() / name;
  }
  return std::nullopt;
}

int run_generate(const GenerateArgs& a) {
  std::optional<Model> model;
  std::optional<wb::model::Tokenizer> tok;
  fs::path model_path = a.model_path, tokenizer_path = a.tokenizer_path;
  if (model_path.empty())
    if (const auto tiny = wb::model::tiny_stories_from_env()) {
      model_path = tiny->model;
      if (tokenizer_path.empty()) tokenizer_path = tiny->tokenizer;
      std::cerr << "no --model given: using " << model_path.string() << " from WB_DATA_DIR\n";
    }
  if (model_path.empty()) {
    std::cerr << wb::model::no_model_note();
    model.emplace(wb::model::make_synthetic(wb::model::synthetic_110m()));
    if (!tokenizer_path.empty()) tok.emplace(wb::model::Tokenizer::load(tokenizer_path, model->config().vocab_size));
    else tok.emplace(wb::model::Tokenizer::synthetic(model->config().vocab_size, wb::model::synthetic_110m().seed));
  } else {
    model.emplace(wb::model::load_checkpoint(model_path));
    if (tokenizer_path.empty()) {
      const auto found = tokenizer_next_to(model_path, model->config().vocab_size);
      if (!found) {
        std::cerr << "bench_08 generate: no --tokenizer given and none found next to " << model_path.string()
                  << "\nhint: pass --tokenizer (tok512.bin for stories260K, tokenizer.bin for the 32000-token models)\n";
        return 2;
      }
      tokenizer_path = *found;
    }
    tok.emplace(wb::model::Tokenizer::load(tokenizer_path, model->config().vocab_size));
  }
  const ch08::StepMode mode = a.step == "persistent"     ? ch08::StepMode::Persistent
                              : a.step == "step_by_step" ? ch08::StepMode::StepByStep
                                                         : ch08::StepMode::Graph;
  std::cerr << "model: " << model->origin() << "\n  " << model->config().summary()
            << "\ndecoder: chapter 08 (" << WB_BUILD_NAME << " build), " << ch08::to_string(mode)
            << (mode == ch08::StepMode::Persistent ? " (the decoder's own kernel, not the chapter's)" : "")
            << ", the fused GPU sampler (chapter 07)\n";
  ch08::GpuModel gm(*model);
  ch08::GpuDecoder dec(gm);
  dec.set_mode(mode);
  if (a.plan != "auto") {
    if (mode != ch08::StepMode::Persistent) {
      std::cerr << "bench_08 generate: --plan " << a.plan << " is the persistent step's; add --step persistent\n";
      return 2;
    }
    dec.set_persistent_plan(a.plan == "cluster" ? ch08::PersistentPlan::Cluster : ch08::PersistentPlan::Grid);
  }
  if (mode == ch08::StepMode::Persistent)
    std::cerr << "persistent plan: " << ch08::plan_name(dec.persistent_step()->plan()) << "\n";
  const std::vector<int> prompt = tok->encode(a.prompt, /*bos=*/true, /*eos=*/false);
  ch07::SamplingParams p;
  p.temperature = a.temperature;
  p.top_k = a.top_k;
  p.top_p = a.top_p;
  p.seed = a.seed;
  const auto t0 = std::chrono::steady_clock::now();
  const std::vector<int> tokens = dec.generate(prompt, a.steps, p);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::string text;
  for (std::size_t i = 1; i < tokens.size(); ++i) {
    const std::string piece = tok->decode(tokens[i - 1], tokens[i]);
    if (!wb::model::is_unprintable_piece(piece)) text += piece;
  }
  std::cout << text << "\n" << std::flush;
  std::cerr << std::fixed << std::setprecision(1) << "tok/s: " << dec.forward_passes() / seconds << " ("
            << dec.forward_passes() << " forward passes, the first included; " << dec.host_launches_per_step()
            << " host launches per token)\n";
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  const std::string build = WB_BUILD_NAME;
  CLI::App app{"Chapter 08 bench: the whole token loop on the GPU (CPU, chapter 03, step by step, graph)"};
  std::string out;
  bool quick = false;
  int steps = 0;
  app.add_option("--out", out, "results file (default: results/08_token_loop-<build>.json)");
  app.add_flag("--quick", quick, "32 steps instead of 256");
  app.add_option("--steps", steps, "forward passes per variant (default 256, like the llama2.c anchors)");
  Sweeps sweeps;
  app.add_option("--persistent-blocks", sweeps.grids,
                 "also time the persistent step with these grid sizes (printed, not written)")
      ->delimiter(',');
  app.add_option("--persistent-prefetch-ahead", sweeps.prefetch_ahead,
                 "also time the grid plan with the weights asked of L2 this many stages ahead (0.." +
                     std::to_string(ch08::PersistentTuning::kMaxPrefetchAhead) + "; printed, not written)")
      ->delimiter(',')
      ->check(CLI::Range(0, ch08::PersistentTuning::kMaxPrefetchAhead));
  app.add_option("--persistent-poll-ns", sweeps.poll_ns,
                 "also time the grid plan with this sleep between two polls of a tagged value (ns; printed, not "
                 "written)")
      ->delimiter(',')
      ->check(CLI::Range(0u, ch08::PersistentTuning::kMaxPollSleepNs));
  app.add_option("--persistent-ring-slots", sweeps.ring_slots,
                 "also time the grid plan with a weight ring of this many 16 KB slots (" +
                     std::to_string(ch08::PersistentTuning::kMinRingSlots) + ".." +
                     std::to_string(ch08::PersistentTuning::kMaxRingSlots) + "; printed, not written)")
      ->delimiter(',')
      ->check(CLI::Range(ch08::PersistentTuning::kMinRingSlots, ch08::PersistentTuning::kMaxRingSlots));
  app.add_option("--persistent-copies", sweeps.copies,
                 "also time the grid plan with at most this many copies into the weight ring in flight (1..the "
                 "default ring's slots; printed, not written)")
      ->delimiter(',')
      ->check(CLI::Range(1, ch08::PersistentTuning{}.ring_slots));
  app.add_option("--persistent-wqkv-on-heads", sweeps.wqkv_on_heads,
                 "also time the grid plan with the attention heads' blocks computing a share of Wqkv (1, the "
                 "default) or none of it (0; with --persistent-trace, traced too; printed, not written)")
      ->delimiter(',')
      ->check(CLI::Range(0, 1));
  app.add_option("--persistent-trace", sweeps.trace_positions,
                 "also trace one token of the grid plan at these positions: per stage, the hand-off from the last "
                 "writer, the work and the straggle (printed, not written)")
      ->delimiter(',')
      ->check(CLI::Range(0, 1 << 20));

  GenerateArgs g;
  auto* gen = app.add_subcommand("generate", "generate text with the chapter 08 decoder (./workbook generate --backend 08)");
  gen->add_option("--model", g.model_path, "llama2.c checkpoint (default: WB_DATA_DIR, else synthetic)");
  gen->add_option("--tokenizer", g.tokenizer_path, "llama2.c tokenizer (default: next to the model)");
  gen->add_option("--prompt", g.prompt, "text to start from");
  gen->add_option("--steps", g.steps, "forward passes (default 256, capped at the model's context)");
  gen->add_option("--temperature", g.temperature, "0 = greedy (default)");
  gen->add_option("--top-k", g.top_k, "keep the k most probable tokens (0 = off)");
  gen->add_option("--top-p", g.top_p, "keep the nucleus of this mass (1 = off)");
  gen->add_option("--seed", g.seed, "sampling seed");
  gen->add_option("--step", g.step,
                  "graph: the step as a CUDA graph (default); step_by_step: launched kernel by kernel; "
                  "persistent: the decoder's persistent kernel (Hopper)")
      ->check(CLI::IsMember({"graph", "step_by_step", "persistent"}));
  gen->add_option("--plan", g.plan,
                  "with --step persistent: auto (cluster where the model fits one, the default), grid (one block "
                  "per SM) or cluster (one thread-block cluster holding the weights, for small models)")
      ->check(CLI::IsMember({"auto", "grid", "cluster"}));
  CLI11_PARSE(app, argc, argv);

  if (!wb::has_cuda_device()) {
    std::cerr << "bench_08: skipped: no CUDA device\n";
    return 77;
  }
  try {
    if (gen->parsed()) return run_generate(g);
    return run_bench(build, out, steps > 0 ? steps : (quick ? 32 : 256), sweeps);
  } catch (const wb::NotImplemented& e) {
    std::cerr << "bench_08: " << e.what() << "\nfinish the chapter's TODOs first (./workbook check 08)\n";
    return 1;
  } catch (const wb::model::ModelError& e) {
    std::cerr << "bench_08: " << e.what() << "\n";
    return 2;
  } catch (const std::invalid_argument& e) {
    std::cerr << "bench_08: " << e.what() << "\n";
    return 2;
  } catch (const std::exception& e) {
    std::cerr << "bench_08: " << e.what() << "\n";
    return 1;
  }
}
