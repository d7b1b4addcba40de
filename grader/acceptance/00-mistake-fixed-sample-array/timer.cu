// Chapter 00 reference: a kernel timer that follows the rules.
#include "timer.cuh"

#include <algorithm>

#include "wb/check.hpp"

namespace ch00 {
namespace {

// The median is the middle of the sorted samples: one slow sample (a page fault, a clock
// change, another process) moves the mean but not the median.
// Sorts the first n samples in place.
float median(float* v, int n) {
  std::sort(v, v + n);
  return n % 2 ? v[n / 2] : 0.5f * (v[n / 2 - 1] + v[n / 2]);
}

// Room for the samples on the stack: no heap allocation next to the timed calls (the
// workbook's default is 15 samples; 64 is plenty).
constexpr int kMaxSamples = 64;

}  // namespace

float time_work_ms(const Work& work, cudaStream_t stream, const TimerOptions& options) {
  // Rule 2: the first calls pay for module loading, lazy allocations and cold caches.
  // Run them untimed and wait for them, so none of their cost lands in a sample.
  for (int i = 0; i < options.warmup; ++i) work(stream);
  WB_CUDA(cudaStreamSynchronize(stream));

  // Rule 3: a launch returns before the kernel runs, so a host clock around work() measures
  // the launch. Events recorded on the work's own stream are timestamped by the GPU when
  // the stream reaches them, so stop - start is the device time of everything in between.
  cudaEvent_t start, stop;
  WB_CUDA(cudaEventCreate(&start));
  WB_CUDA(cudaEventCreate(&stop));
  float samples[kMaxSamples];
  for (int i = 0; i < options.samples; ++i) {
    // Rule 5: flush before the start event, so the flush itself is not timed.
    if (options.cold_cache) flush_l2(stream);
    WB_CUDA(cudaEventRecord(start, stream));
    work(stream);
    WB_CUDA(cudaEventRecord(stop, stream));
    WB_CUDA(cudaEventSynchronize(stop));
    float ms = 0;
    WB_CUDA(cudaEventElapsedTime(&ms, start, stop));
    samples[i] = ms;
  }
  WB_CUDA(cudaEventDestroy(start));
  WB_CUDA(cudaEventDestroy(stop));
  // Rule 6: the median of many samples.
  return median(samples, options.samples);
}

}  // namespace ch00
