#pragma once
// Values that carry the tag of the write that made them: how the blocks of the persistent step
// (persistent_step.cu) hand each other their outputs without a grid barrier.
//
// A value and its tag share one 8-byte word (tag in the high half, the float's bits in the
// low half), written and read as one access: an aligned 8-byte access is single-copy atomic,
// so a reader sees either the old word or the new one, never half of each. The writer needs no
// fence and no flag; the reader loads the word until its tag is the one it expects, and then
// holds the value of exactly that write. (NCCL's "LL" protocol moves data between GPUs the
// same way.) Tags are never reused while an old word could still be read: the step gives each
// layer of each launch its own (persistent_step.cu, layer_tag).
//
// A reader waits for exactly the values it needs, as soon as they exist: the RMSNorm of a
// stage waits for the whole residual stream, an attention head only for its own q, k and v.
// Relaxed loads at GPU scope are served by L2, never by a stale L1 line. Between polls a
// waiting thread sleeps a little, so that blocks that wait long (for attention, say) do not
// flood L2 with loads while the others stream weights through it.
#include <cstdint>

namespace ch08::tagged {

__device__ __forceinline__ void publish(std::uint64_t* slot, float value, std::uint32_t tag) {
  const std::uint64_t word = (std::uint64_t(tag) << 32) | __float_as_uint(value);
  asm volatile("st.relaxed.gpu.global.b64 [%0], %1;" ::"l"(slot), "l"(word) : "memory");
}

__device__ __forceinline__ std::uint64_t load(const std::uint64_t* slot) {
  std::uint64_t word;
  asm volatile("ld.relaxed.gpu.global.b64 %0, [%1];" : "=l"(word) : "l"(slot) : "memory");
  return word;
}

__device__ __forceinline__ bool has_tag(std::uint64_t word, std::uint32_t tag) { return std::uint32_t(word >> 32) == tag; }

__device__ __forceinline__ float value_of(std::uint64_t word) { return __uint_as_float(std::uint32_t(word)); }

// The value in `slot` once it carries `tag`.
__device__ __forceinline__ float await(const std::uint64_t* slot, std::uint32_t tag, unsigned sleep_ns) {
  std::uint64_t word = load(slot);
  while (!has_tag(word, tag)) {
    __nanosleep(sleep_ns);
    word = load(slot);
  }
  return value_of(word);
}

// dst[i] = the value of src[i] once it carries `tag`, for i < n; thread t of `threads` takes
// i = t, t + threads, ..., a batch of eight at a time. Each poll loads every value of the batch
// not yet seen, all before any is looked at: one round trip per poll, however many are
// missing. (Polling them one after the other costs a round trip per value after the last one
// is written: when a block waits long, the words it loaded first are all stale.)
template <int threads>
__device__ void await_vector(const std::uint64_t* src, int n, std::uint32_t tag, float* dst, unsigned sleep_ns) {
  constexpr int kBatch = 8;
  for (int first = int(threadIdx.x); first < n; first += threads * kBatch) {
    unsigned missing = 0;  // bit k: value first + k * threads, not yet seen with its tag
#pragma unroll
    for (int k = 0; k < kBatch; ++k)
      if (first + k * threads < n) missing |= 1u << k;
    for (;;) {
      std::uint64_t words[kBatch];
#pragma unroll
      for (int k = 0; k < kBatch; ++k)
        if (missing >> k & 1u) words[k] = load(src + first + k * threads);
#pragma unroll
      for (int k = 0; k < kBatch; ++k)
        if ((missing >> k & 1u) && has_tag(words[k], tag)) {
          dst[first + k * threads] = value_of(words[k]);
          missing &= ~(1u << k);
        }
      if (missing == 0) break;
      __nanosleep(sleep_ns);
    }
  }
}

}  // namespace ch08::tagged
