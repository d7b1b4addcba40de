// Chapter 00, correctness: your timer against work whose true duration is known.
// Each check names the rule (README.md, "The rules") a wrong timer breaks.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <set>
#include <sstream>
#include <string>
#include <tuple>
#include <typeinfo>
#include <vector>

#include "support.hpp"
#include "timer.cuh"
#include "wb/api_counter.hpp"
#include "wb/check.hpp"
#include "wb/kernel_coverage.hpp"
#include "wb/testing.hpp"
#include "wb/timing.hpp"

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

namespace {

// Work whose state is its own (a functor with members, or a lambda capturing by value and
// declared mutable), not behind a pointer: a copy of it starts from the count the original had
// when it was copied, and counts on its own. Its first `slow_calls` calls take 4 ms, the later
// ones 0.4 ms (first calls that load, allocate, fill caches). Each call logs the count its own
// object had reached, through a pointer that every copy shares.
struct SelfCountingWork {
  int calls = 0;
  int slow_calls = 0;
  std::vector<int>* log = nullptr;
  void operator()(cudaStream_t s) {
    log->push_back(calls);
    wb::launch_spin_kernel((calls < slow_calls ? 4000.0 : 400.0) * 1e3, s);
    ++calls;
  }
};

}  // namespace

TEST_CASE("warms up the very work it times: work with state of its own (rule 2)") {
  WB_REQUIRE_GPU();
  TestStream stream;
  ch00::support::reset_log(stream.get());
  const ch00::TimerOptions opt{.warmup = 3, .samples = 5, .cold_cache = false};
  std::vector<int> log;
  ch00::Work work = SelfCountingWork{.calls = 0, .slow_calls = opt.warmup, .log = &log};
  const double got = ch00::time_work_ms(work, stream.get(), opt);
  wb::testing::record_metric("reported_ms", got);
  // Every call must continue the state the call before it left: 0, 1, 2, ... The warmup is
  // there to advance it past the slow first calls before the samples see it.
  bool continued = true;
  for (std::size_t i = 0; i < log.size(); ++i) continued = continued && log[i] == int(i);
  if (!continued) {
    std::ostringstream seen;
    for (int c : log) seen << c << " ";
    FAIL("rule 2 (warm up the work you time): options {warmup = 3, samples = 5, cold_cache = false}; the work "
         << "keeps its own state (a "
         << "call counter inside the callable, not behind a pointer), and its first " << opt.warmup
         << " calls take 4 ms, later ones 0.4 ms. Each call logged how many calls its own object had seen "
            "before it: "
         << seen.str() << "(a timer that calls the work it was given shows 0 1 2 3 4 5 6 7). The count started "
         << "over: some calls ran on a copy of the work, so the samples replayed the first calls the warmup "
         << "should have absorbed (your timer reported " << ms(got) << ", the work takes 0.4 ms once warm).\n"
         << "hint: call work(stream) on the const Work& you were given, for the warmup and for every sample; a "
            "helper that takes `Work work` by value warms up a copy: give it a const Work& too.");
  }
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

// ---- The timer's log: what it did, in order, checked against the options it was given.
//
// CUPTI (wb::ApiTrace) logs the timer's CUDA calls: events created, recorded (and on which
// stream), synchronized, read and destroyed, stream and device synchronizations; the probe
// work and flush_l2 add their own marks ('W', 'F') in the same order. Each option must show
// in the log (warmup: untimed calls; samples: timed calls; cold_cache: a flush before every
// sample, none otherwise), and so must each rule (nothing synchronizes between a sample's
// start and stop events; every event created is destroyed).
namespace {

using wb::ApiCall;
using wb::ApiTraceEntry;

bool is_sync(const ApiTraceEntry& e) {
  return e.call == ApiCall::StreamSync || e.call == ApiCall::DeviceSync || e.call == ApiCall::EventSync;
}
bool is_mark(const ApiTraceEntry& e, char c) { return e.call == ApiCall::Note && e.note == c; }

std::string options_string(const ch00::TimerOptions& o) {
  return "options {warmup = " + std::to_string(o.warmup) + ", samples = " + std::to_string(o.samples) +
         ", cold_cache = " + (o.cold_cache ? "true" : "false") + "}";
}

// The log, as the message shows it: W work, F flush_l2, C/D event create/destroy, R record,
// e event synchronize, S stream synchronize, Y device synchronize, E elapsed-time read.
std::string shown(const std::vector<ApiTraceEntry>& t) {
  std::string s;
  for (const ApiTraceEntry& e : t)
    if (e.call != ApiCall::Launch && e.call != ApiCall::Memcpy && e.call != ApiCall::Malloc && e.call != ApiCall::Free)
      s += e.code();
  if (s.size() > 160) s = s.substr(0, 160) + "...";
  return "your timer's log (W work, F flush_l2, C/D event create/destroy, R event record, e event "
         "synchronize, S stream synchronize, Y device synchronize, E elapsed-time read): " + s;
}

// The first rule the log breaks, as a test message; empty when it obeys every one.
std::string check_timer_log(const std::vector<ApiTraceEntry>& t, const ch00::TimerOptions& opt,
                            cudaStream_t stream) {
  const std::string given = options_string(opt);
  std::vector<std::size_t> works, records;
  int flushes = 0, creates = 0, destroys = 0, elapsed = 0;
  std::set<const void*> created;
  const void* kept_event = nullptr;  // recorded in this call, created before it
  for (std::size_t i = 0; i < t.size(); ++i) {
    if (is_mark(t[i], 'W')) works.push_back(i);
    if (is_mark(t[i], 'F')) ++flushes;
    if (t[i].call == ApiCall::EventRecord) records.push_back(i);
    if (t[i].call == ApiCall::EventCreate) created.insert(t[i].handle);
    if (t[i].call == ApiCall::EventRecord && !kept_event && !created.count(t[i].handle)) kept_event = t[i].handle;
    creates += t[i].call == ApiCall::EventCreate;
    destroys += t[i].call == ApiCall::EventDestroy;
    elapsed += t[i].call == ApiCall::ElapsedTime;
  }
  std::ostringstream m;
  if (creates != destroys) {
    m << "rule: destroy what you create (CUDA events). One call of your timer created " << creates
      << " events and destroyed " << destroys << ": every call leaks " << creates - destroys
      << " of them, and a benchmark calls its timer thousands of times.\n" << shown(t)
      << "\nhint: cudaEventDestroy each event you cudaEventCreate before returning (two events, "
         "reused for every sample, are enough).";
    return m.str();
  }
  // Events kept from an earlier call (static or global) balance within this one, so the count
  // above misses them: they are created once, never destroyed, and shared by every caller.
  if (kept_event != nullptr) {
    m << "rule: destroy what you create (CUDA events). Your timer recorded event " << kept_event
      << ", which it did not create in this call: events kept from an earlier call (a static or global "
         "cudaEvent_t, created on the first call) are never destroyed, and every caller shares them: two "
         "threads timing at once record into the same two events and read each other's times, and a call "
         "with another GPU current cannot record them on its stream at all.\n" << shown(t)
      << "\nhint: create the two events in time_work_ms, as locals, and destroy them before it returns; "
         "making an event costs microseconds, nothing next to a sample.";
    return m.str();
  }
  if (!opt.cold_cache && flushes > 0) {
    m << "rule 5 (cold cache): with cold_cache = false your timer called flush_l2 " << flushes
      << " times. A hot measurement must find the data where the previous call left it.\n"
      << shown(t) << "\nhint: if (options.cold_cache) flush_l2(stream);";
    return m.str();
  }
  const int asked = opt.warmup + opt.samples;
  // The mark (W or F) before entry i, or 0.
  auto previous_mark = [&](std::size_t i) -> char {
    while (i-- > 0)
      if (t[i].call == ApiCall::Note) return t[i].note;
    return 0;
  };
  if (elapsed == 0) {
    // A host-clock timer: each sample is work(stream) between two synchronizations.
    if (int(works.size()) != asked) {
      m << "rule 2 and rule 6 (the options are the contract): " << given << " ask for "
        << opt.warmup << " untimed calls and " << opt.samples << " timed ones, " << asked
        << " calls of the work; your timer made " << works.size() << ".\n" << shown(t)
        << "\nhint: loop options.warmup times, then options.samples times, with no other calls.";
      return m.str();
    }
    for (int k = 0; k < opt.samples; ++k) {
      const std::size_t w = works[std::size_t(opt.warmup + k)];
      const std::size_t prev_w = k + opt.warmup > 0 ? works[std::size_t(opt.warmup + k - 1)] : 0;
      const std::size_t next_w = k + 1 < opt.samples ? works[std::size_t(opt.warmup + k + 1)] : t.size();
      bool before = false, after = false;
      for (std::size_t i = prev_w; i < w; ++i) before |= is_sync(t[i]);
      for (std::size_t i = w + 1; i < next_w; ++i) after |= is_sync(t[i]);
      if (!before || !after) {
        m << "rule 3 (time the device, not the launch): your timer reads no CUDA events, so it times "
             "with a host clock, but sample " << k + 1 << " of " << opt.samples << " has no synchronize "
          << (before ? "after" : "before") << " its work.\n" << shown(t)
          << "\nhint: a host clock measures the device only between cudaStreamSynchronize(stream) "
             "calls: synchronize, read the clock, work(stream), synchronize, read the clock.";
        return m.str();
      }
      if (opt.cold_cache && previous_mark(w) != 'F') {
        m << "rule 5 (cold cache): cold_cache was true, but sample " << k + 1 << " of " << opt.samples
          << " was not preceded by flush_l2.\n" << shown(t)
          << "\nhint: if (options.cold_cache) flush_l2(stream); before every sample.";
        return m.str();
      }
    }
    return "";
  }
  // An event timer: a sample is one call of the work between a start and a stop record.
  auto record_before = [&](std::size_t i) -> std::ptrdiff_t {
    while (i-- > 0)
      if (t[i].call == ApiCall::EventRecord) return std::ptrdiff_t(i);
    return -1;
  };
  auto record_after = [&](std::size_t i) -> std::ptrdiff_t {
    for (++i; i < t.size(); ++i)
      if (t[i].call == ApiCall::EventRecord) return std::ptrdiff_t(i);
    return -1;
  };
  int untimed_before_first_record = 0, timed = 0, batched = 0;
  for (std::size_t w : works) {
    const std::ptrdiff_t start = record_before(w), stop = record_after(w);
    if (start < 0) {
      ++untimed_before_first_record;
      continue;
    }
    if (stop < 0) continue;
    int works_inside = 0;
    for (std::ptrdiff_t i = start + 1; i < stop; ++i) works_inside += is_mark(t[std::size_t(i)], 'W');
    if (works_inside > 1) {
      ++batched;
      continue;
    }
    ++timed;
    const ApiTraceEntry& a = t[std::size_t(start)];
    const ApiTraceEntry& b = t[std::size_t(stop)];
    if (a.stream != stream || b.stream != stream) {
      m << "rule 3 (time the device, not the launch): sample " << timed << " was timed between events recorded on stream "
        << (a.stream != stream ? a.stream : b.stream) << ", but the work runs on stream " << stream
        << ". An event on another stream does not wait for this stream's work.\n" << shown(t)
        << "\nhint: cudaEventRecord(start, stream) and cudaEventRecord(stop, stream), with the stream "
           "you were given.";
      return m.str();
    }
    for (std::ptrdiff_t i = start + 1; i < stop; ++i) {
      const ApiTraceEntry& e = t[std::size_t(i)];
      if (is_sync(e)) {
        m << "rule 4 (nothing escapes the timed region, nothing synchronizes inside it): between the start "
             "and stop events of sample " << timed << " your timer called "
          << (e.call == ApiCall::StreamSync ? "cudaStreamSynchronize"
              : e.call == ApiCall::DeviceSync ? "cudaDeviceSynchronize" : "cudaEventSynchronize")
          << ". The host waits there, so the stop event is recorded late and everything the host does "
             "meanwhile is inside the sample.\n" << shown(t)
          << "\nhint: record start, call work(stream), record stop; synchronize on the stop event only "
             "after recording it.";
        return m.str();
      }
      if (is_mark(e, 'F')) {
        m << "rule 5 (cold cache, outside the timed region): flush_l2 ran between the start and stop "
             "events of sample " << timed << ", inside the timed region: the sample measures the flush too.\n"
          << shown(t) << "\nhint: flush first, then record the start event.";
        return m.str();
      }
    }
    if (opt.cold_cache && previous_mark(std::size_t(start)) != 'F') {
      m << "rule 5 (cold cache): cold_cache was true, but sample " << timed << " of " << opt.samples
        << " was not preceded by flush_l2 (outside its start and stop events).\n" << shown(t)
        << "\nhint: if (options.cold_cache) flush_l2(stream); before recording each start event.";
      return m.str();
    }
  }
  if (untimed_before_first_record != opt.warmup) {
    m << "rule 2 (warm up): " << given << " ask for " << opt.warmup
      << " untimed calls before the first sample; your timer made " << untimed_before_first_record
      << ". The warmup count is an option: too few leaves first-call costs in the samples, extra ones are "
         "work nobody asked for.\n" << shown(t)
      << "\nhint: for (int i = 0; i < options.warmup; ++i) work(stream); then synchronize.";
    return m.str();
  }
  if (timed != opt.samples || batched > 0) {
    m << "rule 6 (many samples): " << given << " ask for " << opt.samples
      << " samples, each one call of the work between its own start and stop events; your timer timed "
      << timed << " calls one by one";
    if (batched > 0) m << " and " << batched << " calls in groups (a group's time over its size is a mean)";
    m << ".\n" << shown(t) << "\nhint: loop options.samples times: record start, work(stream), record stop.";
    return m.str();
  }
  if (elapsed < opt.samples) {
    m << "rule 6 (many samples): " << opt.samples << " samples need " << opt.samples
      << " elapsed-time readings; your timer read cudaEventElapsedTime " << elapsed << " times.\n" << shown(t)
      << "\nhint: one cudaEventElapsedTime(&ms, start, stop) per sample, kept in a vector.";
    return m.str();
  }
  if (int(works.size()) != asked) {
    m << "rule 2 and rule 6 (the options are the contract): " << given << " ask for " << asked
      << " calls of the work in all; your timer made " << works.size() << ".\n" << shown(t)
      << "\nhint: no calls of the work besides the warmup and the samples.";
    return m.str();
  }
  return "";
}

bool tracing_or_skip() {
  if (wb::ApiCounter::available()) return true;
  wb::testing::mark_skipped("skipped: CUDA API tracing is unavailable (" + wb::ApiCounter::unavailable_reason() + ")");
  return false;
}

// The median of the values, as a timer should compute it (the two middle ones averaged for
// an even count, though the probes use odd counts so every convention agrees).
double median_of(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const std::size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

// What the timer reports for a probe whose samples take `samples_ms` in call order, after
// `warmup` calls of `warmup_ms` (calls beyond them take 5 ms), recorded as `metric`; the
// probe must have run on the given stream. `cold` sets options.cold_cache (the probe spins on
// the GPU clock, so a flush does not change its durations).
double timer_on_probe(cudaStream_t stream, const std::vector<double>& samples_ms, int warmup,
                      double warmup_ms, const std::string& metric, bool cold = false) {
  const int n = int(samples_ms.size());
  ch00::support::reset_log(stream);
  Probe probe(stream, [&](int call) {
    if (call < warmup) return 1e3 * warmup_ms;
    if (call >= warmup + n) return 5000.0;
    return 1e3 * samples_ms[std::size_t(call - warmup)];
  });
  const ch00::TimerOptions opt{.warmup = warmup, .samples = n, .cold_cache = cold};
  const double got = ch00::time_work_ms(probe.work(), stream, opt);
  wb::testing::record_metric(metric, got);
  check_called_on_stream(probe);
  return got;
}

}  // namespace

TEST_CASE("does what its options say: warmup, samples, cold cache, events (the timer's log)") {
  WB_REQUIRE_GPU();
  if (!tracing_or_skip()) return;
  TestStream stream;
  // The flush buffer is allocated on the first flush: not the timer's doing.
  ch00::flush_l2(stream.get());
  WB_CUDA(cudaStreamSynchronize(stream.get()));
  // The last set is cold with 1001 samples, as many as the last test of this file takes: the
  // flush is the costly part of a cold sample, and a timer that flushes only the first few
  // dozen samples passes every short set. (101 under compute-sanitizer, which instruments the
  // flush's read kernel.)
  const ch00::TimerOptions option_sets[] = {
      {.warmup = 1, .samples = 5, .cold_cache = false},
      {.warmup = 4, .samples = 7, .cold_cache = true},
      {.warmup = 2, .samples = 12, .cold_cache = false},
      {.warmup = 6, .samples = 3, .cold_cache = true},
      {.warmup = 2, .samples = wb::coverage::quick() ? 101 : 1001, .cold_cache = true},
  };
  for (const ch00::TimerOptions& opt : option_sets) {
    CAPTURE(options_string(opt));
    ch00::support::reset_log(stream.get());
    Probe probe(stream.get(), [](int) { return 100.0; });
    std::vector<ApiTraceEntry> log;
    wb::ApiCounter counter;
    {
      wb::ApiTrace trace;
      ch00::time_work_ms(probe.work(), stream.get(), opt);
      log = trace.entries();
    }
    const wb::ApiCounts c = counter.counts();
    if (c.mallocs != c.frees || c.live_device_bytes() != 0 || c.host_allocs != c.host_frees ||
        c.live_host_bytes() != 0 || c.host_registers != c.host_unregisters)
      FAIL("rule: free what you allocate. One call of your timer made " << c.resources()
           << ".\nhint: a timer needs no memory of its own beyond a vector of samples; free (cudaFree, "
              "cudaFreeHost) whatever you allocate before returning.");
    check_called_on_stream(probe);
    if (ch00::support::call_log().flushes_on_other_streams > 0)
      FAIL("rule 5: flush_l2 was called on another stream, so it may run during the timed work."
           "\nhint: flush_l2(stream) with the work's stream.");
    const std::string problem = check_timer_log(log, opt, stream.get());
    if (!problem.empty()) FAIL(problem << "\n(" << options_string(opt) << ")");
  }
}

TEST_CASE("reports the median of all the samples it was asked for, from this call (rule 6)") {
  WB_REQUIRE_GPU();
  TestStream stream;
  // Nine distinct durations, 30% apart, in two orders: the first sample is the slowest and the
  // last the fastest in one probe, the reverse in the other (the second probe is 1.5x
  // longer, so no constant answers both). Their median is the fifth value, and the middle
  // sample in call order is not it. The mean, the minimum, the first, the last, the middle
  // sample unsorted, the median without the first or the last sample, and the median that
  // takes a call beyond options.samples are all at least 12% away from it in one probe.
  // Warmup calls take 4 ms; calls beyond warmup + samples take 5 ms.
  const std::vector<double> order_a = {2.70, 0.52, 1.18, 0.40, 2.05, 0.90, 0.68, 1.55, 0.30};
  const std::vector<double> order_b = {0.30, 1.55, 0.68, 2.05, 0.40, 1.18, 0.90, 0.52, 2.70};
  const int warmup = 2;
  for (const auto& [name, order, scale] :
       {std::tuple{std::string("A"), order_a, 1.0},  // std::string: doctest prints a const
        std::tuple{std::string("B"), order_b, 1.5}}) {  // char* const as an address
    std::vector<double> samples_ms;
    for (double v : order) samples_ms.push_back(v * scale);
    const int n = int(samples_ms.size());
    const double got = timer_on_probe(stream.get(), samples_ms, warmup, 4.0, "reported_ms_probe_" + name);
    const double want = median_of(samples_ms);
    if (std::abs(got - want) > 0.06 * want + 0.02) {
      std::ostringstream diagnosis;
      std::vector<double> sorted = samples_ms;
      std::sort(sorted.begin(), sorted.end());
      double mean = 0;
      for (double v : samples_ms) mean += v / n;
      auto near = [&](double v) { return std::abs(got - v) <= 0.06 * v + 0.02; };
      const std::vector<double> without_first(samples_ms.begin() + 1, samples_ms.end());
      const std::vector<double> without_last(samples_ms.begin(), samples_ms.end() - 1);
      if (near(mean)) diagnosis << " That is the mean (" << ms(mean) << ").";
      else if (near(sorted.front())) diagnosis << " That is the minimum.";
      else if (near(samples_ms.front())) diagnosis << " That is the first sample.";
      else if (near(samples_ms.back())) diagnosis << " That is the last sample.";
      else if (near(samples_ms[std::size_t(n / 2)])) diagnosis << " That is the middle sample in call order: the samples were not sorted.";
      else if (near(sorted[std::size_t(n / 2 - 1)]) || near(sorted[std::size_t(n / 2 + 1)]) ||
               near(median_of(without_first)) || near(median_of(without_last)))
        diagnosis << " That is a neighbour of the median: a sample was dropped, added or counted twice.";
      std::ostringstream list;
      for (double v : samples_ms) list << ms(v) << " ";
      FAIL("rule 6 (the median of all the samples): probe " << name << " takes, per sample in call order, "
           << list.str() << "(after " << warmup << " warmup calls of 4 ms); the median of those " << n
           << " samples is " << ms(want) << ", your timer reported " << ms(got) << "." << diagnosis.str()
           << "\nhint: keep one time per sample, all options.samples of them, sort them and return the middle "
              "one (for an even count, the mean of the two middle ones); compute it from this call's samples.");
    }
  }
}

TEST_CASE("reports the median of an even number of samples (rule 6)") {
  WB_REQUIRE_GPU();
  TestStream stream;
  // Six samples, so the median sits between the two middle ones (1.0 and 1.2 ms sorted): their
  // mean, 1.1 ms, or either middle one is accepted (the lesson takes v[n / 2] or the mean).
  // Probe A falls as a clock settles; probe B is another order, 1.5x longer. Taking the upper
  // middle with std::nth_element and then its left neighbour as the lower middle gives 0.725 ms
  // (A): nth_element puts v[n / 2] in place and leaves the left part unsorted.
  const std::vector<double> order_a = {2.6, 2.0, 1.2, 1.0, 0.25, 0.2};
  const std::vector<double> order_b = {1.2, 2.6, 1.0, 0.25, 0.2, 2.0};
  const int warmup = 1;
  for (const auto& [name, order, scale] :
       {std::tuple{std::string("A"), order_a, 1.0},  // std::string: doctest prints a const
        std::tuple{std::string("B"), order_b, 1.5}}) {  // char* const as an address
    std::vector<double> samples_ms;
    for (double v : order) samples_ms.push_back(v * scale);
    const int n = int(samples_ms.size());
    const double got = timer_on_probe(stream.get(), samples_ms, warmup, 3.0, "reported_ms_even_probe_" + name);
    std::vector<double> sorted = samples_ms;
    std::sort(sorted.begin(), sorted.end());
    const double lower = sorted[std::size_t(n / 2 - 1)], upper = sorted[std::size_t(n / 2)];
    auto near = [&](double v) { return std::abs(got - v) <= 0.06 * v + 0.02; };
    if (!near(0.5 * (lower + upper)) && !near(lower) && !near(upper)) {
      std::ostringstream list;
      for (double v : samples_ms) list << ms(v) << " ";
      FAIL("rule 6 (the median of all the samples, for an even count too): probe " << name
           << " takes, per sample in call order, " << list.str() << "; sorted, the two middle ones are "
           << ms(lower) << " and " << ms(upper) << ", so the median is " << ms(0.5 * (lower + upper))
           << " (either middle one is accepted too); your timer reported " << ms(got) << "."
           << (got < lower ? " That is below both middle samples: the lower middle one was not the lower middle." : "")
           << "\nhint: std::sort the samples and, for an even n, average v[n / 2 - 1] and v[n / 2]. After "
              "std::nth_element(v.begin() + n / 2) only v[n / 2] is in place: v[n / 2 - 1] is some smaller "
              "sample, not the lower middle (sort, or take the largest of the left part).");
    }
  }
}

TEST_CASE("reports the median of slow samples too: no outlier trimming (rule 6)") {
  WB_REQUIRE_GPU();
  TestStream stream;
  // Three of seven calls take 8 ms, the others 0.3 to 0.6 ms: work that sometimes takes a slow path.
  // Those are samples too, and the median needs no protection from them: it is 0.6 ms. A timer that
  // drops the samples far above its median as "glitches" (3x, 5x, 10x it) returns the median of the
  // four fast ones, 0.4 to 0.5 ms.
  const std::vector<double> samples_ms = {8.0, 0.3, 8.0, 0.6, 0.4, 8.0, 0.5};
  const double got = timer_on_probe(stream.get(), samples_ms, 2, 4.0, "reported_ms_with_slow_samples");
  const double want = median_of(samples_ms);
  if (std::abs(got - want) > 0.06 * want + 0.02)
    FAIL("rule 6 (the median of all the samples): the work takes, per sample in call order, 8 ms, 0.3 ms, "
         << "8 ms, 0.6 ms, 0.4 ms, 8 ms and 0.5 ms (after 2 warmup calls of 4 ms); the median of those 7 samples is "
         << ms(want) << ", your timer reported " << ms(got)
         << (got > 0.35 && got < 0.55 ? ", the median of the fast samples alone: the slow ones were dropped as outliers." : ".")
         << " A slow sample is a measurement: that call really took that long, and the median already keeps "
            "one far-off sample from moving the answer; trimming the slow side moves it.\nhint: keep every "
            "sample, sort them all and take the middle one; do not filter samples by their value.");
}

TEST_CASE("keeps a sample that reads 0 ms (rule 6)") {
  WB_REQUIRE_GPU();
  if (!tracing_or_skip()) return;
  TestStream stream;
  // Two events the GPU stamps in the same tick read 0 ms: a real reading, which a GPU gives
  // only now and then (records queued together behind other work). CUPTI hands the timer 0 for
  // two of every three cudaEventElapsedTime calls, whatever it reads them for: of any 15
  // consecutive readings 10 are 0, so the median of the 15 samples is 0 ms. The others read
  // the probe's 0.2 ms kernel.
  ch00::support::reset_log(stream.get());
  Probe probe(stream.get(), [](int) { return 200.0; });
  const ch00::TimerOptions opt{.warmup = 2, .samples = 15, .cold_cache = false};
  double got = 0;
  long long replaced = 0;
  {
    const wb::ElapsedTimeOverride zeros([](long long call, float reading) { return call % 3 == 2 ? reading : 0.0f; });
    got = ch00::time_work_ms(probe.work(), stream.get(), opt);
    replaced = zeros.calls();
  }
  wb::testing::record_metric("reported_ms_with_zero_readings", got);
  if (replaced == 0) {  // a timer on the host clock (rule 3's other way) never reads 0
    wb::testing::record_note("the timer read no event times (a host-clock timer): nothing to check");
    return;
  }
  check_called_on_stream(probe);
  if (got > 0.01)
    FAIL("rule 6 (the median of all the samples): two of every three of your timer's "
         << "cudaEventElapsedTime readings were 0 ms (the test made them so: two events stamped in the "
         << "same tick read 0, a real measurement), so most of its 15 samples are 0 and their "
         << "median is 0 ms; your timer reported " << ms(got) << ", the median of the others. A sample "
            "of 0 ms was dropped (or treated as a failed reading).\nhint: keep every sample, 0.0f "
            "included; sort them all and take the middle one.");
}

TEST_CASE("reports the median of all the samples when cold_cache is on too (rule 6)") {
  WB_REQUIRE_GPU();
  TestStream stream;
  // Cold samples are samples like any other: the answer is the median of all options.samples of
  // them. The nine distinct durations of probe A above, now with cold_cache = true (a flush
  // before each sample, outside its events; the probe spins on the GPU clock, so the flush does
  // not change its durations). Every test above that checks the median times hot; a timer that
  // treats its cold samples differently (leaves out the first as "still warming up", takes the
  // best one because "cold samples are noisy") gives the right call log and a plausible cold
  // time, and only its answer shows it.
  const std::vector<double> samples_ms = {2.70, 0.52, 1.18, 0.40, 2.05, 0.90, 0.68, 1.55, 0.30};
  const int warmup = 2, n = int(samples_ms.size());
  const double got = timer_on_probe(stream.get(), samples_ms, warmup, 4.0, "reported_ms_cold_probe", true);
  const double want = median_of(samples_ms);
  auto near = [&](double v) { return std::abs(got - v) <= 0.06 * v + 0.02; };
  if (!near(want)) {
    std::vector<double> sorted = samples_ms;
    std::sort(sorted.begin(), sorted.end());
    double mean = 0;
    for (double v : samples_ms) mean += v / n;
    const std::vector<double> without_first(samples_ms.begin() + 1, samples_ms.end());
    const std::vector<double> without_last(samples_ms.begin(), samples_ms.end() - 1);
    std::ostringstream diagnosis;
    if (near(mean)) diagnosis << " That is the mean (" << ms(mean) << ").";
    else if (near(sorted.front())) diagnosis << " That is the minimum.";
    else if (near(samples_ms.front())) diagnosis << " That is the first sample.";
    else if (near(samples_ms.back())) diagnosis << " That is the last sample.";
    else if (near(median_of(without_first)))
      diagnosis << " That is the median without the first sample: a cold sample was left out.";
    else if (near(median_of(without_last)))
      diagnosis << " That is the median without the last sample: a cold sample was left out.";
    std::ostringstream list;
    for (double v : samples_ms) list << ms(v) << " ";
    FAIL("rule 6 (the median of all the samples, cold ones too): options {warmup = 2, samples = 9, "
         << "cold_cache = true}; the work takes, per sample in call order, " << list.str() << "(after "
         << warmup << " warmup calls of 4 ms); the median of those " << n << " samples is " << ms(want)
         << ", your timer reported " << ms(got) << "." << diagnosis.str()
         << " The same durations timed hot are checked above; only cold_cache changed.\nhint: the cold "
            "path differs from the hot one by the flush before each start event, nothing else: keep every "
            "cold sample in the same vector and take the same median.");
  }
}

namespace {

// A work that throws on its call number `throw_on` (1 = the first), having returned at once
// before that: the timer must pass the exception on and leave nothing behind.
void check_failing_work(int throw_on, const char* when) {
  TestStream stream;
  ch00::support::reset_log(stream.get());
  int calls = 0;
  const ch00::Work failing = [&](cudaStream_t) {
    if (++calls == throw_on)
      throw wb::CudaError(cudaErrorInvalidConfiguration,
                          "test work: launch of a kernel with a configuration it cannot run (expected)");
  };
  const ch00::TimerOptions opt{.warmup = 3, .samples = 5, .cold_cache = false};
  wb::ApiCounter counter;
  bool threw = false;
  double got = 0;
  try {
    got = ch00::time_work_ms(failing, stream.get(), opt);
  } catch (const std::exception&) {
    threw = true;
  }
  const wb::ApiCounts c = counter.counts();
  if (c.event_creates != c.event_destroys)
    FAIL("rule: destroy what you create (CUDA events), on every way out of the timer. The work threw "
         << "an exception on " << when << " (options {warmup = 3, samples = 5}); your timer had created "
         << c.event_creates << " events by then and destroyed " << c.event_destroys << ": every call on work "
         << "that fails leaks " << c.event_creates - c.event_destroys << " of them, and an autotuner that "
         << "skips the configurations that cannot run calls its timer thousands of times.\nhint: hold each "
            "event in a small guard whose destructor calls cudaEventDestroy, so that an exception thrown "
            "anywhere between the create and the end destroys it too (creating them after the warmup is not "
            "enough: a work may fail on a timed call).");
  if (!threw)
    FAIL("rule 1 (check every call): the work threw an exception on " << when << " (a launch that failed its "
         << "check), but your timer returned " << ms(got) << " after " << calls << " call(s) of it, a time for "
         << "work that never ran.\nhint: do not catch the work's exceptions in the timer; let them reach "
            "the caller.");
  if (c.mallocs != c.frees || c.live_device_bytes() != 0 || c.host_allocs != c.host_frees)
    FAIL("rule: free what you allocate, on every way out of the timer. The work threw on " << when
         << "; your timer had made " << c.resources() << ".\nhint: allocate nothing, or free it in a guard's "
            "destructor.");
}

}  // namespace

TEST_CASE("destroys its events when the work throws on its first call (rule: destroy what you create)") {
  WB_REQUIRE_GPU();
  if (!tracing_or_skip()) return;
  // A work whose launch check fails throws wb::CudaError at once (WB_CHECK_LAUNCH after a launch
  // the kernel cannot make): an autotuner times each candidate configuration, catches the error
  // of the ones that cannot run and goes on to the next, calling the timer thousands of times.
  // The timer must pass the error on and leave nothing behind: an event created before the
  // warmup, and destroyed only at the end of the normal path, leaks on every such call.
  check_failing_work(1, "its first call");
}

TEST_CASE("destroys its events when the work throws on a timed call (rule: destroy what you create)") {
  WB_REQUIRE_GPU();
  if (!tracing_or_skip()) return;
  // The same error on the sixth call: after the three warmup calls, during the third sample
  // (work that fails intermittently, or runs out of memory as it grows). Events created after
  // the warmup and destroyed only at the end of the normal path leak here.
  check_failing_work(6, "its sixth call, the third timed sample");
}

namespace {

// A work that throws wb::CudaError on its call number `throw_on` (1 = the first): what reaches the
// timer's caller must be that very error, its type, code and message intact.
void check_error_passes_through(int throw_on, const char* when) {
  TestStream stream;
  ch00::support::reset_log(stream.get());
  const std::string work_message = "test work: launch of a kernel with a configuration it cannot run (expected)";
  int calls = 0;
  const ch00::Work failing = [&](cudaStream_t) {
    if (++calls == throw_on) throw wb::CudaError(cudaErrorInvalidConfiguration, work_message);
  };
  const ch00::TimerOptions opt{.warmup = 3, .samples = 5, .cold_cache = false};
  bool threw = false;
  double got = 0;
  std::string wrong;  // what reached the caller, when it is not the work's own error
  try {
    got = ch00::time_work_ms(failing, stream.get(), opt);
  } catch (const wb::CudaError& e) {
    threw = true;
    if (e.code() != cudaErrorInvalidConfiguration || std::string(e.what()).find(work_message) == std::string::npos)
      wrong = std::string("a wb::CudaError with code ") + cudaGetErrorName(e.code()) + " and what() \"" + e.what() +
              "\": another error, or the work's error with its code or message replaced";
  } catch (const std::exception& e) {
    threw = true;
    wrong = std::string(typeid(e) == typeid(std::exception) ? "a plain std::exception"
                                                            : "an exception that is not a wb::CudaError") +
            " whose what() is \"" + e.what() + "\"";
  } catch (...) {
    threw = true;
    wrong = "an exception that is not even a std::exception";
  }
  if (!threw)
    FAIL("rule 1 (check every call): the work threw wb::CudaError(cudaErrorInvalidConfiguration) on " << when
         << " (a launch that failed its check), but your timer returned " << ms(got) << " after " << calls
         << " call(s) of it, a time for work that never ran.\nhint: do not catch the work's exceptions in the "
            "timer; let them reach the caller.");
  if (!wrong.empty())
    FAIL("rule 1 (check every call: a failure reaches the caller as the wb::CudaError it is): the work threw "
         << "wb::CudaError(cudaErrorInvalidConfiguration, \"" << work_message << "\") on " << when
         << " (options {warmup = 3, samples = 5, cold_cache = false}); what reached the caller of your timer was "
         << wrong << ". The caller (an autotuner that catches wb::CudaError and skips a configuration that "
         << "cannot launch, or a person reading the message) needs the error's type, code and message."
         << (wrong.rfind("a plain std::exception", 0) == 0
                 ? " `throw e;` inside `catch (const std::exception& e)` throws a new copy of the static type "
                   "std::exception: the wb::CudaError is sliced away."
                 : " A new exception thrown in its place (std::runtime_error, another code) hides why the work failed.")
         << "\nhint: let the work's exceptions pass through "
            "untouched: no try/catch in the timer (the event guards clean up however it ends); if you must "
            "catch, rethrow the same object with a bare `throw;`.");
}

}  // namespace

TEST_CASE("passes the work's error on unchanged: the same wb::CudaError, code and message (rule 1)") {
  WB_REQUIRE_GPU();
  // The failing-work tests above check that an error thrown by the work leaves the timer and
  // leaves nothing behind; this one checks what leaves: the work's own wb::CudaError, on a
  // warmup call and on a timed one. A timer that catches it and throws something else (a sliced
  // copy, a new std::runtime_error) still "throws", and the caller can no longer tell why.
  check_error_passes_through(1, "its first call");
  check_error_passes_through(6, "its sixth call, the third timed sample");
}

// Last in this file: a timer that stores samples past the end of a fixed-size array corrupts
// the stack and may crash the test program, and no test after this one would run.
TEST_CASE("keeps every sample, however many are asked for (rule 6)") {
  WB_REQUIRE_GPU();
  TestStream stream;
  // options.samples may be any count (the harness takes 20 to 2000). 1001 samples: the first
  // and the last 200 take 0.6 ms, the 601 in between 0.3 ms, so the median is 0.3 ms, while the
  // first few hundred samples alone (or the last few hundred) have a median of 0.6 ms.
  const int warmup = 2, n = 1001, slow = 200;
  ch00::support::reset_log(stream.get());
  Probe probe(stream.get(), [&](int call) {
    const int k = call - warmup;
    return k < 0 ? 600.0 : (k < slow || k >= n - slow) ? 600.0 : 300.0;
  });
  const ch00::TimerOptions opt{.warmup = warmup, .samples = n, .cold_cache = false};
  double got = 0;
  {
    // Shown if the timer crashes (a signal) or throws.
    INFO("rule 6 (many samples): options.samples was 1001. If this test crashed or threw, look for samples "
         "stored past the end of a fixed-size array (float samples[64]): writing past it overwrites the "
         "stack.\nhint: keep the samples in a std::vector<float> (reserve(options.samples), push_back).");
    got = ch00::time_work_ms(probe.work(), stream.get(), opt);
  }
  wb::testing::record_metric("reported_ms_1001_samples", got);
  check_called_on_stream(probe);
  if (probe.calls != warmup + n)
    FAIL("rule 2 and rule 6 (the options are the contract): " << options_string(opt) << " ask for "
         << warmup + n << " calls of the work; your timer made " << probe.calls
         << ".\nhint: loop options.samples times whatever the count: no fixed-size array, no cap.");
  if (std::abs(got - 0.3) > 0.06 * 0.3 + 0.02)
    FAIL("rule 6 (the median of all the samples): of 1001 samples (after " << warmup
         << " warmup calls), the first and the last 200 take 0.6 ms and the 601 in between 0.3 ms: the median is "
         << ms(0.3) << ", your timer reported " << ms(got)
         << ". Near 0.6 ms, it kept only some of the samples (the first or the last few hundred); elsewhere, "
            "it read values that are not samples.\nhint: keep every sample in a std::vector<float> "
            "(reserve(options.samples), push_back), then sort it and take the middle one.");
}
