#pragma once
// Checking a matvec (chapters 01-03): out = W x against a double-precision CPU reference,
// on fresh random inputs and a poisoned (NaN) output, so an element never written or a
// term never added cannot pass.
#include <cuda_runtime.h>

#include <cstddef>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "wb/compare.hpp"

namespace wb::model {

// out[i] = sum_j W[i*n + j] * x[j], accumulated in double.
std::vector<double> matvec_reference(std::span<const float> W, std::span<const float> x, int n, int d);

// A float dot product of length n differs from the exact one by rounding in the partial
// sums, which grows about like sqrt(n) for any summation order (sequential, strided,
// tree). With inputs in [-1, 1] an error above 2e-5 * sqrt(n) means a wrong result (a term
// skipped or counted twice changes a row by ~0.25 on average), not rounding.
Tolerance matvec_tolerance(int n);

// A kernel launcher on device pointers: y = W x, enqueued on `stream`.
using DeviceMatvec =
    std::function<void(float* y, const float* x, const float* W, int n, int d, cudaStream_t stream)>;
// A host wrapper: out = W x, host pointers, synchronous.
using HostMatvec = std::function<void(float* out, const float* x, const float* W, int n, int d)>;

struct MatvecCheck {
  std::string chapter;   // "01"
  std::string what;      // "launch_matvec"
  std::string hint;      // the chapter's hint for a mismatch
};

// W and x uniform in [-1, 1] from seeds labelled with the chapter and shape (WB_SEED
// reproduces them); y poisoned and between guard bands (a store past either end fails with
// "rule: write only your own elements"); `launch` on a stream of its own; compared with the
// reference (shape shown as [row, 0]). d rows of n columns: "d x n".
CompareResult check_device_matvec(const DeviceMatvec& launch, int n, int d, const MatvecCheck& check);
CompareResult check_host_matvec(const HostMatvec& matvec, int n, int d, const MatvecCheck& check);

}  // namespace wb::model
