// bench_07_<build>: the chapter 07 samplers side by side, every one re-checked on fresh
// logits after timing. Writes results/07_gpu_sampler-<build>.json.
//
//   build/bin/bench_07_solution [--out FILE] [--quick]
//   build/bin/bench_07_solution generate --sampler cpu|07 [--temperature T] [--top-k K]
//       [--top-p P] [--seed S] [--model M --tokenizer T --prompt P --steps N]
//     text from the llama2.c engine (wb::model, CPU matmuls) with chapter 07's CPU sampler
//     or its fused GPU sampler picking every token; what `./workbook generate --sampler`
//     runs. The same --seed gives the same text: each token's draw is draw_uniform(seed,
//     position, 0).
//
// Entries (variant / impl; every entry has "shape" = ROWSxVOCAB and "sampling" = the params):
//   copy            baseline  a device copy of the logits (the bytes any sampler must read)
//   cpu_1t          cpu       step 1, the CPU sampler on one thread (logits already on the host)
//   cpu_threads     cpu       the same on every hardware thread ("threads" says how many)
//   sort_then_cpu   <build>   step 2: GPU sort of every row, rows copied back, CPU post
//   top_candidates  <build>   step 3: GPU softmax + top candidates, candidates copied back
//   fused           <build>   step 4: everything on the GPU; tokens and confidences stay there
//   greedy          <build>   step 4 with T = 0: the argmax and its confidence
//   ch04_softmax    ch04_reference  chapter 04's reference fused softmax (ch04::softmax_fused)
//                             of the same logits, at every shape greedy is timed at: what
//                             greedy must not be slower than (it reads the row and writes it
//                             back; greedy reads it and writes 8 bytes). "bytes" counts both.
//                             The greedy entry of that shape carries "ch04_softmax_over_greedy".
// Sampling cases ("sampling"): topk50_topp0.9 (T = 1, top_k 50, top_p 0.9), topp0.9 (T = 1,
// top_p 0.9 alone) and greedy (T = 0). Every timed entry records "d2h_bytes_per_row" and
// "speedup_vs_cpu_1t" / "speedup_vs_sort_then_cpu" where those ran at the same shape and case.
// "op" repeats "sampling" (the schema's key for telling entries of one shape apart). Steps
// 2 and 3 also get a "stages" entry (impl = the step's variant) whose "breakdown_us" is the
// report's stage table: sort / gpu, copy, cpu_post, each timed on its own (see the stage
// table below) with the CPU part as the remainder of the whole call for step 2.
//
// Then the report's workload replayed ("replay_16x151936" entries, one per variant, "op" =
// the variant): a block of 16 masked positions over a 151936-token vocabulary, kReplaySteps
// denoising steps. Each step runs a stand-in for the model's forward pass (it streams
// kStandinWeightBytes of "weights", what a 1B-parameter bf16 model reads per step, then
// writes fresh logits; timed alone as "replay_logits_only") and samples its logits;
// "sampling_share" is the part of the step spent sampling, "ms_per_step" the whole step.
//
// Timing: GPU-only work (fused, greedy, ch04_softmax, copy) by device events around the stream's work
// (wb::Bench, Clock::Device, cold L2); steps 1-3, which synchronize or run on the CPU, by
// the host clock (Clock::Host).
#include <cuda_runtime.h>

#include <CLI/CLI.hpp>
#include <cub/device/device_segmented_radix_sort.cuh>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <functional>
#include <iostream>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "reference.hpp"
#include "sampler.cuh"
#include "softmax.cuh"  // chapter 04's API: its reference, linked through "uses" (chapter.json)
#include "wb/buffer.hpp"
#include "wb/check.hpp"
#include "wb/device.hpp"
#include "wb/not_implemented.hpp"
#include "wb/random.hpp"
#include "wb/results.hpp"
#include "wb/timing.hpp"

#ifdef WB_HAVE_MODEL
#include "wb/model/generate_cli.hpp"
#include "wb/model/matmul.hpp"
#endif

