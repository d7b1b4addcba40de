// Must-pass variant (ch00 "events_per_sample"): a fresh pair of blocking-sync events for each
// sample, destroyed right after its reading; the median by std::nth_element, upper middle.
#include <algorithm>
#include <vector>

#include "timer.cuh"
#include "wb/check.hpp"

namespace ch00 {
namespace {

// A blocking-sync event, destroyed however the sample ends (the work may throw).
struct BlockingEvent {
  cudaEvent_t e = nullptr;
  BlockingEvent() { WB_CUDA(cudaEventCreateWithFlags(&e, cudaEventBlockingSync)); }
  ~BlockingEvent() { cudaEventDestroy(e); }
  BlockingEvent(const BlockingEvent&) = delete;
  BlockingEvent& operator=(const BlockingEvent&) = delete;
};

float one_sample_ms(const Work& work, cudaStream_t stream, bool cold) {
  if (cold) flush_l2(stream);
  const BlockingEvent start, stop;
  WB_CUDA(cudaEventRecord(start.e, stream));
  work(stream);
  WB_CUDA(cudaEventRecord(stop.e, stream));
  WB_CUDA(cudaEventSynchronize(stop.e));
  float ms = 0;
  WB_CUDA(cudaEventElapsedTime(&ms, start.e, stop.e));
  return ms;
}

}  // namespace

float time_work_ms(const Work& work, cudaStream_t stream, const TimerOptions& options) {
  for (int i = 0; i < options.warmup; ++i) work(stream);
  WB_CUDA(cudaDeviceSynchronize());
  std::vector<float> samples;
  for (int i = 0; i < options.samples; ++i) samples.push_back(one_sample_ms(work, stream, options.cold_cache));
  auto mid = samples.begin() + samples.size() / 2;
  std::nth_element(samples.begin(), mid, samples.end());
  return *mid;
}

}  // namespace ch00
