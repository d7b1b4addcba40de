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
  if (exec_) cudaGraphExecDestroy(exec_);
  if (graph_) cudaGraphDestroy(graph_);
}

void StepGraph::capture(const std::function<void(cudaStream_t)>& enqueue_step, cudaStream_t stream) {
  if (stream == nullptr)
    throw std::invalid_argument(
        "ch08 StepGraph::capture: stream must be a stream you created (cudaStreamCreate); the "
        "legacy default stream (null) cannot be captured");
  if (!enqueue_step) throw std::invalid_argument("ch08 StepGraph::capture: enqueue_step is empty");

  // A second capture replaces the first: free the old graph first, so nothing leaks.
  if (exec_) check(cudaGraphExecDestroy(exec_), "cudaGraphExecDestroy");
  if (graph_) check(cudaGraphDestroy(graph_), "cudaGraphDestroy");

  // ThreadLocal: a CUDA call from ANOTHER thread that is illegal during capture (a
  // cudaMalloc, a synchronize) does not invalidate ours; a call from this thread does, and
  // that is a bug in enqueue_step we want to hear about.
  check(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal), "cudaStreamBeginCapture");
  try {
    enqueue_step(stream);  // recorded, not run
  } catch (...) {
    // End the capture (the stream would stay in capture mode otherwise, and every later
    // call on it would fail) and drop whatever was recorded.
    cudaGraph_t partial = nullptr;
    cudaStreamEndCapture(stream, &partial);
    if (partial) cudaGraphDestroy(partial);
    throw;
  }
  check(cudaStreamEndCapture(stream, &graph_), "cudaStreamEndCapture (something in the step broke the capture: "
                                               "a synchronize, an allocation or a copy from pageable memory?)");
  check(cudaGraphInstantiate(&exec_, graph_, 0), "cudaGraphInstantiate");
}

void StepGraph::replay(cudaStream_t stream) const {
  if (!exec_) throw std::logic_error("ch08 StepGraph::replay: nothing was captured (call capture first)");
  // One launch for the whole step; returns at once, like any launch.
  check(cudaGraphLaunch(exec_, stream), "cudaGraphLaunch");
}

}  // namespace ch08