namespace {

using ch07::SamplingParams;

struct Shape {
  int rows, vocab;
  std::string name() const { return std::to_string(rows) + "x" + std::to_string(vocab); }
  std::size_t count() const { return static_cast<std::size_t>(rows) * vocab; }
};

struct Case {
  std::string name;
  SamplingParams params;
};

const Case kTopK50TopP{"topk50_topp0.9", {1.0f, 50, 0.9f, 2024, 0}};
const Case kTopP{"topp0.9", {1.0f, 0, 0.9f, 2024, 0}};
const Case kGreedy{"greedy", {0.0f, 0, 1.0f, 2024, 0}};

constexpr int kReplaySteps = 64;
constexpr std::size_t kStandinWeightBytes = std::size_t(2) << 30;  // 1B parameters in bf16

// Logits with a realistic spread: normal, standard deviation 4 (as the PyTorch peer's).
std::vector<float> make_logits(const Shape& s, const std::string& label) {
  return wb::random_normal(s.count(), 0.0f, 4.0f, "ch07/bench/" + label + "/" + s.name());
}

// Pinned host memory (the CPU samplers' inputs and the copies of the stage table).
template <typename T>
struct PinnedBuffer {
  T* ptr = nullptr;
  explicit PinnedBuffer(std::size_t n) { WB_CUDA(cudaMallocHost(&ptr, std::max<std::size_t>(n, 1) * sizeof(T))); }
  ~PinnedBuffer() { cudaFreeHost(ptr); }
  PinnedBuffer(const PinnedBuffer&) = delete;
  PinnedBuffer& operator=(const PinnedBuffer&) = delete;
};

// ------------------------------------------------------------------------------------------
// Checking a sampler's answer (rule 7 of the harness: after timing, on fresh logits).

// Every row: the token is in the kept set (or the token right after it, at the top-p
// boundary), its confidence is its probability; greedy: exactly the argmax.
void check_answer(const std::string& who, const Shape& s, const std::vector<float>& logits,
                  const SamplingParams& p, const std::vector<int>& tokens,
                  const std::vector<float>& confidence) {
  const int rows_to_check = std::min(s.rows, 32);  // the CPU reference costs ~ms per row
  for (int r = 0; r < rows_to_check; ++r) {
    const float* row = logits.data() + static_cast<std::size_t>(r) * s.vocab;
    const ch07::reference::KeptSet kept = ch07::reference::kept_set(row, s.vocab, p);
    const int t = tokens[r];
    const auto at = std::find(kept.tokens.begin(), kept.tokens.end(), t);
    bool ok = at != kept.tokens.end();
    if (!ok && !ch07::is_greedy(p) && t >= 0 && t < s.vocab) {
      const std::vector<int> ranked =
          ch07::reference::ranked_tokens(row, s.vocab, static_cast<int>(kept.tokens.size()) + 1);
      ok = ranked.back() == t;  // the documented band at the top-p boundary
    }
    if (!ok)
      throw std::runtime_error("bench_07: " + who + " " + s.name() + " row " + std::to_string(r) +
                               ": token " + std::to_string(t) + " is not in the kept set");
    const double want = ch07::reference::probabilities(
        row, s.vocab, ch07::reference::confidence_temperature(p))[t];
    if (!(std::abs(confidence[r] - want) <= 1e-9 + 1e-3 * want))
      throw std::runtime_error("bench_07: " + who + " " + s.name() + " row " + std::to_string(r) +
                               ": confidence " + std::to_string(confidence[r]) + ", expected " +
                               std::to_string(want));
  }
}

// Chapter 04's softmax (the ch04_softmax entries) on fresh logits: the first rows' outputs
// against the double-precision softmax (T = 1).
void check_softmax(const Shape& s, const std::vector<float>& logits, wb::DeviceBuffer<float>& probs,
                   const std::function<void(cudaStream_t)>& softmax) {
  probs.poison();
  softmax(nullptr);
  WB_CUDA(cudaDeviceSynchronize());
  const std::vector<float> got = probs.download();
  const int rows_to_check = std::min(s.rows, 4);
  for (int r = 0; r < rows_to_check; ++r) {
    const std::size_t at = static_cast<std::size_t>(r) * s.vocab;
    const std::vector<double> want = ch07::reference::probabilities(logits.data() + at, s.vocab, 1.0);
    for (int i = 0; i < s.vocab; ++i)
      if (!(std::abs(got[at + i] - want[i]) <= 1e-9 + 1e-3 * want[i]))
        throw std::runtime_error("bench_07: ch04_softmax " + s.name() + " row " + std::to_string(r) +
                                 " column " + std::to_string(i) + ": " + std::to_string(got[at + i]) +
                                 ", expected " + std::to_string(want[i]));
  }
}

// ------------------------------------------------------------------------------------------

class SamplerBench {
 public:
  SamplerBench(wb::ResultsWriter& writer, bool quick) : writer_(writer), quick_(quick) {}

  wb::BenchOptions options(wb::Clock clock, double bytes) const {
    wb::BenchOptions o;
    o.clock = clock;
    o.bytes = bytes;
    if (clock == wb::Clock::Host) o.check_floor = false;  // host time includes more than bytes
    if (quick_) {
      o.min_samples = 5;
      o.min_time_ms = 5;
      o.max_time_ms = 300;
    } else {
      o.min_samples = 10;
      o.min_time_ms = 20;
      o.max_time_ms = 1500;
    }
    return o;
  }

  // Times `work` and records it; returns the median (0 when skipped).
  double measure(const std::string& variant, const std::string& impl, const Shape& s,
                 const Case& c, wb::BenchOptions o, const std::function<void(cudaStream_t)>& work,
                 const std::function<void()>& verify, nlohmann::json extra) {
    o.name = "sampler " + variant + " " + s.name() + " " + c.name;
    std::cerr << "bench_07: " << variant << " " << s.name() << " " << c.name << "\n";
    try {
      wb::Bench bench(o);
      const wb::Stats st = bench.run(work, verify);
      extra["rows"] = s.rows;
      extra["vocab"] = s.vocab;
      extra["sampling"] = c.name;
      extra["op"] = c.name;  // (variant, impl, shape, op) names one entry
      extra["params"] = {{"temperature", c.params.temperature}, {"top_k", c.params.top_k},
                         {"top_p", c.params.top_p}};
      const std::string key = s.name() + "/" + c.name;
      if (variant == "cpu_1t") cpu_us_[key] = st.median_us;
      if (variant == "sort_then_cpu") step2_us_[key] = st.median_us;
      if (variant == "ch04_softmax") softmax_us_[s.name()] = st.median_us;
      if (cpu_us_.count(key)) extra["speedup_vs_cpu_1t"] = cpu_us_[key] / st.median_us;
      if (step2_us_.count(key) && variant != "sort_then_cpu")
        extra["speedup_vs_sort_then_cpu"] = step2_us_[key] / st.median_us;
      if (variant == "greedy" && softmax_us_.count(s.name()))
        extra["ch04_softmax_over_greedy"] = softmax_us_[s.name()] / st.median_us;
      writer_.add(variant, impl, s.name(), st, extra);
      lines_.push_back({s.name(), c.name, variant, st.median_us});
      return st.median_us;
    } catch (const wb::NotImplemented& e) {
      std::cerr << "bench_07: " << variant << ": " << e.what() << " (skipped)\n";
    } catch (const std::invalid_argument& e) {  // step 3: a nucleus longer than its candidates
      std::cerr << "bench_07: " << variant << " " << s.name() << " " << c.name << ": " << e.what()
                << " (skipped)\n";
      writer_.add_metrics(variant, impl, s.name(),
                          {{"sampling", c.name}, {"op", c.name}, {"skipped", e.what()}});
    }
    return 0;
  }

