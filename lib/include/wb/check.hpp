#pragma once
// CUDA error checking that says what failed, where, and what to try next.
//
//   WB_CUDA(cudaMalloc(&p, bytes));          // any runtime call
//   my_kernel<<<grid, block, 0, s>>>(...);
//   WB_CHECK_LAUNCH("my_kernel");            // after every launch
//
// With WB_DEBUG_SYNC=1 in the environment, WB_CHECK_LAUNCH also synchronizes, so an
// illegal address is reported at the launch that caused it rather than at a later call.
#include <cuda_runtime.h>

#include <stdexcept>
#include <string>

namespace wb {

// Thrown for every failed CUDA call; what() is the whole teaching message.
class CudaError : public std::runtime_error {
 public:
  CudaError(cudaError_t code, const std::string& message)
      : std::runtime_error(message), code_(code) {}
  cudaError_t code() const { return code_; }

 private:
  cudaError_t code_;
};

// A short hint about the usual cause of an error code ("" when there is nothing useful).
const char* hint_for(cudaError_t code);

void cuda_check(cudaError_t err, const char* expression, const char* file, int line);
void check_launch(const char* kernel, const char* file, int line);
bool debug_sync_enabled();

}  // namespace wb

#define WB_CUDA(call) ::wb::cuda_check((call), #call, __FILE__, __LINE__)
#define WB_CHECK_LAUNCH(kernel_name) ::wb::check_launch((kernel_name), __FILE__, __LINE__)
