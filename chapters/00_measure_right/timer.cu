// Chapter 00: your kernel timer. Read README.md first; `./workbook check 00` tests it.
#include "timer.cuh"

#include <vector>

#include "wb/check.hpp"            // WB_CUDA(call): checks a CUDA call, throws with a message
#include "wb/not_implemented.hpp"

namespace ch00 {

float time_work_ms(const Work& work, cudaStream_t stream, const TimerOptions& options) {
  // TODO 1 (rule 2): call work(stream) options.warmup times without timing it, then wait
  //         for it to finish, so first-call costs stay out of your samples.
  // TODO 2 (rule 3): create two CUDA events, each in a guard whose destructor destroys it
  //         (work may throw on any call). For each of options.samples samples:
  //         - if options.cold_cache, call flush_l2(stream) first (rule 5);
  //         - record the start event on `stream`, call work(stream), record the stop event
  //           on `stream`, wait for the stop event, and keep cudaEventElapsedTime.
  // TODO 3 (rule 6): return the median of the samples (not the mean, not the minimum).
  (void)work;
  (void)stream;
  (void)options;
  wb::not_implemented("ch00::time_work_ms (chapters/00_measure_right/timer.cu)");
}

}  // namespace ch00
