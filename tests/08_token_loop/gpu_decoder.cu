// Chapter 08's decoder (see gpu_decoder.hpp): the llama2 forward pass and the sampler on the
// device, with the arithmetic of llama2.c's run.c (RMSNorm eps 1e-5, weight * (scale * x),
// RoPE, grouped-query attention, SwiGLU), built from the earlier chapters' reference kernels
// and this chapter's student kernels.
#include "gpu_decoder.hpp"

#include <algorithm>
#include <chrono>
#include <functional>
#include <initializer_list>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "add_norm.cuh"  // chapter 06
#include "matvec.hpp"    // chapter 01
#include "wb/check.hpp"
#include "wb/upload.hpp"
#include "wb/model/tokenizer.hpp"

namespace ch08 {

namespace {

constexpr float kRmsEps = 1e-5f;  // llama2.c's run.c

// x = embedding[*token]. A token outside the vocabulary (the sampler's -1 for a NaN row)
// gives a NaN row, so the mistake shows up in the logits instead of reading out of bounds.
__global__ void embed_kernel(float* x, const float* embedding, const int* token, int dim, int vocab) {
  const int t = *token;
  const bool ok = t >= 0 && t < vocab;
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < dim; i += gridDim.x * blockDim.x)
    x[i] = ok ? embedding[static_cast<std::size_t>(t) * dim + i] : __int_as_float(0x7fc00000);
}

// The step's last kernel: the next step runs at the next position.
__global__ void advance_position_kernel(int* pos) { *pos += 1; }

// Records whatever `enqueue` puts on `stream` into a graph (plain CUDA API, nothing runs).
// If enqueue throws, the capture is ended and its graph destroyed before the exception goes on.
template <typename F>
cudaGraph_t capture_graph(cudaStream_t stream, F&& enqueue) {
  WB_CUDA(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
  cudaGraph_t graph = nullptr;
  try {
    enqueue(stream);
  } catch (...) {
    cudaStreamEndCapture(stream, &graph);
    if (graph) cudaGraphDestroy(graph);
    throw;
  }
  WB_CUDA(cudaStreamEndCapture(stream, &graph));
  return graph;
}

// Kernel, memset and memcpy nodes of whatever `enqueue` puts on `stream` (captured into a
// throwaway graph, never run): how many launches it makes from the host.
template <typename F>
int count_nodes(cudaStream_t stream, F&& enqueue) {
  cudaGraph_t graph = capture_graph(stream, enqueue);
  std::size_t n = 0;
  WB_CUDA(cudaGraphGetNodes(graph, nullptr, &n));
  std::vector<cudaGraphNode_t> nodes(n);
  if (n > 0) WB_CUDA(cudaGraphGetNodes(graph, nodes.data(), &n));
  int count = 0;
  for (cudaGraphNode_t node : nodes) {
    cudaGraphNodeType type;
    WB_CUDA(cudaGraphNodeGetType(node, &type));
    if (type == cudaGraphNodeTypeKernel || type == cudaGraphNodeTypeMemset || type == cudaGraphNodeTypeMemcpy)
      ++count;
  }
  WB_CUDA(cudaGraphDestroy(graph));
  return count;
}

// Microseconds per replay of whatever `enqueue` puts on `stream`, captured once as a graph,
// replayed once to warm up, then `replays` times back to back between two events.
template <typename F>
double time_graph_us(cudaStream_t stream, int replays, F&& enqueue) {
  cudaGraph_t graph = capture_graph(stream, enqueue);
  cudaGraphExec_t exec = nullptr;
  cudaEvent_t start = nullptr, stop = nullptr;
  float ms = 0;
  try {
    WB_CUDA(cudaGraphInstantiate(&exec, graph, 0));
    WB_CUDA(cudaEventCreate(&start));
    WB_CUDA(cudaEventCreate(&stop));
    WB_CUDA(cudaGraphLaunch(exec, stream));
    WB_CUDA(cudaEventRecord(start, stream));
    for (int r = 0; r < replays; ++r) WB_CUDA(cudaGraphLaunch(exec, stream));
    WB_CUDA(cudaEventRecord(stop, stream));
    WB_CUDA(cudaEventSynchronize(stop));
    WB_CUDA(cudaEventElapsedTime(&ms, start, stop));
  } catch (...) {
    cudaStreamSynchronize(stream);
    if (start) cudaEventDestroy(start);
    if (stop) cudaEventDestroy(stop);
    if (exec) cudaGraphExecDestroy(exec);
    cudaGraphDestroy(graph);
    throw;
  }
  WB_CUDA(cudaEventDestroy(start));
  WB_CUDA(cudaEventDestroy(stop));
  WB_CUDA(cudaGraphExecDestroy(exec));
  WB_CUDA(cudaGraphDestroy(graph));
  return 1e3 * double(ms) / replays;
}

enum Stage { kAllStages = -1, kEmbedNorm, kMatvec, kRope, kAttention, kSwiglu };

}  // namespace

const char* to_string(StepMode mode) {
  switch (mode) {
    case StepMode::Graph: return "graph";
    case StepMode::Persistent: return "persistent";
    case StepMode::StepByStep: break;
  }
  return "step_by_step";
}

double StageTimes::total_us() const {
  return embed_norm_us + matvec_us + rope_us + attention_us + swiglu_us + sampler_us;
}

// ---- GpuModel ------------------------------------------------------------------------------

namespace {

// Copies the matrices `parts` (device pointers, `rows[i]` x `cols` each) one after another
// into `packed`: the rows of the first, then those of the second, ...
void pack_rows(float* packed, std::initializer_list<const float*> parts, std::initializer_list<std::size_t> rows,
               std::size_t cols) {
  const std::size_t* r = rows.begin();
  for (const float* part : parts) {
    WB_CUDA(cudaMemcpy(packed, part, *r * cols * sizeof(float), cudaMemcpyDeviceToDevice));
    packed += *r * cols;
    ++r;
  }
}

}  // namespace

GpuModel::GpuModel(const wb::model::Model& model) : host_(model), config_(model.config()) {
  const std::span<const float> p = model.payload();
  const wb::model::Config& c = config_;
  const std::size_t dim = c.dim, kv = c.kv_dim(), hidden = c.hidden_dim, layers = c.n_layers;
  try {
    WB_CUDA(cudaMalloc(&d_payload_, p.size_bytes()));
    WB_CUDA(cudaMemcpy(d_payload_, p.data(), p.size_bytes(), cudaMemcpyHostToDevice));
    WB_CUDA(cudaMalloc(&d_qkv_, std::max<std::size_t>(layers, 1) * (dim + 2 * kv) * dim * sizeof(float)));
    WB_CUDA(cudaMalloc(&d_w13_, std::max<std::size_t>(layers, 1) * 2 * hidden * dim * sizeof(float)));
    for (std::size_t l = 0; l < layers; ++l) {
      const wb::model::LayerWeights& lw = model.weights().layers[l];
      pack_rows(d_qkv_ + l * (dim + 2 * kv) * dim, {device(lw.wq), device(lw.wk), device(lw.wv)}, {dim, kv, kv}, dim);
      pack_rows(d_w13_ + l * 2 * hidden * dim, {device(lw.w1), device(lw.w3)}, {hidden, hidden}, dim);
    }
    // A copy from pageable memory may return before its DMA is done, and the decoder's stream
    // is non-blocking (it does not wait for the legacy stream): wait here, once.
    WB_CUDA(cudaDeviceSynchronize());
  } catch (...) {
    cudaFree(d_payload_);
    cudaFree(d_qkv_);
    cudaFree(d_w13_);
    throw;
  }
}

GpuModel::~GpuModel() {
  if (d_payload_) cudaFree(d_payload_);
  if (d_qkv_) cudaFree(d_qkv_);
  if (d_w13_) cudaFree(d_w13_);
}

const float* GpuModel::qkv(int layer) const {
  const std::size_t dim = config_.dim, kv = config_.kv_dim();
  return d_qkv_ + std::size_t(layer) * (dim + 2 * kv) * dim;
}

const float* GpuModel::w13(int layer) const {
  return d_w13_ + std::size_t(layer) * 2 * std::size_t(config_.hidden_dim) * std::size_t(config_.dim);
}

const float* GpuModel::device(const float* host_weight) const {
  const std::span<const float> p = host_.payload();
  const std::less_equal<const float*> le;
  if (host_weight == nullptr || !le(p.data(), host_weight) || !le(host_weight, p.data() + p.size()))
    throw std::invalid_argument("ch08 GpuModel::device: the pointer is not inside the model's weights (" +
                                host_.origin() + ")");
  return d_payload_ + (host_weight - p.data());
}

std::size_t GpuModel::weight_bytes_per_token() const {
  const wb::model::Config& c = config_;
  const std::size_t dim = c.dim, kv = c.kv_dim(), hidden = c.hidden_dim;
  const std::size_t per_layer = 2 * dim                 // rms_att, rms_ffn
                                + 2 * dim * dim         // wq, wo
                                + 2 * kv * dim          // wk, wv
                                + 3 * hidden * dim;     // w1, w2, w3
  const std::size_t floats = std::size_t(c.n_layers) * per_layer + dim /*rms_final*/ +
                             std::size_t(c.vocab_size) * dim /*classifier*/ + dim /*one embedding row*/;
  return floats * sizeof(float);
}

// ---- GpuDecoder ----------------------------------------------------------------------------

struct GpuDecoder::Buffers {
  float* x[2] = {nullptr, nullptr};  // the residual stream, ping-pong (ch06's outputs may not alias)
  float* xb = nullptr;               // the normalized stream: every matvec's input
  float* qkv = nullptr;              // the packed qkv matvec's output: q (dim), k, v (kv_dim each)
  float* att = nullptr;              // attention output (input of wo)
  float* delta = nullptr;            // wo / w2 output (what the next add adds)
  float* h13 = nullptr;              // the packed w13 matvec's output: W1 h, then W3 h (hidden
                                     // each); swiglu turns the first half into the FFN's input
  float* logits = nullptr;
  float* key_cache = nullptr;        // [layer][seq_len][kv_dim]
  float* value_cache = nullptr;
  float* scores = nullptr;           // [n_heads][seq_len]
  void* workspace = nullptr;         // chapter 07's sampler
  std::size_t workspace_bytes = 0;
  float* confidence = nullptr;       // the sampler's (unused here)
  int* pos = nullptr;                // the position of the next step (device)
  int* token = nullptr;              // the token of the next step (device)
  int* host_tokens = nullptr;        // pinned: sampled tokens coming back, one slot per position
  cudaEvent_t token_home[2] = {nullptr, nullptr};  // after the copy of an even / odd position
  int* host_prompt = nullptr;        // pinned: forced tokens going in, one slot per position
  std::vector<void*> device_allocs;

