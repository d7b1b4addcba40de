#pragma once
// What GPU is here, if any. Every GPU test starts by asking has_cuda_device().
#include <cstddef>
#include <string>

namespace wb {

struct DeviceInfo {
  int index = 0;
  std::string name;
  int cc_major = 0, cc_minor = 0;
  int sm_count = 0;
  std::size_t l2_bytes = 0;
  std::size_t global_mem_bytes = 0;
  int sm_clock_mhz = 0;     // peak, from the device attributes
  int mem_clock_mhz = 0;    // peak, from the device attributes
  int mem_bus_bits = 0;
  int driver_version = 0;   // e.g. 13000
  int runtime_version = 0;  // e.g. 13000
  std::string compute_capability() const;  // "9.0"
};

// True when at least one CUDA device can be used (never throws; caches the answer).
bool has_cuda_device();
// Properties of the current device. Throws wb::CudaError when there is none.
const DeviceInfo& device_info();

}  // namespace wb
