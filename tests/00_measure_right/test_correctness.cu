// Chapter 00, correctness: your timer against work whose true duration is known.
// Each check names the rule (README.md, "The rules") a wrong timer breaks.
#include <cstdio>
#include <sstream>
#include <string>

#include "support.hpp"
#include "timer.cuh"
#include "wb/testing.hpp"

using ch00::support::Probe;
using ch00::support::TestStream;

namespace {

std::string ms(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.3f ms", v);
  return buf;
}

// Rule 3 breaks show up as a time far below the kernel's: the timer saw the launch only.
void check_not_launch_time(double got_ms, double true_ms) {
  if (got_ms < 0.5 * true_ms)
    FAIL("rule 3 (time the device, not the launch): your timer reported "
         << ms(got_ms) << " for a kernel that runs " << ms(true_ms)
         << " on the GPU. A launch returns before the kernel runs, so a host clock read "
            "right after work() measures the launch, and events recorded on another stream "
            "do not wait for this one.\n"
            "hint: record both events on the stream you were given "
            "(cudaEventRecord(start, stream)) and wait for the stop event before reading "
            "cudaEventElapsedTime; or call cudaStreamSynchronize(stream) before each host clock read.");
}

void check_called_on_stream(const Probe& probe) {
  if (probe.calls_on_other_streams > 0)
    FAIL("rule 3: the work was called " << probe.calls_on_other_streams
                                        << " time(s) with a stream other than the one you were given.\n"
                                           "hint: pass `stream` to work(stream) unchanged.");
}

void check_sample_count(const Probe& probe, const ch00::TimerOptions& opt) {
  if (probe.calls < opt.samples)
    FAIL("rule 6 (many samples): the work was called " << probe.calls << " times in all, but "
         << opt.samples << " samples were asked for. "
         << "One sample (or a few) is at the mercy of noise.\n"
            "hint: loop options.samples times, keeping one time per sample.");
}

}  // namespace

TEST_CASE("times a kernel of known duration (rule 3)") {
  WB_REQUIRE_GPU();
  TestStream stream;
  for (double true_us : {2000.0, 500.0}) {
    ch00::support::reset_log(stream.get());
    Probe probe(stream.get(), [&](int) { return true_us; });
    const ch00::TimerOptions opt{.warmup = 2, .samples = 9, .cold_cache = false};
    const double got = ch00::time_work_ms(probe.work(), stream.get(), opt);
    wb::testing::record_metric("reported_ms_for_" + std::to_string(int(true_us)) + "us", got);
    check_called_on_stream(probe);
    check_not_launch_time(got, true_us / 1e3);
    // An event pair around one launch also contains the launch latency (a few us).
    if (got > 1.05 * true_us / 1e3 + 0.03)
      FAIL("your timer reported " << ms(got) << " for a kernel that runs " << ms(true_us / 1e3)
                                  << ": something besides the work is inside the timed region.\n"
                                     "hint: only the work goes between the start and stop events "
                                     "(no warmup, flush, allocation or printing).");
  }
}

TEST_CASE("keeps slow first calls out of the samples (rule 2)") {
  WB_REQUIRE_GPU();
  TestStream stream;
  ch00::support::reset_log(stream.get());
  // Like module loading and first-touch allocations: the first `warmup` calls take 5 ms,
  // every later call 0.5 ms. With 2*warmup-1 samples, a timer that does not warm up has a
  // majority of slow samples, so even its median is wrong.
  const int warmup = 5;
  Probe probe(stream.get(), [&](int call) { return call < warmup ? 5000.0 : 500.0; });
  const ch00::TimerOptions opt{.warmup = warmup, .samples = 2 * warmup - 1, .cold_cache = false};
  const double got = ch00::time_work_ms(probe.work(), stream.get(), opt);
  wb::testing::record_metric("reported_ms", got);
  check_called_on_stream(probe);
  check_not_launch_time(got, 0.5);
  if (got > 0.75)
    FAIL("rule 2 (warm up): the first " << warmup << " calls of this work take 5 ms (like "
         << "module loading and first-touch allocations), every later call 0.5 ms; your timer "
         << "reported " << ms(got) << ", so slow first calls landed in the samples.\n"
         << "hint: call work(stream) options.warmup times untimed and synchronize before the "
            "first sample.");
  check_sample_count(probe, opt);
  CHECK(got == doctest::Approx(0.5).epsilon(0.06));
}

TEST_CASE("reports the median of its samples (rule 6)") {
  WB_REQUIRE_GPU();
  TestStream stream;
  ch00::support::reset_log(stream.get());
  // A skewed sequence, repeating every 5 calls: any 15 consecutive calls hold three of
  // each, so the median is 1.0 ms wherever sampling starts; the mean is 2.6 ms and the
  // minimum 0.8 ms.
  const double pattern_us[5] = {1000, 1000, 800, 1200, 9000};
  Probe probe(stream.get(), [&](int call) { return pattern_us[call % 5]; });
  const ch00::TimerOptions opt{.warmup = 2, .samples = 15, .cold_cache = false};
  const double got = ch00::time_work_ms(probe.work(), stream.get(), opt);
  wb::testing::record_metric("reported_ms", got);
  check_called_on_stream(probe);
  check_not_launch_time(got, 1.0);
  check_sample_count(probe, opt);
  if (got > 1.5)
    FAIL("rule 6 (median): durations 1.0, 1.0, 0.8, 1.2 and 9.0 ms repeat; your timer "
         << "reported " << ms(got) << ", near the mean (2.6 ms). One slow sample in five "
         << "moves the mean far from what a call usually costs.\n"
         << "hint: sort the samples and take the middle one.");
  if (got < 0.9)
    FAIL("rule 6 (median): durations 1.0, 1.0, 0.8, 1.2 and 9.0 ms repeat; your timer "
         << "reported " << ms(got) << ", the minimum (or a single lucky sample), not the median (1.0 ms).\n"
         << "hint: keep every sample, sort them and take the middle one.");
  CHECK(got == doctest::Approx(1.0).epsilon(0.05));
}
