// The timing harness (see wb/timing.hpp for the rules it implements).
#include "wb/timing.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <string>
#include <vector>
#include <numeric>
#include <sstream>

#include "wb/api_counter.hpp"
#include "wb/check.hpp"
#include "wb/device.hpp"
#include "wb/global_timer.cuh"
#include "wb/test_environment.hpp"
#include "wb/upload.hpp"

namespace wb {

const char* to_string(Cache c) { return c == Cache::Cold ? "cold" : "hot"; }
const char* to_string(Clock c) { return c == Clock::Device ? "device" : "host"; }

// ---------------------------------------------------------------------------------------
// Kernels of known cost: they calibrate the harness and chapter 00's tests.
namespace {

// One thread spins until `ns` nanoseconds have passed on the GPU's global timer.
__global__ void spin_kernel(unsigned long long ns) {
  const unsigned long long start = wb::global_timer_ns();
  while (wb::global_timer_ns() - start < ns) {
  }
}

__global__ void empty_kernel() {}

// Follows the chain from index 0: each load's address is the previous load's value.
__global__ void chase_kernel(const unsigned* next, int steps, unsigned* sink) {
  unsigned i = 0;
  for (int s = 0; s < steps; ++s) i = next[i];
  if (i == 0xFFFFFFFFu) *sink = i;  // keeps the loads alive; never true
}

// A plain vectorized copy: the reference for "how fast can this GPU move bytes".
__global__ void copy_kernel(const float4* __restrict__ in, float4* __restrict__ out,
                            std::size_t n) {
  const std::size_t stride = std::size_t(gridDim.x) * blockDim.x;
  for (std::size_t i = std::size_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride)
    out[i] = in[i];
}

// Reads every 16 bytes of the flush buffer so that each of its lines is brought into L2.
// The sum is written out only if it hits a value it never has, so the loads cannot be
// optimized away and nothing is written.
__global__ void read_flush_kernel(const float4* __restrict__ buffer, std::size_t n,
                                  float* __restrict__ never_written) {
  float sum = 0.0f;
  const std::size_t stride = std::size_t(gridDim.x) * blockDim.x;
  for (std::size_t i = std::size_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    const float4 v = __ldcg(buffer + i);  // .cg: cached in L2 only, which is what we fill
    sum += v.x + v.y + v.z + v.w;
  }
  if (sum == -1.0f) *never_written = sum;  // the buffer holds 0x01 bytes: sums are positive
}

// A read-only stream for the ceilings: four independent 16-byte loads in flight per thread
// per step (a matvec keeps as many going), summed so that the loads cannot be dropped; the
// sum is written only if it hits a value it never has.
__global__ void read_stream_kernel(const float4* __restrict__ in, std::size_t n,
                                   float* __restrict__ never_written) {
  const std::size_t stride = std::size_t(gridDim.x) * blockDim.x;
  float4 acc[4] = {};
  std::size_t i = std::size_t(blockIdx.x) * blockDim.x + threadIdx.x;
  for (; i + 3 * stride < n; i += 4 * stride) {
#pragma unroll
    for (int u = 0; u < 4; ++u) {
      const float4 v = in[i + u * stride];
      acc[u].x += v.x; acc[u].y += v.y; acc[u].z += v.z; acc[u].w += v.w;
    }
  }
  for (; i < n; i += stride) acc[0].x += in[i].x + in[i].y + in[i].z + in[i].w;
  float sum = 0.0f;
  for (int u = 0; u < 4; ++u) sum += acc[u].x + acc[u].y + acc[u].z + acc[u].w;
  if (sum == -1.0f) *never_written = sum;  // the buffer holds 0x01 bytes: sums are positive
}

double now_us() {
  using namespace std::chrono;
  return duration<double, std::micro>(steady_clock::now().time_since_epoch()).count();
}

// True while the ceilings themselves are being measured (they use Bench too).
thread_local bool g_measuring_ceilings = false;

void check_work_launch(const std::string& bench_name) {
  const std::string what = "the work timed as '" + bench_name + "'";
  cuda_check(cudaGetLastError(), what.c_str(), __FILE__, __LINE__);
}

}  // namespace

void launch_spin_kernel(double ns, cudaStream_t stream) {
  spin_kernel<<<1, 1, 0, stream>>>(static_cast<unsigned long long>(ns));
  WB_CHECK_LAUNCH("spin_kernel");
}

void launch_empty_kernel(cudaStream_t stream) {
  empty_kernel<<<1, 1, 0, stream>>>();
  WB_CHECK_LAUNCH("empty_kernel");
}

LatencyChain::LatencyChain(int steps) : steps_(steps) {
  constexpr std::size_t kStride = 4096;  // unsigneds: 16 KiB, a separate line and DRAM page
  std::vector<unsigned> next(std::size_t(steps) * kStride, 0);
  for (int s = 0; s < steps; ++s)
    next[std::size_t(s) * kStride] = unsigned((std::size_t(s + 1) % steps) * kStride);
  WB_CUDA(cudaMalloc(&chain_, next.size() * sizeof(unsigned)));
  WB_CUDA(cudaMalloc(&sink_, sizeof(unsigned)));
  upload_bytes(chain_, next.data(), next.size() * sizeof(unsigned));  // chased on non-blocking streams
}

LatencyChain::~LatencyChain() {
  cudaFree(chain_);
  cudaFree(sink_);
}

void LatencyChain::launch(cudaStream_t stream) const {
  chase_kernel<<<1, 1, 0, stream>>>(chain_, steps_, sink_);
  WB_CHECK_LAUNCH("chase_kernel");
}

// ---------------------------------------------------------------------------------------
// Statistics.

double median_of(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const std::size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

namespace {
double quantile_sorted(const std::vector<double>& s, double q) {
  if (s.empty()) return 0;
  const double pos = q * double(s.size() - 1);
  const std::size_t lo = std::size_t(pos);
  const std::size_t hi = std::min(lo + 1, s.size() - 1);
  return s[lo] + (pos - double(lo)) * (s[hi] - s[lo]);
}

// Relative standard error of the median, from the robust spread (normal approximation).
double median_relative_error(const Stats& s) {
  return s.samples > 0 ? 1.2533 * s.noise / std::sqrt(double(s.samples)) : 1.0;
}
}  // namespace

Stats summarize(const std::string& name, std::vector<double> samples_us, double bytes) {
  Stats s;
  s.name = name;
  s.samples_us = samples_us;
  s.samples = int(samples_us.size());
  s.bytes = bytes;
  if (samples_us.empty()) return s;
  std::sort(samples_us.begin(), samples_us.end());
  s.min_us = samples_us.front();
  s.max_us = samples_us.back();
  s.median_us = median_of(samples_us);
  s.p25_us = quantile_sorted(samples_us, 0.25);
  s.p75_us = quantile_sorted(samples_us, 0.75);
  s.mean_us = std::accumulate(samples_us.begin(), samples_us.end(), 0.0) / s.samples;
  std::vector<double> dev(samples_us.size());
  for (std::size_t i = 0; i < dev.size(); ++i) dev[i] = std::fabs(samples_us[i] - s.median_us);
  s.noise = s.median_us > 0 ? 1.4826 * median_of(dev) / s.median_us : 0;
  if (bytes > 0 && s.median_us > 0) s.gbps = bytes / (s.median_us * 1e3);
  return s;
}

// ---------------------------------------------------------------------------------------
// Ceilings (rule 9).

namespace {
Ceilings measure_ceilings() {
  g_measuring_ceilings = true;
  Ceilings c;
  const DeviceInfo& dev = device_info();
  c.l2_bytes = double(dev.l2_bytes);

  // A copy far larger than L2, so it streams from and to device memory.
  const std::size_t bytes = std::max<std::size_t>(std::size_t(256) << 20, 8 * dev.l2_bytes);
  void *src = nullptr, *dst = nullptr;
  WB_CUDA(cudaMalloc(&src, bytes));
  WB_CUDA(cudaMalloc(&dst, bytes));
  WB_CUDA(cudaMemset(src, 1, bytes));

  BenchOptions opt;
  opt.bytes = 2.0 * double(bytes);  // read + write
  opt.cache = Cache::Hot;           // the buffers are 8x L2: nothing stays cached anyway
  opt.check_floor = false;
  opt.min_samples = 10;
  opt.min_time_ms = 20;
  opt.max_time_ms = 400;
  opt.name = "device copy: cudaMemcpyAsync";
  Bench memcpy_bench(opt);
  const Stats by_memcpy = memcpy_bench.run([&](cudaStream_t s) {
    WB_CUDA(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, s));
  });
  opt.name = "device copy: float4 kernel";
  Bench kernel_bench(opt);
  const std::size_t n4 = bytes / sizeof(float4);
  const int blocks = dev.sm_count * 8;
  const Stats by_kernel = kernel_bench.run([&](cudaStream_t s) {
    copy_kernel<<<blocks, 512, 0, s>>>(static_cast<const float4*>(src), static_cast<float4*>(dst), n4);
  });
  c.copy_gbps = std::max(by_memcpy.gbps, by_kernel.gbps);
  // A read-only stream is faster than a copy on HBM (no read-write turnaround): it is the
  // ceiling for kernels that mostly read, such as a matvec over its weights (rule 8).
  opt.bytes = double(bytes);
  opt.name = "device read: float4 kernel";
  Bench read_bench(opt);
  const Stats by_read = read_bench.run([&](cudaStream_t s) {
    read_stream_kernel<<<blocks, 512, 0, s>>>(static_cast<const float4*>(src), n4,
                                              static_cast<float*>(dst));
  });
  c.read_gbps = by_read.gbps;
  WB_CUDA(cudaFree(src));
  WB_CUDA(cudaFree(dst));

  // Launch latency: back-to-back empty kernels (device time per launch) and one launch
  // followed by a synchronize (the host's round trip).
  cudaStream_t s;
  WB_CUDA(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  cudaEvent_t a, b;
  WB_CUDA(cudaEventCreate(&a));
  WB_CUDA(cudaEventCreate(&b));
  for (int i = 0; i < 100; ++i) launch_empty_kernel(s);
  constexpr int kLaunches = 1000;
  WB_CUDA(cudaEventRecord(a, s));
  for (int i = 0; i < kLaunches; ++i) launch_empty_kernel(s);
  WB_CUDA(cudaEventRecord(b, s));
  WB_CUDA(cudaEventSynchronize(b));
  float ms = 0;
  WB_CUDA(cudaEventElapsedTime(&ms, a, b));
  c.launch_us = 1e3 * ms / kLaunches;
  std::vector<double> round_trips;
  for (int i = 0; i < 200; ++i) {
    const double t0 = now_us();
    launch_empty_kernel(s);
    WB_CUDA(cudaStreamSynchronize(s));
    round_trips.push_back(now_us() - t0);
  }
  c.launch_sync_us = median_of(round_trips);
  WB_CUDA(cudaEventDestroy(a));
  WB_CUDA(cudaEventDestroy(b));
  WB_CUDA(cudaStreamDestroy(s));
  g_measuring_ceilings = false;
  return c;
}
}  // namespace

const Ceilings& measured_ceilings() {
  static const Ceilings c = measure_ceilings();
  return c;
}

// ---------------------------------------------------------------------------------------
// Bench.

Bench::Bench(BenchOptions options) : options_(std::move(options)) {
  if (options_.name.empty()) options_.name = "unnamed";
  // A non-blocking stream: work that escapes to the legacy default stream is not silently
  // ordered with ours, so the escape check (rule 4) can see it.
  WB_CUDA(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
  WB_CUDA(cudaEventCreate(&start_));
  WB_CUDA(cudaEventCreate(&stop_));
  if (options_.cache == Cache::Cold) {
    // Twice the L2's size evicts whatever the work left there (rule 5).
    flush_bytes_ = std::max<std::size_t>(2 * device_info().l2_bytes, std::size_t(8) << 20);
    WB_CUDA(cudaMalloc(&flush_buffer_, flush_bytes_));
  }
}

Bench::~Bench() {
  if (flush_buffer_) cudaFree(flush_buffer_);
  if (start_) cudaEventDestroy(start_);
  if (stop_) cudaEventDestroy(stop_);
  if (stream_) cudaStreamDestroy(stream_);
}

const char* l2_flush_method() {
  return test_environment("WB_L2_FLUSH") == "write" ? "write" : "write+read";
}

void flush_l2(void* buffer, std::size_t bytes, cudaStream_t stream) {
  // 0x01 bytes: every float of the buffer is a small positive number (see read_flush_kernel).
  WB_CUDA(cudaMemsetAsync(buffer, 0x01, bytes, stream));
  if (std::string(l2_flush_method()) == "write") return;
  read_flush_kernel<<<4 * device_info().sm_count, 256, 0, stream>>>(
      static_cast<const float4*>(buffer), bytes / sizeof(float4),
      static_cast<float*>(buffer));
  WB_CHECK_LAUNCH("read_flush_kernel");
}

void Bench::flush_l2() {
  if (flush_buffer_) wb::flush_l2(flush_buffer_, flush_bytes_, stream_);
}

double Bench::sample_device(const std::function<void(cudaStream_t)>& work) {
  flush_l2();
  const bool counting = ApiCounter::available();
  const std::uint64_t syncs_before = counting ? api_totals().syncs : 0;
  WB_CUDA(cudaEventRecord(start_, stream_));
  work(stream_);
  check_work_launch(options_.name);
  const std::uint64_t syncs = counting ? api_totals().syncs - syncs_before : 0;
  WB_CUDA(cudaEventRecord(stop_, stream_));
  WB_CUDA(cudaEventSynchronize(stop_));
  if (syncs > 0)
    throw TimingViolation(
        4, "rule 4 (no synchronization inside an event-timed region): '" + options_.name +
               "' called a synchronizing CUDA function " + std::to_string(syncs) +
               " time(s) while being timed\nhint: enqueue everything on the stream you are "
               "given and return; the harness synchronizes after the stop event.");
  float ms = 0;
  WB_CUDA(cudaEventElapsedTime(&ms, start_, stop_));
  return 1e3 * double(ms);
}

double Bench::sample_host(const std::function<void(cudaStream_t)>& work) {
  flush_l2();
  // Rule 3 for host clocks: the device is idle before the first read and done before the second.
  WB_CUDA(cudaDeviceSynchronize());
  const double t0 = now_us();
  work(stream_);
  check_work_launch(options_.name);
  WB_CUDA(cudaDeviceSynchronize());
  return now_us() - t0;
}

void Bench::check_escaped(const std::function<void(cudaStream_t)>& work, double median_us) {
  // Rule 4, second half: events on our stream only see work on our stream. If the host
  // waits much longer for the whole device than the events say, something ran elsewhere.
  const double launch_sync = g_measuring_ceilings ? 10.0 : measured_ceilings().launch_sync_us;
  double best_gap = 1e300, best_host = 0, best_event = 0;
  for (int trial = 0; trial < 3; ++trial) {
    WB_CUDA(cudaDeviceSynchronize());
    const double t0 = now_us();
    WB_CUDA(cudaEventRecord(start_, stream_));
    work(stream_);
    check_work_launch(options_.name);
    WB_CUDA(cudaEventRecord(stop_, stream_));
    WB_CUDA(cudaDeviceSynchronize());
    const double host_us = now_us() - t0;
    float ms = 0;
    WB_CUDA(cudaEventElapsedTime(&ms, start_, stop_));
    const double gap = host_us - 1e3 * ms;
    if (gap < best_gap) best_gap = gap, best_host = host_us, best_event = 1e3 * ms;
  }
  const double allowed = 20.0 + 2.0 * launch_sync;
  if (best_gap > allowed && best_gap > 0.5 * best_host) {
    std::ostringstream msg;
    msg << "rule 4 (time the work on the stream it runs on): '" << options_.name
        << "' took " << best_host << " us of host time around a device-wide synchronize but "
        << "only " << best_event << " us between events on the given stream (median "
        << median_us << " us): work escaped the stream and was not timed"
        << "\nhint: launch every kernel and copy with the cudaStream_t you are given "
           "(kernel<<<grid, block, smem, stream>>>, cudaMemcpyAsync(..., stream)); the "
           "default stream or a stream of your own runs outside the timed region.";
    throw TimingViolation(4, msg.str());
  }
}

Stats Bench::run(const std::function<void(cudaStream_t)>& work, const std::function<void()>& verify) {
  // Rule 9 first, outside any timed region.
  const Ceilings* ceilings = g_measuring_ceilings ? nullptr : &measured_ceilings();

  // Rule 2: an untimed first call (module loading, lazy allocation), then warmup.
  work(stream_);
  check_work_launch(options_.name);
  WB_CUDA(cudaStreamSynchronize(stream_));
  const double warm_start = now_us();
  for (int i = 0; i < options_.warmup_count || now_us() - warm_start < 1e3 * options_.warmup_ms; ++i) {
    flush_l2();
    work(stream_);
    check_work_launch(options_.name);
    if (i >= 100000) break;
  }
  WB_CUDA(cudaStreamSynchronize(stream_));

  // Rule 6: sample until the median is known to the noise target, within the caps.
  std::vector<double> samples;
  const double t_begin = now_us();
  bool converged = false;
  for (;;) {
    samples.push_back(options_.clock == Clock::Device ? sample_device(work) : sample_host(work));
    const double elapsed_ms = (now_us() - t_begin) / 1e3;
    const int n = int(samples.size());
    if (n >= options_.min_samples && elapsed_ms >= options_.min_time_ms) {
      const Stats partial = summarize(options_.name, samples, 0);
      if (median_relative_error(partial) <= options_.noise_target) {
        converged = true;
        break;
      }
    }
    if (n >= options_.max_samples || elapsed_ms >= options_.max_time_ms) break;
  }

  Stats s = summarize(options_.name, samples, options_.bytes);
  s.cache = options_.cache;
  s.clock = options_.clock;
  s.flops = options_.flops;
  s.converged = converged;

  if (options_.clock == Clock::Device && options_.check_escape) check_escaped(work, s.median_us);

  if (ceilings && options_.bytes > 0 && ceilings->copy_gbps > 0) {
    s.pct_of_peak = 100.0 * s.gbps / ceilings->copy_gbps;
    s.floor_us = options_.bytes / (ceilings->copy_gbps * 1e3);
    // Rule 8 holds the work to the fastest this GPU moved bytes while its ceilings were
    // measured: a copy, or a read-only stream (faster on HBM, and what a matvec mostly does).
    const double fastest_gbps = std::max(ceilings->copy_gbps, ceilings->read_gbps);
    const double plausible_floor_us = options_.bytes / (fastest_gbps * 1e3);
    // Data that fits in L2 and is timed hot may legitimately beat DRAM bandwidth, so that
    // case gets a wider (L2-sized) slack.
    const bool from_dram = options_.cache == Cache::Cold || options_.bytes > 2 * ceilings->l2_bytes;
    const double slack = from_dram ? options_.floor_slack : 5.0;
    if (options_.check_floor && s.median_us * slack < plausible_floor_us) {
      std::ostringstream msg;
      msg << "rule 8 (physically plausible): '" << options_.name << "' claims to move "
          << options_.bytes / 1e6 << " MB in " << s.median_us << " us, that is "
          << s.gbps << " GB/s, faster than this GPU moved data when its ceilings were measured "
          << "(copy " << ceilings->copy_gbps << " GB/s, read-only " << ceilings->read_gbps
          << " GB/s; floor " << plausible_floor_us << " us)"
          << "\nhint: the work skipped part of its job (an early return, a grid that covers "
             "only part of the data) or the byte count is wrong.";
      throw TimingViolation(8, msg.str());
    }
  }

  // Rule 7: the answer must still be right after timing, on fresh inputs.
  if (verify) verify();
  return s;
}

}  // namespace wb
