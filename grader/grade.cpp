#include "grader/grade.hpp"
#include "grader/sanitize.hpp"

#include <cuda_runtime.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <functional>
#include <regex>
#include <thread>

#include "grader/build.hpp"
#include "grader/submission.hpp"
#include "grader/test_run.hpp"
#include "grader/util.hpp"
#include "wb/device.hpp"

#ifndef WB_GIT_REVISION
#define WB_GIT_REVISION "unknown"
#endif

namespace wb::grader {

std::vector<std::string> visible_gpus() {
  if (!wb::has_cuda_device()) return {};
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess || count <= 0) return {};
  std::vector<std::string> tokens;
  if (const char* env = std::getenv("CUDA_VISIBLE_DEVICES"); env && *env) {
    std::string cur;
    for (char c : std::string(env) + ",") {
      if (c == ',') {
        if (!trim(cur).empty()) tokens.push_back(trim(cur));
        cur.clear();
      } else {
        cur += c;
      }
    }
    if (tokens.size() > static_cast<std::size_t>(count)) tokens.resize(count);
    return tokens;
  }
  for (int i = 0; i < count; ++i) tokens.push_back(std::to_string(i));
  return tokens;
}

std::uint64_t student_seed(std::uint64_t base, const std::string& student) {
  // Decimal seeds below 2^53 stay exact in every JSON reader.
  return splitmix64(base ^ fnv1a64(student)) & ((1ULL << 53) - 1);
}

namespace {

json grader_json(const GradeOptions& o) {
  char host[256] = {0};
  ::gethostname(host, sizeof host - 1);
  return {{"version", "workbook-grader/1"},
          {"git_revision", WB_GIT_REVISION},
          {"host", host},
          {"gpu_tests", o.gpu_tests},
          {"no_gpu_reason", o.gpu_tests ? "" : o.no_gpu_reason},
          {"gpu", o.gpu ? json(*o.gpu) : json(nullptr)},
          {"sanitize", o.sanitize}};
}

json run_summary(const TestRun& r) {
  return {{"binary", r.binary},        {"outcome", r.outcome},       {"problem", r.problem},
          {"exit_code", r.exit_code},  {"signal", r.signal},         {"seconds", round2(r.seconds)},
          {"timeout_s", r.timeout_s},  {"device", r.device},         {"warnings", r.warnings},
          {"output_tail", tail_lines(r.output, 40)}};
}

// Pass marks that apply to a test, evaluated on its metrics.
json evaluate_marks(const std::vector<PassMark>& marks, const CaseResult& c, bool& all_ok) {
  json out = json::array();
  all_ok = true;
  for (const auto& m : marks) {
    if (!m.applies_to(c.name)) continue;
    json e = {{"metric", m.metric}, {"mark", m.describe()}, {"note", m.note}};
    if (!c.metrics.contains(m.metric) || !c.metrics[m.metric].is_number()) {
      e["value"] = nullptr;
      e["ok"] = false;
      e["problem"] = "the test did not record " + m.metric;
    } else {
      const double v = c.metrics[m.metric].get<double>();
      const bool ok = (!m.min || v >= *m.min) && (!m.max || v <= *m.max);
      e["value"] = v;
      e["ok"] = ok;
    }
    all_ok = all_ok && e["ok"].get<bool>();
    out.push_back(e);
  }
  return out;
}

}  // namespace

