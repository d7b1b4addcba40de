#pragma once
// Chapter 08's decoder: the llama2 forward pass and the sampler, all on the device, with the
// weights resident (chapter 03). Support code, not the student's: it strings the student's
// kernels (token_loop.cuh: RoPE + cache append, attention, SwiGLU, the step graph) together
// with the earlier chapters' REFERENCE kernels (01's matvec,
// 06's fused add + RMSNorm, 07's fused sampler), so chapter 08 can be done before 06 or 07.
//
//   ch08::GpuModel model(cpu_model);            // uploads the weights once
//   ch08::GpuDecoder decoder(model);             // activations, KV cache, pos/token on the device
//   decoder.set_mode(ch08::StepMode::Graph);     // capture the step once, replay per token
//   std::vector<int> tokens = decoder.generate(prompt_tokens, 256, sampling);
//
// Per step only the chosen token (4 bytes) comes back to the host.
//
// Design (why it is built this way):
//   - Every buffer (activations, KV cache, sampler workspace, *pos, *token, pinned host
//     slots) is allocated once in the constructor: a captured graph holds their addresses,
//     and no step may allocate.
//   - The residual stream ping-pongs between two buffers (chapter 06's outputs may not
//     alias its inputs); after each layer's two adds it is back in buffer 0, so every step
//     enqueues exactly the same work: what a graph needs.
//   - The position and the token live in device memory; the step reads them through
//     pointers and ends by advancing *pos (token_loop.cuh explains why).
//   - The sampler is NOT in the graph: ch07::SamplingParams carries the step counter by
//     value, and a graph would freeze it (every sampled token would reuse one random
//     number). It is launched from the host after each replay (its own kernel or two).
//   - The host keeps its own copy of the position and checks it before each step.
//   - The constructor runs one un-graphed warm-up step (every kernel's module is loaded, and
//     a broken kernel fails there, before any capture), then counts the launches of a step
//     and of the sampler by capturing each into a throwaway graph (plain CUDA API, not run).
//   - WB_DEBUG_SYNC=1 (WB_CHECK_LAUNCH synchronizes after every launch) cannot be combined
//     with Graph mode: a synchronize inside a capture breaks it.
//   - In greedy decoding the persistent step picks the token itself and writes it into the
//     pinned slot (host memory mapped into the device's address space): no sampler launch and
//     no copy between two steps, only the event the host waits on.
//   - StepMode::Persistent runs the same step as ONE kernel of the decoder's own
//     (persistent_step.hpp: one block per SM, tagged values between the stages; or, for a
//     model as small as stories260K, one thread-block cluster: cluster_step.hpp), on the
//     same buffers and caches; none of the chapter's kernels. It is what the
//     graph leaves on the table, measured beside it; the constructor plans it where the model
//     and the GPU allow (Hopper), and says why not otherwise (persistent_unavailable()).
#include <cuda_runtime.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "persistent_step.hpp"  // StepMode::Persistent
#include "sampler.cuh"           // chapter 07: SamplingParams
#include "token_loop.cuh"        // this chapter's API
#include "wb/model/checkpoint.hpp"

namespace ch08 {

// The model's weights on the device: Model::payload() uploaded once, in file order, so every
// matrix is found at the same offset as on the host.
class GpuModel {
 public:
  explicit GpuModel(const wb::model::Model& model);
  ~GpuModel();
  GpuModel(const GpuModel&) = delete;
  GpuModel& operator=(const GpuModel&) = delete;

  const wb::model::Config& config() const { return config_; }
  const wb::model::Model& host() const { return host_; }
  // The device copy of a host weight pointer (one that points into host().payload()).
  const float* device(const float* host_weight) const;
  // The matrices that multiply the same vector, packed at load time into one matrix per
  // layer, so that each group is ONE matvec (one launch, one read of the input) instead of
  // three and two: qkv(l) holds the rows of Wq, then Wk, then Wv ((dim + 2 kv_dim) x dim);
  // w13(l) the rows of W1, then W3 (2 hidden x dim). Row for row the same dot products as
  // the separate matrices, so the same results to the bit. (The payload keeps its own copy of
  // them, unused by the step: simpler than a second upload path, at the price of memory.)
  const float* qkv(int layer) const;
  const float* w13(int layer) const;
  // Bytes of weights one token reads (every matrix and norm once, one embedding row).
  std::size_t weight_bytes_per_token() const;

