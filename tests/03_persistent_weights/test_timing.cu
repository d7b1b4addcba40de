// Chapter 03 timing: with the weights resident, the model must decode several times faster
// than the one-thread CPU baseline measured in the same run (a ratio, not a time).
#include <string>

#include "ch03_adapters.hpp"
#include "wb/model/generate.hpp"
#include "wb/model/synthetic.hpp"
#include "wb/model/transformer.hpp"
#include "wb/rubric.hpp"
#include "wb/testing.hpp"

namespace {
const double kStudentMark = wb::pass_mark("03", "x_cpu_1thread");  // x the one-thread CPU (data/rubric.json)
}

TEST_CASE("the 110M model decodes >= 5x faster than one CPU thread with persistent weights") {
  WB_REQUIRE_GPU();
  const wb::model::Model model = wb::model::make_synthetic(wb::model::synthetic_110m());

  wb::model::CpuMatmul one_thread(1);
  wb::model::Transformer cpu(model, one_thread, 1);
  const wb::model::Throughput base = wb::model::measure_throughput(cpu, 9);

  wb::model::CpuMatmul all_threads(0);
  wb::model::Transformer cpu_all(model, all_threads, 0);
  const wb::model::Throughput base_all = wb::model::measure_throughput(cpu_all, 33);

  // The work left on the CPU (attention, norms, RoPE) runs on one thread, like the baseline's:
  // with all threads, each OpenMP region waits for its slowest thread, so on a machine busy
  // with other work (tests side by side, a grader compiling the next submission) the GPU path
  // lost to one CPU thread (seen on a 64-core H200 host: 322 ms a token outside the matmuls,
  // against 0.74 ms when quiet). One thread costs the GPU path about 2 ms a token (the CPU
  // rungs of data/results/03_persistent_weights-solution.json spend 2.7 ms a token outside the
  // matmuls on one thread, 0.74 on 16), so about 17x one CPU thread instead of 28x: far
  // above the 5x pass mark.
  ch03::PersistentMatvec p;
  auto backend = ch03_adapters::persistent_backend(p);
  wb::model::Transformer gpu(model, backend, 1);
  const wb::model::Throughput got = wb::model::measure_throughput(gpu, 65);

  const double ratio = got.tokens_per_s / base.tokens_per_s;
  wb::testing::record_metric("cpu_1thread_tokens_per_s", base.tokens_per_s);
  wb::testing::record_metric("cpu_all_threads_tokens_per_s", base_all.tokens_per_s);
  wb::testing::record_metric("persistent_tokens_per_s", got.tokens_per_s);
  wb::testing::record_metric("x_cpu_1thread", ratio);
  wb::testing::record_metric("x_cpu_all_threads", got.tokens_per_s / base_all.tokens_per_s);
  wb::testing::record_metric("matmul_ms_per_token", got.matmul_us_per_token / 1e3);
  wb::testing::record_metric("other_ms_per_token", got.other_us_per_token / 1e3);
  // Same greedy tokens as the CPU for the positions both ran (a wrong matmul changes them).
  for (std::size_t i = 0; i < base.tokens.size(); ++i) {
    CAPTURE(i);
    CHECK(got.tokens[i] == base.tokens[i]);
  }
  CHECK_MESSAGE(ratio >= kStudentMark,
                "chapter 03: " << got.tokens_per_s << " tokens/s with persistent weights, "
                               << base.tokens_per_s << " on one CPU thread: " << ratio << "x, the mark is "
                               << kStudentMark << "x. Per token: " << got.matmul_us_per_token / 1e3
                               << " ms in matmuls, " << got.other_us_per_token / 1e3
                               << " ms elsewhere\nhint: per matmul only x may go up and out come down; "
                                  "no allocation, no weight copy, one synchronization (the copy back).");
}
