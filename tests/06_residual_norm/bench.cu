// bench_06_<build>: residual add + norm. For each shape, in one run: a device copy of the
// bytes the fused pass moves (the ceiling), the standalone residual add launched
// asynchronously, the same add called the way an integration did it (a synchronize after
// every call, host-timed), the unfused add + norm pair, and the fused pass, for LayerNorm and
// RMSNorm, fp32 and half. Writes results/06_residual_norm-<build>.json.
//
//   build/bin/bench_06_solution [--out FILE] [--quick]
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <CLI/CLI.hpp>
#include <functional>
#include <iostream>
#include <string>
#include <vector>

#include "add_norm.cuh"
#include "reference.hpp"
#include "wb/buffer.hpp"
#include "wb/check.hpp"
#include "wb/device.hpp"
#include "wb/fusion_bench.hpp"
#include "wb/results.hpp"
#include "wb/timing.hpp"

namespace {

struct Case {
  int rows, dim;
  ch06::Norm norm;
  const char* dtype;  // of delta and h: "fp32", "fp16", "bf16"
  // "4096x2560_layernorm_fp32": no spaces, so a lesson marker can select it.
  std::string name() const {
    return std::to_string(rows) + "x" + std::to_string(dim) +
           (norm == ch06::Norm::LayerNorm ? "_layernorm_" : "_rmsnorm_") + dtype;
  }
};

// The PyTorch anchors' shapes (4096x2560, 8192x768, LayerNorm fp32), llama's RMSNorm, and the
// half-precision versions.
const std::vector<Case> kCases = {
    {4096, 2560, ch06::Norm::LayerNorm, "fp32"}, {8192, 768, ch06::Norm::LayerNorm, "fp32"},
    {4096, 2560, ch06::Norm::RMSNorm, "fp32"},   {4096, 2560, ch06::Norm::LayerNorm, "fp16"},
    {4096, 2560, ch06::Norm::LayerNorm, "bf16"}, {8192, 768, ch06::Norm::LayerNorm, "fp16"}};
const std::vector<Case> kQuickCases = {{4096, 2560, ch06::Norm::LayerNorm, "fp32"},
                                       {4096, 2560, ch06::Norm::LayerNorm, "fp16"}};

template <typename T>
float round_to(float v) {
  if constexpr (std::is_same_v<T, __half>) return __half2float(__float2half_rn(v));
  else if constexpr (std::is_same_v<T, __nv_bfloat16>) return __bfloat162float(__float2bfloat16_rn(v));
  else return v;
}
template <typename T>
T narrow(float v) {
  if constexpr (std::is_same_v<T, __half>) return __float2half_rn(v);
  else if constexpr (std::is_same_v<T, __nv_bfloat16>) return __float2bfloat16_rn(v);
  else return v;
}
template <typename T>
float widen(T v) {
  if constexpr (std::is_same_v<T, __half>) return __half2float(v);
  else if constexpr (std::is_same_v<T, __nv_bfloat16>) return __bfloat162float(v);
  else return v;
}

template <typename T>
void bench_case(const Case& c, bool quick, const std::string& build, wb::FusionBench& bench) {
  const std::size_t n = std::size_t(c.rows) * c.dim;
  wb::DeviceBuffer<float> x(n), r(n), weight(c.dim), bias(c.dim);
  wb::DeviceBuffer<T> delta(n), h(n);
  ch06::reference::Problem problem;
  const auto upload = [&](const std::string& label) {
    problem = ch06::reference::make_problem(c.rows, c.dim, c.norm, ch06::reference::Data::Typical,
                                            label, &round_to<T>);
    std::vector<T> d(n);
    for (std::size_t i = 0; i < n; ++i) d[i] = narrow<T>(problem.delta[i]);
    x.upload(problem.x);
    delta.upload(d);
    weight.upload(problem.weight);
    bias.upload(problem.bias);
  };
  upload("ch06/bench/" + c.name());
  const ch06::NormParams params{c.norm, weight.data(),
                                c.norm == ch06::Norm::LayerNorm ? bias.data() : nullptr, 1e-5f};

  // What the fused pass must move: x and r in fp32, delta and h in T.
  const double fused_bytes = double(n) * (2 * sizeof(float) + 2 * sizeof(T));
  const double add_bytes = double(n) * (2 * sizeof(float) + sizeof(T));
  wb::BenchOptions options;
  options.bytes = fused_bytes;
  if (quick) {
    options.min_samples = 10;
    options.min_time_ms = 10;
    options.max_time_ms = 500;
  }
  const wb::Tolerance tol = std::is_same_v<T, float>   ? ch06::reference::kHFp32Tol
                            : std::is_same_v<T, __half> ? ch06::reference::kHFp16Tol
                                                        : ch06::reference::kHBf16Tol;
  // Rule 7: each variant is re-checked on fresh inputs after timing.
  const auto verify_with = [&](const std::string& variant,
                               const std::function<void(cudaStream_t)>& work, bool check_h) {
    return [&, variant, work, check_h](cudaStream_t stream) {
      upload("ch06/bench/verify/" + variant + "/" + c.name());
      r.poison(stream);
      h.poison(stream);
      work(stream);
      WB_CUDA(cudaStreamSynchronize(stream));
      std::string failure = ch06::reference::check_residual(problem, r.download(), variant + " (bench)");
      if (failure.empty() && check_h) {
        const std::vector<T> got = h.download();
        std::vector<float> got_f(n);
        for (std::size_t i = 0; i < n; ++i) got_f[i] = widen(got[i]);
        failure = ch06::reference::check_normalized(problem, ch06::reference::residual(problem),
                                                    got_f, tol, variant + " (bench)");
      }
      if (!failure.empty()) throw std::runtime_error(failure);
    };
  };
  const nlohmann::json extra = {{"rows", c.rows}, {"dim", c.dim},
                                {"norm", ch06::reference::norm_name(c.norm)},
                                {"dtype", c.dtype}, {"fused_bytes", fused_bytes},
                                {"add_bytes", add_bytes}};
  // The copy moves the fused pass's bytes: read fused_bytes / 2, write fused_bytes / 2.
  wb::DeviceBuffer<unsigned char> copy_src(std::size_t(fused_bytes / 2)),
      copy_dst(std::size_t(fused_bytes / 2));
  const auto copy = [&](cudaStream_t s) {
    WB_CUDA(cudaMemcpyAsync(copy_dst.data(), copy_src.data(), copy_src.bytes(),
                            cudaMemcpyDeviceToDevice, s));
  };
  const auto add = [&](cudaStream_t s) { ch06::residual_add(x.data(), delta.data(), r.data(), n, s); };
  const auto add_sync = [&](cudaStream_t s) {
    ch06::residual_add(x.data(), delta.data(), r.data(), n, s);
    WB_CUDA(cudaStreamSynchronize(s));  // what a per-call synchronize costs
  };
  const auto unfused = [&](cudaStream_t s) {
    ch06::residual_add(x.data(), delta.data(), r.data(), n, s);
    ch06::norm_rows(r.data(), h.data(), c.rows, c.dim, params, s);
  };
  const auto fused = [&](cudaStream_t s) {
    ch06::add_norm_fused(x.data(), delta.data(), r.data(), h.data(), c.rows, c.dim, params, s);
  };
  bench.measure("copy", "baseline", c.name(), options, copy, {}, extra);
  wb::BenchOptions add_options = options;
  add_options.bytes = add_bytes;
  bench.measure("add", build, c.name(), add_options, add, verify_with("add", add, false), extra);
  wb::BenchOptions sync_options = add_options;
  sync_options.clock = wb::Clock::Host;  // the synchronize is part of what is measured
  sync_options.check_escape = false;
  bench.measure("add_sync_per_call", build, c.name(), sync_options, add_sync,
                verify_with("add_sync_per_call", add_sync, false), extra);
  bench.measure("unfused", build, c.name(), options, unfused, verify_with("unfused", unfused, true), extra);
  bench.measure("fused", build, c.name(), options, fused, verify_with("fused", fused, true), extra);
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Chapter 06 bench: residual add + norm, unfused vs fused, and the add alone"};
  std::string out;
  bool quick = false;
  app.add_option("--out", out, "results file (default: results/06_residual_norm-<build>.json)");
  app.add_flag("--quick", quick, "fewer shapes, fewer samples");
  CLI11_PARSE(app, argc, argv);

  if (!wb::has_cuda_device()) {
    std::cerr << "bench_06: skipped: no CUDA device\n";
    return 77;
  }
  const std::string build = WB_BUILD_NAME;
  wb::ResultsWriter writer("06_residual_norm", build);
  wb::FusionBench bench("bench_06", "add_norm", writer);
  try {
    for (const Case& c : quick ? kQuickCases : kCases) {
      const std::string dtype = c.dtype;
      if (dtype == "fp32") bench_case<float>(c, quick, build, bench);
      else if (dtype == "fp16") bench_case<__half>(c, quick, build, bench);
      else bench_case<__nv_bfloat16>(c, quick, build, bench);
    }
  } catch (const std::exception& e) {
    std::cerr << "bench_06: " << e.what() << "\n";
    return 1;
  }
  bench.print_table("chapter 06 residual add + norm (" + build + " build)", "shape");
  const std::string path = out.empty() ? writer.default_path().string() : out;
  writer.write(path);
  std::cerr << "bench_06: wrote " << path << "\n";
  return 0;
}
