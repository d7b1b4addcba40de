#pragma once
// Measuring the transfer ladder (chapters 01-03): where one token's matmul time goes when
// every call allocates and copies (01), when only the copies remain (02), and when the
// weights stay on the device (03).
//
// The breakdown is a replay: the matmul calls of one forward pass (same shapes, same
// order, the real weights) run under one protocol with the chapter's own kernel, and each
// step (allocate, copy in, kernel, copy out, free) is timed on the host with the device
// synchronized before and after it. The steps are what the chapter's wrapper does; the
// sum can be set beside the matmul time measured inside the real forward pass.
#include <cuda_runtime.h>

#include <functional>
#include <vector>

#include <nlohmann/json.hpp>

#include "wb/model/checkpoint.hpp"

namespace wb::model {

// One matmul of a forward pass: out[d] = W[d][n] x[n].
struct MatmulCall {
  const char* what;  // "wq", "w1", "classifier", ...
  int layer;         // -1 for the classifier
  const float* W;    // inside Model::payload()
  int n, d;
};
// The matmul calls of one forward pass, in the order the forward pass makes them
// (7 per layer, then the classifier).
std::vector<MatmulCall> token_matmuls(const Model& model);

// A chapter's kernel: y = W x, device pointers, enqueued on `stream`.
using MatvecLaunch =
    std::function<void(float* y, const float* x, const float* W, int n, int d, cudaStream_t stream)>;

enum class Protocol {
  AllocateEveryCall,  // chapter 01: malloc W, x, y; copy W and x in; kernel; copy y out; free
  Preallocated,       // chapter 02: buffers kept; copy W and x in; kernel; copy y out
  Persistent,         // chapter 03: weights resident; copy x in; kernel; copy y out
};
const char* to_string(Protocol p);

// Per-token sums of each step, in microseconds.
struct Breakdown {
  double alloc_us = 0, h2d_us = 0, kernel_us = 0, d2h_us = 0, free_us = 0;
  double total_us() const { return alloc_us + h2d_us + kernel_us + d2h_us + free_us; }
  // {"alloc":..,"h2d":..,"kernel":..,"d2h":..,"free":..}
  nlohmann::json to_json() const;
};

// Replays one token's matmul calls `repeats` times (after one untimed replay) and returns
// the median of each step's per-token sum. Uses the legacy default stream, like the
// chapters' synchronous wrappers.
Breakdown replay_token(const Model& model, Protocol protocol, const MatvecLaunch& launch,
                       int repeats = 5);

}  // namespace wb::model