json score_chapter(const Chapter& chapter, const ChapterRuns& runs, const Verdict& verdict,
                   const Rubric& rubric, const json& sanitizer) {
  const auto kinds = chapter.kinds();
  const std::string gate = kinds.empty() ? "correctness" : kinds.front();
  const auto& cr = rubric.for_chapter(chapter.id);
  const bool judged = verdict.state != ChapterState::missing && verdict.state != ChapterState::rejected && verdict.state != ChapterState::compile_error;

  bool gate_complete = false;
  json out_kinds = json::array();
  double total = 0, max_total = 0;
  for (const auto& kind : kinds) {
    const double points = rubric.points(chapter.id, kind);
    max_total += points;
    json k = {{"kind", kind}, {"max_score", points}, {"score", 0.0}, {"tests", json::array()}};
    const TestRun* run = nullptr;
    for (const auto& r : runs.runs)
      if (r.kind == kind) run = &r;
    if (!judged) {
      k["status"] = "not_run";
      k["note"] = verdict.label;
    } else if (!run || run->outcome == RunOutcome::not_run) {
      k["status"] = kind == gate ? "not_run" : "gated";
      k["note"] = run && !run->problem.empty() ? run->problem : "not run";
    } else if (run->outcome == RunOutcome::not_gradable || run->all_skipped()) {
      k["status"] = "not_gradable";
      k["note"] = "GPU tests could not run here (no CUDA device): skipped, not passed";
      k["run"] = run_summary(*run);
    } else if (!run->completed()) {
      k["status"] = "failed_to_run";
      k["note"] = run->problem;
      k["run"] = run_summary(*run);
    } else {
      k["status"] = "scored";
      k["run"] = run_summary(*run);
      // A test skipped for a reason of its own (optional data not provided here) is not
      // counted either way; one skipped for lack of a GPU makes the chapter not gradable.
      auto weight_of = [&](const CaseResult& c) { return c.skipped_optional() ? 0.0 : rubric.weight(chapter.id, c.name); };
      double weight_sum = 0;
      for (const auto& c : run->cases) weight_sum += weight_of(c);
      double earned = 0;
      bool every_passed = !run->cases.empty();
      for (const auto& c : run->cases) {
        const double w = weight_of(c);
        const double case_max = weight_sum > 0 ? points * w / weight_sum : 0;
        bool marks_ok = true;
        json marks = kind == gate ? json::array() : evaluate_marks(cr.pass_marks, c, marks_ok);
        const bool ok = c.status == "passed" && marks_ok;
        every_passed = every_passed && (c.status == "passed" || c.skipped_optional());
        const double got = ok ? case_max : 0;
        earned += got;
        json t = {{"name", c.name},        {"status", c.status},   {"reason", c.reason},
                  {"score", round2(got)},  {"max_score", round2(case_max)},
                  {"message", c.message},  {"hint", c.hint},       {"duration_s", round2(c.seconds)},
                  {"metrics", c.metrics},  {"notes", c.notes},     {"pass_marks", marks}};
        if (c.status == "passed" && !marks_ok) t["reason"] = "below_pass_mark";
        k["tests"].push_back(t);
      }
      if (kind == gate) gate_complete = every_passed;
      k["score"] = round2(earned);
    }
    // Correctness gates every other kind.
    if (kind != gate && !gate_complete && k["status"] == "scored") {
      k["status"] = "gated";
      k["score"] = 0.0;
      for (auto& t : k["tests"]) t["score"] = 0.0;
    }
    if (kind == gate && k["status"] == "scored" && rubric.sanitizer_penalty > 0 && sanitizer.is_array()) {
      bool errors = false;
      for (const auto& s : sanitizer) errors = errors || s.value("errors", 0) > 0;
      if (errors) {
        k["score"] = round2(k["score"].get<double>() * (1 - rubric.sanitizer_penalty));
        k["note"] = "sanitizer errors: " + format_points(rubric.sanitizer_penalty * 100) + "% of these points lost";
      }
    }
    total += k["score"].get<double>();
    out_kinds.push_back(k);
  }
  return {{"score", round2(total)}, {"max_score", round2(max_total)}, {"kinds", out_kinds}};
}

