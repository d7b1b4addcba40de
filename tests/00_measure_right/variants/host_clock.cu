// Must-pass variant (ch00 "host_clock"): times each sample with the host's steady clock, read
// between two synchronizations of the stream (the API allows it: "between two host clock
// reads that each follow a synchronize"). No CUDA events at all.
#include <algorithm>
#include <chrono>
#include <vector>

#include "timer.cuh"
#include "wb/check.hpp"

namespace ch00 {

float time_work_ms(const Work& work, cudaStream_t stream, const TimerOptions& options) {
  for (int i = 0; i < options.warmup; ++i) work(stream);
  WB_CUDA(cudaStreamSynchronize(stream));
  std::vector<float> samples;
  for (int i = 0; i < options.samples; ++i) {
    if (options.cold_cache) {
      flush_l2(stream);
      WB_CUDA(cudaStreamSynchronize(stream));  // the flush finishes before the clock starts
    }
    const auto t0 = std::chrono::steady_clock::now();
    work(stream);
    WB_CUDA(cudaStreamSynchronize(stream));
    const auto t1 = std::chrono::steady_clock::now();
    samples.push_back(std::chrono::duration<float, std::milli>(t1 - t0).count());
  }
  // Lower median via nth_element (the probes use odd counts, where every convention agrees).
  auto mid = samples.begin() + samples.size() / 2;
  std::nth_element(samples.begin(), mid, samples.end());
  return *mid;
}

}  // namespace ch00