  template <typename T>
  T* alloc(std::size_t count) {
    void* p = nullptr;
    WB_CUDA(cudaMalloc(&p, std::max<std::size_t>(count, 1) * sizeof(T)));
    device_allocs.push_back(p);
    return static_cast<T*>(p);
  }
  ~Buffers() {
    for (void* p : device_allocs) cudaFree(p);
    if (host_tokens) cudaFreeHost(host_tokens);
    for (cudaEvent_t e : token_home)
      if (e) cudaEventDestroy(e);
    if (host_prompt) cudaFreeHost(host_prompt);
  }
};

GpuDecoder::GpuDecoder(const GpuModel& model) : model_(model) {
  const wb::model::Config& c = model.config();
  b_ = new Buffers;
  try {
    const std::size_t dim = c.dim, kv = c.kv_dim(), hidden = c.hidden_dim;
    const std::size_t cache = std::size_t(c.n_layers) * std::size_t(c.seq_len) * kv;
    b_->x[0] = b_->alloc<float>(dim);
    b_->x[1] = b_->alloc<float>(dim);
    b_->xb = b_->alloc<float>(dim);
    b_->qkv = b_->alloc<float>(dim + 2 * kv);
    b_->att = b_->alloc<float>(dim);
    b_->delta = b_->alloc<float>(dim);
    b_->h13 = b_->alloc<float>(2 * hidden);
    b_->logits = b_->alloc<float>(std::size_t(c.vocab_size));
    b_->key_cache = b_->alloc<float>(cache);
    b_->value_cache = b_->alloc<float>(cache);
    b_->scores = b_->alloc<float>(std::size_t(c.n_heads) * std::size_t(c.seq_len));
    b_->workspace_bytes = ch07::fused_sampler_workspace_bytes(1, c.vocab_size);
    b_->workspace = b_->alloc<unsigned char>(b_->workspace_bytes);
    b_->confidence = b_->alloc<float>(1);
    b_->pos = b_->alloc<int>(1);
    b_->token = b_->alloc<int>(1);
    // Mapped: the persistent step writes its greedy pick straight into its slot (send_token_home).
    WB_CUDA(cudaHostAlloc(&b_->host_tokens, std::size_t(c.seq_len) * sizeof(int), cudaHostAllocMapped));
    for (cudaEvent_t& e : b_->token_home) WB_CUDA(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
    WB_CUDA(cudaMallocHost(&b_->host_prompt, std::size_t(c.seq_len) * sizeof(int)));
    // Our own stream; non-blocking, so nothing on the legacy default stream serializes with
    // it (everything of the decoder goes on this stream, in order).
    WB_CUDA(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
    // The persistent step (persistent_step.hpp), where the model and the GPU allow it; the
    // other modes do not need it.
    StepBuffers io;
    io.logits = b_->logits;
    io.key_cache = b_->key_cache;
    io.value_cache = b_->value_cache;
    io.pos = b_->pos;
    io.token = b_->token;
    WB_CUDA(cudaHostGetDevicePointer(reinterpret_cast<void**>(&io.token_home), b_->host_tokens, 0));
    try {
      persistent_ = std::make_unique<PersistentStep>(model, io);
    } catch (const std::invalid_argument& e) {
      persistent_unavailable_ = e.what();
    }
    // Zeroed caches: stale rows are never read, but zeros keep a wrong attention finite.
    WB_CUDA(cudaMemsetAsync(b_->key_cache, 0, cache * sizeof(float), stream_));
    WB_CUDA(cudaMemsetAsync(b_->value_cache, 0, cache * sizeof(float), stream_));

    // One un-graphed warm-up step (BOS at position 0): loads every kernel's module before any
    // capture (lazy loading), and finds a broken kernel here rather than inside a capture.
    reset();
    put_token(wb::model::Tokenizer::kBos);
    enqueue_step(stream_);
    ch07::SamplingParams greedy{0.0f, 0, 1.0f, 0, 0};
    enqueue_sample(greedy);
    WB_CUDA(cudaStreamSynchronize(stream_));
    WB_CUDA(cudaGetLastError());
    // The launches a step and a sampler call make from the host (host_launches_per_step).
    // Not under WB_DEBUG_SYNC=1: its synchronize after every launch would break the capture.
    if (!wb::debug_sync_enabled()) {
      step_nodes_ = count_nodes(stream_, [this](cudaStream_t s) { enqueue_step(s); });
      sampler_nodes_ = count_nodes(stream_, [this, greedy](cudaStream_t s) {
        ch07::sample_fused(b_->logits, 1, model_.config().vocab_size, greedy, b_->token, b_->confidence,
                           b_->workspace, b_->workspace_bytes, s);
      });
    }
    reset();
  } catch (...) {
    if (stream_) cudaStreamDestroy(stream_);
    delete b_;
    throw;
  }
}

GpuDecoder::~GpuDecoder() {
  if (stream_) cudaStreamSynchronize(stream_);
  if (stream_) cudaStreamDestroy(stream_);
  delete b_;
}

void GpuDecoder::set_mode(StepMode mode) {
  if (mode == StepMode::Persistent && !persistent_)
    throw std::invalid_argument("ch08 GpuDecoder: StepMode::Persistent cannot run here: " + persistent_unavailable_);
  mode_ = mode;
  need_capture_ = true;
}

void GpuDecoder::set_persistent_blocks(int blocks) {
  if (!persistent_)
    throw std::invalid_argument("ch08 GpuDecoder: StepMode::Persistent cannot run here: " + persistent_unavailable_);
  WB_CUDA(cudaStreamSynchronize(stream_));
  persistent_->set_blocks(blocks);
}

void GpuDecoder::set_persistent_tuning(const PersistentTuning& tuning) {
  if (!persistent_)
    throw std::invalid_argument("ch08 GpuDecoder: StepMode::Persistent cannot run here: " + persistent_unavailable_);
  WB_CUDA(cudaStreamSynchronize(stream_));
  persistent_->set_tuning(tuning);
}

void GpuDecoder::set_persistent_plan(PersistentPlan plan) {
  if (!persistent_)
    throw std::invalid_argument("ch08 GpuDecoder: StepMode::Persistent cannot run here: " + persistent_unavailable_);
  WB_CUDA(cudaStreamSynchronize(stream_));
  persistent_->set_plan(plan);
}

StepTrace GpuDecoder::trace_persistent_step(int token, std::vector<float>* logits) {
  if (mode_ != StepMode::Persistent || persistent_->plan() != PersistentPlan::Grid)
    throw std::logic_error("ch08 GpuDecoder: trace_persistent_step needs StepMode::Persistent on the grid plan");
  WB_CUDA(cudaStreamSynchronize(stream_));
  persistent_->arm_trace();
  std::vector<float> got = forward_logits(token);
  if (logits) *logits = std::move(got);
  return persistent_->read_trace();
}

void GpuDecoder::reset() {
  pos_ = 0;
  WB_CUDA(cudaMemsetAsync(b_->pos, 0, sizeof(int), stream_));
}

// One forward pass of *token at *pos, then ++*pos. Kernels only: no synchronization, no
// allocation, no copy (it is captured as the step graph). With `only` set to a stage
// (measure_stages), only that stage's launches are enqueued, and the position stays.
void GpuDecoder::enqueue_step(cudaStream_t s, int only) {
  const wb::model::Config& c = model_.config();
  const wb::model::Weights& w = model_.host().weights();
  const int dim = c.dim, kv_dim = c.kv_dim(), hidden = c.hidden_dim, head_size = c.head_size();
  const std::size_t layer_cache = std::size_t(c.seq_len) * std::size_t(kv_dim);
  Buffers& b = *b_;
  auto want = [only](Stage stage) { return only == kAllStages || only == stage; };
  auto matvec = [&](float* y, const float* x, const float* W_device, int n, int d) {
    if (want(kMatvec)) ch01::launch_matvec(y, x, W_device, n, d, s);
  };
  auto add_norm = [&](const float* x, const float* delta, float* sum, const float* weight_host) {
    if (!want(kEmbedNorm)) return;
    ch06::NormParams p;
    p.norm = ch06::Norm::RMSNorm;
    p.weight = model_.device(weight_host);
    p.eps = kRmsEps;
    if (delta) ch06::add_norm_fused(x, delta, sum, b.xb, 1, dim, p, s);  // sum = x + delta; xb = norm(sum)
    else ch06::norm_rows(x, b.xb, 1, dim, p, s);                         // xb = norm(x)
  };

  int cur = 0;  // which x holds the residual stream
  if (want(kEmbedNorm)) {
    embed_kernel<<<std::min((dim + 255) / 256, 64), 256, 0, s>>>(b.x[cur], model_.device(w.token_embedding),
                                                                b.token, dim, c.vocab_size);
    WB_CUDA(cudaGetLastError());
  }
  add_norm(b.x[cur], nullptr, nullptr, w.layers[0].rms_att);
  for (int l = 0; l < c.n_layers; ++l) {
    const wb::model::LayerWeights& lw = w.layers[std::size_t(l)];
    float* key_cache = b.key_cache + std::size_t(l) * layer_cache;
    float* value_cache = b.value_cache + std::size_t(l) * layer_cache;
    // Attention block: xb = rmsnorm(x) is ready. q, k and v in one matvec (packed weights).
    float* q = b.qkv;
    const float* k = b.qkv + dim;
    const float* v = b.qkv + dim + kv_dim;
    matvec(b.qkv, b.xb, model_.qkv(l), dim, dim + 2 * kv_dim);
    if (want(kRope)) rope_and_append(q, k, v, key_cache, value_cache, dim, kv_dim, head_size, b.pos, s);
    if (want(kAttention))
      attention(b.att, q, key_cache, value_cache, b.scores, c.n_heads, c.n_kv_heads, head_size, c.seq_len,
                b.pos, s);
    matvec(b.delta, b.att, model_.device(lw.wo), dim, dim);
    // x += wo a; xb = rmsnorm(x) with rms_ffn (one fused pass; the sum goes to the other buffer).
    add_norm(b.x[cur], b.delta, b.x[1 - cur], lw.rms_ffn);
    cur = 1 - cur;
    // Feed-forward block: W1 h and W3 h in one matvec (packed weights), SwiGLU in place.
    float* gate = b.h13;
    const float* up = b.h13 + hidden;
    matvec(b.h13, b.xb, model_.w13(l), dim, 2 * hidden);
    if (want(kSwiglu)) swiglu(gate, gate, up, hidden, s);
    matvec(b.delta, gate, model_.device(lw.w2), hidden, dim);
    // x += w2 g; xb = rmsnorm(x) with the next layer's rms_att (the final norm after the last).
    const float* next_norm = l + 1 < c.n_layers ? w.layers[std::size_t(l) + 1].rms_att : w.rms_final;
    add_norm(b.x[cur], b.delta, b.x[1 - cur], next_norm);
    cur = 1 - cur;
  }
  matvec(b.logits, b.xb, model_.device(w.classifier), dim, c.vocab_size);
  if (only == kAllStages) {
    advance_position_kernel<<<1, 1, 0, s>>>(b.pos);
    WB_CUDA(cudaGetLastError());
  }
}

void GpuDecoder::run_step() {
  const int seq_len = model_.config().seq_len;
  if (pos_ < 0 || pos_ >= seq_len)
    throw std::out_of_range("ch08 GpuDecoder: position " + std::to_string(pos_) +
                            " is outside the context (0.." + std::to_string(seq_len - 1) + ") of " +
                            model_.host().origin() + "; call reset() to start again");
  if (mode_ == StepMode::Graph) {
    if (need_capture_) {
      if (wb::debug_sync_enabled())
        throw std::logic_error("ch08 GpuDecoder: Graph mode cannot run with WB_DEBUG_SYNC=1 (it synchronizes "
                               "after every launch, which breaks the stream capture); unset it or use StepByStep");
      graph_.capture([this](cudaStream_t s) { enqueue_step(s); }, stream_);
      need_capture_ = false;
    }
    graph_.replay(stream_);
  } else if (mode_ == StepMode::Persistent) {
    persistent_->enqueue(stream_);
  } else {
    enqueue_step(stream_);
  }
  ++pos_;
}

void GpuDecoder::enqueue_sample(const ch07::SamplingParams& sampling) {
  ch07::sample_fused(b_->logits, 1, model_.config().vocab_size, sampling, b_->token, b_->confidence,
                     b_->workspace, b_->workspace_bytes, stream_);
}

// Greedy decoding (chapter 07's rule 1: temperature 0, or top-k 1) needs only the logits'
// argmax; the persistent step (either plan) picks it itself and writes it into *token, so the
// sampler's launch is skipped then (same rule: its tests check the pick against chapter 07's).
bool GpuDecoder::step_picked_token(const ch07::SamplingParams& sampling) const {
  return ch07::is_greedy(sampling) && mode_ == StepMode::Persistent && persistent_->picks_greedy_token();
}

void GpuDecoder::put_token(int token) {
  const int vocab = model_.config().vocab_size;
  if (token < 0 || token >= vocab)
    throw std::invalid_argument("ch08 GpuDecoder: token " + std::to_string(token) +
                                " is outside the vocabulary (0.." + std::to_string(vocab - 1) + ")");
  // One pinned slot per position: the copy is asynchronous, so a slot is not rewritten
  // before the stream has used it (positions only grow until reset(), which follows a sync).
  int* slot = b_->host_prompt + std::min(pos_, model_.config().seq_len - 1);
  *slot = token;
  WB_CUDA(cudaMemcpyAsync(b_->token, slot, sizeof(int), cudaMemcpyHostToDevice, stream_));
}

std::vector<float> GpuDecoder::forward_logits(int token) {
  WB_CUDA(cudaStreamSynchronize(stream_));  // the pinned slot of this position is free
  put_token(token);
  run_step();
  std::vector<float> logits(std::size_t(model_.config().vocab_size));
  WB_CUDA(cudaMemcpyAsync(logits.data(), b_->logits, logits.size() * sizeof(float), cudaMemcpyDeviceToHost,
                          stream_));
  WB_CUDA(cudaStreamSynchronize(stream_));
  return logits;
}

int GpuDecoder::token_on_device() {
  int token = 0;
  WB_CUDA(cudaMemcpyAsync(&token, b_->token, sizeof(int), cudaMemcpyDeviceToHost, stream_));
  WB_CUDA(cudaStreamSynchronize(stream_));
  return token;
}

void GpuDecoder::send_token_home(int pos, bool step_wrote_it) {
  if (!step_wrote_it)
    WB_CUDA(cudaMemcpyAsync(b_->host_tokens + pos, b_->token, sizeof(int), cudaMemcpyDeviceToHost, stream_));
  WB_CUDA(cudaEventRecord(b_->token_home[pos % 2], stream_));
}

int GpuDecoder::take_token(int pos) {
  // The event of pos % 2 is not recorded again before this wait: the loop records the other
  // one (pos + 1) in between, and this one again (pos + 2) only after the wait.
  WB_CUDA(cudaEventSynchronize(b_->token_home[pos % 2]));
  const int token = b_->host_tokens[pos];
  const int vocab = model_.config().vocab_size;
  if (token < 0 || token >= vocab)
    throw wb::model::ModelError("ch08 GpuDecoder: the sampler returned token " + std::to_string(token) +
                                " at position " + std::to_string(pos) +
                                " (the logits hold NaN or inf: a kernel of the step is wrong)");
  return token;
}

int GpuDecoder::decode(std::span<const int> prompt, int steps, const ch07::SamplingParams& sampling,
                       const std::function<bool(int pos, int token)>& on_token) {
  WB_CUDA(cudaStreamSynchronize(stream_));
  reset();
  put_token(prompt[0]);
  long long host_launches = 1;  // the first token's copy
  int passes = 0;
  int pending = -1;  // the position whose sampled token is on its way to the host
  for (int pos = 0; pos < steps; ++pos) {
    run_step();
    ++passes;
    host_launches += mode_ == StepMode::StepByStep ? step_nodes_ : 1;  // a graph launch, or one kernel
    const bool forced = pos + 1 < int(prompt.size());
    if (forced) {
      put_token(prompt[std::size_t(pos) + 1]);  // straight into *token, no sampling
      ++host_launches;
    } else {
      if (!step_picked_token(sampling)) {
        ch07::SamplingParams p = sampling;
        p.step = std::uint64_t(pos);  // the step counter: by value, hence outside the graph
        enqueue_sample(p);            // writes *token, where the next step reads it on the device
        host_launches += sampler_nodes_;
      }
      send_token_home(pos, step_picked_token(sampling));
    }
    // Step pos is enqueued: now the host looks at the token of the step before it, except
    // after the first step, whose own token it waits for (no lag: see generate()).
    int ready = pending;
    pending = forced ? -1 : pos;
    if (pos == 0) std::swap(ready, pending);
    if (ready >= 0 && !on_token(ready, take_token(ready))) {
      pending = -1;
      break;  // the step just enqueued, if any, is wasted
    }
  }
  if (pending >= 0) (void)on_token(pending, take_token(pending));
  WB_CUDA(cudaStreamSynchronize(stream_));
  passes_ = passes;
  host_launches_per_step_ = passes > 0 ? double(host_launches) / passes : 0;
  return passes;
}

std::vector<int> GpuDecoder::generate(std::span<const int> prompt, int steps,
                                      const ch07::SamplingParams& sampling) {
  const wb::model::Config& c = model_.config();
  if (prompt.empty())
    throw std::invalid_argument("ch08 GpuDecoder::generate: the prompt must hold at least BOS (token " +
                                std::to_string(wb::model::Tokenizer::kBos) + ")");
  steps = std::min(steps, c.seq_len);
  if (int(prompt.size()) > steps)
    throw wb::model::ModelError("ch08 GpuDecoder::generate: the prompt is " + std::to_string(prompt.size()) +
                                " tokens, more than the " + std::to_string(steps) + " steps asked for");
  for (int t : prompt)
    if (t < 0 || t >= c.vocab_size)
      throw std::invalid_argument("ch08 GpuDecoder::generate: prompt token " + std::to_string(t) +
                                  " is outside the vocabulary (0.." + std::to_string(c.vocab_size - 1) + ")");
  std::vector<int> tokens(prompt.begin(), prompt.end());
  (void)decode(prompt, steps, sampling, [&tokens](int, int token) {
    if (token == wb::model::Tokenizer::kBos) return false;  // llama2.c's end of story
    tokens.push_back(token);
    return true;
  });
  return tokens;
}

double GpuDecoder::measure_tokens_per_s(int steps) {
  steps = std::clamp(steps, 2, model_.config().seq_len);
  const ch07::SamplingParams greedy{0.0f, 0, 1.0f, 0, 0};
  const int bos[] = {wb::model::Tokenizer::kBos};
  using Clock = std::chrono::steady_clock;
  Clock::time_point start;
  // The first step (and a capture) is not timed: decode() waits for its token before it
  // enqueues step 1, and the clock starts there. BOS does not stop this loop.
  (void)decode(bos, steps, greedy, [&start](int pos, int) {
    if (pos == 0) start = Clock::now();
    return true;
  });
  const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
  return double(steps - 1) / seconds;
}

StageTimes GpuDecoder::measure_stages(int position, int replays) {
  const wb::model::Config& c = model_.config();
  if (position < 0 || position >= c.seq_len)
    throw std::out_of_range("ch08 GpuDecoder::measure_stages: position " + std::to_string(position) +
                            " is outside the context (0.." + std::to_string(c.seq_len - 1) + ")");
  if (wb::debug_sync_enabled())
    throw std::logic_error("ch08 GpuDecoder::measure_stages captures graphs, which WB_DEBUG_SYNC=1 breaks; unset it");
  replays = std::max(replays, 1);
  WB_CUDA(cudaStreamSynchronize(stream_));
  wb::upload_bytes(b_->pos, &position, sizeof(int));  // stage graphs keep it; stream_ is non-blocking
  StageTimes t;
  auto stage = [&](Stage st, double& us, int& nodes) {
    auto enqueue = [this, st](cudaStream_t s) { enqueue_step(s, st); };
    nodes = count_nodes(stream_, enqueue);
    us = time_graph_us(stream_, replays, enqueue);
  };
  stage(kEmbedNorm, t.embed_norm_us, t.embed_norm_nodes);
  stage(kMatvec, t.matvec_us, t.matvec_nodes);
  stage(kRope, t.rope_us, t.rope_nodes);
  stage(kAttention, t.attention_us, t.attention_nodes);
  stage(kSwiglu, t.swiglu_us, t.swiglu_nodes);
  const ch07::SamplingParams greedy{0.0f, 0, 1.0f, 0, 0};
  auto sample = [this, &greedy](cudaStream_t s) {
    ch07::sample_fused(b_->logits, 1, model_.config().vocab_size, greedy, b_->token, b_->confidence,
                       b_->workspace, b_->workspace_bytes, s);
  };
  t.sampler_nodes = count_nodes(stream_, sample);
  t.sampler_us = time_graph_us(stream_, replays, sample);
  reset();
  WB_CUDA(cudaStreamSynchronize(stream_));
  return t;
}

}  // namespace ch08