namespace {

// A timing test can pass its own threshold and still miss a stricter pass mark of the
// rubric: the chapter then reads "passing correctness", with the mark that was missed.
Verdict apply_pass_marks(Verdict v, const json& score) {
  if (v.state != ChapterState::passing_timing) return v;
  for (const auto& k : score["kinds"]) {
    for (const auto& t : k.value("tests", json::array())) {
      if (t.value("reason", "") != "below_pass_mark") continue;
      v.state = ChapterState::passing_correctness;
      v.label = state_label(v.state);
      v.complete = false;
      v.reason = "below_pass_mark";
      v.test = t.value("name", "");
      v.kind = k.value("kind", "");
      std::vector<std::string> missed;
      for (const auto& m : t.value("pass_marks", json::array())) {
        if (m.value("ok", false)) continue;
        const json value = m.value("value", json(nullptr));
        missed.push_back(m.value("metric", "") + " = " +
                         (value.is_number() ? format_points(value.get<double>()) : std::string("not measured")) +
                         ", the pass mark is " + m.value("mark", ""));
      }
      v.message = "\"" + v.test + "\" passed its own check but not the rubric's pass mark: " + join(missed, "; ");
      v.hint = "the instructor's rubric asks for more than the test's own threshold: see the timing table";
      return v;
    }
  }
  return v;
}

json chapter_json(const Chapter& c, const Verdict& v0, const json& score) {
  const Verdict v = apply_pass_marks(v0, score);
  return {{"id", c.id},
          {"slug", c.slug},
          {"title", c.title},
          {"state", v.state},
          {"label", v.label},
          {"reason", v.reason},
          {"message", v.message},
          {"hint", v.hint},
          {"test", v.test},
          {"kind", v.kind},
          {"complete", v.complete},
          {"gradable", v.gradable},
          {"score", score["score"]},
          {"max_score", score["max_score"]},
          {"kinds", score["kinds"]}};
}

json sum_report(json report) {
  double score = 0, max_score = 0;
  bool gradable = true;
  for (const auto& c : report["chapters"]) {
    score += c["score"].get<double>();
    max_score += c["max_score"].get<double>();
    gradable = gradable && c["gradable"].get<bool>();
  }
  report["score"] = round2(score);
  report["max_score"] = round2(max_score);
  if (report["status"] == "graded" && !gradable) report["status"] = "incomplete";
  return report;
}

std::string first_error_line(const std::string& text) { return clip_text(trim(text), 1, 300); }

// compute-sanitizer over the correctness binary: errors per tool.
json run_sanitizer(const fs::path& binary, const Chapter& c, const GradeOptions& o, const Workspace& ws,
                   const fs::path& logs, const ChapterRuns& runs) {
  // racecheck runs the cases the chapter's correctness run reported, one by one.
  std::vector<std::string> cases;
  for (const TestRun& run : runs.runs)
    if (run.kind == c.kinds().front() && run.completed()) cases = case_names(run);
  json out = json::array();
  for (const auto& name : o.rubric.sanitizer_tools) {
    if (o.progress) o.progress(c.id + ": compute-sanitizer " + name);
    TestRunOptions t;
    t.binary = binary;
    t.chapter_id = c.id;
    t.kind = "correctness";
    t.scratch = ws.scratch / "runs";
    t.seed = o.seed;
    t.gpu = o.gpu;
    t.limits.timeout_s = o.rubric.sanitizer_timeout_s;
    t.limits.file_size_bytes = static_cast<std::uint64_t>(o.rubric.limits.file_size_mb * (1 << 20));
    t.limits.output_bytes = 1u << 20;
    const int jobs = o.rubric.sanitizer_jobs > 0 ? o.rubric.sanitizer_jobs : default_sanitizer_jobs();
    const SanitizerResult r = run_sanitizer_tool(name, t, jobs, cases);
    if (r.ran || !r.output.empty()) write_text_atomic(logs / (c.id + "-sanitizer-" + name + ".log"), r.output);
    out.push_back(r.to_json());
  }
  return out;
}

}  // namespace

json ungradable_report(const fs::path& submission, const std::string& student,
                       const std::vector<Chapter>& chapters, const GradeOptions& o,
                       const std::string& status, const std::string& error) {
  json report = {{"schema", kReportSchema},
                 {"student", student},
                 {"status", status},
                 {"error", error},
                 {"submission", {{"input", submission.string()}}},
                 {"graded_at", utc_now_iso()},
                 {"duration_s", 0},
                 {"seed", o.seed},
                 {"grader", grader_json(o)},
                 {"rubric", {{"source", o.rubric.source}, {"digest", o.rubric.digest}}},
                 {"chapters", json::array()}};
  for (const auto& c : chapters) {
    if (!o.only_chapters.empty() &&
        std::find(o.only_chapters.begin(), o.only_chapters.end(), c.id) == o.only_chapters.end())
      continue;
    ChapterRuns runs;
    runs.missing = true;
    runs.missing_detail = error;
    Verdict v = judge_chapter(c, runs);
    v.reason = status == "invalid" ? "invalid_submission" : "grader_error";
    report["chapters"].push_back(chapter_json(c, v, score_chapter(c, runs, v, o.rubric, json())));
  }
  return sum_report(report);
}

