// Chapter 08 must-pass variant: the step graph, another correct design.
//
// Differences from the reference, each allowed by token_loop.cuh:
//   - the captured graph is destroyed as soon as it is instantiated (the executable graph is
//     self-contained; graph_ stays null);
//   - a second capture first tries cudaGraphExecUpdate, which rewrites the existing
//     executable graph in place when the new step has the same shape (same nodes, new
//     arguments): cheaper than a fresh cudaGraphInstantiate. When the update is refused (the
//     topology changed) the old executable graph is destroyed and the new one instantiated.
//   - the capture mode is cudaStreamCaptureModeGlobal (stricter: an unsafe call from any
//     thread breaks the capture).
#include <cuda_runtime.h>

#include <stdexcept>
#include <string>

#include "token_loop.cuh"

namespace ch08 {

namespace {

void check(cudaError_t e, const char* what) {
  if (e != cudaSuccess)
    throw std::runtime_error(std::string("ch08 StepGraph: ") + what + " failed: " + cudaGetErrorString(e));
}

// Records enqueue_step on stream and returns the captured graph; a throwing step ends the
// capture and destroys what was recorded before the exception goes on.
cudaGraph_t record(const std::function<void(cudaStream_t)>& enqueue_step, cudaStream_t stream) {
  check(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal), "cudaStreamBeginCapture");
  cudaGraph_t graph = nullptr;
  try {
    enqueue_step(stream);
  } catch (...) {
    cudaStreamEndCapture(stream, &graph);
    if (graph) cudaGraphDestroy(graph);
    throw;
  }
  check(cudaStreamEndCapture(stream, &graph), "cudaStreamEndCapture");
  return graph;
}

}  // namespace

StepGraph::~StepGraph() {
  if (exec_) cudaGraphExecDestroy(exec_);
  if (graph_) cudaGraphDestroy(graph_);
}

void StepGraph::capture(const std::function<void(cudaStream_t)>& enqueue_step, cudaStream_t stream) {
  if (stream == nullptr) throw std::invalid_argument("ch08 StepGraph::capture: stream must not be null");
  if (!enqueue_step) throw std::invalid_argument("ch08 StepGraph::capture: enqueue_step is empty");

  cudaGraph_t graph = nullptr;
  try {
    graph = record(enqueue_step, stream);
  } catch (...) {
    // The contract: after a failed capture nothing is kept.
    if (exec_) cudaGraphExecDestroy(exec_);
    exec_ = nullptr;
    throw;
  }

  bool updated = false;
  if (exec_) {
    cudaGraphExecUpdateResultInfo info{};
    updated = cudaGraphExecUpdate(exec_, graph, &info) == cudaSuccess;
    if (!updated) {
      (void)cudaGetLastError();  // the refused update is not an error of ours
      check(cudaGraphExecDestroy(exec_), "cudaGraphExecDestroy");
      exec_ = nullptr;
    }
  }
  if (!updated) {
    const cudaError_t e = cudaGraphInstantiate(&exec_, graph, 0);
    if (e != cudaSuccess) {
      exec_ = nullptr;
      cudaGraphDestroy(graph);
      check(e, "cudaGraphInstantiate");
    }
  }
  check(cudaGraphDestroy(graph), "cudaGraphDestroy");  // the executable graph does not need it
}

void StepGraph::replay(cudaStream_t stream) const {
  if (!exec_) throw std::logic_error("ch08 StepGraph::replay: nothing was captured (call capture first)");
  check(cudaGraphLaunch(exec_, stream), "cudaGraphLaunch");
}

}  // namespace ch08
