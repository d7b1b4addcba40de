// Chapter 08, step 4: the decoding step as a CUDA graph (reference).
//
// A step of a 12-layer llama is ~170 small kernels. Launched one by one, each costs the CPU a
// few microseconds in cudaLaunchKernel, often more than the kernel runs on the GPU: the GPU
// waits on the CPU. A CUDA graph is recorded once (stream capture: the launches are not run,
// they are written down as nodes of a graph, with their grids and their ARGUMENTS), turned
// into an executable graph once (cudaGraphInstantiate: the driver validates and lays the
// whole thing out), and then replayed with ONE cudaGraphLaunch per token.
//
// What a graph freezes: every kernel's arguments as they were during the capture, pointers
// and values alike. That is why the decoder keeps the position and the token in DEVICE
// memory (the kernels get the pointer, which does not change, and read the value, which
// does) and ends the step with a one-thread kernel that advances the position: a `pos`
// passed by value would replay position 0 for ever. Buffers must also outlive the graph and
// stay where they are (the graph holds their addresses).
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

}  // namespace

StepGraph::~StepGraph() {
  // Destructors must not throw: errors here are ignored (the context may already be gone).
  // Only the executable graph lives past capture() (graph_ stays null: see below).
  if (exec_) cudaGraphExecDestroy(exec_);
  if (graph_) cudaGraphDestroy(graph_);
}

void StepGraph::capture(const std::function<void(cudaStream_t)>& enqueue_step, cudaStream_t stream) {
  if (stream == nullptr)
    throw std::invalid_argument(
        "ch08 StepGraph::capture: stream must be a stream you created (cudaStreamCreate); the "
        "legacy default stream (null) cannot be captured");
  if (!enqueue_step) throw std::invalid_argument("ch08 StepGraph::capture: enqueue_step is empty");

  // A second capture replaces the first: the old executable graph goes first.
  if (exec_) {
    cudaGraphExec_t old = exec_;
    exec_ = nullptr;
    check(cudaGraphExecDestroy(old), "cudaGraphExecDestroy");
  }
  if (graph_) {  // never set by this version, kept for safety
    cudaGraph_t old = graph_;
    graph_ = nullptr;
    check(cudaGraphDestroy(old), "cudaGraphDestroy");
  }

  check(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal), "cudaStreamBeginCapture");
  cudaGraph_t graph = nullptr;
  try {
    enqueue_step(stream);  // recorded, not run
  } catch (...) {
    cudaGraph_t partial = nullptr;
    cudaStreamEndCapture(stream, &partial);  // leave the stream usable
    if (partial) cudaGraphDestroy(partial);
    throw;
  }
  check(cudaStreamEndCapture(stream, &graph), "cudaStreamEndCapture (something in the step broke the capture: "
                                              "a synchronize, an allocation or a copy from pageable memory?)");

  // The executable graph is a self-contained copy: once instantiated, the template graph is
  // no longer needed (CUDA allows destroying it right away), so it is freed here instead of
  // being carried until the next capture or the destructor.
  cudaGraphExec_t exec = nullptr;
  const cudaError_t e = cudaGraphInstantiateWithFlags(&exec, graph, 0);
  cudaGraphDestroy(graph);
  check(e, "cudaGraphInstantiateWithFlags");
  exec_ = exec;
}

void StepGraph::replay(cudaStream_t stream) const {
  if (!exec_) throw std::logic_error("ch08 StepGraph::replay: nothing was captured (call capture first)");
  // One launch for the whole step; returns at once, like any launch.
  check(cudaGraphLaunch(exec_, stream), "cudaGraphLaunch");
}

}  // namespace ch08
