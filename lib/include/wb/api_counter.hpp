#pragma once
// Counts CUDA runtime API calls inside a region, through CUPTI's callback API: the chapters
// whose lesson is the copies check that their rules hold (no cudaMalloc per call after
// warmup; no weight bytes host-to-device per token).
//
//   wb::ApiCounter counter;            // starts counting
//   forward(...);
//   wb::ApiCounts c = counter.counts();   // calls and bytes since construction
//   CHECK(c.mallocs == 0);
#include <cstdint>
#include <string>

namespace wb {

struct ApiCounts {
  std::uint64_t mallocs = 0;        // cudaMalloc, cudaMallocAsync, cudaMallocManaged, pitch
  std::uint64_t frees = 0;          // cudaFree, cudaFreeAsync
  std::uint64_t host_allocs = 0;    // cudaMallocHost, cudaHostAlloc
  std::uint64_t memcpys = 0;        // every cudaMemcpy* call
  std::uint64_t memsets = 0;
  std::uint64_t syncs = 0;          // cudaDeviceSynchronize, cudaStreamSynchronize, cudaEventSynchronize
  std::uint64_t launches = 0;       // cudaLaunchKernel and friends
  std::uint64_t bytes_h2d = 0, bytes_d2h = 0, bytes_d2d = 0, bytes_h2h = 0;
  std::string summary() const;      // one line, for messages
};

class ApiCounter {
 public:
  // False when CUPTI is missing or another tool (a profiler) already subscribed.
  static bool available();
  static std::string unavailable_reason();

  ApiCounter();
  ApiCounts counts() const;  // since construction (or the last reset)
  void reset();

 private:
  ApiCounts start_;
};

// Totals since the subscription started (all threads).
ApiCounts api_totals();

}  // namespace wb
