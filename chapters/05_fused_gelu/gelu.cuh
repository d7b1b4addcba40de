#pragma once
// Chapter 05: GELU, tanh approximation, elementwise over n floats. The API the tests call;
// do not edit.
//
//   gelu(x) = 0.5 x (1 + tanh( sqrt(2/pi) (x + 0.044715 x^3) ))
//
// (the GELU of GPT-2 and of torch.nn.functional.gelu(x, approximate="tanh"); the exact GELU,
// x * Phi(x) with the normal CDF Phi, differs from it by up to 4.7e-4 at |x| = 2.7 and is not what is asked.)
//
// x and y are device pointers to n floats. Both entry points enqueue all their work on
// `stream` and return without waiting: no synchronization, no allocation, no copies.
// What every implementation must do (the tests check each point):
//   - any n >= 0: 1, odd sizes, sizes that are not a multiple of 4 or of the block size;
//   - x and y may be any float pointers (a view x + 1 is not 16-byte aligned);
//   - large |x|: where tanh saturates, gelu(x) = x for large positive x and 0 for large
//     negative x, with no inf or NaN on the way (x^3 overflows float beyond |x| = 7e12);
//   - y must not overlap x.
#include <cuda_runtime.h>

#include <cstddef>
#include <stdexcept>
#include <string>

namespace ch05 {

// How many floats of scratch gelu_unfused needs: two temporaries of n floats.
inline std::size_t gelu_unfused_scratch_count(std::size_t n) { return 2 * n; }

// Step 1-2. GELU as a framework composes it from elementary ops: one kernel per op, each
// reading its inputs from and writing its result to device memory. `scratch` is a device
// buffer of gelu_unfused_scratch_count(n) floats, owned by the caller; its contents on entry
// are garbage.
void gelu_unfused(const float* x, float* y, float* scratch, std::size_t n, cudaStream_t stream);

// Step 3-4. GELU in one kernel: x read once, y written once, 16-byte accesses where the
// pointers allow, and a correct tail when n is not a multiple of 4.
void gelu_fused(const float* x, float* y, std::size_t n, cudaStream_t stream);

// Bad arguments throw std::invalid_argument naming the function and the argument. Both
// entry points call this first; n == 0 is nothing to do.
inline void check_gelu_args(const char* function, const float* x, const float* y,
                            std::size_t n) {
  if (n > 0 && (x == nullptr || y == nullptr))
    throw std::invalid_argument(std::string("ch05 ") + function +
                                ": x and y must be device pointers, got a null pointer (n = " +
                                std::to_string(n) + ")");
}

}  // namespace ch05
