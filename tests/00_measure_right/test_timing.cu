// Chapter 00, timing: your timer on real memory-bound work, beside the workbook's harness,
// hot and cold.
#include <cstdio>
#include <string>
#include <vector>

#include "support.hpp"
#include "timer.cuh"
#include "wb/buffer.hpp"
#include "wb/check.hpp"
#include "wb/rubric.hpp"
#include "wb/testing.hpp"
#include "wb/timing.hpp"

using ch00::support::TestStream;

namespace {

__global__ void sum_reduce_kernel(const float4* __restrict__ in, std::size_t n, float* out) {
  float acc = 0;
  for (std::size_t i = blockIdx.x * std::size_t(blockDim.x) + threadIdx.x; i < n;
       i += std::size_t(gridDim.x) * blockDim.x)
    acc += in[i].x + in[i].y + in[i].z + in[i].w;
  atomicAdd(out, acc);
}

// Reads `n4` float4s once: memory-bound work whose time depends on where the data is.
struct ReadWork {
  explicit ReadWork(std::size_t bytes) : in(bytes / sizeof(float4)), out(1) {
    WB_CUDA(cudaMemset(in.data(), 0, in.bytes()));
  }
  double bytes_read() const { return double(in.bytes()); }
  ch00::Work work() {
    return [this](cudaStream_t s) {
      ch00::support::call_log().order += 'W';
      sum_reduce_kernel<<<wb::device_info().sm_count * 4, 256, 0, s>>>(in.data(), in.size(), out.data());
      WB_CHECK_LAUNCH("sum_reduce_kernel");
    };
  }
  wb::DeviceBuffer<float4> in;
  wb::DeviceBuffer<float> out;
};

// 128 dependent loads that fit in L2 (wb::LatencyChain): hot repeats find them in L2, cold
// ones in device memory, several times slower.
struct ChaseWork {
  wb::LatencyChain chain{128};
  double bytes_read() const { return 0; }  // latency-bound: a bandwidth would mean nothing
  ch00::Work work() {
    return [this](cudaStream_t s) {
      ch00::support::call_log().order += 'W';
      chain.launch(s);
    };
  }
};

template <class AnyWork>
double harness_us(AnyWork& w, wb::Cache cache) {
  wb::BenchOptions o;
  o.name = std::string("reference timing, ") + wb::to_string(cache);
  o.bytes = w.bytes_read();
  o.cache = cache;
  wb::Bench bench(o);
  auto work = w.work();
  return bench.run(work).median_us;
}

// How many of the work calls were immediately preceded by a flush.
int flushed_calls(const std::string& order) {
  int n = 0;
  for (std::size_t i = 1; i < order.size(); ++i) n += order[i] == 'W' && order[i - 1] == 'F';
  return n;
}

}  // namespace

TEST_CASE("flushes L2 before every sample when cold timing is asked (rule 5)") {
  WB_REQUIRE_GPU();
  TestStream stream;
  // Hot repeats find the chain in L2, cold ones in device memory.
  ChaseWork w;
  const double hot_us = harness_us(w, wb::Cache::Hot);
  const double cold_us = harness_us(w, wb::Cache::Cold);

  ch00::support::reset_log(stream.get());
  const ch00::TimerOptions opt{.warmup = 3, .samples = 15, .cold_cache = true};
  const double got_us = 1e3 * ch00::time_work_ms(w.work(), stream.get(), opt);
  const auto& log = ch00::support::call_log();
  wb::testing::record_metric("reported_us", got_us);
  wb::testing::record_metric("harness_cold_us", cold_us);
  wb::testing::record_metric("harness_hot_us", hot_us);
  MESSAGE("cold: yours " << got_us << " us, harness " << cold_us << " us (hot " << hot_us << " us)");

  if (flushed_calls(log.order) < opt.samples)
    FAIL("rule 5 (cold cache): options.cold_cache was true, but only "
         << flushed_calls(log.order) << " of your " << opt.samples
         << " samples came right after flush_l2. Without it, each sample reads the data the "
            "previous call left in L2: you reported "
         << got_us << " us, the harness measures " << cold_us << " us cold and " << hot_us
         << " us hot.\nhint: if (options.cold_cache) flush_l2(stream); before recording the "
            "start event of every sample.");
  if (log.flushes_on_other_streams > 0)
    FAIL("rule 5: flush_l2 was called on another stream, so it may run during the timed work."
         "\nhint: flush_l2(stream) with the work's stream.");
  // The time itself: close to the harness's cold time, and not the hot one.
  if (cold_us > 1.3 * hot_us && got_us < 0.85 * cold_us)
    FAIL("rule 5 (cold cache): you reported " << got_us << " us; cold is " << cold_us
                                              << " us, hot " << hot_us << " us.");
  if (got_us > 1.25 * cold_us + 3)
    FAIL("you reported " << got_us << " us, the harness " << cold_us
                         << " us cold: the flush is probably inside your timed region.\n"
                            "hint: flush first, then record the start event.");
}

TEST_CASE("agrees with the harness on a memory-bound kernel") {
  WB_REQUIRE_GPU();
  TestStream stream;
  ReadWork w(std::size_t(512) << 20);  // far larger than L2
  const double harness = harness_us(w, wb::Cache::Hot);
  ch00::support::reset_log(stream.get());
  const ch00::TimerOptions opt{.warmup = 3, .samples = 21, .cold_cache = false};
  const double got_us = 1e3 * ch00::time_work_ms(w.work(), stream.get(), opt);
  wb::testing::record_metric("reported_us", got_us);
  wb::testing::record_metric("harness_us", harness);
  wb::testing::record_metric("ratio_to_harness", got_us / harness);
  MESSAGE("512 MiB read: yours " << got_us << " us, harness " << harness << " us");
  CHECK_MESSAGE(got_us == doctest::Approx(harness).epsilon(wb::pass_mark("00", "ratio_to_harness", "max") - 1),  // rubric
                "your timer reported " << got_us << " us, the harness " << harness
                                       << " us for the same 512 MiB read (more than 5% apart)");
}