  void print_table() const {
    std::printf("chapter 07 samplers (%s build)\n%-12s %-16s %-16s %12s\n", WB_BUILD_NAME,
                "shape", "sampling", "variant", "median us");
    for (const Line& l : lines_)
      std::printf("%-12s %-16s %-16s %12.2f\n", l.shape.c_str(), l.sampling.c_str(),
                  l.variant.c_str(), l.us);
  }

 private:
  struct Line {
    std::string shape, sampling, variant;
    double us;
  };
  wb::ResultsWriter& writer_;
  bool quick_;
  std::map<std::string, double> cpu_us_, step2_us_, softmax_us_;
  std::vector<Line> lines_;
};

// ------------------------------------------------------------------------------------------
// The stage table of steps 2 and 3 (the report's: sort, copies, CPU post). The samplers are
// one call each, so each stage is timed as the same work done on its own:
//   sort_us      step 2's GPU part: a CUB segmented radix sort of every row (keys descending,
//                values = token ids), device events, cold L2;
//   copy_us      a device-to-host copy of d2h_bytes_per_row x rows into pinned memory, host
//                clock (what the step copies back, per its own d2h_bytes_per_row());
//   gpu_us       step 3's GPU part: the whole call minus the copy and the CPU part (below);
//   cpu_post_us  step 2: the whole call minus sort and copy; step 3: the CPU reference's
//                filtering and draw over the kept candidates, host clock.
double time_host(const std::function<void()>& f, int reps) {
  std::vector<double> us;
  for (int i = 0; i < reps; ++i) {
    WB_CUDA(cudaDeviceSynchronize());
    const auto t0 = std::chrono::steady_clock::now();
    f();
    WB_CUDA(cudaDeviceSynchronize());
    us.push_back(std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count());
  }
  return wb::median_of(us);
}

double time_segmented_sort(const Shape& s, const wb::DeviceBuffer<float>& logits, bool quick) {
  const std::size_t n = s.count();
  wb::DeviceBuffer<float> keys_out(n);
  wb::DeviceBuffer<int> ids_in(n), ids_out(n), offsets(s.rows + 1);
  std::vector<int> ids(n), off(s.rows + 1);
  for (std::size_t i = 0; i < n; ++i) ids[i] = static_cast<int>(i % s.vocab);
  for (int r = 0; r <= s.rows; ++r) off[r] = r * s.vocab;
  ids_in.upload(ids);
  offsets.upload(off);
  std::size_t temp_bytes = 0;
  WB_CUDA(cub::DeviceSegmentedRadixSort::SortPairsDescending(
      nullptr, temp_bytes, logits.data(), keys_out.data(), ids_in.data(), ids_out.data(),
      static_cast<int>(n), s.rows, offsets.data(), offsets.data() + 1));
  wb::DeviceBuffer<unsigned char> temp(temp_bytes);
  wb::BenchOptions o;
  o.name = "segmented sort " + s.name();
  o.bytes = 4.0 * n * sizeof(float);
  o.min_samples = quick ? 5 : 10;
  o.max_time_ms = quick ? 300 : 1000;
  wb::Bench bench(o);
  return bench
      .run([&](cudaStream_t st) {
        std::size_t bytes = temp_bytes;
        WB_CUDA(cub::DeviceSegmentedRadixSort::SortPairsDescending(
            temp.data(), bytes, logits.data(), keys_out.data(), ids_in.data(), ids_out.data(),
            static_cast<int>(n), s.rows, offsets.data(), offsets.data() + 1, 0,
            sizeof(float) * 8, st));
      })
      .median_us;
}

double time_d2h_copy(std::size_t bytes, int reps) {
  wb::DeviceBuffer<unsigned char> src(std::max<std::size_t>(bytes, 1));
  PinnedBuffer<unsigned char> dst(bytes);
  return time_host([&] { WB_CUDA(cudaMemcpy(dst.ptr, src.data(), bytes, cudaMemcpyDeviceToHost)); },
                   reps);
}

// Step 3's CPU part: filtering and the draw over the kept candidates of every row (the
// reference's code over the candidate list, which is what the step copies back).
double time_candidate_post(const Shape& s, const std::vector<float>& logits, const SamplingParams& p,
                           int reps) {
  const int candidates = ch07::TopCandidatesSampler::kMaxCandidates;
  std::vector<std::vector<int>> ranked(s.rows);
  std::vector<std::vector<double>> prob(s.rows);
  for (int r = 0; r < s.rows; ++r) {
    const float* row = logits.data() + static_cast<std::size_t>(r) * s.vocab;
    ranked[r] = ch07::reference::ranked_tokens(row, s.vocab, candidates);
    const std::vector<double> all = ch07::reference::probabilities(row, s.vocab, p.temperature);
    for (int t : ranked[r]) prob[r].push_back(all[t]);
  }
  volatile int sink = 0;
  return time_host(
      [&] {
        for (int r = 0; r < s.rows; ++r) {
          const int k = p.top_k > 0 ? std::min<int>(p.top_k, static_cast<int>(ranked[r].size()))
                                    : static_cast<int>(ranked[r].size());
          double mass = 0;
          for (int i = 0; i < k; ++i) mass += prob[r][i];
          double run = 0;
          int n = k;
          for (int i = 0; i < k; ++i) {
            run += prob[r][i];
            if (run >= p.top_p * mass) {
              n = i + 1;
              break;
            }
          }
          double kept = 0;
          for (int i = 0; i < n; ++i) kept += prob[r][i];
          const double target = 0.5 * kept;
          double c = 0;
          int pick = ranked[r][0];
          for (int i = 0; i < n; ++i) {
            c += prob[r][i];
            if (c >= target) {
              pick = ranked[r][i];
              break;
            }
          }
          sink = sink + pick;
        }
      },
      reps);
}

// ------------------------------------------------------------------------------------------
// The replay's stand-in for the model: fresh logits for every step (a counter-based hash, so
// each step's logits differ and nothing is cached between steps).
__global__ void make_step_logits(float* logits, std::size_t n, unsigned step) {
  for (std::size_t i = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<std::size_t>(gridDim.x) * blockDim.x) {
    unsigned h = static_cast<unsigned>(i) * 2654435761u ^ (step * 0x9E3779B9u);
    h ^= h >> 15, h *= 0x2c1b3c6dU, h ^= h >> 12, h *= 0x297a2d39U, h ^= h >> 15;
    // a sum of uniforms: roughly normal, spread like the bench's logits
    const float a = (h & 0xffff) * (1.0f / 65536.0f), b = (h >> 16) * (1.0f / 65536.0f);
    logits[i] = (a + b - 1.0f) * 9.8f;
  }
}

// The forward pass's weight traffic: every byte of `weights` read once (a sum that is kept,
// so the reads cannot be optimized away).
__global__ void stream_weights(const float4* weights, std::size_t n, float* sink) {
  float acc = 0;
  for (std::size_t i = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<std::size_t>(gridDim.x) * blockDim.x) {
    const float4 w = weights[i];
    acc += w.x + w.y + w.z + w.w;
  }
  if (acc == 12345.678f) *sink = acc;  // never true for the zeroed weights; keeps the loads
}

void launch_step_logits(const void* weights, float* sink, float* logits, std::size_t n, unsigned step,
                        cudaStream_t stream) {
  stream_weights<<<132 * 8, 512, 0, stream>>>(static_cast<const float4*>(weights),
                                              kStandinWeightBytes / sizeof(float4), sink);
  WB_CHECK_LAUNCH("stream_weights");
  make_step_logits<<<1024, 256, 0, stream>>>(logits, n, step);
  WB_CHECK_LAUNCH("make_step_logits");
}

// ------------------------------------------------------------------------------------------
// `generate`: chapter 07's samplers picking the tokens of the llama2.c engine.
#ifdef WB_HAVE_MODEL
struct GenerateArgs {
  std::string sampler = "07";
  std::string model, tokenizer, prompt;
  int steps = 256, threads = 0;
  SamplingParams params{0.0f, 0, 1.0f, 42, 0};
};

// One row at a time, the step counter being the position: reproducible from the seed.
class ChapterPicker {
 public:
  ChapterPicker(bool fused, const SamplingParams& params) : fused_(fused), params_(params) {}
  int operator()(std::span<const float> logits, int position) {
    SamplingParams p = params_;
    p.step = static_cast<std::uint64_t>(position);
    const int vocab = static_cast<int>(logits.size());
    int token = -1;
    float confidence = 0;
    if (!fused_) {
      float u = 1.0f;
      if (!ch07::is_greedy(p)) {  // the contract's number, from the GPU like every step's
        ch07::fill_draw_uniforms(uniform_.data(), 1, p.seed, p.step, nullptr);
        WB_CUDA(cudaMemcpy(&u, uniform_.data(), sizeof(float), cudaMemcpyDeviceToHost));
      }
      ch07::sample_cpu(logits.data(), 1, vocab, p, &u, &token, &confidence, 1);
    } else {
      if (logits_.size() != logits.size()) {
        logits_ = wb::DeviceBuffer<float>(logits.size());
        workspace_bytes_ = ch07::fused_sampler_workspace_bytes(1, vocab);
        workspace_ = wb::DeviceBuffer<unsigned char>(std::max<std::size_t>(workspace_bytes_, 256));
      }
      logits_.upload(logits);
      ch07::sample_fused(logits_.data(), 1, vocab, p, token_.data(), confidence_.data(),
                         workspace_.data(), workspace_bytes_, nullptr);
      WB_CUDA(cudaMemcpy(&token, token_.data(), sizeof(int), cudaMemcpyDeviceToHost));
    }
    if (token < 0 || token >= vocab)
      throw std::runtime_error("bench_07 generate: the sampler returned token " + std::to_string(token) +
                               " at position " + std::to_string(position) +
                               " (a NaN or +inf in the logits?)");
    return token;
  }

