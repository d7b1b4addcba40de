// Must-pass variant (ch00 "deferred_readout"): records a start and a stop event per sample
// without waiting in between, synchronizes once at the end, then reads every elapsed time.
// The samples run back to back on the stream; the host never waits inside a timed region.
#include <algorithm>
#include <vector>

#include "timer.cuh"
#include "wb/check.hpp"

namespace ch00 {
namespace {

// The events made so far, destroyed however the timer ends (a work may throw on any call).
struct Events {
  std::vector<cudaEvent_t> all;
  cudaEvent_t make() {
    cudaEvent_t e = nullptr;
    WB_CUDA(cudaEventCreate(&e));
    all.push_back(e);  // reserved: cannot throw
    return e;
  }
  ~Events() {
    for (cudaEvent_t e : all) cudaEventDestroy(e);
  }
};

}  // namespace

float time_work_ms(const Work& work, cudaStream_t stream, const TimerOptions& options) {
  for (int i = 0; i < options.warmup; ++i) work(stream);
  WB_CUDA(cudaStreamSynchronize(stream));
  const std::size_t n = std::size_t(options.samples);
  Events events;
  events.all.reserve(2 * n);
  std::vector<cudaEvent_t> starts(n), stops(n);
  for (std::size_t i = 0; i < n; ++i) {
    starts[i] = events.make();
    stops[i] = events.make();
  }
  for (std::size_t i = 0; i < n; ++i) {
    if (options.cold_cache) flush_l2(stream);
    WB_CUDA(cudaEventRecord(starts[i], stream));
    work(stream);
    WB_CUDA(cudaEventRecord(stops[i], stream));
  }
  WB_CUDA(cudaEventSynchronize(stops[n - 1]));
  std::vector<float> samples(n);
  for (std::size_t i = 0; i < n; ++i) WB_CUDA(cudaEventElapsedTime(&samples[i], starts[i], stops[i]));
  std::sort(samples.begin(), samples.end());
  return n % 2 ? samples[n / 2] : 0.5f * (samples[n / 2 - 1] + samples[n / 2]);
}

}  // namespace ch00
