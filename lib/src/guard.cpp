#include <algorithm>
#include <cstddef>
#include <cstring>
#include <span>
#include <sstream>
#include <string>

#include "wb/guarded_buffer.hpp"

namespace wb {
namespace {

struct Changed {
  std::size_t elements = 0;  // elements with at least one byte that is not the pattern
  std::size_t first = 0, last = 0;  // their positions within the band, in elements
};

Changed changed_elements(std::span<const unsigned char> band, std::size_t element_bytes) {
  Changed c;
  for (std::size_t e = 0; e < band.size() / element_bytes; ++e) {
    const auto bytes = band.subspan(e * element_bytes, element_bytes);
    if (std::all_of(bytes.begin(), bytes.end(), [](unsigned char b) { return b == kGuardByte; }))
      continue;
    if (c.elements++ == 0) c.first = e;
    c.last = e;
  }
  return c;
}

std::string at(const std::string& name, long long index) {
  return name + "[" + std::to_string(index) + "]";
}

}  // namespace

std::string describe_overrun(std::span<const unsigned char> before,
                             std::span<const unsigned char> after, std::size_t element_bytes,
                             std::size_t count, const std::string& name) {
  std::string message;
  const Changed past_end = changed_elements(after, element_bytes);
  if (past_end.elements > 0) {
    const long long first = static_cast<long long>(count + past_end.first);
    const long long last = static_cast<long long>(count + past_end.last);
    message += "wrote " + std::to_string(past_end.elements) + " element(s) past the end of " +
               name + " (" + name + " has " + std::to_string(count) + "; the first write was " +
               at(name, first) + (last != first ? ", the last " + at(name, last) : "") + ")";
  }
  const Changed before_start = changed_elements(before, element_bytes);
  if (before_start.elements > 0) {
    const std::size_t band = before.size() / element_bytes;
    const long long first = -static_cast<long long>(band - before_start.first);
    const long long last = -static_cast<long long>(band - before_start.last);
    message += std::string(message.empty() ? "wrote " : "; and ") +
               std::to_string(before_start.elements) + " element(s) before the start of " +
               name + " (" + at(name, first) + (last != first ? " to " + at(name, last) : "") +
               ")";
  }
  return message;
}

std::string describe_input_change(std::span<const float> before, std::span<const float> after,
                                  const std::string& name) {
  const std::size_t n = std::min(before.size(), after.size());
  std::size_t changed = 0, first = 0;
  for (std::size_t i = 0; i < n; ++i)
    if (std::memcmp(&before[i], &after[i], sizeof(float)) != 0 && changed++ == 0) first = i;
  if (changed == 0) return "";
  std::ostringstream text;
  text << "changed " << changed << " of the " << n << " elements of its input " << name
       << " (the first: " << at(name, static_cast<long long>(first)) << " was " << before[first]
       << ", is now " << after[first] << ")";
  return text.str();
}

}  // namespace wb

// ------------------------------------------------------------------------------------------
// InputAtEnd: the CUDA virtual memory API through the runtime's driver entry points.

#include <cuda.h>
#include <stdexcept>

namespace wb {
namespace {

template <typename F>
F driver_entry(const char* name) {
  void* fn = nullptr;
  cudaDriverEntryPointQueryResult found{};
  WB_CUDA(cudaGetDriverEntryPointByVersion(name, &fn, 12000, cudaEnableDefault, &found));
  if (fn == nullptr || found != cudaDriverEntryPointSuccess)
    throw std::runtime_error(std::string("wb::InputAtEnd: driver entry point ") + name +
                             " not found");
  return reinterpret_cast<F>(fn);
}

void driver_check(CUresult r, const char* what) {
  if (r != CUDA_SUCCESS)
    throw std::runtime_error(std::string("wb::InputAtEnd: ") + what + " failed (CUresult " +
                             std::to_string(static_cast<int>(r)) + ")");
}

struct Vmm {
  decltype(&cuMemGetAllocationGranularity) granularity =
      driver_entry<decltype(&cuMemGetAllocationGranularity)>("cuMemGetAllocationGranularity");
  decltype(&cuMemCreate) create = driver_entry<decltype(&cuMemCreate)>("cuMemCreate");
  decltype(&cuMemAddressReserve) reserve =
      driver_entry<decltype(&cuMemAddressReserve)>("cuMemAddressReserve");
  decltype(&cuMemMap) map = driver_entry<decltype(&cuMemMap)>("cuMemMap");
  decltype(&cuMemSetAccess) set_access = driver_entry<decltype(&cuMemSetAccess)>("cuMemSetAccess");
  decltype(&cuMemUnmap) unmap = driver_entry<decltype(&cuMemUnmap)>("cuMemUnmap");
  decltype(&cuMemRelease) release = driver_entry<decltype(&cuMemRelease)>("cuMemRelease");
  decltype(&cuMemAddressFree) address_free =
      driver_entry<decltype(&cuMemAddressFree)>("cuMemAddressFree");
};

const Vmm& vmm() {
  static const Vmm v;
  return v;
}

CUmemAllocationProp device_memory() {
  int device = 0;
  WB_CUDA(cudaGetDevice(&device));
  CUmemAllocationProp prop{};
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop.location.id = device;
  return prop;
}

}  // namespace

InputAtEnd::InputAtEnd(std::size_t count) : count_(count) {
  WB_CUDA(cudaFree(nullptr));  // a context for the driver calls
  const Vmm& v = vmm();
  const CUmemAllocationProp prop = device_memory();
  std::size_t granule = 0;
  driver_check(v.granularity(&granule, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM),
               "cuMemGetAllocationGranularity");
  const std::size_t bytes = std::max<std::size_t>(count * sizeof(float), 1);
  mapped_ = (bytes + granule - 1) / granule * granule;
  reserved_ = mapped_ + granule;  // the granule after the data stays unmapped
  CUdeviceptr base = 0;
  driver_check(v.reserve(&base, reserved_, granule, 0, 0), "cuMemAddressReserve");
  base_ = base;
  CUmemGenericAllocationHandle handle = 0;
  driver_check(v.create(&handle, mapped_, &prop, 0), "cuMemCreate");
  handle_ = handle;
  driver_check(v.map(base, mapped_, 0, handle, 0), "cuMemMap");
  CUmemAccessDesc access{};
  access.location = prop.location;
  access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  driver_check(v.set_access(base, mapped_, &access, 1), "cuMemSetAccess");
  data_ = reinterpret_cast<float*>(base + mapped_ - count * sizeof(float));
}

InputAtEnd::~InputAtEnd() {
  const Vmm& v = vmm();
  cudaDeviceSynchronize();
  if (base_ != 0) v.unmap(base_, mapped_);
  if (handle_ != 0) v.release(handle_);
  if (base_ != 0) v.address_free(base_, reserved_);
}

void InputAtEnd::upload(std::span<const float> host) {
  if (host.size() != count_) throw std::invalid_argument("wb::InputAtEnd::upload: wrong size");
  upload_bytes(data_, host.data(), count_ * sizeof(float));
}

std::vector<float> InputAtEnd::download() const {
  std::vector<float> host(count_);
  if (count_ > 0)
    WB_CUDA(cudaMemcpy(host.data(), data_, count_ * sizeof(float), cudaMemcpyDeviceToHost));
  return host;
}

}  // namespace wb
