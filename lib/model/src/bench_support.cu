#include "wb/model/bench_support.hpp"

#include <cstdio>
#include <iostream>

#include "wb/api_counter.hpp"
#include "wb/buffer.hpp"
#include "wb/check.hpp"
#include "wb/random.hpp"
#include "wb/model/generate.hpp"
#include "wb/model/transformer.hpp"

namespace wb::model {

std::vector<MatvecShape> bandwidth_shapes() {
  return {{32000, 4096}, {11008, 4096}, {4096, 4096}, {768, 768}};
}

void bench_matvec_bandwidth(ResultsWriter& writer, const DeviceMatvec& kernel, const std::string& variant,
                            const std::string& impl, Cache cache, const std::vector<MatvecShape>& shapes) {
  const double copy_gbps = measured_ceilings().copy_gbps;
  for (const MatvecShape& s : shapes) {
    const std::string label = "bench/matvec/" + s.name();
    const std::vector<float> W_host =
        random_uniform(std::size_t(s.d) * std::size_t(s.n), -1.0f, 1.0f, label + "/W");
    std::vector<float> x_host = random_uniform(std::size_t(s.n), -1.0f, 1.0f, label + "/x");
    DeviceBuffer<float> W{std::span<const float>(W_host)}, x{std::span<const float>(x_host)},
        y{std::size_t(s.d)};
    BenchOptions options;
    options.name = variant + " " + s.name();
    options.bytes = 4.0 * (double(s.d) * s.n + s.n + s.d);
    options.cache = cache;
    Bench bench(options);
    auto verify = [&] {
      x_host = random_uniform(std::size_t(s.n), -1.0f, 1.0f, label + "/x-after");
      x.upload(x_host);
      y.poison();
      kernel(y.data(), x.data(), W.data(), s.n, s.d, nullptr);
      WB_CUDA(cudaDeviceSynchronize());
      const CompareResult r = compare(y.download(), matvec_reference(W_host, x_host, s.n, s.d),
                                      {.chapter = "bench", .what = options.name,
                                       .shape = {std::size_t(s.d)}, .tol = matvec_tolerance(s.n)});
      if (!r.ok) throw std::runtime_error(r.message);
    };
    const Stats st = bench.run(
        [&](cudaStream_t stream) { kernel(y.data(), x.data(), W.data(), s.n, s.d, stream); }, verify);
    writer.add(variant, impl, s.name(), st, {{"fraction_of_copy", st.gbps / copy_gbps}});
    std::printf("  %-18s %-12s %-5s %10.2f us %8.0f GB/s %6.1f%% of copy (%.0f GB/s)\n", variant.c_str(),
                s.name().c_str(), to_string(cache), st.median_us, st.gbps, 100 * st.gbps / copy_gbps,
                copy_gbps);
    std::fflush(stdout);
  }
}

nlohmann::json measure_rung(const Model& model, Matmul& backend, int threads, int steps,
                            std::optional<Protocol> protocol, const DeviceMatvec& kernel) {
  Transformer transformer(model, backend, threads);
  steps = std::min(steps, model.config().seq_len - 1);  // one position left for the API count
  const Throughput t = measure_throughput(transformer, steps);

  nlohmann::json m;
  m["tokens_per_s"] = t.tokens_per_s;
  m["tokens_timed"] = t.tokens_timed;
  m["steps"] = steps;
  m["threads"] = threads;
  m["matmul_us_per_token"] = t.matmul_us_per_token;
  m["other_us_per_token"] = t.other_us_per_token;
  m["matmul_calls_per_token"] = 7 * model.config().n_layers + 1;

  Breakdown b;
  if (protocol) {
    // What one real token does to the CUDA API (mallocs, frees, bytes each way).
    if (ApiCounter::available()) {
      ApiCounter counter;
      transformer.forward(t.tokens.back(), steps);
      const ApiCounts c = counter.counts();
      m["api_per_token"] = {{"mallocs", c.mallocs}, {"frees", c.frees}, {"memcpys", c.memcpys},
                            {"launches", c.launches}, {"bytes_h2d", c.bytes_h2d}, {"bytes_d2h", c.bytes_d2h}};
    }
    b = replay_token(model, *protocol, kernel);
    m["breakdown_method"] =
        std::string("replay of one token's matmul calls under the '") + to_string(*protocol) +
        "' protocol with the chapter's kernel; each step host-timed between device synchronizations";
  } else {
    b.kernel_us = t.matmul_us_per_token;
    m["breakdown_method"] = "CPU: 'kernel' is the matmul time measured inside the forward pass";
  }
  m["breakdown_us"] = b.to_json();
  return m;
}

void print_rung_header() {
  std::printf("  %-16s %9s %8s %8s %10s %10s | %9s %9s %9s %9s %9s\n", "variant", "tok/s", "x cpu1",
              "x cpuN", "matmul ms", "other ms", "alloc ms", "h2d ms", "kernel ms", "d2h ms", "free ms");
}

void print_rung(const std::string& variant, const nlohmann::json& m, double cpu1, double cpu_all) {
  const double tps = m.at("tokens_per_s").get<double>();
  const auto& b = m.at("breakdown_us");
  // A ratio column stays empty when its baseline was not measured in this run.
  auto ratio = [tps](double base) {
    char s[16];
    if (base > 0) std::snprintf(s, sizeof s, "%8.2f", tps / base);
    else std::snprintf(s, sizeof s, "%8s", "-");
    return std::string(s);
  };
  std::printf("  %-16s %9.1f %s %s %10.2f %10.2f | %9.2f %9.2f %9.2f %9.2f %9.2f\n", variant.c_str(),
              tps, ratio(cpu1).c_str(), ratio(cpu_all).c_str(),
              m.at("matmul_us_per_token").get<double>() / 1e3, m.at("other_us_per_token").get<double>() / 1e3,
              b.at("alloc").get<double>() / 1e3, b.at("h2d").get<double>() / 1e3,
              b.at("kernel").get<double>() / 1e3, b.at("d2h").get<double>() / 1e3,
              b.at("free").get<double>() / 1e3);
  std::fflush(stdout);
}

}  // namespace wb::model
