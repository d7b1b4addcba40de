#include "wb/device.hpp"

#include <cuda_runtime.h>

#include "wb/check.hpp"

namespace wb {

std::string DeviceInfo::compute_capability() const {
  return std::to_string(cc_major) + "." + std::to_string(cc_minor);
}

bool has_cuda_device() {
  static const bool present = [] {
    int count = 0;
    if (cudaGetDeviceCount(&count) != cudaSuccess) {
      cudaGetLastError();  // clear the error so later calls don't see it
      return false;
    }
    return count > 0;
  }();
  return present;
}

namespace {
int attribute(cudaDeviceAttr attr, int device) {
  int value = 0;
  WB_CUDA(cudaDeviceGetAttribute(&value, attr, device));
  return value;
}

DeviceInfo query_device() {
  DeviceInfo info;
  WB_CUDA(cudaGetDevice(&info.index));
  cudaDeviceProp prop{};
  WB_CUDA(cudaGetDeviceProperties(&prop, info.index));
  info.name = prop.name;
  info.cc_major = prop.major;
  info.cc_minor = prop.minor;
  info.sm_count = prop.multiProcessorCount;
  info.l2_bytes = static_cast<std::size_t>(prop.l2CacheSize);
  info.global_mem_bytes = prop.totalGlobalMem;
  info.mem_bus_bits = prop.memoryBusWidth;
  // CUDA 13 removed the clock fields from cudaDeviceProp; the attributes remain (kHz).
  info.sm_clock_mhz = attribute(cudaDevAttrClockRate, info.index) / 1000;
  info.mem_clock_mhz = attribute(cudaDevAttrMemoryClockRate, info.index) / 1000;
  WB_CUDA(cudaDriverGetVersion(&info.driver_version));
  WB_CUDA(cudaRuntimeGetVersion(&info.runtime_version));
  return info;
}
}  // namespace

const DeviceInfo& device_info() {
  if (!has_cuda_device()) WB_CUDA(cudaErrorNoDevice);
  static const DeviceInfo info = query_device();
  return info;
}

}  // namespace wb