namespace {

// What grading found per chapter, filled phase by phase.
struct Findings {
  std::map<std::string, ChapterRuns> runs;
  std::map<std::string, std::vector<Flag>> flags;
  std::map<std::string, json> sanitizer;
};

using Say = std::function<void(const std::string&)>;

std::vector<Chapter> chapters_to_grade(const std::vector<Chapter>& all, const GradeOptions& o) {
  std::vector<Chapter> chapters;
  for (const auto& c : all)
    if (o.only_chapters.empty() || std::find(o.only_chapters.begin(), o.only_chapters.end(), c.id) != o.only_chapters.end())
      chapters.push_back(c);
  return chapters;
}

// Phase 1: which chapters are missing, rejected before building, or to be built.
std::vector<std::string> sort_submitted(const std::vector<Chapter>& chapters, const PreparedSubmission& sub,
                                        Findings& f) {
  std::vector<std::string> to_build;
  for (const auto& c : chapters) {
    const SubmittedChapter& sc = sub.chapters.at(c.id);
    ChapterRuns& r = f.runs[c.id];
    f.flags[c.id] = sc.flags;
    if (!sc.present) {
      r.missing = true;
      r.missing_detail = "no file of this chapter in the submission (looked for " + join(c.editable, ", ") +
                         " under " + (sub.layout == Layout::workbook ? sub.prefix + "chapters/" : sub.prefix) +
                         c.slug + "/)";
    } else if (!sc.reject_reason.empty()) {
      r.rejected = true;
      r.reject_reason = sc.reject_reason;
      r.reject_detail = sc.reject_detail;
    } else {
      to_build.push_back(c.id);
    }
  }
  return to_build;
}

BuildSettings build_settings(const Workspace& ws, const PreparedSubmission& sub, const GradeOptions& o) {
  BuildSettings bs;
  bs.tree = ws.tree;
  bs.build_dir = ws.build;
  bs.student_root = sub.student_root;
  bs.scratch = ws.scratch;
  bs.cuda_architectures = o.cuda_architectures;
  bs.dependency_args = o.dependency_args;
  bs.jobs = o.build_jobs;
  bs.timeout_s = o.rubric.limits.build_timeout_s;
  return bs;
}

// Phase 2: configure the pristine tree for the chapters to build. Failing to configure is
// the grader's problem, not the student's: a runtime_error, reported as a grader error.
void configure(const BuildSettings& bs, const std::vector<std::string>& to_build, const fs::path& logs,
               const Say& say) {
  if (to_build.empty()) return;
  say("configuring");
  remove_student_binaries(bs.build_dir);
  const ProcessResult conf = configure_student_build(bs, to_build);
  write_text_atomic(logs / "configure.log", printable(conf.output));
  if (!conf.ok())
    throw std::runtime_error("the pristine workbook did not configure (" + conf.describe(bs.timeout_s) + "); see " +
                             (logs / "configure.log").string() + ":\n" + tail_lines(printable(conf.output), 15));
}

// Phase 3: build each chapter on its own and check its objects.
void build_chapters(const std::vector<Chapter>& chapters, const BuildSettings& bs, const GradeOptions& o,
                    const fs::path& logs, Findings& f, const Say& say) {
  // What chapter code may not be compiled with: the tests (CPU references, harness), the
  // grader, the solutions; in the grading tree and in the instructor's own tree (an absolute
  // #include). The grading tree itself may live inside the instructor's tree (--out there).
  std::vector<fs::path> forbidden_dirs = test_code_dirs(bs.tree);
  for (const auto& dir : test_code_dirs(o.source_dir)) forbidden_dirs.push_back(dir);
  for (const auto& c : chapters) {
    ChapterRuns& r = f.runs[c.id];
    if (r.missing || r.rejected) continue;
    say(c.id + ": building");
    r.build = build_chapter(bs, c);
    write_text_atomic(logs / (c.id + "-build.log"), r.build.log);
    if (!r.build.ok) continue;
    for (auto& flag : check_student_objects(bs, c, forbidden_dirs)) {
      if (flag.severity == Severity::reject && !r.rejected) {
        r.rejected = true;
        r.reject_reason = flag.code;
        r.reject_detail = flag.file + " " + flag.message;
      }
      f.flags[c.id].push_back(flag);
    }
  }
}

TestRunOptions test_options(const Chapter& c, const std::string& kind, const ChapterTest& test, const GradeOptions& o,
                            const Workspace& ws) {
  TestRunOptions t;
  t.binary = ws.build / "bin" / c.binary(kind);
  t.chapter_id = c.id;
  t.kind = kind;
  t.scratch = ws.scratch / "runs";
  t.seed = o.seed;
  t.gpu = o.gpu;
  const double timeout = o.timeout_override_s > 0 ? o.timeout_override_s : o.rubric.timeout_s(c.id, test);
  t.limits.timeout_s = timeout;
  t.limits.cpu_s = timeout * std::clamp<unsigned>(std::thread::hardware_concurrency(), 1u, 8u) + 60;
  t.limits.file_size_bytes = static_cast<std::uint64_t>(o.rubric.limits.file_size_mb * (1 << 20));
  t.limits.memory_bytes = static_cast<std::uint64_t>(o.rubric.limits.test_memory_gb * (1ull << 30));
  t.limits.output_bytes = static_cast<std::size_t>(o.rubric.limits.output_kb * 1024);
  return t;
}

// Phase 4: a built chapter's tests, gate (correctness) first; the rest only when it passed.
void run_chapter_tests(const Chapter& c, const GradeOptions& o, const Workspace& ws, const fs::path& logs,
                       ChapterRuns& r, const Say& say) {
  const auto kinds = c.kinds();
  bool gate_passed = false, gate_not_gradable = false;
  for (const auto& kind : kinds) {
    const ChapterTest* test = c.test_of_kind(kind);
    TestRun run;
    run.kind = kind;
    run.binary = c.binary(kind);
    const bool is_gate = kind == kinds.front();
    if (!is_gate && !gate_passed && gate_not_gradable) {
      run.outcome = RunOutcome::not_gradable;
      run.problem = "not gradable here: the " + kinds.front() + " tests could not run (" + o.no_gpu_reason + ")";
    } else if (!is_gate && !gate_passed) {
      run.outcome = RunOutcome::not_run;
      run.problem = "not run: every " + kinds.front() + " test must pass first";
    } else if (test->gpu && !o.gpu_tests) {
      run.outcome = RunOutcome::not_gradable;
      run.problem = "GPU tests could not run here (" + o.no_gpu_reason + "): not gradable here";
    } else {
      say(c.id + ": " + kind + " tests");
      run = run_test_binary(test_options(c, kind, *test, o, ws));
      write_text_atomic(logs / (c.id + "-" + kind + ".log"), run.output);
    }
    if (is_gate) {
      gate_passed = run.completed() && !run.cases.empty();
      for (const auto& cs : run.cases) gate_passed = gate_passed && (cs.status == "passed" || cs.skipped_optional());
      gate_not_gradable = run.outcome == RunOutcome::not_gradable || run.all_skipped();
    }
    r.runs.push_back(std::move(run));
  }
}

// Phase 5: the report: verdict, score, files, flags, build and sanitizer per chapter.
json assemble_report(const std::string& student, const std::vector<Chapter>& chapters, const PreparedSubmission& sub,
                     Findings& f, const GradeOptions& o) {
  json report = {{"schema", kReportSchema},
                 {"student", student},
                 {"status", "graded"},
                 {"error", ""},
                 {"graded_at", utc_now_iso()},
                 {"seed", o.seed},
                 {"grader", grader_json(o)},
                 {"rubric", {{"source", o.rubric.source}, {"digest", o.rubric.digest}}},
                 {"chapters", json::array()}};
  json submission_json = sub.to_json();
  submission_json.erase("chapters");
  // Editable files the submission lacked: the committed starter was built in their place.
  json filled = json::object();
  for (const auto& [id, sc] : sub.chapters)
    if (sc.present && !sc.from_starter.empty()) filled[id] = sc.from_starter;
  submission_json["filled_from_starter"] = filled;
  report["submission"] = submission_json;
  std::string device;
  for (const auto& c : chapters) {
    const ChapterRuns& r = f.runs[c.id];
    for (const auto& run : r.runs)
      if (device.empty() && !run.device.empty()) device = run.device;
    const Verdict v = judge_chapter(c, r);
    const json san = f.sanitizer.count(c.id) ? f.sanitizer[c.id] : json();
    json cj = chapter_json(c, v, score_chapter(c, r, v, o.rubric, san));
    const SubmittedChapter& sc = sub.chapters.at(c.id);
    cj["files"] = {{"taken", sc.taken}, {"from_starter", sc.from_starter}, {"unchanged_starter", sc.unchanged_starter}};
    json fl = json::array();
    for (const auto& flag : f.flags[c.id]) fl.push_back(flag.to_json());
    cj["flags"] = fl;
    cj["build"] = r.build.to_json();
    cj["sanitizer"] = san.is_null() ? json::array() : san;
    report["chapters"].push_back(cj);
  }
  report["grader"]["device"] = device.empty() ? json(nullptr) : json(device);
  return report;
}

}  // namespace

