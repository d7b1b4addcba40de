#pragma once
// The tests' one way to call any of the four steps: logits in a guarded device buffer (or a
// host copy for step 1), outputs poisoned before every call and kept between guard bands,
// every SM's shared memory poisoned before every GPU step's call, the step's own object
// built once. After the calls, integrity() says whether anything was
// written outside the outputs or the logits changed.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <memory>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "../lib/poisoned_shared_memory.cuh"
#include "sampler.cuh"
#include "wb/api_counter.hpp"
#include "wb/buffer.hpp"
#include "wb/check.hpp"
#include "wb/guarded_buffer.hpp"

namespace ch07::testing {

enum class Step { Cpu = 1, SortThenCpu = 2, TopCandidates = 3, Fused = 4 };

inline const char* step_name(Step s) {
  switch (s) {
    case Step::Cpu: return "step 1 (sample_cpu)";
    case Step::SortThenCpu: return "step 2 (SortThenCpuSampler)";
    case Step::TopCandidates: return "step 3 (TopCandidatesSampler)";
    default: return "step 4 (sample_fused)";
  }
}

// An unwritten token: no sampler returns it (it is neither -1 nor in any vocabulary here).
inline constexpr int kPoisonToken = 0x7F7F7F7F;
inline constexpr int kGuardToken = 0x5A5A5A5A;

struct Draws {
  std::vector<int> tokens;
  std::vector<float> confidence;
  wb::ApiCounts counts;  // what the sampler call itself did (when CUPTI is available)
};

inline int cpu_threads() { return std::max(1u, std::thread::hardware_concurrency()); }

class Runner {
 public:
  // `logits` is rows x vocab; calls may sample any prefix of rows.
  Runner(Step step, const std::vector<float>& logits, int rows, int vocab, int cpu_threads = 0)
      : step_(step), rows_(rows), vocab_(vocab), logits_host_(logits),
        logits_(std::max<std::size_t>(logits.size(), 1)), uniforms_(std::max(rows, 1)),
        tokens_dev_(std::max(rows, 1)), confidence_dev_(std::max(rows, 1)),
        threads_(cpu_threads > 0 ? cpu_threads : testing::cpu_threads()) {
    if (!logits.empty()) logits_.upload(logits);
    WB_CUDA(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
    if (step == Step::SortThenCpu) sort_then_cpu_ = std::make_unique<SortThenCpuSampler>(rows, vocab);
    if (step == Step::TopCandidates)
      top_candidates_ = std::make_unique<TopCandidatesSampler>(rows, vocab);
    if (step == Step::Fused) {
      workspace_bytes_ = fused_sampler_workspace_bytes(rows, vocab);
      workspace_ = std::make_unique<wb::GuardedBuffer<unsigned char>>(workspace_bytes_);
    }
    host_tokens_.assign(rows + 2 * kHostGuard, kGuardToken);
    host_confidence_.assign(rows + 2 * kHostGuard, kGuardConfidence);
  }
  ~Runner() {
    if (stream_) {
      cudaStreamSynchronize(stream_);
      cudaStreamDestroy(stream_);
    }
  }
  Runner(const Runner&) = delete;
  Runner& operator=(const Runner&) = delete;

  Step step() const { return step_; }
  int rows() const { return rows_; }
  int vocab() const { return vocab_; }
  cudaStream_t stream() const { return stream_; }
  const float* device_logits() const { return logits_.data(); }
  void* workspace() { return workspace_ ? workspace_->data() : nullptr; }
  std::size_t workspace_bytes() const { return workspace_bytes_; }

  // One call on the first `rows` rows (all of them when rows < 0).
  Draws run(const SamplingParams& params, int rows = -1) {
    if (rows < 0) rows = rows_;
    Draws d;
    d.tokens.assign(rows, kPoisonToken);
    d.confidence.assign(rows, std::nanf(""));
    poison_outputs(rows);
    wb::ApiCounter counter;
    call(params, rows);
    d.counts = counter.counts();
    collect(rows, d);
    return d;
  }

  // Overwrites the logits in place (the same buffers, as a decoder rewrites its logits at
  // every step); integrity() then checks against these. Same size as the constructor's.
  void replace_logits(const std::vector<float>& logits) {
    if (logits.size() != logits_host_.size())
      throw std::logic_error("Runner::replace_logits: the logits must keep their size");
    logits_host_ = logits;
    logits_.upload(logits);
  }

  // The raw entry point, with pointers of the kind the step takes, for the bad-argument
  // tests (null pointers, rows out of range).
  void call_raw(const float* logits, int rows, const SamplingParams& params, int* tokens,
                float* confidence) {
    switch (step_) {
      case Step::Cpu: {
        std::vector<float> uniforms(std::max(rows, 1), 0.5f);
        sample_cpu(logits, rows, vocab_, params, uniforms.data(), tokens, confidence, threads_);
        break;
      }
      case Step::SortThenCpu:
        sort_then_cpu_->sample(logits, rows, params, tokens, confidence, stream_);
        break;
      case Step::TopCandidates:
        top_candidates_->sample(logits, rows, params, tokens, confidence, stream_);
        break;
      case Step::Fused:
        sample_fused(logits, rows, vocab_, params, tokens, confidence, workspace(),
                     workspace_bytes_, stream_);
        WB_CUDA(cudaStreamSynchronize(stream_));
        break;
    }
  }
  // Valid pointers of the right kind for call_raw.
  const float* logits_for_call() const {
    return step_ == Step::Cpu ? logits_host_.data() : logits_.data();
  }
  int* tokens_for_call() {
    return step_ == Step::Fused ? tokens_dev_.data() : host_tokens_.data() + kHostGuard;
  }
  float* confidence_for_call() {
    return step_ == Step::Fused ? confidence_dev_.data() : host_confidence_.data() + kHostGuard;
  }

  std::size_t d2h_bytes_per_row() const {
    if (sort_then_cpu_) return sort_then_cpu_->d2h_bytes_per_row();
    if (top_candidates_) return top_candidates_->d2h_bytes_per_row();
    return 0;
  }

  // Empty when every write stayed inside the outputs (and the workspace) and the logits are
  // bit for bit what was uploaded; otherwise what went wrong, for the message.
  std::string integrity() {
    WB_CUDA(cudaStreamSynchronize(stream_));
    std::string out;
    const auto add = [&](const std::string& s) {
      if (!s.empty()) out += (out.empty() ? "" : "; ") + s;
    };
    if (step_ != Step::Cpu && !logits_host_.empty()) {
      const std::string change = logits_.input_change(logits_host_, "logits");
      if (!change.empty()) add("rule: the logits are read-only. The sampler " + change);
    }
    if (step_ == Step::Fused) {
      add(tokens_dev_.overrun("tokens"));
      add(confidence_dev_.overrun("confidence"));
      add(workspace_->overrun("workspace"));
    } else {
      for (int i = 0; i < kHostGuard; ++i) {
        const std::size_t tail = kHostGuard + rows_ + i;
        if (host_tokens_[i] != kGuardToken || host_tokens_[tail] != kGuardToken ||
            std::memcmp(&host_confidence_[i], &kGuardConfidence, sizeof(float)) != 0 ||
            std::memcmp(&host_confidence_[tail], &kGuardConfidence, sizeof(float)) != 0) {
          add("wrote host memory outside tokens[0, rows) or confidence[0, rows)");
          break;
        }
      }
    }
    return out;
  }

 private:
  static constexpr int kHostGuard = 64;
  static constexpr float kGuardConfidence = -2.87e-16f;

  void poison_outputs(int rows) {
    // What a kernel reads from shared memory it never wrote is 0xFF bytes, not the last
    // call's values (which a stale read would get right by luck on the same row).
    if (step_ != Step::Cpu) wb::testing::poison_shared_memory(stream_);
    if (step_ == Step::Fused) {
      // tokens get 0x7F7F7F7F (never a valid answer: not -1, not in the vocabulary);
      // confidences NaN; the workspace garbage (its contents on entry are undefined).
      if (rows > 0) {
        WB_CUDA(cudaMemsetAsync(tokens_dev_.data(), 0x7F, rows * sizeof(int), stream_));
        WB_CUDA(cudaMemsetAsync(confidence_dev_.data(), 0xFF, rows * sizeof(float), stream_));
      }
      if (workspace_bytes_ > 0)
        WB_CUDA(cudaMemsetAsync(workspace_->data(), 0xC3, workspace_bytes_, stream_));
    } else {
      std::fill(host_tokens_.begin() + kHostGuard, host_tokens_.begin() + kHostGuard + rows,
                kPoisonToken);
      std::fill(host_confidence_.begin() + kHostGuard,
                host_confidence_.begin() + kHostGuard + rows, std::nanf(""));
    }
  }

  void call(const SamplingParams& params, int rows) {
    switch (step_) {
      case Step::Cpu: {
        // Rule 4's numbers come from the device, as for steps 2 and 3.
        fill_draw_uniforms(uniforms_.data(), rows, params.seed, params.step, stream_);
        std::vector<float> uniforms(std::max(rows, 1));
        WB_CUDA(cudaMemcpyAsync(uniforms.data(), uniforms_.data(), rows * sizeof(float),
                                cudaMemcpyDeviceToHost, stream_));
        WB_CUDA(cudaStreamSynchronize(stream_));
        sample_cpu(logits_host_.data(), rows, vocab_, params, uniforms.data(),
                   host_tokens_.data() + kHostGuard, host_confidence_.data() + kHostGuard,
                   threads_);
        break;
      }
      case Step::SortThenCpu:
        sort_then_cpu_->sample(logits_.data(), rows, params, host_tokens_.data() + kHostGuard,
                               host_confidence_.data() + kHostGuard, stream_);
        break;
      case Step::TopCandidates:
        top_candidates_->sample(logits_.data(), rows, params, host_tokens_.data() + kHostGuard,
                                host_confidence_.data() + kHostGuard, stream_);
        break;
      case Step::Fused:
        sample_fused(logits_.data(), rows, vocab_, params, tokens_dev_.data(),
                     confidence_dev_.data(), workspace(), workspace_bytes_, stream_);
        break;
    }
  }

  void collect(int rows, Draws& d) {
    if (step_ == Step::Fused) {
      // Read back on the sampler's stream: work that escaped it races with these copies.
      if (rows > 0) {
        WB_CUDA(cudaMemcpyAsync(d.tokens.data(), tokens_dev_.data(), rows * sizeof(int),
                                cudaMemcpyDeviceToHost, stream_));
        WB_CUDA(cudaMemcpyAsync(d.confidence.data(), confidence_dev_.data(),
                                rows * sizeof(float), cudaMemcpyDeviceToHost, stream_));
      }
      WB_CUDA(cudaStreamSynchronize(stream_));
    } else {
      std::copy_n(host_tokens_.begin() + kHostGuard, rows, d.tokens.begin());
      std::copy_n(host_confidence_.begin() + kHostGuard, rows, d.confidence.begin());
    }
  }

  Step step_;
  int rows_, vocab_;
  std::vector<float> logits_host_;
  wb::GuardedBuffer<float> logits_;
  wb::DeviceBuffer<float> uniforms_;
  wb::GuardedBuffer<int> tokens_dev_;
  wb::GuardedBuffer<float> confidence_dev_;
  std::unique_ptr<wb::GuardedBuffer<unsigned char>> workspace_;
  std::size_t workspace_bytes_ = 0;
  std::vector<int> host_tokens_;
  std::vector<float> host_confidence_;
  std::unique_ptr<SortThenCpuSampler> sort_then_cpu_;
  std::unique_ptr<TopCandidatesSampler> top_candidates_;
  cudaStream_t stream_ = nullptr;
  int threads_;
};

}  // namespace ch07::testing
