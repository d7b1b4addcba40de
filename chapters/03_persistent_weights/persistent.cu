// Chapter 03: persistent weights. Your file: the kernel (from chapter 01), the one-time
// upload, and a matmul that moves only activations. README.md walks through it;
// `./workbook check 03` tests it.
#include <cstddef>

#include "persistent.hpp"
#include "wb/check.hpp"
#include "wb/not_implemented.hpp"

namespace ch03 {
namespace {

// TODO(step 1): paste your matvec kernel from chapter 01 here (and your ensure_capacity
// from chapter 02, as a helper for the x and y buffers).

}  // namespace

void launch_matvec(float* y, const float* x, const float* W, int n, int d, cudaStream_t stream) {
  // TODO(step 1): launch your kernel on `stream` and WB_CHECK_LAUNCH it.
  (void)y, (void)x, (void)W, (void)n, (void)d, (void)stream;
  wb::not_implemented("ch03::launch_matvec (step 1: your kernel from chapter 01)");
}

void PersistentMatvec::load(const float* host_weights, std::size_t count) {
  // TODO(step 2): free earlier weights, cudaMalloc `count` floats into d_weights_, copy
  // all of host_weights there (one cudaMemcpy) and remember host_weights_ and weight_count_.
  (void)host_weights, (void)count;
  wb::not_implemented("ch03::PersistentMatvec::load (step 2: upload the weights once)");
}

void PersistentMatvec::matvec(float* out, const float* x, const float* W, int n, int d) {
  // TODO(step 3): find W's device twin: d_weights_ + offset_inside(W, n*d, host_weights_,
  // weight_count_). Make sure d_x_ and d_y_ are big enough; copy x up (n floats), launch,
  // copy y down (d floats) into out. No weight bytes cross PCIe here.
  (void)out, (void)x, (void)W, (void)n, (void)d;
  wb::not_implemented("ch03::PersistentMatvec::matvec (step 3: move only the activations)");
}

void PersistentMatvec::release() noexcept {
  // TODO(step 4): cudaFree d_weights_, d_x_ and d_y_ and reset every member, so a second
  // call frees nothing twice. (No WB_CUDA: the destructor calls this.)
}

}  // namespace ch03
