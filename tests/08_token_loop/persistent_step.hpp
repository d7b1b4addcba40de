#pragma once
// The whole decoding step as ONE persistent kernel: what comes after the CUDA graph.
//
// The graph removed the host's launch calls, but not the kernels' boundaries: inside a graph
// each of the step's ~136 kernels still starts only when the one before it has finished, and
// at batch 1 most of them are too short to hide that. This kernel runs the same forward pass
// (embedding row, RMSNorm, packed QKV matvec, RoPE + cache append, attention, Wo + residual,
// RMSNorm, packed W1|W3 matvec, SwiGLU, W2 + residual, ..., final norm, classifier) as one
// launch of one block per SM (7 warps that compute, 1 that streams the weights):
//
//   - The blocks hand each other the stages' outputs (a few kilobytes) as tagged values
//     (tagged_values.cuh): each value carries the layer and launch that wrote it, and a reader
//     waits for exactly the values it needs. No grid barrier: a block starts a stage as soon
//     as its own input exists.
//   - Each block owns a contiguous range of rows of every matrix, so the weights it will read
//     never depend on the activations: its producer warp copies them into a ring of shared-
//     memory slots (Hopper's bulk copies, each landing on an mbarrier; the weights' last read
//     in the token, so they mark their L2 lines evict-first), as far ahead as the ring holds,
//     and asks L2 for its rows two stages beyond the one it sends (bulk prefetch instructions,
//     no waiting). When a stage's input arrives its weights are already in shared memory, and
//     its warps read them a row per warp. The device memory works on the next stages while the
//     blocks wait for their inputs.
//   - RMSNorm is recomputed by every block from the whole residual stream (a few kilobytes),
//     so it needs no stage of its own; each block owns the W1 and W3 rows of the same hidden
//     units, so SwiGLU is the end of its W1|W3 stage; RoPE and the cache append happen in the
//     attention stage, one block per query head, which copies its head's cache rows into
//     shared memory at the start of the layer (cp.async, as many as the shared memory left
//     beside the ring holds), while it computes its share of Wqkv.
//   - After the classifier the blocks pick greedy decoding's token (greedy_pick.cuh), and
//     block 0 writes it for the next step and into the host's pinned slot (mapped memory):
//     between two greedy steps nothing else runs on the stream.
//
// Same arithmetic as llama2.c's run.c in fp32, in another order: the logits match the CPU
// engine within the model tests' tolerance, and they are the same bit for bit whatever the
// number of blocks (every dot product and every norm is summed in one fixed order).
//
// Measured on the H200 (data/results/08_token_loop-solution.json, 08_persistent): faster than
// the graph on both models, and still far from the weight-bytes roofline: each layer is a
// chain of five hand-offs between blocks plus attention in one block per head, and at batch 1
// that chain, not the bytes, sets the time (chapter 08's lesson has the figures).
//
// That is the GRID plan. A model small enough that one thread-block cluster holds all of its
// weights in shared memory (stories260K: dim 64) runs the CLUSTER plan instead
// (cluster_step.hpp): there the hand-offs through L2 would be the whole time, and a cluster
// hands values over through its blocks' shared memory at a hardware barrier. PersistentStep
// picks the plan (PersistentPlan); both have the same interface and the same tests.
//
// Decoder code, not the student's: it uses none of the chapter's kernels. GpuDecoder runs it
// in StepMode::Persistent; its tests are tests/08_token_loop/test_persistent.cu (reference build
// only). Needs Hopper (sm_90: the L2 bulk prefetch) and a model whose rows are whole 16-byte
// units; PersistentStep's constructor says what a model or GPU lacks.
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace wb::model {
struct Config;
}

