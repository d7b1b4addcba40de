// Chapter 08, step 4: the decoding step as a CUDA graph. YOUR CODE.
//
// capture(): record everything enqueue_step(stream) enqueues into a graph
//   (cudaStreamBeginCapture / cudaStreamEndCapture), then instantiate it
//   (cudaGraphInstantiate). Read the rules in token_loop.cuh: a null stream, a second
//   capture, an enqueue_step that throws.
// replay(): one cudaGraphLaunch; no waiting.
// ~StepGraph(): free what capture() made (and never throw).
//
// Why the position lives in device memory: a graph freezes every kernel argument it was
// captured with (see token_loop.cuh).
#include <cuda_runtime.h>

#include <stdexcept>

#include "token_loop.cuh"
#include "wb/not_implemented.hpp"

namespace ch08 {

StepGraph::~StepGraph() {
  // TODO: destroy the executable graph and the graph (cudaGraphExecDestroy, cudaGraphDestroy)
  // if capture() made them. Must not throw. (Nothing captured: nothing to free.)
}

void StepGraph::capture(const std::function<void(cudaStream_t)>& enqueue_step, cudaStream_t stream) {
  (void)enqueue_step;
  (void)stream;
  wb::not_implemented("ch08::StepGraph::capture (step 4)");
}

void StepGraph::replay(cudaStream_t stream) const {
  (void)stream;
  wb::not_implemented("ch08::StepGraph::replay (step 4)");
}

}  // namespace ch08
