#pragma once
// Hopper's bulk copy (the Tensor Memory Accelerator's cp.async.bulk) from global to shared
// memory, and the mbarrier that says when it has landed: how one thread fills a shared-memory
// slot with kilobytes of weights while the rest of the block computes with another.
//
//   one thread: arrive_expecting(bar, bytes); bulk_copy(slot, src, bytes, bar);
//   everyone:   wait(bar, parity)   -- the copy has landed; read the slot
//
// An mbarrier completes one phase per use: the producer's one arrival plus the copy's bytes.
// A waiter passes the parity of the phase it waits for (use 0: 0, use 1: 1, use 2: 0, ...).
// The copy needs a 16-byte aligned source and destination and a size that is a multiple of 16.
#include <cstdint>

namespace ch08::bulk {

__device__ __forceinline__ std::uint32_t shared_address(const void* p) {
  return static_cast<std::uint32_t>(__cvta_generic_to_shared(p));
}

// Before any use, by one thread; then init_done() and a block barrier, so that every thread,
// and the copy engine, see the initialized barrier.
__device__ __forceinline__ void init(std::uint64_t* barrier, std::uint32_t arrivals) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(shared_address(barrier)), "r"(arrivals) : "memory");
}

__device__ __forceinline__ void init_done() { asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory"); }

// One arrival that also announces `bytes` still to come from bulk copies.
__device__ __forceinline__ void arrive_expecting(std::uint64_t* barrier, std::uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(shared_address(barrier)), "r"(bytes)
               : "memory");
}

// One plain arrival: how a reader says it is done with a slot (an mbarrier initialized with
// one arrival per reader).
__device__ __forceinline__ void arrive(std::uint64_t* barrier) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(shared_address(barrier)) : "memory");
}

// Waits until the phase of parity `parity` has completed.
__device__ __forceinline__ void wait(std::uint64_t* barrier, std::uint32_t parity) {
  asm volatile(
      "{\n"
      ".reg .pred done;\n"
      "WAIT_%=:\n"
      "mbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1;\n"
      "@!done bra WAIT_%=;\n"
      "}\n" ::"r"(shared_address(barrier)),
      "r"(parity)
      : "memory");
}

// `bytes` from global `src` to shared `dst`, completing that many bytes of `barrier`'s
// transaction when they have landed. The thread does not wait.
__device__ __forceinline__ void bulk_copy(void* dst, const void* src, std::uint32_t bytes, std::uint64_t* barrier) {
  asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::"r"(
                   shared_address(dst)),
               "l"(src), "r"(bytes), "r"(shared_address(barrier))
               : "memory");
}

// The same, with an L2 cache policy for the bytes read (make it with evict_first below).
__device__ __forceinline__ void bulk_copy(void* dst, const void* src, std::uint32_t bytes, std::uint64_t* barrier,
                                          std::uint64_t l2_policy) {
  asm volatile(
      "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes.L2::cache_hint [%0], [%1], %2, [%3], %4;" ::"r"(
          shared_address(dst)),
      "l"(src), "r"(bytes), "r"(shared_address(barrier)), "l"(l2_policy)
      : "memory");
}

// An L2 cache policy for bytes read for the last time: L2 evicts their lines first, before
// lines that will be read again.
__device__ __forceinline__ std::uint64_t evict_first() {
  std::uint64_t policy;
  asm volatile("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;" : "=l"(policy));
  return policy;
}

// And the small one: 16 bytes from global to shared memory by one thread, which does not wait
// (cp.async; the thread's cp.async.wait_all waits for its copies). How a block gathers rows
// that are not contiguous, like a head's rows of the KV cache.
__device__ __forceinline__ void copy16_async(float* dst, const float* src) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(shared_address(dst)), "l"(src) : "memory");
}

}  // namespace ch08::bulk