namespace ch08 {

class GpuModel;
class ClusterStep;

// The model's sizes, as both plans' kernels read them (their Params start with these).
struct StepShape {
  int dim, hidden, n_layers, n_heads, n_kv_heads, head_size, kv_dim, vocab, seq_len;
};
StepShape step_shape(const wb::model::Config& config);

// How the step is spread over the GPU:
//   Grid:    one block per SM (or set_blocks), every matrix's rows split over the blocks,
//            tagged values between them through L2: for models whose weights take every SM
//            to stream.
//   Cluster: one thread-block cluster (up to 16 blocks) that holds all of a token's weights in
//            its shared memory and hands values over through distributed shared memory
//            (cluster_step.hpp): for models small enough to fit, like stories260K.
enum class PersistentPlan { Grid, Cluster };
const char* plan_name(PersistentPlan plan);

// The decoder's buffers the step reads and writes (allocated by GpuDecoder); the activations
// between the stages are the step's own.
struct StepBuffers {
  float* logits = nullptr;       // vocab
  float* key_cache = nullptr;    // [layer][seq_len][kv_dim]
  float* value_cache = nullptr;
  int* pos = nullptr;            // read, then advanced by the kernel
  int* token = nullptr;          // the token of this step; both plans write their greedy pick of
                                 // the next one there at the end (GpuDecoder::decode)
  int* token_home = nullptr;     // pinned host memory, mapped ([seq_len]; may be null): the pick
                                 // also goes to [pos], so that no copy brings it home
};

// The Grid plan's knobs, for bench 08's sweeps (--persistent-prefetch-ahead, --persistent-poll-ns,
// --persistent-ring-slots, --persistent-copies, --persistent-wqkv-on-heads); the defaults are
// the reference's.
struct PersistentTuning {
  static constexpr int kMaxPrefetchAhead = 16;
  static constexpr unsigned kMaxPollSleepNs = 100000;
  static constexpr int kMinRingSlots = 2, kMaxRingSlots = 16;  // 2: W1 and W3 pieces side by side
  int prefetch_ahead = 2;       // stages between the one the producer copies and the one it asks L2 for
  unsigned poll_sleep_ns = 32;  // __nanosleep between two polls of a tagged value not yet written
  // The weight ring: its slots (16 KB each, or one row if longer; a larger ring leaves fewer
  // cache rows in shared memory, history_rows()), and the copies into it the producer lets run
  // at once (1..ring_slots).
  int ring_slots = 8;
  int copies_in_flight = 3;
  // Whether the blocks that compute attention's heads also compute a share of Wqkv, the stage
  // attention waits for (false: the other blocks share its rows; only where the grid has more
  // blocks than heads). The head blocks also copy their head's cache history meanwhile.
  bool wqkv_on_head_blocks = true;
};

// The Grid plan's trace (bench 08's --persistent-trace): in one launch, thread 0 of every block
// stamps the GPU's global timer (ns) where each stage's input is complete (...In) and where its
// outputs are published (...Out), per layer. The attention heads' blocks also stamp inside
// attention: AttentionIn once the head's q, k and v are in shared memory, AttentionScores once
// the softmax's sum is known, AttentionOut once the head is published (a block with no head
// stamps all three right after QkvOut). After the last layer, the classifier's input and output
// take the QkvIn and QkvOut places of "layer" n_layers.
enum class StepStamp { QkvIn, QkvOut, AttentionIn, AttentionScores, AttentionOut, WoIn, WoOut, W13In, W13Out, W2In, W2Out };
constexpr int kStampsPerLayer = 11, kFinalStamps = 2;

struct StepTrace {
  int blocks = 0, n_layers = 0, n_heads = 0;
  std::vector<unsigned long long> ns;  // [block][kStampsPerLayer * n_layers + kFinalStamps]
  unsigned long long at(int block, int layer, StepStamp which) const {
    return ns[std::size_t(block) * std::size_t(kStampsPerLayer * n_layers + kFinalStamps) +
              std::size_t(layer * kStampsPerLayer + int(which))];
  }
};

// Where a traced token's time went, per stage, as medians over the layers (µs): the hand-off
// (from the last block's publish of the stage's input to the median block having all of it),
// the stage's own work (median block, input complete to output published), and the straggle
// (the last block's input minus the first's). Lines of a table, for printing.
std::vector<std::string> trace_table(const StepTrace& trace);

class PersistentStep {
 public:
  // Plans the kernel for this model on the current device (one block per SM, shared memory
  // for a head's cache history) and allocates its tagged activations. Throws
  // std::invalid_argument saying what the model or the GPU lacks (then the other step modes
  // still work).
  PersistentStep(const GpuModel& model, const StepBuffers& buffers);
  ~PersistentStep();
  PersistentStep(const PersistentStep&) = delete;
  PersistentStep& operator=(const PersistentStep&) = delete;

