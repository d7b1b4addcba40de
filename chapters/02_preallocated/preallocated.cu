// Chapter 02: preallocated buffers. Your file: the kernel (from chapter 01) and a wrapper
// that keeps its device buffers. README.md walks through it; `./workbook check 02` tests it.
#include <cstddef>

#include "preallocated.hpp"
#include "wb/check.hpp"
#include "wb/not_implemented.hpp"

namespace ch02 {
namespace {

// TODO(step 1): paste your matvec kernel from chapter 01 here.

}  // namespace

void launch_matvec(float* y, const float* x, const float* W, int n, int d, cudaStream_t stream) {
  // TODO(step 1): launch your kernel on `stream` and WB_CHECK_LAUNCH it, as in chapter 01.
  (void)y, (void)x, (void)W, (void)n, (void)d, (void)stream;
  wb::not_implemented("ch02::launch_matvec (step 1: your kernel from chapter 01)");
}

void PreallocatedMatvec::ensure_capacity(float** buffer, std::size_t* capacity, std::size_t count) {
  // TODO(step 2): if *capacity already holds `count` floats, return at once. Otherwise
  // cudaFree the old buffer (cudaFree(nullptr) is fine), cudaMalloc `count` floats into
  // *buffer and record the new capacity.
  (void)buffer, (void)capacity, (void)count;
  wb::not_implemented("ch02::PreallocatedMatvec::ensure_capacity (step 2)");
}

void PreallocatedMatvec::matvec(float* out, const float* x, const float* W, int n, int d) {
  // TODO(step 3): ensure_capacity for W (n*d floats), x (n) and y (d); cudaMemcpy W and x
  // to the device; launch_matvec(d_y_, d_x_, d_w_, n, d, nullptr); cudaMemcpy y into out.
  // No cudaMalloc or cudaFree here: that is the point of this chapter.
  (void)out, (void)x, (void)W, (void)n, (void)d;
  wb::not_implemented("ch02::PreallocatedMatvec::matvec (step 3)");
}

void PreallocatedMatvec::release() noexcept {
  // TODO(step 4): cudaFree the three buffers and reset the pointers and capacities, so a
  // second call frees nothing twice. (No WB_CUDA here: the destructor calls this and must
  // not throw.) Nothing to free until step 3 allocates something.
}

}  // namespace ch02