 private:
  bool fused_;
  SamplingParams params_;
  wb::DeviceBuffer<float> logits_, uniform_{1}, confidence_{1};
  wb::DeviceBuffer<int> token_{1};
  wb::DeviceBuffer<unsigned char> workspace_;
  std::size_t workspace_bytes_ = 0;
};

int run_generate_command(const GenerateArgs& g) {
  if (!wb::has_cuda_device()) {
    std::cerr << "bench_07 generate: skipped: no CUDA device (both samplers take their random "
                 "numbers from draw_uniform on the GPU)\n";
    return 77;
  }
  try {
    ch07::check_sampling_args("generate", &g, 1, 1, g.params, &g, &g);
  } catch (const std::invalid_argument& e) {
    std::cerr << "bench_07 " << e.what() << "\n";
    return 2;
  }
  wb::model::GenerateRequest request;
  request.model_path = g.model;
  request.tokenizer_path = g.tokenizer;
  request.prompt = g.prompt;
  request.steps = g.steps;
  request.temperature = g.params.temperature;
  request.seed = g.params.seed;
  request.threads = g.threads;
  const bool fused = g.sampler == "07";
  auto picker = std::make_shared<ChapterPicker>(fused, g.params);  // std::function copies
  request.pick = [picker](std::span<const float> logits, int position) {
    return (*picker)(logits, position);
  };
  request.sampler_name = std::string(fused ? "chapter 07 fused GPU sampler" : "chapter 07 CPU sampler") +
                         " (" + WB_BUILD_NAME + " build), temperature " +
                         std::to_string(g.params.temperature) + ", top_k " +
                         std::to_string(g.params.top_k) + ", top_p " + std::to_string(g.params.top_p) +
                         ", seed " + std::to_string(g.params.seed);
  wb::model::CpuMatmul cpu(g.threads);
  try {
    return wb::model::run_generate(request, cpu, std::cout, std::cerr);
  } catch (const std::exception& e) {
    std::cerr << "bench_07 generate: " << e.what() << "\n";
    return 1;
  }
}
#endif

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Chapter 07 bench: CPU, sort-then-CPU, top-candidates and fused GPU samplers"};
  std::string out;
  bool quick = false;
  app.add_option("--out", out, "results file (default: results/07_gpu_sampler-<build>.json)");
  app.add_flag("--quick", quick, "fewer shapes, fewer samples");
#ifdef WB_HAVE_MODEL
  GenerateArgs gen;
  CLI::App* generate = app.add_subcommand("generate", "text from the llama2.c engine, tokens picked by chapter 07's samplers");
  generate->add_option("--sampler", gen.sampler, "cpu (step 1) or 07 (step 4, fused)")
      ->check(CLI::IsMember({"cpu", "07"}))
      ->capture_default_str();
  generate->add_option("--temperature", gen.params.temperature, "0 = greedy")->capture_default_str();
  generate->add_option("--top-k", gen.params.top_k, "0 = off")->capture_default_str();
  generate->add_option("--top-p", gen.params.top_p, "1 = off")->capture_default_str();
  generate->add_option("--seed", gen.params.seed, "the random stream (the step is the position)")
      ->capture_default_str();
  generate->add_option("--model", gen.model, "llama2.c checkpoint (.bin)");
  generate->add_option("--tokenizer", gen.tokenizer, "llama2.c tokenizer");
  generate->add_option("--prompt", gen.prompt, "text to start from");
  generate->add_option("--steps", gen.steps, "forward passes")->capture_default_str();
  generate->add_option("--threads", gen.threads, "CPU threads of the matmuls (0 = all)")->capture_default_str();
#endif
  CLI11_PARSE(app, argc, argv);
#ifdef WB_HAVE_MODEL
  if (generate->parsed()) return run_generate_command(gen);
#endif

