#pragma once
// The one operation the transfer chapters move to the GPU: out = W x, with W a [d][n]
// row-major matrix taken from the model's weights, x a vector of n floats and out of d.
// About 99% of a llama2 forward pass's arithmetic is in these calls, so the forward pass
// takes the matmul as a pluggable backend: the CPU one below, or a chapter's GPU version.
//
//   wb::model::CpuMatmul cpu(16);                      // 16 OpenMP threads
//   wb::model::FunctionMatmul gpu("01_naive", [](float* out, const float* x,
//                                                const float* W, int n, int d) {
//     ch01::matvec_naive(out, x, W, n, d);
//   });
//   wb::model::Transformer t(model, gpu);
#include <functional>
#include <span>
#include <string>

namespace wb::model {

class Matmul {
 public:
  virtual ~Matmul() = default;
  virtual std::string name() const = 0;
  // Called once when a Transformer is built on a model, with every weight of the model in
  // one contiguous host array (Model::payload()). Every W later passed to matmul() points
  // inside it. A backend that keeps weights on the device uploads them here.
  virtual void load_weights(std::span<const float> /*weights*/) {}
  // out[i] = sum_j W[i*n + j] * x[j] for i < d. All pointers are host memory; when the
  // call returns, out holds the result.
  virtual void matmul(float* out, const float* x, const float* W, int n, int d) = 0;
};

// The CPU baseline: one dot product per output row, rows split over OpenMP threads (the
// same computation as llama2.c's run.c).
class CpuMatmul final : public Matmul {
 public:
  // threads <= 0: every thread OpenMP offers (omp_get_max_threads()).
  explicit CpuMatmul(int threads = 0);
  std::string name() const override;
  void matmul(float* out, const float* x, const float* W, int n, int d) override;
  int threads() const { return threads_; }

 private:
  int threads_;
};

// Adapts any callable (a chapter's wrapper) to the interface.
class FunctionMatmul final : public Matmul {
 public:
  using MatmulFn = std::function<void(float* out, const float* x, const float* W, int n, int d)>;
  using LoadFn = std::function<void(std::span<const float> weights)>;
  FunctionMatmul(std::string name, MatmulFn matmul, LoadFn load = {});
  std::string name() const override { return name_; }
  void load_weights(std::span<const float> weights) override;
  void matmul(float* out, const float* x, const float* W, int n, int d) override;

 private:
  std::string name_;
  MatmulFn matmul_;
  LoadFn load_;
};

// Threads OpenMP offers on this machine (1 when built without OpenMP).
int max_threads();

}  // namespace wb::model
