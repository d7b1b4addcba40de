// Chapter 08's decoder (see gpu_decoder.hpp): the llama2 forward pass and the sampler on the
// device, with the arithmetic of llama2.c's run.c (RMSNorm eps 1e-5, weight * (scale * x),
// RoPE, grouped-query attention, SwiGLU), built from the earlier chapters' reference kernels
// and this chapter's student kernels.
#include "gpu_decoder.hpp"

#include <algorithm>
#include <chrono>
#include <stdexcept>
#include <string>
#include <vector>

#include "add_norm.cuh"  // chapter 06
#include "matvec.hpp"    // chapter 01
#include "wb/check.hpp"
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

// Kernel, memset and memcpy nodes of whatever `enqueue` puts on `stream` (captured into a
// throwaway graph with the plain CUDA API, never run): how many launches it makes from the host.
template <typename F>
int count_nodes(cudaStream_t stream, F&& enqueue) {
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

enum Stage { kEmbedNorm, kMatvec, kRope, kAttention, kSwiglu, kSampler, kStages };

}  // namespace

const char* to_string(StepMode mode) {
  return mode == StepMode::Graph ? "graph" : "step_by_step";
}

double StageTimes::total_us() const {
  return embed_norm_us + matvec_us + rope_us + attention_us + swiglu_us + sampler_us;
}

// ---- GpuModel ------------------------------------------------------------------------------

GpuModel::GpuModel(const wb::model::Model& model) : host_(model), config_(model.config()) {
  const std::span<const float> p = model.payload();
  WB_CUDA(cudaMalloc(&d_payload_, p.size_bytes()));
  WB_CUDA(cudaMemcpy(d_payload_, p.data(), p.size_bytes(), cudaMemcpyHostToDevice));
  // A copy from pageable memory may return before its DMA is done, and the decoder's stream
  // is non-blocking (it does not wait for the legacy stream): wait here, once.
  WB_CUDA(cudaDeviceSynchronize());
}

GpuModel::~GpuModel() {
  if (d_payload_) cudaFree(d_payload_);
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
  float* q = nullptr;
  float* k = nullptr;
  float* v = nullptr;
  float* att = nullptr;              // attention output (input of wo)
  float* delta = nullptr;            // wo / w2 output (what the next add adds)
  float* hb = nullptr;               // w1 output, then swiglu in place
  float* hb2 = nullptr;              // w3 output
  float* logits = nullptr;
  float* key_cache = nullptr;        // [layer][seq_len][kv_dim]
  float* value_cache = nullptr;
  float* scores = nullptr;           // [n_heads][seq_len]
  void* workspace = nullptr;         // chapter 07's sampler
  std::size_t workspace_bytes = 0;
  float* confidence = nullptr;       // the sampler's (unused here)
  int* pos = nullptr;                // the position of the next step (device)
  int* token = nullptr;              // the token of the next step (device)
  int* host_token = nullptr;         // pinned: the token coming back
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
    if (host_token) cudaFreeHost(host_token);
    if (host_prompt) cudaFreeHost(host_prompt);
  }
};

