// Must-pass variant (ch00 "events_per_sample"): a fresh pair of blocking-sync events for each
// sample, destroyed right after its reading; the median by std::nth_element, upper middle.
#include <algorithm>
#include <vector>

#include "timer.cuh"
#include "wb/check.hpp"

namespace ch00 {
namespace {

float one_sample_ms(const Work& work, cudaStream_t stream, bool cold) {
  if (cold) flush_l2(stream);
  cudaEvent_t start, stop;
  WB_CUDA(cudaEventCreateWithFlags(&start, cudaEventBlockingSync));
  WB_CUDA(cudaEventCreateWithFlags(&stop, cudaEventBlockingSync));
  WB_CUDA(cudaEventRecord(start, stream));
  work(stream);
  WB_CUDA(cudaEventRecord(stop, stream));
  WB_CUDA(cudaEventSynchronize(stop));
  float ms = 0;
  WB_CUDA(cudaEventElapsedTime(&ms, start, stop));
  WB_CUDA(cudaEventDestroy(start));
  WB_CUDA(cudaEventDestroy(stop));
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
