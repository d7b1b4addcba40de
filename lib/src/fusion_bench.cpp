#include "wb/fusion_bench.hpp"

#include <cstdio>
#include <iostream>
#include <utility>

#include "wb/not_implemented.hpp"

namespace wb {

FusionBench::FusionBench(std::string tag, std::string op, ResultsWriter& writer)
    : tag_(std::move(tag)), op_(std::move(op)), writer_(writer) {}

void FusionBench::measure(const std::string& variant, const std::string& impl,
                          const std::string& shape, BenchOptions options,
                          const std::function<void(cudaStream_t)>& work,
                          const std::function<void(cudaStream_t)>& verify, nlohmann::json extra) {
  std::cerr << tag_ << ": " << variant << " " << shape << "\n";
  options.name = op_ + " " + variant + " " + shape;
  Bench bench(options);
  try {
    const Stats s = verify ? bench.run(work, [&] { verify(bench.stream()); }) : bench.run(work);
    if (variant == "copy") copy_us_[shape] = s.median_us;
    if (variant == "unfused") unfused_us_[shape] = s.median_us;
    if (variant == "fused" && unfused_us_.count(shape))
      extra["speedup_vs_unfused"] = unfused_us_[shape] / s.median_us;
    // The ceiling at this size: a device copy of the same bytes, timed the same way.
    const double vs_copy = copy_us_.count(shape) ? copy_us_[shape] / s.median_us : 0.0;
    if (variant != "copy" && vs_copy > 0) extra["fraction_of_same_size_copy"] = vs_copy;
    writer_.add(variant, impl, shape, s, extra);
    rows_.push_back({shape, variant, s, vs_copy});
  } catch (const NotImplemented& e) {
    std::cerr << tag_ << ": " << variant << ": " << e.what() << " (skipped)\n";
  }
}

void FusionBench::print_table(const std::string& title, const std::string& shape_header) const {
  const double copy_gbps = measured_ceilings().copy_gbps;
  std::printf("%s, cold L2; measured copy ceiling %.0f GB/s\n", title.c_str(), copy_gbps);
  std::printf("%-12s %-8s %10s %10s %8s %13s\n", shape_header.c_str(), "variant", "median us",
              "GB/s", "% ceiling", "vs same copy");
  for (const Row& r : rows_)
    std::printf("%-12s %-8s %10.2f %10.0f %8.1f%% %12.1f%%\n", r.shape.c_str(),
                r.variant.c_str(), r.stats.median_us, r.stats.gbps,
                100.0 * r.stats.gbps / copy_gbps, 100.0 * r.vs_copy);
}

}  // namespace wb
