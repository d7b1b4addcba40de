#pragma once
// Chapter 02: preallocated buffers. (API header: shared by the starter and the reference;
// do not edit it, the grader uses its own copy.)
//
// Chapter 01's wrapper pays for cudaMalloc and cudaFree on every call. Here the device
// buffers are allocated once, grown only when a call needs more than they hold, and
// reused: allocation leaves the hot path. W is still copied on every call.
#include <cuda_runtime.h>

#include <cstddef>

namespace ch02 {

// y = W x on the device: your kernel from chapter 01 (same contract: W is d x n row-major,
// any n >= 1 and d >= 1, enqueued on `stream`, no synchronization).
void launch_matvec(float* y, const float* x, const float* W, int n, int d, cudaStream_t stream);

class PreallocatedMatvec {
 public:
  PreallocatedMatvec() = default;
  ~PreallocatedMatvec() { release(); }
  PreallocatedMatvec(const PreallocatedMatvec&) = delete;
  PreallocatedMatvec& operator=(const PreallocatedMatvec&) = delete;

  // out = W x with W, x and out in HOST memory: make sure the device buffers are big
  // enough (ensure_capacity), copy W and x to the device, launch_matvec, copy out back.
  // After the first calls of each size, no call allocates or frees anything.
  void matvec(float* out, const float* x, const float* W, int n, int d);

  // Frees the device buffers and sets every capacity back to 0, leaving the object as new: a
  // matvec after it allocates again (the destructor calls it; calling it twice is fine).
  void release() noexcept;

  // Floats each buffer holds now (for the tests).
  std::size_t w_capacity() const { return w_capacity_; }
  std::size_t x_capacity() const { return x_capacity_; }
  std::size_t y_capacity() const { return y_capacity_; }

 private:
  // Makes *buffer hold at least `count` floats: when *capacity is smaller, free the old
  // buffer and allocate a new one of `count` floats; otherwise do nothing.
  static void ensure_capacity(float** buffer, std::size_t* capacity, std::size_t count);

  float* d_w_ = nullptr;
  float* d_x_ = nullptr;
  float* d_y_ = nullptr;
  std::size_t w_capacity_ = 0;
  std::size_t x_capacity_ = 0;
  std::size_t y_capacity_ = 0;
};

}  // namespace ch02
