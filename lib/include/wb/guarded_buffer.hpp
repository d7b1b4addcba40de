#pragma once
// An output buffer with a guard band on each side.
//
// A kernel that writes past either end of its output is wrong even when every output it
// was asked for is right: a grid rounded up without `if (i < n)`, a float4 store across
// the last partial pack, a row index that runs past the last row. Without a guard such a
// write is silent: it lands in the bytes cudaMalloc rounded the allocation up to, or in
// whichever buffer happens to come next, and the test reads back correct outputs. Here the
// elements the kernel owns sit between two bands filled with a pattern no kernel computes by
// accident; overrun() reads the bands back and says what changed.
//
// The bands also make reads just past the end harmless (they read the pattern, not an
// unmapped page), so a test that puts its inputs in a GuardedBuffer too gets a clean
// "wrote past the end" message instead of a crash that depends on the allocator.
#include <cuda_runtime.h>

#include <cstddef>
#include <span>
#include <string>
#include <type_traits>
#include <vector>

#include "wb/buffer.hpp"
#include "wb/check.hpp"
#include "wb/upload.hpp"

namespace wb {

// 16 KiB on each side: more than a rounded-up block of float4 stores (1024 threads x 16 B)
// can reach, and a multiple of 256 B, so data() keeps cudaMalloc's alignment.
inline constexpr std::size_t kGuardBytes = 16384;
// 0xA5A5A5A5 as a float is -2.87e-16: not a value a kernel writes by accident (unlike 0,
// 1, NaN or the 0xFF poison).
inline constexpr unsigned char kGuardByte = 0xA5;

// What a kernel did to the guard bands around `count` elements of `element_bytes` each,
// called `name` ("y"): which side, how many elements changed, the first and last index
// (relative to name[0]). Empty when both bands are intact.
std::string describe_overrun(std::span<const unsigned char> before,
                             std::span<const unsigned char> after, std::size_t element_bytes,
                             std::size_t count, const std::string& name);

// What a kernel did to an input it must only read: how many floats of `name` differ (bit for
// bit) between `before` (what the test uploaded) and `after` (what is there now), and the
// first one. Empty when nothing changed.
std::string describe_input_change(std::span<const float> before, std::span<const float> after,
                                  const std::string& name);

template <typename T>
class GuardedBuffer {
 public:
  explicit GuardedBuffer(std::size_t count)
      : count_(count), raw_(count * sizeof(T) + 2 * kGuardBytes) {
    poison();
    WB_CUDA(cudaDeviceSynchronize());
  }
  explicit GuardedBuffer(std::span<const T> host) : GuardedBuffer(host.size()) { upload(host); }

  T* data() { return reinterpret_cast<T*>(raw_.data() + kGuardBytes); }
  const T* data() const { return reinterpret_cast<const T*>(raw_.data() + kGuardBytes); }
  std::size_t size() const { return count_; }
  std::size_t bytes() const { return count_ * sizeof(T); }

  void upload(std::span<const T> host) {
    upload_bytes(data(), host.data(), host.size() * sizeof(T));
  }
  std::vector<T> download() const {
    std::vector<T> host(count_);
    if (count_ > 0) WB_CUDA(cudaMemcpy(host.data(), data(), bytes(), cudaMemcpyDeviceToHost));
    return host;
  }
  // The elements get the 0xFF poison (NaN: an element never written cannot pass a
  // comparison), the bands their pattern again.
  void poison(cudaStream_t stream = nullptr) {
    WB_CUDA(cudaMemsetAsync(raw_.data(), kGuardByte, raw_.bytes(), stream));
    if (count_ > 0) WB_CUDA(cudaMemsetAsync(data(), 0xFF, bytes(), stream));
  }
  // Call after the work is finished (it copies synchronously): empty when the kernel wrote
  // nothing outside its elements, else the message for the test.
  std::string overrun(const std::string& name) const {
    std::vector<unsigned char> before(kGuardBytes), after(kGuardBytes);
    WB_CUDA(cudaMemcpy(before.data(), raw_.data(), kGuardBytes, cudaMemcpyDeviceToHost));
    WB_CUDA(cudaMemcpy(after.data(), raw_.data() + kGuardBytes + bytes(), kGuardBytes,
                       cudaMemcpyDeviceToHost));
    return describe_overrun(before, after, sizeof(T), count_, name);
  }
  // For an input: empty when the elements from `offset` on are still, bit for bit, the
  // `uploaded` ones, else the message for the test (see describe_input_change).
  std::string input_change(std::span<const float> uploaded, const std::string& name,
                           std::size_t offset = 0) const {
    static_assert(std::is_same_v<T, float>, "input_change compares floats");
    const std::vector<float> now = download();
    return describe_input_change(uploaded, std::span<const float>(now).subspan(offset), name);
  }

 private:
  std::size_t count_;
  DeviceBuffer<unsigned char> raw_;
};

// An input that ends exactly where mapped device memory ends. Guard bands make a read past
// the end harmless (it reads the pattern); here the page after the last element is reserved
// but not mapped, so a kernel that reads even one float past the end of the input (a row
// tail loaded "just in case", a load before its bounds check) gets an illegal-address
// error instead of a right answer. Device memory through CUDA's virtual memory API, reached
// via cudaGetDriverEntryPointByVersion (no link to the driver library needed).
//
// The end is 2 MiB-aligned, so data() is 16-byte aligned when count % 4 == 0.
class InputAtEnd {
 public:
  explicit InputAtEnd(std::size_t count);
  ~InputAtEnd();
  InputAtEnd(const InputAtEnd&) = delete;
  InputAtEnd& operator=(const InputAtEnd&) = delete;

  float* data() { return data_; }
  std::size_t size() const { return count_; }
  void upload(std::span<const float> host);
  std::vector<float> download() const;

 private:
  std::size_t count_ = 0;
  std::size_t mapped_ = 0;    // bytes mapped, a multiple of the granularity
  std::size_t reserved_ = 0;  // mapped_ + one unmapped granule
  unsigned long long base_ = 0;
  unsigned long long handle_ = 0;
  float* data_ = nullptr;
};

}  // namespace wb
