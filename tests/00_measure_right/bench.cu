// Chapter 00 bench: what this GPU's ceilings are, what naive timers report, and how your
// timer compares with the harness. Writes results/00_measure_right-<build>.json.
#include <CLI/CLI.hpp>

#include <chrono>
#include <iostream>

#include "support.hpp"
#include "timer.cuh"
#include "wb/buffer.hpp"
#include "wb/device.hpp"
#include "wb/check.hpp"
#include "wb/not_implemented.hpp"
#include "wb/results.hpp"
#include "wb/timing.hpp"

namespace {

__global__ void never_launched_before() {}

double host_us_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count();
}

// The first launch of a kernel pays for loading its module (CUDA loads lazily).
double first_launch_us(cudaStream_t s) {
  WB_CUDA(cudaStreamSynchronize(s));
  const auto t0 = std::chrono::steady_clock::now();
  never_launched_before<<<1, 1, 0, s>>>();
  WB_CHECK_LAUNCH("never_launched_before");
  WB_CUDA(cudaStreamSynchronize(s));
  return host_us_since(t0);
}

// What a host clock around an asynchronous launch reports: the launch, not the kernel.
double launch_only_us(double kernel_us, cudaStream_t s) {
  WB_CUDA(cudaStreamSynchronize(s));
  const auto t0 = std::chrono::steady_clock::now();
  wb::launch_spin_kernel(kernel_us * 1e3, s);
  const double us = host_us_since(t0);
  WB_CUDA(cudaStreamSynchronize(s));
  return us;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Chapter 00 bench: ceilings, timing traps, your timer vs the harness"};
  std::string out;
  bool quick = false;
  app.add_option("--out", out, "results file (default results/00_measure_right-" WB_BUILD_NAME ".json)");
  app.add_flag("--quick", quick, "fewer samples");
  CLI11_PARSE(app, argc, argv);
  if (!wb::has_cuda_device()) {
    std::cerr << "skipped: no CUDA device\n";
    return 77;
  }
  try {
    wb::ResultsWriter results("00_measure_right", WB_BUILD_NAME);
    const wb::Ceilings& c = wb::measured_ceilings();
    std::cerr << "ceilings: copy " << c.copy_gbps << " GB/s, launch " << c.launch_us
              << " us back to back, " << c.launch_sync_us << " us launch+sync\n";
    results.add_metrics("copy_bandwidth", "harness", "2x" + std::to_string(8 * wb::device_info().l2_bytes >> 20) + "MiB",
                        {{"gbps", c.copy_gbps}});
    results.add_metrics("launch_latency", "harness", "empty kernel",
                        {{"launch_us", c.launch_us}, {"launch_sync_us", c.launch_sync_us}});

    ch00::support::TestStream stream;
    results.add_metrics("first_launch", "trap", "empty kernel", {{"host_us", first_launch_us(stream.get())}});
    results.add_metrics("launch_only", "trap", "spin 1000us", {{"host_us", launch_only_us(1000, stream.get())}});

    // A 1 ms kernel and a 512 MiB read, timed by the harness and by the timer in this build.
    wb::BenchOptions o;
    o.cache = wb::Cache::Hot;
    if (quick) o.max_time_ms = 300;
    o.name = "spin 1000 us";
    wb::Bench spin_bench(o);
    const wb::Stats spin = spin_bench.run([](cudaStream_t s) { wb::launch_spin_kernel(1e6, s); });
    results.add("spin", "harness", "1000us", spin);
    wb::DeviceBuffer<float> src(std::size_t(128) << 20), dst(std::size_t(128) << 20);
    WB_CUDA(cudaMemset(src.data(), 0, src.bytes()));
    auto copy = [&](cudaStream_t s) {
      WB_CUDA(cudaMemcpyAsync(dst.data(), src.data(), src.bytes(), cudaMemcpyDeviceToDevice, s));
    };
    o.name = "copy 512 MiB";
    o.bytes = 2.0 * double(src.bytes());
    wb::Bench copy_bench(o);
    results.add("copy", "harness", "512MiB", copy_bench.run(copy));

    const ch00::TimerOptions topt{.warmup = 3, .samples = quick ? 11 : 51, .cold_cache = false};
    try {
      const double spin_ms = ch00::time_work_ms([](cudaStream_t s) { wb::launch_spin_kernel(1e6, s); },
                                                stream.get(), topt);
      results.add_metrics("spin", WB_BUILD_NAME, "1000us", {{"median_us", 1e3 * spin_ms}});
      const double copy_ms = ch00::time_work_ms(copy, stream.get(), topt);
      results.add_metrics("copy", WB_BUILD_NAME, "512MiB",
                          {{"median_us", 1e3 * copy_ms}, {"gbps", o.bytes / (copy_ms * 1e6)}});
      std::cerr << "your timer: spin " << spin_ms << " ms (harness " << spin.median_us / 1e3
                << "), copy " << copy_ms * 1e3 << " us\n";
    } catch (const wb::NotImplemented& e) {
      std::cerr << e.what() << " (your timer's rows are left out)\n";
    }
    const auto path = out.empty() ? results.default_path() : std::filesystem::path(out);
    results.write(path);
    std::cout << "wrote " << path.string() << "\n";
  } catch (const std::exception& e) {
    std::cerr << "bench 00 failed: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