  // One forward pass of *token at *pos, then ++*pos: one launch on `stream` (the grid's is
  // cooperative).
  void enqueue(cudaStream_t stream);

  // The plan (PersistentPlan): the constructor picks Cluster where a cluster can hold the
  // model (cluster_unavailable() says why not), Grid otherwise. set_plan(Cluster) throws
  // std::invalid_argument, with that reason, for a model no cluster can hold. Between launches.
  PersistentPlan plan() const { return plan_; }
  void set_plan(PersistentPlan plan);
  const std::string& cluster_unavailable() const { return cluster_unavailable_; }  // "" when it can run
  std::size_t cluster_shared_bytes() const;  // per block; 0 where the cluster plan cannot run
  int cluster_blocks() const;                // blocks of the cluster plan's cluster; 0 likewise

  // Blocks of the Grid plan: 0 = one per SM (the default). At most what is resident at once (a
  // cooperative launch: the blocks wait for each other) and at most dim (every block writes
  // some of the residual stream); throws std::invalid_argument otherwise. Between launches.
  void set_blocks(int blocks);
  int blocks() const { return blocks_; }
  int max_blocks() const { return max_blocks_; }
  std::size_t shared_bytes() const { return shared_bytes_; }
  int history_rows() const { return history_rows_; }  // cache rows a head block holds in shared memory
  // The Grid plan's PersistentTuning; throws std::invalid_argument outside its ranges. Between
  // launches.
  void set_tuning(const PersistentTuning& tuning);
  const PersistentTuning& tuning() const { return tuning_; }
  // The next Grid plan launch records a StepTrace (one launch only: the stamps cost a little);
  // read_trace() waits for the device and returns it. Throws std::logic_error when no traced
  // launch has run since arm_trace().
  void arm_trace();
  StepTrace read_trace();
  // Whether a launch also writes greedy decoding's next token into *token (the argmax of the
  // logits, chapter 07's greedy rule: greedy_pick.cuh): then a greedy decoder needs no sampler
  // launch. Both plans do.
  bool picks_greedy_token() const { return true; }

 private:
  void plan_cluster(int optin);
  // Shared memory for a ring of `ring_slots` slots (why_not: why it cannot run; else the cache
  // rows it leaves room for and the blocks that fit at once); apply() makes it the kernel's.
  struct SharedPlan {
    int history_rows = 0, blocks_at_once = 0;
    std::size_t shared_bytes = 0;
    std::string why_not;
  };
  SharedPlan plan_shared(int ring_slots) const;
  void apply(const SharedPlan& plan);

  const GpuModel& model_;
  StepBuffers buffers_;
  std::uint64_t* tagged_ = nullptr;  // the stages' outputs, tagged (tagged_values.cuh)
  std::size_t tagged_words_ = 0;
  std::uint32_t launches_ = 0;       // the tags of launch n are n * n_layers + layer + 1
  int blocks_ = 0, max_blocks_ = 0, history_rows_ = 0;
  int checked_blocks_ = 0;  // the most blocks the constructor checked the row arithmetic for
  std::size_t shared_bytes_ = 0;
  PersistentTuning tuning_;
  PersistentPlan plan_ = PersistentPlan::Grid;
  std::string cluster_unavailable_;
  std::unique_ptr<ClusterStep> cluster_;  // the Cluster plan, where it can run
  unsigned long long* trace_ = nullptr;  // arm_trace's buffer, allocated on first use
  bool trace_armed_ = false, trace_written_ = false;
};

}  // namespace ch08