struct GpuDecoder::Marks {
  std::vector<cudaEvent_t> events;  // recorded in order
  std::vector<int> stages;          // events[i] ends a segment of stages[i]
  std::size_t used = 0;
  void mark(Stage stage, cudaStream_t stream) {
    if (used >= events.size()) throw std::logic_error("ch08 measure_stages: too few events");
    WB_CUDA(cudaEventRecord(events[used], stream));
    stages[used] = stage;
    ++used;
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
    b_->q = b_->alloc<float>(dim);
    b_->k = b_->alloc<float>(kv);
    b_->v = b_->alloc<float>(kv);
    b_->att = b_->alloc<float>(dim);
    b_->delta = b_->alloc<float>(dim);
    b_->hb = b_->alloc<float>(hidden);
    b_->hb2 = b_->alloc<float>(hidden);
    b_->logits = b_->alloc<float>(std::size_t(c.vocab_size));
    b_->key_cache = b_->alloc<float>(cache);
    b_->value_cache = b_->alloc<float>(cache);
    b_->scores = b_->alloc<float>(std::size_t(c.n_heads) * std::size_t(c.seq_len));
    b_->workspace_bytes = ch07::fused_sampler_workspace_bytes(1, c.vocab_size);
    b_->workspace = b_->alloc<unsigned char>(b_->workspace_bytes);
    b_->confidence = b_->alloc<float>(1);
    b_->pos = b_->alloc<int>(1);
    b_->token = b_->alloc<int>(1);
    WB_CUDA(cudaMallocHost(&b_->host_token, sizeof(int)));
    WB_CUDA(cudaMallocHost(&b_->host_prompt, std::size_t(c.seq_len) * sizeof(int)));
    // Our own stream; non-blocking, so nothing on the legacy default stream serializes with
    // it (everything of the decoder goes on this stream, in order).
    WB_CUDA(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
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
  mode_ = mode;
  need_capture_ = true;
}

void GpuDecoder::reset() {
  pos_ = 0;
  WB_CUDA(cudaMemsetAsync(b_->pos, 0, sizeof(int), stream_));
}

// One forward pass of *token at *pos, then ++*pos. Kernels only: no synchronization, no
// allocation, no copy (it is captured as the step graph). `marks` (measure_stages only)
// records an event after each stage.
void GpuDecoder::enqueue_step(cudaStream_t s, Marks* marks) {
  const wb::model::Config& c = model_.config();
  const wb::model::Weights& w = model_.host().weights();
  const int dim = c.dim, kv_dim = c.kv_dim(), hidden = c.hidden_dim, head_size = c.head_size();
  const std::size_t layer_cache = std::size_t(c.seq_len) * std::size_t(kv_dim);
  Buffers& b = *b_;
  auto mark = [&](Stage stage) {
    if (marks) marks->mark(stage, s);
  };
  auto matvec = [&](float* y, const float* x, const float* W_host, int n, int d) {
    ch01::launch_matvec(y, x, model_.device(W_host), n, d, s);
  };
  auto rms = [&](const float* weight_host) {
    ch06::NormParams p;
    p.norm = ch06::Norm::RMSNorm;
    p.weight = model_.device(weight_host);
    p.eps = kRmsEps;
    return p;
  };

  int cur = 0;  // which x holds the residual stream
  embed_kernel<<<std::min((dim + 255) / 256, 64), 256, 0, s>>>(b.x[cur], model_.device(w.token_embedding),
                                                              b.token, dim, c.vocab_size);
  WB_CUDA(cudaGetLastError());
  ch06::norm_rows(b.x[cur], b.xb, 1, dim, rms(w.layers[0].rms_att), s);
  mark(kEmbedNorm);
  for (int l = 0; l < c.n_layers; ++l) {
    const wb::model::LayerWeights& lw = w.layers[std::size_t(l)];
    float* key_cache = b.key_cache + std::size_t(l) * layer_cache;
    float* value_cache = b.value_cache + std::size_t(l) * layer_cache;
    // Attention block: xb = rmsnorm(x) is ready.
    matvec(b.q, b.xb, lw.wq, dim, dim);
    matvec(b.k, b.xb, lw.wk, dim, kv_dim);
    matvec(b.v, b.xb, lw.wv, dim, kv_dim);
    mark(kMatvec);
    rope_and_append(b.q, b.k, b.v, key_cache, value_cache, dim, kv_dim, head_size, b.pos, s);
    mark(kRope);
    attention(b.att, b.q, key_cache, value_cache, b.scores, c.n_heads, c.n_kv_heads, head_size, c.seq_len,
              b.pos, s);
    mark(kAttention);
    matvec(b.delta, b.att, lw.wo, dim, dim);
    mark(kMatvec);
    // x += wo a; xb = rmsnorm(x) with rms_ffn (one fused pass; the sum goes to the other buffer).
    ch06::add_norm_fused(b.x[cur], b.delta, b.x[1 - cur], b.xb, 1, dim, rms(lw.rms_ffn), s);
    cur = 1 - cur;
    mark(kEmbedNorm);
    // Feed-forward block.
    matvec(b.hb, b.xb, lw.w1, dim, hidden);
    matvec(b.hb2, b.xb, lw.w3, dim, hidden);
    mark(kMatvec);
    swiglu(b.hb, b.hb, b.hb2, hidden, s);
    mark(kSwiglu);
    matvec(b.delta, b.hb, lw.w2, hidden, dim);
    mark(kMatvec);
    // x += w2 g; xb = rmsnorm(x) with the next layer's rms_att (the final norm after the last).
    const float* next_norm = l + 1 < c.n_layers ? w.layers[std::size_t(l) + 1].rms_att : w.rms_final;
    ch06::add_norm_fused(b.x[cur], b.delta, b.x[1 - cur], b.xb, 1, dim, rms(next_norm), s);
    cur = 1 - cur;
    mark(kEmbedNorm);
  }
  matvec(b.logits, b.xb, w.classifier, dim, c.vocab_size);
  mark(kMatvec);
  advance_position_kernel<<<1, 1, 0, s>>>(b.pos);
  WB_CUDA(cudaGetLastError());
  mark(kEmbedNorm);
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
  } else {
    enqueue_step(stream_);
  }
  ++pos_;
}

void GpuDecoder::enqueue_sample(const ch07::SamplingParams& sampling) {
  ch07::sample_fused(b_->logits, 1, model_.config().vocab_size, sampling, b_->token, b_->confidence,
                     b_->workspace, b_->workspace_bytes, stream_);
}

int GpuDecoder::fetch_token() {
  WB_CUDA(cudaMemcpyAsync(b_->host_token, b_->token, sizeof(int), cudaMemcpyDeviceToHost, stream_));
  WB_CUDA(cudaStreamSynchronize(stream_));
  return *b_->host_token;
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
  WB_CUDA(cudaStreamSynchronize(stream_));
  reset();
  std::vector<int> tokens{prompt[0]};
  put_token(prompt[0]);
  long long host_launches = 1;  // the first token's copy
  int passes = 0;
  for (int pos = 0; pos < steps; ++pos) {
    run_step();
    ++passes;
    host_launches += mode_ == StepMode::Graph ? 1 : step_nodes_;
    int next;
    if (pos + 1 < int(prompt.size())) {
      next = prompt[std::size_t(pos) + 1];  // forced: straight into *token, no sampling
      put_token(next);
      ++host_launches;
    } else {
      ch07::SamplingParams p = sampling;
      p.step = std::uint64_t(pos);  // the step counter: by value, hence outside the graph
      enqueue_sample(p);
      host_launches += sampler_nodes_;
      next = fetch_token();  // 4 bytes back; the next step reads *token on the device
      if (next < 0 || next >= c.vocab_size)
        throw wb::model::ModelError("ch08 GpuDecoder::generate: the sampler returned token " +
                                    std::to_string(next) + " at position " + std::to_string(pos) +
                                    " (the logits hold NaN or inf: a kernel of the step is wrong)");
    }
    if (next == wb::model::Tokenizer::kBos) break;  // llama2.c's end of story
    tokens.push_back(next);
  }
  WB_CUDA(cudaStreamSynchronize(stream_));
  passes_ = passes;
  host_launches_per_step_ = passes > 0 ? double(host_launches) / passes : 0;
  return tokens;
}

double GpuDecoder::measure_tokens_per_s(int steps) {
  steps = std::clamp(steps, 2, model_.config().seq_len);
  const ch07::SamplingParams greedy{0.0f, 0, 1.0f, 0, 0};
  WB_CUDA(cudaStreamSynchronize(stream_));
  reset();
  put_token(wb::model::Tokenizer::kBos);
  using Clock = std::chrono::steady_clock;
  Clock::time_point start;
  for (int pos = 0; pos < steps; ++pos) {
    run_step();
    ch07::SamplingParams p = greedy;
    p.step = std::uint64_t(pos);
    enqueue_sample(p);
    (void)fetch_token();  // the real loop: the token comes back every step
    if (pos == 0) start = Clock::now();  // the first pass (and a capture) is not timed
  }
  const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
  return double(steps - 1) / seconds;
}

StageTimes GpuDecoder::measure_stages(int steps) {
  const wb::model::Config& c = model_.config();
  steps = std::clamp(steps, 1, c.seq_len);
  Marks marks;
  // start, embed+norm, 9 per layer, classifier, advance, sampler
  const std::size_t per_step = 1 + 1 + std::size_t(c.n_layers) * 9 + 2 + 1;
  marks.events.resize(per_step + 1);
  marks.stages.resize(per_step + 1);
  for (cudaEvent_t& e : marks.events) WB_CUDA(cudaEventCreate(&e));
  double sums[kStages] = {};
  try {
    WB_CUDA(cudaStreamSynchronize(stream_));
    reset();
    put_token(wb::model::Tokenizer::kBos);
    for (int pos = 0; pos < steps; ++pos) {
      if (pos_ >= c.seq_len) break;
      marks.used = 0;
      marks.mark(kEmbedNorm, stream_);  // the start (its segment is empty)
      enqueue_step(stream_, &marks);
      ++pos_;
      ch07::SamplingParams p{0.0f, 0, 1.0f, 0, std::uint64_t(pos)};
      enqueue_sample(p);
      marks.mark(kSampler, stream_);
      (void)fetch_token();
      for (std::size_t i = 1; i < marks.used; ++i) {
        float ms = 0;
        WB_CUDA(cudaEventElapsedTime(&ms, marks.events[i - 1], marks.events[i]));
        sums[marks.stages[i]] += 1e3 * ms;
      }
    }
  } catch (...) {
    for (cudaEvent_t e : marks.events) cudaEventDestroy(e);
    throw;
  }
  for (cudaEvent_t e : marks.events) WB_CUDA(cudaEventDestroy(e));
  StageTimes t;
  t.embed_norm_us = sums[kEmbedNorm] / steps;
  t.matvec_us = sums[kMatvec] / steps;
  t.rope_us = sums[kRope] / steps;
  t.attention_us = sums[kAttention] / steps;
  t.swiglu_us = sums[kSwiglu] / steps;
  t.sampler_us = sums[kSampler] / steps;
  return t;
}

}  // namespace ch08
