#pragma once
// Device memory fenced by unmapped pages: the elements end exactly where mapped memory ends
// (Fence::After) or begin exactly where it begins (Fence::Before), so a kernel that reads or
// writes even one element past that end faults at once, on any GPU, with or without
// compute-sanitizer. (cudaMalloc rounds allocations up and packs them together, so an
// over-read of a cudaMalloc'd input usually reads someone else's bytes in silence.)
//
// Built with CUDA's virtual memory management (reserve an address range, map physical
// memory into the middle of it and leave a granule unmapped on each side). The driver
// functions come through cudaGetDriverEntryPointByVersion, so tests need not link libcuda.
//
// A fault poisons the CUDA context: every later CUDA call in the process fails. A test
// that uses this buffer must report the fault with the rule it names; later tests in the
// same binary then fail too, which is what a fault means.
#include <cuda.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

#include "wb/check.hpp"
#include "wb/upload.hpp"

namespace wb_tests {

enum class Fence { After, Before };

namespace fenced_detail {

template <typename F>
F driver_entry(const char* name) {
  void* fn = nullptr;
  cudaDriverEntryPointQueryResult status{};
  if (cudaGetDriverEntryPointByVersion(name, &fn, 12000, cudaEnableDefault, &status) != cudaSuccess ||
      status != cudaDriverEntryPointSuccess || fn == nullptr)
    throw std::runtime_error(std::string("FencedBuffer: the CUDA driver has no ") + name);
  return reinterpret_cast<F>(fn);
}

struct Driver {
  decltype(&::cuMemGetAllocationGranularity) granularity = driver_entry<decltype(granularity)>("cuMemGetAllocationGranularity");
  decltype(&::cuMemCreate) create = driver_entry<decltype(create)>("cuMemCreate");
  decltype(&::cuMemRelease) release = driver_entry<decltype(release)>("cuMemRelease");
  decltype(&::cuMemAddressReserve) reserve = driver_entry<decltype(reserve)>("cuMemAddressReserve");
  decltype(&::cuMemAddressFree) address_free = driver_entry<decltype(address_free)>("cuMemAddressFree");
  decltype(&::cuMemMap) map = driver_entry<decltype(map)>("cuMemMap");
  decltype(&::cuMemUnmap) unmap = driver_entry<decltype(unmap)>("cuMemUnmap");
  decltype(&::cuMemSetAccess) set_access = driver_entry<decltype(set_access)>("cuMemSetAccess");
};

inline const Driver& driver() {
  static const Driver d;
  return d;
}

inline void check(CUresult r, const char* what) {
  if (r != CUDA_SUCCESS) throw std::runtime_error(std::string("FencedBuffer: ") + what + " failed (CUresult " + std::to_string(int(r)) + ")");
}

}  // namespace fenced_detail

template <typename T>
class FencedBuffer {
 public:
  // `count` elements; `slack` extra elements between the elements and the fence (0: the
  // elements touch it). Slack moves the elements' alignment without moving them far from it.
  FencedBuffer(std::size_t count, Fence fence, std::size_t slack = 0) : count_(count) {
    WB_CUDA(cudaFree(nullptr));  // a context exists before the driver calls
    const auto& drv = fenced_detail::driver();
    int device = 0;
    WB_CUDA(cudaGetDevice(&device));
    CUmemAllocationProp prop{};
    prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    prop.location.id = device;
    std::size_t granule = 0;
    fenced_detail::check(drv.granularity(&granule, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM), "cuMemGetAllocationGranularity");
    const std::size_t want = (count + slack) * sizeof(T);
    mapped_ = ((want + granule - 1) / granule) * granule;
    if (mapped_ == 0) mapped_ = granule;
    reserved_ = mapped_ + 2 * granule;
    fenced_detail::check(drv.reserve(&base_, reserved_, granule, 0, 0), "cuMemAddressReserve");
    fenced_detail::check(drv.create(&handle_, mapped_, &prop, 0), "cuMemCreate");
    fenced_detail::check(drv.map(base_ + granule, mapped_, 0, handle_, 0), "cuMemMap");
    CUmemAccessDesc access{};
    access.location = prop.location;
    access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
    fenced_detail::check(drv.set_access(base_ + granule, mapped_, &access, 1), "cuMemSetAccess");
    const CUdeviceptr begin = base_ + granule, end = begin + mapped_;
    data_ = reinterpret_cast<T*>(fence == Fence::After ? end - (count + slack) * sizeof(T) : begin + slack * sizeof(T));
    WB_CUDA(cudaMemset(reinterpret_cast<void*>(begin), 0xA5, mapped_));
  }
  ~FencedBuffer() {
    const auto& drv = fenced_detail::driver();
    cudaDeviceSynchronize();
    const std::size_t granule = (reserved_ - mapped_) / 2;
    drv.unmap(base_ + granule, mapped_);
    drv.release(handle_);
    drv.address_free(base_, reserved_);
  }
  FencedBuffer(const FencedBuffer&) = delete;
  FencedBuffer& operator=(const FencedBuffer&) = delete;

  T* data() { return data_; }
  const T* data() const { return data_; }
  std::size_t size() const { return count_; }

  void upload(std::span<const T> host) {
    wb::upload_bytes(data_, host.data(), host.size_bytes());
  }
  std::vector<T> download() const {
    std::vector<T> host(count_);
    WB_CUDA(cudaMemcpy(host.data(), data_, count_ * sizeof(T), cudaMemcpyDeviceToHost));
    return host;
  }
  void poison() { WB_CUDA(cudaMemset(data_, 0xFF, count_ * sizeof(T))); }

 private:
  std::size_t count_;
  std::size_t mapped_ = 0, reserved_ = 0;
  CUdeviceptr base_ = 0;
  CUmemGenericAllocationHandle handle_{};
  T* data_ = nullptr;
};

}  // namespace wb_tests
