// The CPU matmul backend and the adapter for chapter wrappers.
#include "wb/model/matmul.hpp"

#ifdef _OPENMP
#include <omp.h>
#endif

namespace wb::model {

int max_threads() {
#ifdef _OPENMP
  return omp_get_max_threads();
#else
  return 1;
#endif
}

CpuMatmul::CpuMatmul(int threads) : threads_(threads > 0 ? threads : max_threads()) {}

std::string CpuMatmul::name() const {
  return threads_ == 1 ? "cpu (1 thread)" : "cpu (" + std::to_string(threads_) + " threads)";
}

void CpuMatmul::matmul(float* out, const float* x, const float* W, int n, int d) {
  // One dot product per row; rows are independent, so they are shared among the threads.
  // The dot product accumulates in float, in order, like llama2.c's run.c.
#pragma omp parallel for num_threads(threads_) schedule(static)
  for (int i = 0; i < d; ++i) {
    const float* row = W + std::size_t(i) * std::size_t(n);
    float sum = 0.0f;
    for (int j = 0; j < n; ++j) sum += row[j] * x[j];
    out[i] = sum;
  }
}

FunctionMatmul::FunctionMatmul(std::string name, MatmulFn matmul, LoadFn load)
    : name_(std::move(name)), matmul_(std::move(matmul)), load_(std::move(load)) {}

void FunctionMatmul::load_weights(std::span<const float> weights) {
  if (load_) load_(weights);
}

void FunctionMatmul::matmul(float* out, const float* x, const float* W, int n, int d) {
  matmul_(out, x, W, n, d);
}

}  // namespace wb::model
