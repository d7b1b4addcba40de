#pragma once
// The whole decoding step in ONE thread-block cluster: the persistent step's plan for small
// models.
//
// The grid plan (persistent_step.cu) spreads every matrix over one block per SM and hands each
// stage's output to the next through L2: five hand-offs per layer, each a write to L2 and a
// poll that sees it, a microsecond or more apiece. For a model as small as stories260K (dim
// 64, about a megabyte of weights per token) those hand-offs are the whole time, and one block
// alone is no better: one SM pulls a megabyte from L2 far slower than sixteen do.
//
// A cluster (Hopper: up to 16 blocks on neighbouring SMs, launched together) gets both:
//   - Each block owns a share of every matrix: the query heads b, b + 16, ... (their rows of
//     Wqkv and their columns of Wo) and a share of the hidden units (their rows of W1 and W3,
//     their columns of W2). The constructor lays each block's share out once, contiguous, in
//     the order the block reads it, so at its start a block asks the copy engine (Hopper's bulk
//     copy, bulk_copy.cuh) for all of its weights of the whole token in a dozen copies into its
//     shared memory, and no stage ever waits for a load it could not have started earlier.
//   - A layer is two stages, and inside a stage no block waits for another: every block holds
//     the whole residual stream x, and the splits of Wo and W2 by columns let the attention and
//     SwiGLU outputs stay in the block that made them. Each stage ends with a partial sum of
//     the residual update (dim values) written straight into every block's shared memory
//     (distributed shared memory), and one cluster barrier (hardware, no polling); then every
//     block adds the partial sums in the same order.
#include <cuda_runtime.h>

#include <cstddef>

#include "persistent_step.hpp"  // StepBuffers

namespace ch08 {

class GpuModel;

class ClusterStep {
 public:
  // Plans the largest cluster (at most 16 blocks) whose blocks hold their share of the weights
  // and the activations in `shared_optin` bytes of shared memory and that this GPU can launch,
  // and uploads the weights packed as the blocks read them (one more copy of them). Throws
  // std::invalid_argument saying why when no cluster can run the model.
  ClusterStep(const GpuModel& model, const StepBuffers& io, int shared_optin);
  ~ClusterStep();
  ClusterStep(const ClusterStep&) = delete;
  ClusterStep& operator=(const ClusterStep&) = delete;

  // One forward pass of *token at *pos, then ++*pos: one launch of one cluster on `stream`.
  void enqueue(cudaStream_t stream);

  int blocks() const { return blocks_; }
  std::size_t shared_bytes() const { return shared_bytes_; }  // dynamic shared memory per block

 private:
  const GpuModel& model_;
  StepBuffers io_;
  int blocks_ = 0;
  std::size_t shared_bytes_ = 0;
  float* packed_ = nullptr;      // every block's weights, block after block
  std::size_t image_floats_ = 0;  // one block's
};

}  // namespace ch08
