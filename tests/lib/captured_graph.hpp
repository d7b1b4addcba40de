#pragma once
// The rule "all work enqueued on `stream`" (chapters 04-06), made checkable: the call is
// captured into a CUDA graph on a stream of the test's own, and the graph is replayed on new
// inputs. Work that escaped the stream cannot pass:
//   - a launch on the legacy default stream would wait for the capturing (blocking) stream:
//     the capture breaks (cudaErrorStreamCaptureImplicit), and cudaStreamEndCapture says so;
//   - a synchronize, an allocation or a copy from pageable memory breaks it too;
//   - a launch on a stream of its own runs once, at capture time, and is missing from the
//     replays, whose outputs are then stale or still poisoned.
// Under WB_DEBUG_SYNC=1 every launch check synchronizes, which no capture allows: callers skip.
#include <cuda_runtime.h>

#include <functional>
#include <string>

#include "wb/check.hpp"

namespace wb::testing {

class CapturedGraph {
 public:
  // Captures what `enqueue` puts on `stream` (a blocking stream the caller created). An
  // exception from `enqueue` ends the capture and propagates; a capture the call broke throws
  // wb::CudaError from cudaStreamEndCapture or cudaGraphInstantiate.
  CapturedGraph(cudaStream_t stream, const std::function<void(cudaStream_t)>& enqueue) {
    WB_CUDA(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
    try {
      enqueue(stream);
    } catch (...) {
      end_broken_capture(stream);
      throw;
    }
    const cudaError_t ended = cudaStreamEndCapture(stream, &graph_);
    if (ended != cudaSuccess) {
      (void)cudaGetLastError();  // not sticky: the process goes on
      WB_CUDA(ended);
    }
    WB_CUDA(cudaGraphInstantiate(&exec_, graph_, 0));
  }
  ~CapturedGraph() {
    if (exec_) cudaGraphExecDestroy(exec_);
    if (graph_) cudaGraphDestroy(graph_);
  }
  CapturedGraph(const CapturedGraph&) = delete;
  CapturedGraph& operator=(const CapturedGraph&) = delete;

  void replay(cudaStream_t stream) { WB_CUDA(cudaGraphLaunch(exec_, stream)); }

 private:
  static void end_broken_capture(cudaStream_t stream) {
    cudaGraph_t partial = nullptr;
    cudaStreamEndCapture(stream, &partial);
    if (partial) cudaGraphDestroy(partial);
    (void)cudaGetLastError();
  }
  cudaGraph_t graph_ = nullptr;
  cudaGraphExec_t exec_ = nullptr;
};

// What a failed capture teaches, for a test's failure message.
inline constexpr const char* kEverythingOnStreamHint =
    "rule: all work enqueued on `stream`: no synchronization, no allocation, no copies.\n"
    "hint: pass the stream to every launch, <<<grid, block, 0, stream>>> (a launch without it "
    "goes to the legacy default stream), and keep cudaDeviceSynchronize, cudaMalloc and "
    "cudaMemcpy out of the call.";

}  // namespace wb::testing