 private:
  const wb::model::Model& host_;
  wb::model::Config config_;
  float* d_payload_ = nullptr;
  float* d_qkv_ = nullptr;  // [layer][dim + 2 kv_dim][dim]
  float* d_w13_ = nullptr;  // [layer][2 hidden][dim]
};

enum class StepMode {
  StepByStep,  // every kernel launched from the host, every token
  Graph,       // the step captured once (StepGraph), one graph launch per token
  Persistent,  // the whole step as one persistent kernel (persistent_step.hpp): none of the
               // student's kernels, the decoder's own; one launch per token
};
const char* to_string(StepMode mode);

// Where one step's device time goes, by stage (GpuDecoder::measure_stages: a graph per stage,
// replayed). The one-thread kernel that advances the position is in no stage.
struct StageTimes {
  double embed_norm_us = 0;   // embedding row, RMSNorms and fused residual adds
  double matvec_us = 0;       // every matvec (qkv, o, w13, w2, classifier)
  double rope_us = 0;         // RoPE + cache append
  double attention_us = 0;
  double swiglu_us = 0;
  double sampler_us = 0;
  double total_us() const;
  // The launches (graph nodes) of each stage in one step, counted from its graph.
  int embed_norm_nodes = 0, matvec_nodes = 0, rope_nodes = 0, attention_nodes = 0, swiglu_nodes = 0,
      sampler_nodes = 0;
};

class GpuDecoder {
 public:
  // Allocates everything a step needs (activations, the KV cache, the sampler's workspace,
  // the device position and token) and creates its own stream. No allocation after this.
  explicit GpuDecoder(const GpuModel& model);
  ~GpuDecoder();
  GpuDecoder(const GpuDecoder&) = delete;
  GpuDecoder& operator=(const GpuDecoder&) = delete;

  // Graph captures on first use (and again after set_mode). Capturing needs the chapter's
  // StepGraph; StepByStep does not use it at all. Persistent throws std::invalid_argument
  // when the model or the GPU cannot run it (persistent_unavailable() says why).
  void set_mode(StepMode mode);
  StepMode mode() const { return mode_; }
  // Why StepMode::Persistent cannot run here ("" when it can).
  const std::string& persistent_unavailable() const { return persistent_unavailable_; }
  // The persistent step (its plan, its grid); nullptr when it cannot run here.
  const PersistentStep* persistent_step() const { return persistent_.get(); }
  // Blocks of the persistent step's Grid plan (0 = one per SM, the default); waits for the
  // stream.
  void set_persistent_blocks(int blocks);
  // The Grid plan's latency knobs (PersistentTuning); waits for the stream.
  void set_persistent_tuning(const PersistentTuning& tuning);
  // The persistent step's plan (PersistentPlan: Grid or Cluster; the constructor picks one by
  // the model's size); waits for the stream. Throws std::invalid_argument, saying why, where
  // the persistent step or that plan cannot run.
  void set_persistent_plan(PersistentPlan plan);
  // One step at the current position, teacher-forced with `token`, traced (StepTrace: where
  // each stage of each block started and ended; bench 08's --persistent-trace); its logits go
  // to *logits when given. Needs StepMode::Persistent on the Grid plan; throws std::logic_error
  // otherwise.
  StepTrace trace_persistent_step(int token, std::vector<float>* logits = nullptr);

  // Restarts at position 0 (the KV cache of earlier positions is simply overwritten).
  void reset();
  // The position the next forward pass runs at (the host's copy of *d_pos). A forward pass
  // at position >= seq_len throws std::out_of_range before anything is enqueued.
  int position() const { return pos_; }

  // Teacher forcing: runs one forward pass of `token` at the current position and advances
  // it; returns the logits (copied to the host: for tests, not for decoding). A token
  // outside the vocabulary throws std::invalid_argument.
  std::vector<float> forward_logits(int token);
  // *token as the last forward pass left it: in Persistent mode, the step's own greedy pick of
  // the next token (PersistentStep::picks_greedy_token). A synchronous 4-byte copy, for tests.
  int token_on_device();

