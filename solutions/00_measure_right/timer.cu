// Chapter 00 reference: a kernel timer that follows the rules.
#include "timer.cuh"

#include <algorithm>
#include <vector>

#include "wb/check.hpp"

namespace ch00 {
namespace {

// The median is the middle of the sorted samples: one slow sample (a page fault, a clock
// change, another process) moves the mean but not the median.
float median(std::vector<float> v) {
  std::sort(v.begin(), v.end());
  const std::size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5f * (v[n / 2 - 1] + v[n / 2]);
}

// A CUDA event, destroyed however the timer ends: a work that throws (a launch that failed its
// check) on any call, warmup or timed, must not leak the timer's events.
struct Event {
  cudaEvent_t e = nullptr;
  Event() { WB_CUDA(cudaEventCreate(&e)); }
  ~Event() { cudaEventDestroy(e); }
  Event(const Event&) = delete;
  Event& operator=(const Event&) = delete;
};

}  // namespace

float time_work_ms(const Work& work, cudaStream_t stream, const TimerOptions& options) {
  // Rule 2: the first calls pay for module loading, lazy allocations and cold caches.
  // Run them untimed and wait for them, so none of their cost lands in a sample.
  for (int i = 0; i < options.warmup; ++i) work(stream);
  WB_CUDA(cudaStreamSynchronize(stream));

  // Rule 3: a launch returns before the kernel runs, so a host clock around work() measures
  // the launch. Events recorded on the work's own stream are timestamped by the GPU when
  // the stream reaches them, so stop - start is the device time of everything in between.
  const Event start, stop;
  std::vector<float> samples;
  samples.reserve(options.samples);
  for (int i = 0; i < options.samples; ++i) {
    // Rule 5: flush before the start event, so the flush itself is not timed.
    if (options.cold_cache) flush_l2(stream);
    WB_CUDA(cudaEventRecord(start.e, stream));
    work(stream);
    WB_CUDA(cudaEventRecord(stop.e, stream));
    WB_CUDA(cudaEventSynchronize(stop.e));
    float ms = 0;
    WB_CUDA(cudaEventElapsedTime(&ms, start.e, stop.e));
    samples.push_back(ms);
  }
  // Rule 6: the median of many samples.
  return median(std::move(samples));
}

}  // namespace ch00
