#include "wb/check.hpp"

#include <cstdlib>
#include <sstream>
#include <string>

#include "wb/test_environment.hpp"

namespace wb {

const char* hint_for(cudaError_t code) {
  switch (code) {
    case cudaErrorIllegalAddress:
      return "a kernel read or wrote outside an allocation: check the bounds test on the last "
             "block (n not a multiple of the block size) and the row/column index arithmetic; "
             "run with WB_DEBUG_SYNC=1 to stop at the launch that did it, or under "
             "compute-sanitizer to get the line";
    case cudaErrorInvalidConfiguration:
      return "the launch configuration is impossible: more than 1024 threads per block, a grid "
             "dimension of 0, a grid.y or grid.z of more than 65535 blocks (put the large "
             "dimension in grid.x, whose limit is 2^31 - 1), or more shared memory than the "
             "device allows";
    case cudaErrorInvalidValue:
      return "an argument is out of range: a null or host pointer where a device pointer was "
             "expected, a size of 0, a copy larger than its allocation, or a launch with a "
             "grid.y or grid.z of more than 65535 blocks (put the large dimension in grid.x, "
             "whose limit is 2^31 - 1)";
    case cudaErrorMemoryAllocation:
      return "the device is out of memory: free buffers you no longer need (or stop "
             "allocating on every call)";
    case cudaErrorLaunchTimeout:
      return "the kernel ran too long: look for a loop whose exit condition is never reached";
    case cudaErrorNoDevice:
    case cudaErrorInsufficientDriver:
      return "no usable CUDA device here: GPU tests are skipped on such a machine";
    case cudaErrorInvalidAddressSpace:
      return "a kernel loaded or stored through an address that lies in no memory space (not "
             "global, not shared): most often an index before the start of a buffer (a negative "
             "offset, or an unsigned one that wrapped) or far past its end; run under "
             "compute-sanitizer to get the line";
    case cudaErrorMisalignedAddress:
      return "a vector load/store (float4, 16 bytes) used an address that is not 16-byte "
             "aligned: handle the unaligned head or tail with scalar accesses";
    case cudaErrorInvalidDeviceFunction:
    case cudaErrorNoKernelImageForDevice:
      return "the binary has no code for this GPU: rebuild with CMAKE_CUDA_ARCHITECTURES set "
             "to this device's compute capability";
    default:
      return "";
  }
}

void cuda_check(cudaError_t err, const char* expression, const char* file, int line) {
  if (err == cudaSuccess) return;
  std::ostringstream msg;
  msg << "CUDA error " << cudaGetErrorName(err) << " (" << cudaGetErrorString(err) << ") from "
      << expression << " at " << file << ":" << line;
  if (const char* hint = hint_for(err); *hint) msg << "\nhint: " << hint;
  throw CudaError(err, msg.str());
}

bool debug_sync_enabled() {
  return switched_on(test_environment("WB_DEBUG_SYNC"));
}

void check_launch(const char* kernel, const char* file, int line) {
  // A launch error (bad configuration) is reported by cudaGetLastError right away; an error
  // inside the kernel only appears at the next synchronizing call, unless we synchronize here.
  std::string what = std::string("the launch of ") + kernel;
  cuda_check(cudaGetLastError(), what.c_str(), file, line);
  if (debug_sync_enabled()) {
    what = std::string("kernel ") + kernel + " (WB_DEBUG_SYNC=1 synchronized after it)";
    cuda_check(cudaDeviceSynchronize(), what.c_str(), file, line);
  }
}

}  // namespace wb
