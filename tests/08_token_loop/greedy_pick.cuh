#pragma once
// Greedy decoding's token picked inside the step (both plans of the persistent step), so that
// the decoder needs no sampler launch between two steps (GpuDecoder::decode). The rule is
// chapter 07's greedy kernel's: the largest logit, the lowest index among equal ones, and token
// -1 when a logit is NaN or +inf or all are -inf.
//
// A pick is made in parts (each thread over some logits, then warps, blocks, the grid) and the
// parts are combined with `better`, which gives the same pick in any order of combination.
namespace ch08::greedy {

struct Pick {
  float value;
  int index;  // -1: none yet
  int bad;    // a NaN or +inf was seen
};

__device__ __forceinline__ Pick none() { return Pick{-INFINITY, -1, 0}; }

// `mine` after one more logit, value at index. A thread's logits must come in increasing index
// order (equal values keep the first).
__device__ __forceinline__ Pick consider(Pick mine, int index, float value) {
  mine.bad |= !(value < INFINITY);  // NaN compares false
  if (value > mine.value) {
    mine.value = value;
    mine.index = index;
  }
  return mine;
}

__device__ __forceinline__ Pick better(Pick a, Pick b) {
  const bool take_b = b.index >= 0 && (a.index < 0 || b.value > a.value || (b.value == a.value && b.index < a.index));
  Pick out = take_b ? b : a;
  out.bad = a.bad | b.bad;
  return out;
}

__device__ __forceinline__ Pick warp_pick(Pick p) {
  for (int o = 1; o < 32; o <<= 1) {
    const Pick q{__shfl_xor_sync(0xffffffffu, p.value, o), __shfl_xor_sync(0xffffffffu, p.index, o),
                 __shfl_xor_sync(0xffffffffu, p.bad, o)};
    p = better(p, q);
  }
  return p;
}

// The token a whole pick stands for.
__device__ __forceinline__ int token_of(Pick p) { return p.bad || p.index < 0 ? -1 : p.index; }

}  // namespace ch08::greedy
