// The timing harness on a real GPU: its ceilings are plausible, it times known durations
// right, and each rule it enforces fires on work that breaks it.
#include <cuda_runtime.h>

#include <algorithm>
#include <span>
#include <vector>

#include "wb/api_counter.hpp"
#include "wb/buffer.hpp"
#include "wb/check.hpp"
#include "wb/testing.hpp"
#include "wb/timing.hpp"

namespace {

__global__ void noop() {}

// Counts the elements of data that are not `expected` (into *wrong).
__global__ void count_not_equal(const float* data, std::size_t n, float expected, unsigned* wrong) {
  unsigned mine = 0;
  for (std::size_t i = blockIdx.x * std::size_t(blockDim.x) + threadIdx.x; i < n;
       i += std::size_t(gridDim.x) * blockDim.x)
    mine += data[i] != expected;
  if (mine > 0) atomicAdd(wrong, mine);
}

// Uploads `rounds` fills of a 64 MiB buffer (fill r holds the value r + 1) and, right after
// each, counts on a non-blocking stream the elements that do not hold it yet. Returns how
// many rounds saw at least one.
template <typename Upload>
int rounds_that_saw_old_bytes(int rounds, Upload upload) {
  const std::size_t n = std::size_t(16) << 20;
  wb::DeviceBuffer<float> data(n);
  wb::DeviceBuffer<unsigned> wrong(1);
  std::vector<float> host(n);
  cudaStream_t stream = nullptr;
  WB_CUDA(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  int stale = 0;
  for (int r = 0; r < rounds; ++r) {
    std::fill(host.begin(), host.end(), float(r + 1));
    WB_CUDA(cudaMemsetAsync(wrong.data(), 0, sizeof(unsigned), stream));
    WB_CUDA(cudaStreamSynchronize(stream));
    upload(data, host);
    count_not_equal<<<264, 256, 0, stream>>>(data.data(), n, float(r + 1), wrong.data());
    WB_CHECK_LAUNCH("count_not_equal");
    unsigned seen = 0;
    WB_CUDA(cudaMemcpyAsync(&seen, wrong.data(), sizeof seen, cudaMemcpyDeviceToHost, stream));
    WB_CUDA(cudaStreamSynchronize(stream));
    stale += seen > 0;
  }
  WB_CUDA(cudaStreamDestroy(stream));
  return stale;
}

wb::BenchOptions quick(const std::string& name) {
  wb::BenchOptions o;
  o.name = name;
  o.min_samples = 10;
  o.min_time_ms = 5;
  o.max_time_ms = 500;
  return o;
}

}  // namespace

TEST_CASE("ceilings: copy bandwidth is plausible for this GPU's memory") {
  WB_REQUIRE_GPU();
  const auto& c = wb::measured_ceilings();
  const auto& d = wb::device_info();
  // Theoretical DRAM bandwidth: memory clock x bus width x 2 (double data rate).
  const double theoretical_gbps = 2.0 * d.mem_clock_mhz * 1e6 * (d.mem_bus_bits / 8.0) / 1e9;
  wb::testing::record_metric("copy_gbps", c.copy_gbps);
  wb::testing::record_metric("read_gbps", c.read_gbps);
  wb::testing::record_metric("theoretical_gbps", theoretical_gbps);
  wb::testing::record_metric("launch_us", c.launch_us);
  wb::testing::record_metric("launch_sync_us", c.launch_sync_us);
  MESSAGE("copy " << c.copy_gbps << " GB/s, read-only " << c.read_gbps << " GB/s, of " << theoretical_gbps << " theoretical; launch "
                  << c.launch_us << " us back to back, " << c.launch_sync_us << " us with a sync");
  CHECK(c.copy_gbps > 0.6 * theoretical_gbps);
  CHECK(c.copy_gbps < 1.05 * theoretical_gbps);
  CHECK(c.read_gbps > 0.6 * theoretical_gbps);
  CHECK(c.read_gbps < 1.05 * theoretical_gbps);
  CHECK(c.launch_us > 0.3);
  CHECK(c.launch_us < 20);
  CHECK(c.launch_sync_us >= c.launch_us);
}

TEST_CASE("a kernel of known duration is timed to within 2% + one launch") {
  WB_REQUIRE_GPU();
  // Events bracket the launch too, so the launch latency is part of any single-kernel time.
  const double launch = wb::measured_ceilings().launch_sync_us;
  for (double us : {50.0, 500.0, 2000.0}) {
    wb::Bench bench(quick("spin " + std::to_string(us) + " us"));
    const wb::Stats s = bench.run([&](cudaStream_t st) { wb::launch_spin_kernel(us * 1e3, st); });
    MESSAGE("spin " << us << " us measured " << s.median_us << " us");
    CHECK(s.median_us >= us);
    CHECK(s.median_us <= us * 1.02 + launch);
    CHECK(s.min_us <= s.median_us);
    CHECK(s.max_us >= s.median_us);
  }
}

TEST_CASE("host clock: synchronizes around the work") {
  WB_REQUIRE_GPU();
  auto o = quick("spin 300 us, host clock");
  o.clock = wb::Clock::Host;
  wb::Bench bench(o);
  const wb::Stats s = bench.run([&](cudaStream_t st) { wb::launch_spin_kernel(300e3, st); });
  CHECK(s.median_us >= 300);
  CHECK(s.median_us < 300 + 100);
}

TEST_CASE("rule 4: work launched on another stream is caught") {
  WB_REQUIRE_GPU();
  cudaStream_t other;
  WB_CUDA(cudaStreamCreateWithFlags(&other, cudaStreamNonBlocking));
  wb::Bench bench(quick("escaping work"));
  CHECK_THROWS_WITH_AS(
      bench.run([&](cudaStream_t) { wb::launch_spin_kernel(200e3, other); }),
      doctest::Contains("rule 4"), wb::TimingViolation);
  WB_CUDA(cudaStreamSynchronize(other));
  WB_CUDA(cudaStreamDestroy(other));
}

TEST_CASE("rule 4: a synchronize inside the timed region is caught") {
  WB_REQUIRE_GPU();
  if (!wb::ApiCounter::available()) {
    wb::testing::mark_skipped("skipped: CUPTI unavailable: " + wb::ApiCounter::unavailable_reason());
    return;
  }
  wb::Bench bench(quick("synchronizing work"));
  CHECK_THROWS_WITH_AS(bench.run([&](cudaStream_t st) {
                         wb::launch_spin_kernel(20e3, st);
                         WB_CUDA(cudaStreamSynchronize(st));
                       }),
                       doctest::Contains("rule 4"), wb::TimingViolation);
}

TEST_CASE("rule 8: a time below the physical floor is rejected") {
  WB_REQUIRE_GPU();
  auto o = quick("claims 4 GB in a 10 us kernel");
  o.bytes = 4e9;
  wb::Bench bench(o);
  CHECK_THROWS_WITH_AS(bench.run([&](cudaStream_t st) { wb::launch_spin_kernel(10e3, st); }),
                       doctest::Contains("rule 8"), wb::TimingViolation);
}

TEST_CASE("rule 5: cold timing of L2-resident data is slower than hot") {
  WB_REQUIRE_GPU();
  // 512 dependent loads that fit in L2: hot, each hits L2; cold, each goes to device memory.
  const wb::LatencyChain chain(512);
  auto work = [&](cudaStream_t st) { chain.launch(st); };
  auto o = quick("pointer chase in L2");
  o.cache = wb::Cache::Hot;
  wb::Bench hot(o);
  o.cache = wb::Cache::Cold;
  wb::Bench cold(o);
  const double hot_us = hot.run(work).median_us;
  const double cold_us = cold.run(work).median_us;
  wb::testing::record_metric("hot_us", hot_us);
  wb::testing::record_metric("cold_us", cold_us);
  MESSAGE("hot " << hot_us << " us, cold " << cold_us << " us (" << chain.steps() << " dependent loads)");
  CHECK(cold_us > 1.5 * hot_us);
}

TEST_CASE("rule 7: verify runs after timing; rule 1: a bad launch fails loudly") {
  WB_REQUIRE_GPU();
  wb::Bench bench(quick("verify"));
  int verified = 0;
  bench.run([&](cudaStream_t st) { wb::launch_spin_kernel(5e3, st); }, [&] { ++verified; });
  CHECK(verified == 1);
  wb::Bench bad(quick("bad launch"));
  CHECK_THROWS_AS(bad.run([&](cudaStream_t st) { noop<<<1, 2048, 0, st>>>(); /* 2048 threads: invalid */ }),
                  wb::CudaError);
}

TEST_CASE("API counter: counts allocations, copies by direction and synchronizations") {
  WB_REQUIRE_GPU();
  if (!wb::ApiCounter::available()) {
    wb::testing::mark_skipped("skipped: CUPTI unavailable: " + wb::ApiCounter::unavailable_reason());
    return;
  }
  std::vector<float> host(1000, 1.0f);
  wb::ApiCounter counter;
  float* d = nullptr;
  WB_CUDA(cudaMalloc(&d, 4000));
  WB_CUDA(cudaMemcpy(d, host.data(), 4000, cudaMemcpyHostToDevice));
  WB_CUDA(cudaMemcpy(host.data(), d, 2000, cudaMemcpyDefault));
  WB_CUDA(cudaDeviceSynchronize());
  WB_CUDA(cudaFree(d));
  const wb::ApiCounts c = counter.counts();
  MESSAGE(c.summary());
  CHECK(c.mallocs == 1);
  CHECK(c.frees == 1);
  CHECK(c.memcpys == 2);
  CHECK(c.bytes_h2d == 4000);
  CHECK(c.bytes_d2h == 2000);
  CHECK(c.syncs == 1);
}

TEST_CASE("ElapsedTimeOverride: cudaEventElapsedTime hands back the replacement while it lives") {
  WB_REQUIRE_GPU();
  if (!wb::ApiCounter::available()) {
    wb::testing::mark_skipped("skipped: CUPTI unavailable: " + wb::ApiCounter::unavailable_reason());
    return;
  }
  cudaEvent_t start = nullptr, stop = nullptr;
  WB_CUDA(cudaEventCreate(&start));
  WB_CUDA(cudaEventCreate(&stop));
  WB_CUDA(cudaEventRecord(start));
  noop<<<1, 1>>>();
  WB_CUDA(cudaEventRecord(stop));
  WB_CUDA(cudaEventSynchronize(stop));
  float real = -1, replaced = -1, after = -1, seen = -1;
  WB_CUDA(cudaEventElapsedTime(&real, start, stop));
  long long calls = 0;
  {
    const wb::ElapsedTimeOverride override([&](long long call, float reading) {
      seen = reading;
      return call == 0 ? 42.0f : reading;
    });
    WB_CUDA(cudaEventElapsedTime(&replaced, start, stop));
    calls = override.calls();
  }
  WB_CUDA(cudaEventElapsedTime(&after, start, stop));
  WB_CUDA(cudaEventDestroy(start));
  WB_CUDA(cudaEventDestroy(stop));
  CHECK(replaced == 42.0f);
  CHECK(seen == real);  // the replacement was given the real reading
  CHECK(calls == 1);
  CHECK(after == real);  // and only while it lived
}

TEST_CASE("an upload has landed when it returns, also for work on a non-blocking stream") {
  WB_REQUIRE_GPU();
  // A plain cudaMemcpy from pageable memory may return before its DMA is done, and nothing
  // orders a non-blocking stream after it: how often that shows on this machine is printed,
  // not asserted (it depends on the load). The harness's upload must never show it.
  constexpr int kRounds = 16;
  const int raw = rounds_that_saw_old_bytes(kRounds, [](wb::DeviceBuffer<float>& data, const std::vector<float>& host) {
    WB_CUDA(cudaMemcpy(data.data(), host.data(), data.bytes(), cudaMemcpyHostToDevice));
  });
  // DeviceBuffer::upload, as GuardedBuffer's and every test's, is wb::upload_bytes.
  const int harness = rounds_that_saw_old_bytes(
      kRounds, [](wb::DeviceBuffer<float>& data, const std::vector<float>& host) { data.upload(host); });
  wb::testing::record_metric("raw_cudaMemcpy_rounds_stale", raw);
  MESSAGE("a kernel on a non-blocking stream right after a 64 MiB upload saw old bytes in " << raw << " of "
          << kRounds << " rounds after cudaMemcpy, " << harness << " after DeviceBuffer::upload");
  CHECK_MESSAGE(harness == 0, "DeviceBuffer::upload returned before its bytes were on the device");
}