  if (!wb::has_cuda_device()) {
    std::cerr << "bench_07: skipped: no CUDA device\n";
    return 77;
  }
  const std::string build = WB_BUILD_NAME;
  wb::ResultsWriter writer("07_gpu_sampler", build);
  SamplerBench bench(writer, quick);
  const int hw_threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));

  struct Point {
    Shape shape;
    std::vector<Case> cases;
  };
  const std::vector<Point> points =
      quick ? std::vector<Point>{{{16, 151936}, {kTopK50TopP, kGreedy}}, {{256, 151936}, {kTopP}}}
            : std::vector<Point>{{{1, 32000}, {kTopK50TopP, kGreedy}},
                                 {{16, 151936}, {kTopK50TopP, kTopP, kGreedy}},
                                 {{64, 32000}, {kTopK50TopP, kGreedy}},
                                 {{256, 151936}, {kTopK50TopP, kTopP, kGreedy}}};

  try {
    for (const Point& pt : points) {
      const Shape& s = pt.shape;
      const std::vector<float> host_logits = make_logits(s, "timed");
      wb::DeviceBuffer<float> logits(s.count()), copy_dst(s.count());
      logits.upload(host_logits);
      PinnedBuffer<float> pinned_logits(s.count());
      std::copy(host_logits.begin(), host_logits.end(), pinned_logits.ptr);
      wb::DeviceBuffer<int> d_tokens(s.rows);
      wb::DeviceBuffer<float> d_conf(s.rows), d_uniforms(s.rows);
      std::vector<int> h_tokens(s.rows);
      std::vector<float> h_conf(s.rows), h_uniforms(s.rows);
      const std::size_t ws_bytes = ch07::fused_sampler_workspace_bytes(s.rows, s.vocab);
      wb::DeviceBuffer<unsigned char> workspace(std::max<std::size_t>(ws_bytes, 256));
      std::unique_ptr<ch07::SortThenCpuSampler> step2;
      std::unique_ptr<ch07::TopCandidatesSampler> step3;
      try {
        step2 = std::make_unique<ch07::SortThenCpuSampler>(s.rows, s.vocab);
        step3 = std::make_unique<ch07::TopCandidatesSampler>(s.rows, s.vocab);
      } catch (const wb::NotImplemented& e) {
        std::cerr << "bench_07: steps 2/3: " << e.what() << " (skipped)\n";
      }
      const double bytes = static_cast<double>(s.count()) * sizeof(float);

      // Fresh logits for a check after timing (rule 7), and a runner per variant.
      const auto fresh = [&](const std::string& who) {
        std::vector<float> f = make_logits(s, "verify/" + who);
        logits.upload(f);
        std::copy(f.begin(), f.end(), pinned_logits.ptr);
        return f;
      };

      bench.measure("copy", "baseline", s, {"-", {}}, bench.options(wb::Clock::Device, 2 * bytes),
                    [&](cudaStream_t st) {
                      WB_CUDA(cudaMemcpyAsync(copy_dst.data(), logits.data(), s.count() * sizeof(float),
                                              cudaMemcpyDeviceToDevice, st));
                    },
                    {}, {{"d2h_bytes_per_row", 0}});

      // Chapter 04's reference fused softmax of the same logits, where greedy is timed: the
      // bar greedy is held to (test_timing.cu: greedy + confidence no slower than it).
      const bool times_greedy = std::any_of(pt.cases.begin(), pt.cases.end(),
                                            [](const Case& c) { return ch07::is_greedy(c.params); });
      if (times_greedy) {
        wb::DeviceBuffer<float> probs(s.count());
        const auto softmax = [&](cudaStream_t st) {
          ch04::softmax_fused(logits.data(), probs.data(), s.rows, s.vocab, st);
        };
        bench.measure("ch04_softmax", "ch04_reference", s, {"-", {}},
                      bench.options(wb::Clock::Device, 2 * bytes), softmax,
                      [&] { check_softmax(s, fresh("ch04_softmax"), probs, softmax); },
                      {{"d2h_bytes_per_row", 0}});
      }

      for (const Case& c : pt.cases) {
        const SamplingParams& p = c.params;
        const bool greedy = ch07::is_greedy(p);
        // Step 4 (and greedy): device only. Measured last, so that its entry can carry its
        // speedups over the CPU and step 2 of the same case.
        const auto fused = [&](cudaStream_t st) {
          ch07::sample_fused(logits.data(), s.rows, s.vocab, p, d_tokens.data(), d_conf.data(),
                             workspace.data(), ws_bytes, st);
        };
        const std::string fused_name = greedy ? "greedy" : "fused";
        const auto measure_fused = [&] {
          bench.measure(fused_name, build, s, c, bench.options(wb::Clock::Device, bytes), fused,
                        [&] {
                          const std::vector<float> f = fresh(fused_name);
                          d_tokens.poison();
                          d_conf.poison();
                          fused(nullptr);
                          WB_CUDA(cudaDeviceSynchronize());
                          check_answer(fused_name, s, f, p, d_tokens.download(), d_conf.download());
                        },
                        {{"d2h_bytes_per_row", sizeof(int) + sizeof(float)},
                         {"workspace_bytes", ws_bytes}});
        };
        if (greedy) {
          measure_fused();
          continue;
        }

        // Step 1: the CPU sampler (logits already on the host; its uniforms too).
        ch07::fill_draw_uniforms(d_uniforms.data(), s.rows, p.seed, p.step, nullptr);
        WB_CUDA(cudaDeviceSynchronize());
        h_uniforms = d_uniforms.download();
        for (const int threads : {1, hw_threads}) {
          const auto cpu = [&, threads](cudaStream_t) {
            ch07::sample_cpu(pinned_logits.ptr, s.rows, s.vocab, p, h_uniforms.data(), h_tokens.data(),
                             h_conf.data(), threads);
          };
          wb::BenchOptions o = bench.options(wb::Clock::Host, bytes);
          o.min_samples = 3;
          o.warmup_count = 1;
          o.warmup_ms = 0;
          o.min_time_ms = 0;
          o.max_time_ms = quick ? 500 : 2000;
          o.check_escape = false;
          bench.measure(threads == 1 ? "cpu_1t" : "cpu_threads", "cpu", s, c, o, cpu,
                        [&] {
                          const std::vector<float> f = fresh("cpu");
                          cpu(nullptr);
                          check_answer("cpu", s, f, p, h_tokens, h_conf);
                        },
                        {{"threads", threads}, {"d2h_bytes_per_row", 0}});
        }

        // Steps 2 and 3: GPU work, copies and CPU work in one synchronizing call.
        const auto stepwise = [&](const std::string& variant, auto& sampler) {
          if (!sampler) return 0.0;
          const auto work = [&](cudaStream_t st) {
            sampler->sample(logits.data(), s.rows, p, h_tokens.data(), h_conf.data(), st);
          };
          wb::BenchOptions o = bench.options(wb::Clock::Host, bytes);
          o.check_escape = false;
          return bench.measure(variant, build, s, c, o, work,
                               [&] {
                                 const std::vector<float> f = fresh(variant);
                                 work(nullptr);
                                 check_answer(variant, s, f, p, h_tokens, h_conf);
                               },
                               {{"d2h_bytes_per_row", sampler->d2h_bytes_per_row()}});
        };
        const double step2_us = stepwise("sort_then_cpu", step2);
        const double step3_us = stepwise("top_candidates", step3);

        // The stage table (see above), at the report's shape.
        if (s.rows == 16 && s.vocab == 151936 && c.name == kTopK50TopP.name && step2 && step3) {
          const int reps = quick ? 5 : 15;
          const double sort_us = time_segmented_sort(s, logits, quick);
          const double copy2_us = time_d2h_copy(step2->d2h_bytes_per_row() * s.rows, reps);
          const double copy3_us = time_d2h_copy(step3->d2h_bytes_per_row() * s.rows, reps);
          const double post3_us = time_candidate_post(s, host_logits, p, reps);
          if (step2_us > 0)
            writer.add_metrics("stages", "sort_then_cpu", s.name(),
                               {{"sampling", c.name}, {"op", c.name}, {"total_us", step2_us},
                                {"breakdown_us",
                                 {{"sort", sort_us}, {"copy", copy2_us},
                                  {"cpu_post", std::max(0.0, step2_us - sort_us - copy2_us)}}}});
          if (step3_us > 0)
            writer.add_metrics("stages", "top_candidates", s.name(),
                               {{"sampling", c.name}, {"op", c.name}, {"total_us", step3_us},
                                {"breakdown_us",
                                 {{"gpu", std::max(0.0, step3_us - copy3_us - post3_us)},
                                  {"copy", copy3_us}, {"cpu_post", post3_us}}}});
        }
        measure_fused();
      }
    }

    // Observed frequencies against the exact probabilities (the notebook's picture of the
    // statistical test): one row of 32000 logits, copied into 256 rows, sampled at 400 steps
    // (102400 draws), top-k 50 + top-p 0.9. The exact side is the CPU reference's kept set,
    // renormalized.
    {
      const Shape one{1, 32000};
      const int rows = 256, steps = quick ? 40 : 400;
      const SamplingParams base = kTopK50TopP.params;
      const std::vector<float> row = make_logits(one, "frequencies");
      std::vector<float> many;
      for (int r = 0; r < rows; ++r) many.insert(many.end(), row.begin(), row.end());
      wb::DeviceBuffer<float> logits(many.size());
      logits.upload(many);
      wb::DeviceBuffer<int> d_tokens(rows);
      wb::DeviceBuffer<float> d_conf(rows);
      const std::size_t ws_bytes = ch07::fused_sampler_workspace_bytes(rows, one.vocab);
      wb::DeviceBuffer<unsigned char> workspace(std::max<std::size_t>(ws_bytes, 256));
      std::map<int, long> counts;
      for (int step = 0; step < steps; ++step) {
        SamplingParams p = base;
        p.step = static_cast<std::uint64_t>(step);
        ch07::sample_fused(logits.data(), rows, one.vocab, p, d_tokens.data(), d_conf.data(),
                           workspace.data(), ws_bytes, nullptr);
        for (int t : d_tokens.download()) ++counts[t];
      }
      const ch07::reference::KeptSet kept = ch07::reference::kept_set(row.data(), one.vocab, base);
      nlohmann::json tokens = nlohmann::json::array(), expected = nlohmann::json::array(),
                     observed = nlohmann::json::array();
      long inside = 0;
      for (std::size_t i = 0; i < kept.tokens.size(); ++i) {
        tokens.push_back(kept.tokens[i]);
        expected.push_back(kept.p[i] / kept.mass);
        const long c = counts.count(kept.tokens[i]) ? counts[kept.tokens[i]] : 0;
        observed.push_back(c);
        inside += c;
      }
      writer.add_metrics("frequencies", build, one.name(),
                         {{"op", kTopK50TopP.name}, {"sampling", kTopK50TopP.name},
                          {"draws", static_cast<long>(rows) * steps}, {"outside_kept_set",
                          static_cast<long>(rows) * steps - inside}, {"tokens", tokens},
                          {"expected_p", expected}, {"observed", observed}});
    }

    // The report's workload, replayed: 16 x 151936, kReplaySteps denoising steps.
    {
      const Shape s{16, 151936};
      const SamplingParams base = kTopK50TopP.params;
      wb::DeviceBuffer<float> logits(s.count());
      wb::DeviceBuffer<int> d_tokens(s.rows);
      wb::DeviceBuffer<float> d_conf(s.rows), d_uniforms(s.rows);
      PinnedBuffer<float> h_logits(s.count());
      std::vector<int> h_tokens(s.rows);
      std::vector<float> h_conf(s.rows), h_uniforms(s.rows);
      const std::size_t ws_bytes = ch07::fused_sampler_workspace_bytes(s.rows, s.vocab);
      wb::DeviceBuffer<unsigned char> workspace(std::max<std::size_t>(ws_bytes, 256));
      std::unique_ptr<ch07::SortThenCpuSampler> step2;
      std::unique_ptr<ch07::TopCandidatesSampler> step3;
      try {
        step2 = std::make_unique<ch07::SortThenCpuSampler>(s.rows, s.vocab);
        step3 = std::make_unique<ch07::TopCandidatesSampler>(s.rows, s.vocab);
      } catch (const wb::NotImplemented&) {
      }
      const int steps = quick ? 16 : kReplaySteps;
      wb::DeviceBuffer<unsigned char> weights(kStandinWeightBytes);
      wb::DeviceBuffer<float> sink(1);
      WB_CUDA(cudaMemset(weights.data(), 0, kStandinWeightBytes));
      const auto replay = [&](const std::function<void(const SamplingParams&)>& sample) {
        for (int i = 0; i < 2; ++i) {  // warm up
          launch_step_logits(weights.data(), sink.data(), logits.data(), s.count(), 1000 + i, nullptr);
          sample(base);
        }
        return time_host(
                   [&] {
                     for (int step = 0; step < steps; ++step) {
                       SamplingParams p = base;
                       p.step = static_cast<std::uint64_t>(step);
                       launch_step_logits(weights.data(), sink.data(), logits.data(), s.count(), static_cast<unsigned>(step), nullptr);
                       sample(p);
                     }
                   },
                   3) /
               steps;
      };
      const double logits_only = replay([](const SamplingParams&) {});
      writer.add_metrics("replay_logits_only", "baseline", s.name(),
                         {{"steps", steps}, {"us_per_step", logits_only}});
      const auto record = [&](const std::string& variant, const std::string& impl,
                              const std::function<void(const SamplingParams&)>& sample,
                              std::size_t d2h) {
        try {
          const double per_step = replay(sample);
          const double sampling = std::max(0.0, per_step - logits_only);
          writer.add_metrics("replay_16x151936", impl, s.name(),
                             {{"sampler", variant}, {"op", variant}, {"sampling", kTopK50TopP.name},
                              {"steps", steps},
                              {"ms_per_step", per_step / 1000.0}, {"sampling_us_per_step", sampling},
                              {"sampling_share", per_step > 0 ? sampling / per_step : 0.0},
                              {"d2h_bytes_per_row", d2h}});
          std::printf("replay %-16s %10.1f us/step, sampling %5.1f%%\n", variant.c_str(), per_step,
                      100.0 * sampling / per_step);
        } catch (const wb::NotImplemented& e) {
          std::cerr << "bench_07: replay " << variant << ": " << e.what() << " (skipped)\n";
        }
      };
      const auto cpu_with = [&](int threads) {
        return [&, threads](const SamplingParams& p) {
          ch07::fill_draw_uniforms(d_uniforms.data(), s.rows, p.seed, p.step, nullptr);
          WB_CUDA(cudaMemcpy(h_logits.ptr, logits.data(), s.count() * sizeof(float), cudaMemcpyDeviceToHost));
          WB_CUDA(cudaMemcpy(h_uniforms.data(), d_uniforms.data(), s.rows * sizeof(float),
                             cudaMemcpyDeviceToHost));
          ch07::sample_cpu(h_logits.ptr, s.rows, s.vocab, p, h_uniforms.data(), h_tokens.data(),
                           h_conf.data(), threads);
        };
      };
      record("cpu_1t", "cpu", cpu_with(1), s.vocab * sizeof(float));
      record("cpu_threads", "cpu", cpu_with(hw_threads), s.vocab * sizeof(float));
      if (step2)
        record("sort_then_cpu", build, [&](const SamplingParams& p) {
          step2->sample(logits.data(), s.rows, p, h_tokens.data(), h_conf.data(), nullptr);
        }, step2->d2h_bytes_per_row());
      if (step3)
        record("top_candidates", build, [&](const SamplingParams& p) {
          step3->sample(logits.data(), s.rows, p, h_tokens.data(), h_conf.data(), nullptr);
        }, step3->d2h_bytes_per_row());
      record("fused", build, [&](const SamplingParams& p) {
        ch07::sample_fused(logits.data(), s.rows, s.vocab, p, d_tokens.data(), d_conf.data(),
                           workspace.data(), ws_bytes, nullptr);
        // the decoder needs the tokens on the host to commit them: 8 bytes a row
        WB_CUDA(cudaMemcpy(h_tokens.data(), d_tokens.data(), s.rows * sizeof(int), cudaMemcpyDeviceToHost));
        WB_CUDA(cudaMemcpy(h_conf.data(), d_conf.data(), s.rows * sizeof(float), cudaMemcpyDeviceToHost));
      }, sizeof(int) + sizeof(float));
    }
  } catch (const std::exception& e) {
    std::cerr << "bench_07: " << e.what() << "\n";
    return 1;
  }

  bench.print_table();
  const std::string path = out.empty() ? writer.default_path().string() : out;
  writer.write(path);
  std::cerr << "bench_07: wrote " << path << "\n";
  return 0;
}
