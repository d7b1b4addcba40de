#pragma once
// The timing harness: the one way the workbook times GPU work. DESIGN.md's nine rules,
// in one object:
//
//   wb::Bench bench({.name = "softmax fused 16x151936", .bytes = 2.0 * rows * cols * 4});
//   wb::Stats s = bench.run([&](cudaStream_t stream) { softmax(x, y, rows, cols, stream); });
//
//  1. every launch is followed by cudaGetLastError; a failure throws wb::CudaError;
//  2. an untimed first call, then warmup by count and by time;
//  3. Clock::Device times with events recorded on the stream the work is given;
//     Clock::Host (for work that is about host<->device copies) synchronizes the device
//     before both clock reads;
//  4. nothing may synchronize inside an event-timed region (counted with CUPTI when it is
//     available), and work that escapes the stream is caught by comparing event time with
//     host time around a device-wide synchronize;
//  5. Cache::Cold flushes L2 before each sample, outside the timed region: a buffer twice
//     the L2's size is written, then read back, so L2 holds only clean lines of it
//     (wb::flush_l2; see there why the read matters);
//  6. samples until the median is stable (min samples and time, noise target, hard caps);
//     reports median/min/max/noise/samples/GB/s/% of the measured peak;
//  7. run(work, verify) calls verify() after timing: the test re-checks its output on fresh
//     inputs, so a kernel that skips work or replays a cached answer fails;
//  8. a median below the physical floor (bytes / measured copy bandwidth, with slack) is
//     rejected as implausible;
//  9. the ceilings (device copy bandwidth, launch latency) are measured on the GPU at hand.
// A broken rule throws wb::TimingViolation whose message names the rule.
#include <cuda_runtime.h>

#include <functional>
#include <stdexcept>
#include <string>
#include <vector>

namespace wb {

enum class Cache { Hot, Cold };
enum class Clock { Device, Host };
const char* to_string(Cache);
const char* to_string(Clock);

struct BenchOptions {
  std::string name;
  double bytes = 0;               // bytes the work must move through device memory
  double flops = 0;               // optional: floating-point operations
  Cache cache = Cache::Cold;
  Clock clock = Clock::Device;
  int warmup_count = 3;           // after the untimed first call
  double warmup_ms = 20;
  int min_samples = 20;
  double min_time_ms = 50;
  double noise_target = 0.005;    // stop when the median's relative standard error is below
  int max_samples = 2000;
  double max_time_ms = 3000;
  bool check_floor = true;        // rule 8
  bool check_escape = true;       // rule 4
  double floor_slack = 1.10;      // allow 10% over the measured copy bandwidth
};

struct Stats {
  std::string name;
  Cache cache = Cache::Cold;
  Clock clock = Clock::Device;
  double median_us = 0, min_us = 0, max_us = 0, mean_us = 0, p25_us = 0, p75_us = 0;
  double noise = 0;               // robust relative spread: 1.4826 * MAD / median
  int samples = 0;
  bool converged = false;         // noise target reached before a cap
  double bytes = 0, flops = 0;
  double gbps = 0;                // bytes / median
  double pct_of_peak = 0;         // gbps / measured copy bandwidth * 100
  double floor_us = 0;            // bytes / measured copy bandwidth
  std::vector<double> samples_us; // every sample, in order
};

// Measured once per process on the current device (rule 9).
struct Ceilings {
  double copy_gbps = 0;           // best of cudaMemcpyAsync D2D and a vectorized copy kernel,
                                  // counting bytes read + bytes written
  double read_gbps = 0;           // a read-only float4 kernel (faster than a copy on HBM)
  double launch_us = 0;           // device time per launch of an empty kernel, back to back
  double launch_sync_us = 0;      // host time of launch + synchronize, one empty kernel
  double l2_bytes = 0;
};
const Ceilings& measured_ceilings();

class TimingViolation : public std::runtime_error {
 public:
  TimingViolation(int rule, const std::string& message)
      : std::runtime_error(message), rule_(rule) {}
  int rule() const { return rule_; }

 private:
  int rule_;
};

class Bench {
 public:
  explicit Bench(BenchOptions options);
  ~Bench();
  Bench(const Bench&) = delete;
  Bench& operator=(const Bench&) = delete;

  // Times `work`, which must enqueue everything on the stream it is given. `verify`, when
  // given, runs after timing (rule 7) and should throw or fail the test on a wrong answer.
  Stats run(const std::function<void(cudaStream_t)>& work,
            const std::function<void()>& verify = {});
  cudaStream_t stream() const { return stream_; }
  const BenchOptions& options() const { return options_; }

 private:
  void flush_l2();
  double sample_device(const std::function<void(cudaStream_t)>& work);
  double sample_host(const std::function<void(cudaStream_t)>& work);
  void check_escaped(const std::function<void(cudaStream_t)>& work, double median_us);

  BenchOptions options_;
  cudaStream_t stream_ = nullptr;
  cudaEvent_t start_ = nullptr, stop_ = nullptr;
  void* flush_buffer_ = nullptr;
  std::size_t flush_bytes_ = 0;
};

// Evicts the L2 cache, in stream order, using `buffer` (at least twice the L2's size).
// The buffer is written and then read back: the write evicts whatever the last sample left
// (its dirty lines are written back now, outside the timed region), and the read leaves L2
// full of clean lines. A write-only flush, as nvbench and Triton's do_bench use, leaves L2
// full of dirty lines whose write-back the *next timed kernel* pays for (the same-size copy
// entries of data/results/05_fused_gelu-solution.json and of write-flush/ beside it show by
// how much; docs/DESIGN-NOTES.md). WB_L2_FLUSH=write selects the write-only flush, to
// reproduce figures measured that way.
void flush_l2(void* buffer, std::size_t bytes, cudaStream_t stream);
// "write+read" (the default) or "write" (WB_L2_FLUSH=write); recorded in every results file.
const char* l2_flush_method();

// Summary statistics of a list of samples (exposed for tests and for chapter 00).
Stats summarize(const std::string& name, std::vector<double> samples_us, double bytes);
double median_of(std::vector<double> values);

// A kernel that spins on the global timer for `ns` nanoseconds (a kernel of known duration).
void launch_spin_kernel(double ns, cudaStream_t stream);
// An empty kernel (launch latency).
void launch_empty_kernel(cudaStream_t stream);

// A chain of `steps` indices 16 KiB apart in device memory (steps x 16 KiB, well inside L2
// for a few hundred steps). launch() has one thread follow it: each load waits for the one
// before, so the time is steps x the latency of wherever the chain is, L2 when hot and
// device memory after a flush, several times slower. The cold-cache tests' probe: a
// streaming read is a poor one, as it is nearly as fast from device memory as from L2.
class LatencyChain {
 public:
  explicit LatencyChain(int steps);
  ~LatencyChain();
  LatencyChain(const LatencyChain&) = delete;
  LatencyChain& operator=(const LatencyChain&) = delete;
  void launch(cudaStream_t stream) const;
  int steps() const { return steps_; }

 private:
  int steps_;
  unsigned* chain_ = nullptr;
  unsigned* sink_ = nullptr;
};

}  // namespace wb
