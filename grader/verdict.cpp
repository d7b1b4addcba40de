#include "grader/verdict.hpp"

#include <csignal>

#include "grader/util.hpp"

namespace wb::grader {

json BuildOutcome::to_json() const {
  return {{"attempted", attempted}, {"ok", ok}, {"timed_out", timed_out}, {"seconds", seconds},
          {"excerpt", excerpt}};
}

BuildOutcome BuildOutcome::from_json(const json& j) {
  BuildOutcome b;
  b.attempted = j.value("attempted", false);
  b.ok = j.value("ok", false);
  b.timed_out = j.value("timed_out", false);
  b.seconds = j.value("seconds", 0.0);
  b.excerpt = j.value("excerpt", "");
  return b;
}

std::string state_label(ChapterState state) {
  switch (state) {
    case ChapterState::missing: return "not submitted";
    case ChapterState::rejected: return "rejected";
    case ChapterState::compile_error: return "compile error";
    case ChapterState::not_gradable: return "not gradable here";
    case ChapterState::todo: return "to do";
    case ChapterState::in_progress: return "in progress";
    case ChapterState::failing: return "failing";
    case ChapterState::passing_correctness: return "passing correctness";
    case ChapterState::passing_timing: return "passing timing";
  }
  return "unknown";
}

std::string default_hint(const std::string& reason, const TestRun* run) {
  if (reason == "compile_error")
    return "fix the first error first: the ones after it often follow from it";
  if (reason == "build_timeout")
    return "the compiler ran too long: look for a template or loop the compiler unrolls without end";
  if (reason == "timeout")
    return "look for a loop that never ends: a kernel loop whose bound or stride is wrong (a "
           "stride of 0), a thread waiting for a value no thread writes, or a __syncthreads() "
           "inside a branch that some threads of the block skip";
  if (reason == "crashed") {
    if (run && run->signal == SIGSEGV)
      return "a bad host pointer: a device pointer dereferenced on the host, a host pointer "
             "where cudaMemcpy expected another, or an index past the end of a std::vector";
    if (run && run->signal == SIGABRT)
      return "an exception escaped or the heap was corrupted: read the last lines of the output";
    return "read the last lines of the output for the cause";
  }
  if (reason == "memory")
    return "the process used too much host memory: look for buffers allocated on every call "
           "and never freed, or a size computed in elements where bytes were meant (or back)";
  if (reason == "no_report")
    return "chapter code must not call exit(), abort() or std::terminate: report errors by "
           "throwing (WB_CUDA does) so the test can say what went wrong";
  if (reason == "invalid_report")
    return "chapter code must not touch the test harness, its report, its environment or the process's exit";
  if (reason == "cuda_fault")
    return "a kernel touched memory outside its buffers: check the bounds test of the last "
           "block and the index arithmetic; `compute-sanitizer` names the line";
  if (reason == "out_of_memory")
    return "free what you allocate, and allocate once rather than on every call";
  if (reason == "not_started") return "the test binary could not be run on this machine";
  return "";
}

namespace {

Verdict make(ChapterState state) {
  Verdict v;
  v.state = state;
  v.label = state_label(state);
  return v;
}

// The first failed (or, failing that, to-do) case of a run.
const CaseResult* first_with(const TestRun& run, const std::string& status) {
  for (const auto& c : run.cases)
    if (c.status == status) return &c;
  return nullptr;
}

void from_case(Verdict& v, const TestRun& run, const CaseResult& c) {
  v.reason = c.reason.empty() ? c.status : c.reason;
  v.message = c.message;
  v.hint = c.hint.empty() ? default_hint(v.reason, &run) : c.hint;
  v.test = c.name;
  v.kind = run.kind;
}

void from_run_problem(Verdict& v, const TestRun& run) {
  v.reason = to_string(run.outcome);
  v.message = run.problem;
  const std::string tail = tail_lines(run.output, 12);
  if (!tail.empty() && run.outcome != RunOutcome::not_built && run.outcome != RunOutcome::not_run)
    v.message += "\nlast output:\n" + tail;
  v.hint = default_hint(to_string(run.outcome), &run);
  v.kind = run.kind;
}

}  // namespace

Verdict judge_chapter(const Chapter& chapter, const ChapterRuns& r) {
  if (r.missing) {
    Verdict v = make(ChapterState::missing);
    v.reason = "missing";
    v.message = r.missing_detail;
    return v;
  }
  if (r.rejected) {
    Verdict v = make(ChapterState::rejected);
    v.reason = r.reject_reason;
    v.message = r.reject_detail;
    return v;
  }
  if (r.build.attempted && !r.build.ok) {
    Verdict v = make(ChapterState::compile_error);
    v.reason = r.build.timed_out ? "build_timeout" : "compile_error";
    v.message = r.build.excerpt;
    v.hint = default_hint(v.reason);
    return v;
  }

  const auto kinds = chapter.kinds();
  const std::string gate = kinds.empty() ? "correctness" : kinds.front();
  bool gradable = true;

  // The gate (correctness): every run must complete, then its cases decide.
  std::vector<const TestRun*> gate_runs, other_runs;
  for (const auto& run : r.runs) (run.kind == gate ? gate_runs : other_runs).push_back(&run);
  for (const TestRun* run : gate_runs) {
    if (run->outcome == RunOutcome::not_gradable || run->all_skipped()) {
      gradable = false;
      continue;
    }
    if (!run->completed()) {
      Verdict v = make(ChapterState::failing);
      from_run_problem(v, *run);
      return v;
    }
  }
  int passed = 0, failed = 0, todo = 0, skipped = 0;
  const CaseResult* first_failed = nullptr;
  const CaseResult* first_todo = nullptr;
  const TestRun* failed_run = nullptr;
  const TestRun* todo_run = nullptr;
  for (const TestRun* run : gate_runs) {
    for (const auto& c : run->cases) {
      if (c.status == "passed") ++passed;
      if (c.skipped_no_device()) ++skipped;
      if (c.status == "failed") {
        if (!first_failed) first_failed = &c, failed_run = run;
        ++failed;
      }
      if (c.status == "todo") {
        if (!first_todo) first_todo = &c, todo_run = run;
        ++todo;
      }
    }
  }
  if (skipped > 0) gradable = false;
  if (failed > 0) {
    Verdict v = make(ChapterState::failing);
    from_case(v, *failed_run, *first_failed);
    v.gradable = gradable;
    return v;
  }
  if (todo > 0) {
    Verdict v = make(passed == 0 ? ChapterState::todo : ChapterState::in_progress);
    from_case(v, *todo_run, *first_todo);
    v.gradable = gradable;
    return v;
  }
  if (!gradable || gate_runs.empty() || passed == 0) {
    Verdict v = make(gradable ? ChapterState::failing : ChapterState::not_gradable);
    v.gradable = gradable;
    v.reason = gradable ? "no_tests" : "not_gradable";
    v.message = gradable ? "no " + gate + " test ran for this chapter"
                         : "GPU tests could not run here (no CUDA device): skipped, not passed";
    return v;
  }

  // Correctness passes; the other kinds (timing) decide the rest.
  Verdict v = make(ChapterState::passing_correctness);
  v.complete = true;
  for (const TestRun* run : other_runs) {
    if (run->outcome == RunOutcome::not_gradable || run->all_skipped()) {
      v.complete = false;
      v.gradable = false;
      if (v.message.empty()) {
        v.reason = "not_gradable";
        v.kind = run->kind;
        v.message = run->kind + " tests could not run here (no CUDA device): skipped, not passed";
      }
      continue;
    }
    if (!run->completed()) {
      v.complete = false;
      if (v.reason.empty() || v.reason == "not_gradable") from_run_problem(v, *run);
      continue;
    }
    const CaseResult* bad = first_with(*run, "failed");
    if (!bad) bad = first_with(*run, "todo");
    if (bad) {
      v.complete = false;
      if (v.reason.empty() || v.reason == "not_gradable") from_case(v, *run, *bad);
    }
    for (const auto& c : run->cases)
      if (c.skipped_no_device()) v.complete = false, v.gradable = false;
  }
  if (v.complete && !other_runs.empty()) {
    v.state = ChapterState::passing_timing;
    v.label = state_label(v.state);
  }
  return v;
}

}  // namespace wb::grader
