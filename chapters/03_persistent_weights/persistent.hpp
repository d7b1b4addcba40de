#pragma once
// Chapter 03: persistent weights. (API header: shared by the starter and the reference;
// do not edit it, the grader uses its own copy.)
//
// The weights of a model do not change while it generates, so they need to cross PCIe
// only once. load() uploads all of them at start-up; after that a matmul moves only its
// activations: x (n floats) up, out (d floats) down.
#include <cuda_runtime.h>

#include <cstddef>
#include <functional>
#include <sstream>
#include <stdexcept>

namespace ch03 {

// y = W x on the device: your kernel from chapter 01 (same contract).
void launch_matvec(float* y, const float* x, const float* W, int n, int d, cudaStream_t stream);

class PersistentMatvec {
 public:
  PersistentMatvec() = default;
  ~PersistentMatvec() { release(); }
  PersistentMatvec(const PersistentMatvec&) = delete;
  PersistentMatvec& operator=(const PersistentMatvec&) = delete;

  // Uploads `count` floats starting at host_weights (every weight of the model, one
  // contiguous array) to the device, once. Loading again replaces the earlier weights.
  void load(const float* host_weights, std::size_t count);

  // out = W x with x and out in HOST memory and W pointing INSIDE the loaded host weights:
  // the same matrix already sits on the device at the same offset. Copies only x up and
  // out down. Throws std::invalid_argument when W is not inside the loaded weights.
  void matvec(float* out, const float* x, const float* W, int n, int d);

  // Frees every device buffer (the destructor calls it; calling it twice is fine).
  void release() noexcept;

 private:
  const float* host_weights_ = nullptr;  // what load() was given
  std::size_t weight_count_ = 0;
  float* d_weights_ = nullptr;           // its copy on the device
  float* d_x_ = nullptr;
  float* d_y_ = nullptr;
  std::size_t x_capacity_ = 0;
  std::size_t y_capacity_ = 0;
};

// Where the matrix W (count floats) starts inside the loaded weights [base, base + base_count),
// in floats from base. Throws std::invalid_argument, saying what is wrong, when any part of
// W lies outside.
inline std::size_t offset_inside(const float* W, std::size_t count, const float* base, std::size_t base_count) {
  const std::less_equal<const float*> le;  // pointer order that is defined for any pointers
  if (base == nullptr || !le(base, W) || !le(W + count, base + base_count)) {
    std::ostringstream msg;
    msg << "chapter 03: PersistentMatvec::matvec got a W (" << count << " floats at " << W
        << ") that is not inside the weights given to load() (" << base_count << " floats at " << base
        << ")\nhint: call load() with the model's whole weight array first; every W the model "
           "passes points into it.";
    throw std::invalid_argument(msg.str());
  }
  return std::size_t(W - base);
}

}  // namespace ch03