  // Decoding: feeds `prompt` (BOS first, as wb::model::generate does), then samples until
  // `steps` forward passes are done (capped at seq_len) or BOS comes out. Returns every token
  // fed or produced, starting with prompt[0]. Sampling step counter = position. Starts at
  // position 0 (reset()). A prompt longer than the steps throws wb::model::ModelError. The
  // sampler runs after each step (outside the graph: its step counter is passed by value)
  // and writes the next token to device memory, where the next step's embedding reads it; a
  // forced prompt token is copied there instead (4 bytes, from pinned memory).
  //
  // The host runs ONE STEP BEHIND the device. The next step needs no help from the host (it
  // reads its token from device memory), so step p + 1 is enqueued before the host waits for
  // token p (4 bytes, copied to a pinned slot per position, an event after it). While the host
  // looks at one token and launches the next step, the device is already computing: it never
  // idles for the round trip. The price: when BOS ends the story, the step already enqueued
  // behind it is wasted (it runs, its token is dropped; forward_passes() counts it). The first
  // step is the exception: the host waits for it before going on (it may include the capture).
  std::vector<int> generate(std::span<const int> prompt, int steps,
                            const ch07::SamplingParams& sampling);

  // tokens/s of greedy decoding from BOS over `steps` forward passes, the loop of generate()
  // (every token comes back, one step behind); the clock starts when the first token is back.
  double measure_tokens_per_s(int steps);
  // Where a step's device time goes, stage by stage, as a graph runs it: for each stage, a
  // graph of only that stage's launches of one step (in step order, on the step's buffers),
  // replayed `replays` times back to back at position `position` (*pos is not advanced), and
  // the greedy sampler likewise. The stages' kernels run back to back as inside the step's
  // graph, so their times add up to about a replayed step's. The contents of the activations
  // are whatever the last step left (timing only). Afterwards the position is 0 (reset()).
  StageTimes measure_stages(int position, int replays = 50);

  cudaStream_t stream() const { return stream_; }
  // Launches enqueued from the host per generated token by the last generate(), the
  // decoder's own count (CUPTI counts them independently in the tests): StepByStep, the
  // step's kernels (counted once, in the constructor, as the kernel/memset/memcpy nodes of
  // the step captured into a throwaway graph with the plain CUDA API); Graph, 1 (the graph
  // launch); Persistent, 1 (the kernel); plus, in all, the sampler's nodes (counted the same
  // way) and the embedding token copy when a prompt token is forced. Forward passes of the
  // prompt count too.
  double host_launches_per_step() const { return host_launches_per_step_; }
  int forward_passes() const { return passes_; }       // of the last generate()
  int step_nodes() const { return step_nodes_; }        // kernels etc. in one step
  int sampler_nodes() const { return sampler_nodes_; }  // kernels etc. in one sampler call

 private:
  struct Buffers;
  // One forward pass at *pos, then ++*pos; `only` >= 0 (measure_stages): one stage's launches.
  void enqueue_step(cudaStream_t stream, int only = -1);
  void run_step();                         // checks the position, enqueue_step or the graph's replay
  void enqueue_sample(const ch07::SamplingParams& sampling);  // logits -> *d_token
  // The loop of generate() and measure_tokens_per_s(): from position 0, `steps` forward
  // passes (prompt forced, then sampled), on_token(pos, token) for every sampled token, one
  // step behind the device; on_token returning false stops it. Returns the passes run.
  int decode(std::span<const int> prompt, int steps, const ch07::SamplingParams& sampling,
             const std::function<bool(int pos, int token)>& on_token);
  // *d_token -> pinned slot `pos` (unless the step wrote it there itself), then an event (async)
  void send_token_home(int pos, bool step_wrote_it);
  int take_token(int pos);                 // waits for that event, returns the slot's token
  void put_token(int token);               // host -> *d_token (4 bytes, pinned, async)
  // Whether the step itself wrote this sampling's token (greedy decoding, Persistent mode).
  bool step_picked_token(const ch07::SamplingParams& sampling) const;
  const GpuModel& model_;
  Buffers* b_ = nullptr;
  cudaStream_t stream_ = nullptr;
  StepMode mode_ = StepMode::StepByStep;
  StepGraph graph_;
  std::unique_ptr<PersistentStep> persistent_;  // made in the constructor when it can run here
  std::string persistent_unavailable_;
  int pos_ = 0;
  double host_launches_per_step_ = 0;
  int step_nodes_ = 0;
  int sampler_nodes_ = 0;
  bool need_capture_ = true;
  int passes_ = 0;  // Graph mode: capture before the next replay
};

}  // namespace ch08