json grade_submission(const fs::path& submission, const std::string& student, const std::vector<Chapter>& all,
                      const GradeOptions& o, const Workspace& ws, const fs::path& logs) {
  const auto t0 = std::chrono::steady_clock::now();
  const Say say = [&](const std::string& s) {
    if (o.progress) o.progress(s);
  };
  const std::vector<Chapter> chapters = chapters_to_grade(all, o);
  fs::create_directories(ws.scratch);

  say("reading the submission");
  const PreparedSubmission sub = prepare_submission(
      submission, chapters, {ws.tree, o.source_dir / "solutions"}, ws.scratch, o.rubric.limits);
  fs::create_directories(logs);  // only for a submission that could be read

  Findings f;
  const std::vector<std::string> to_build = sort_submitted(chapters, sub, f);
  const BuildSettings bs = build_settings(ws, sub, o);
  configure(bs, to_build, logs, say);
  build_chapters(chapters, bs, o, logs, f, say);
  for (const auto& c : chapters) {
    ChapterRuns& r = f.runs[c.id];
    if (r.missing || r.rejected || !r.build.ok) continue;
    run_chapter_tests(c, o, ws, logs, r, say);
    if (o.sanitize && o.gpu_tests)
      f.sanitizer[c.id] = run_sanitizer(ws.build / "bin" / c.binary(c.kinds().front()), c, o, ws, logs, r);
  }
  json report = assemble_report(student, chapters, sub, f, o);
  report["duration_s"] = round2(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  return sum_report(report);
}

std::vector<std::string> check_expectations(const json& report, const json& expected, std::vector<std::string>& skipped) {
  std::vector<std::string> problems;
  auto one_of = [](const json& want, const std::string& got) {
    if (want.is_string()) return want.get<std::string>() == got;
    if (want.is_array())
      for (const auto& w : want)
        if (w.is_string() && w.get<std::string>() == got) return true;
    return false;
  };
  const std::string status = report.value("status", "");
  if (expected.contains("status") && status == "incomplete" && one_of(expected["status"], "graded") &&
      !one_of(expected["status"], "incomplete"))
    skipped.push_back("status " + expected["status"].dump() + " (needs a GPU)");
  else if (expected.contains("status") && !one_of(expected["status"], status))
    problems.push_back("status is '" + status + "', expected " + expected["status"].dump());
  if (expected.contains("error")) {
    const std::regex re(expected["error"].get<std::string>(), std::regex::icase | std::regex::ECMAScript);
    if (!std::regex_search(report.value("error", ""), re))
      problems.push_back("error '" + first_error_line(report.value("error", "")) + "' does not match /" +
                         expected["error"].get<std::string>() + "/");
  }
  const json want_chapters = expected.value("chapters", json::object());
  for (const auto& c : report.value("chapters", json::array())) {
    const std::string id = c.value("id", "");
    json want;
    if (want_chapters.contains(id)) want = want_chapters[id];
    else if (want_chapters.contains("*")) want = want_chapters["*"];
    else continue;
    const std::string state = c.value("state", "");
    // A verdict that needs a GPU cannot be checked on a machine without one.
    if (!c.value("gradable", true) && (state == "not_gradable" || state == "passing_correctness")) {
      const bool wants_gpu_verdict = !want.contains("state") || !one_of(want["state"], state);
      if (wants_gpu_verdict) {
        skipped.push_back(id + ": expects " + want.dump() + " (needs a GPU)");
        continue;
      }
    }
    const std::string where = "chapter " + id + ": ";
    // A misspelt key would check nothing and pass: name it instead.
    for (const auto& [key, value] : want.items())
      if (!one_of(json::array({"state", "reason", "message", "max_score", "min_score", "may_score", "flag"}), key))
        problems.push_back(where + "unknown expectation '" + key + "'");
    if (want.contains("state") && !one_of(want["state"], state))
      problems.push_back(where + "state is '" + state + "', expected " + want["state"].dump() + " (" +
                         first_error_line(c.value("message", "")) + ")");
    if (want.contains("reason") && !one_of(want["reason"], c.value("reason", "")))
      problems.push_back(where + "reason is '" + c.value("reason", "") + "', expected " + want["reason"].dump() +
                         " (" + first_error_line(c.value("message", "")) + ")");
    if (want.contains("message")) {
      const std::regex re(want["message"].get<std::string>(), std::regex::icase | std::regex::ECMAScript);
      if (!std::regex_search(c.value("message", ""), re))
        problems.push_back(where + "message does not match /" + want["message"].get<std::string>() + "/: " +
                           clip_text(c.value("message", ""), 4, 400));
    }
    if (want.contains("max_score") && c.value("score", 0.0) > want["max_score"].get<double>() + 1e-9)
      problems.push_back(where + "scored " + format_points(c.value("score", 0.0)) + ", expected at most " +
                         format_points(want["max_score"].get<double>()));
    if (want.contains("min_score") && c.value("score", 0.0) < want["min_score"].get<double>() - 1e-9)
      problems.push_back(where + "scored " + format_points(c.value("score", 0.0)) + ", expected at least " +
                         format_points(want["min_score"].get<double>()));
    if (want.contains("may_score")) {  // only the tests whose names match may earn points
      const std::string pattern = want["may_score"].get<std::string>();
      const std::regex re(pattern, std::regex::icase | std::regex::ECMAScript);
      for (const auto& k : c.value("kinds", json::array()))
        for (const auto& t : k.value("tests", json::array()))
          if (t.value("score", 0.0) > 0 && !std::regex_search(t.value("name", ""), re))
            problems.push_back(where + "'" + t.value("name", "") + "' earned " + format_points(t.value("score", 0.0)) +
                               ", but only tests matching /" + pattern + "/ may score");
    }
    if (want.contains("flag")) {
      bool found = false;
      for (const auto& f : c.value("flags", json::array())) found = found || one_of(want["flag"], f.value("code", ""));
      if (!found) problems.push_back(where + "no flag " + want["flag"].dump() + " was raised");
    }
  }
  if (expected.contains("ignored")) {
    const std::regex re(expected["ignored"].get<std::string>(), std::regex::icase | std::regex::ECMAScript);
    bool found = false;
    for (const auto& i : report.value("submission", json::object()).value("ignored", json::array()))
      found = found || (i.is_string() && std::regex_search(i.get<std::string>(), re));
    if (!found) problems.push_back("no ignored file matches /" + expected["ignored"].get<std::string>() + "/");
  }
  if (expected.contains("full_marks") && expected["full_marks"].get<bool>() && status == "incomplete")
    skipped.push_back("full marks (needs a GPU)");
  if (expected.contains("full_marks") && expected["full_marks"].get<bool>() && status == "graded" &&
      report.value("score", 0.0) < report.value("max_score", 0.0) - 1e-9)
    problems.push_back("scored " + format_points(report.value("score", 0.0)) + " of " +
                       format_points(report.value("max_score", 0.0)) + ", expected full marks");
  return problems;
}

}  // namespace wb::grader
