// Chapter 00 test support (compiled into the chapter library; never taken from a submission).
#include "support.hpp"

#include <algorithm>

#include "wb/api_counter.hpp"
#include "wb/check.hpp"
#include "wb/device.hpp"
#include "wb/timing.hpp"

namespace ch00 {

namespace support {
CallLog& call_log() {
  static CallLog log;
  return log;
}
void reset_log(cudaStream_t expected_stream) {
  call_log() = CallLog{};
  call_log().expected_stream = expected_stream;
}

Probe::Probe(cudaStream_t s, std::function<double(int)> d) : stream(s), duration_us(std::move(d)) {}

Work Probe::work() {
  return [this](cudaStream_t s) {
    if (s != stream) ++calls_on_other_streams;
    call_log().order += 'W';
    wb::ApiTrace::note('W');  // in order with the timer's CUDA calls, when a test traces them
    wb::launch_spin_kernel(duration_us(calls) * 1e3, s);
    ++calls;
  };
}

TestStream::TestStream() { WB_CUDA(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking)); }
TestStream::~TestStream() {
  if (s) {
    cudaStreamSynchronize(s);
    cudaStreamDestroy(s);
  }
}
}  // namespace support

void flush_l2(cudaStream_t stream) {
  // Twice the L2's size, written then read back: evicts whatever was cached (wb::flush_l2).
  static void* buffer = nullptr;
  static std::size_t bytes = 0;
  if (!buffer) {
    bytes = std::max<std::size_t>(2 * wb::device_info().l2_bytes, std::size_t(8) << 20);
    WB_CUDA(cudaMalloc(&buffer, bytes));
  }
  auto& log = support::call_log();
  log.order += 'F';
  wb::ApiTrace::note('F');
  if (stream != log.expected_stream) ++log.flushes_on_other_streams;
  wb::flush_l2(buffer, bytes, stream);
}

}  // namespace ch00
