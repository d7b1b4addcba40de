#pragma once
// The GPU's global timer in nanoseconds (PTX %globaltimer): the clock device code uses to spin
// for a known time or give up after one (the harness's spin kernel, the tests' hold and
// neighbour kernels). How often it updates is the GPU's own (the PTX ISA promises nanoseconds
// as the unit, not the resolution): for waits of microseconds to seconds, not for timing a few
// instructions.
namespace wb {

__device__ __forceinline__ unsigned long long global_timer_ns() {
  unsigned long long t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

}  // namespace wb
