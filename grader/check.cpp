#include "grader/check.hpp"
#include "grader/sanitize.hpp"

#include <algorithm>
#include <optional>
#include <ostream>
#include <sstream>

#include "grader/build.hpp"
#include "grader/submission.hpp"
#include "grader/test_run.hpp"
#include "grader/util.hpp"

namespace wb::grader {

namespace {

const char* color_of(const std::string& state) {
  if (state == "passing_timing") return "\033[32m";
  if (state == "passing_correctness" || state == "in_progress" || state == "todo") return "\033[33m";
  if (state == "not_gradable" || state == "not_configured") return "\033[2m";
  return "\033[31m";
}

std::string indent(const std::string& text, const std::string& prefix) {
  std::string out;
  for (const auto& line : split_lines(text)) out += prefix + line + "\n";
  return out;
}

std::string counts(const ChapterRuns& runs) {
  std::vector<std::string> parts;
  for (const auto& run : runs.runs) {
    if (run.outcome == RunOutcome::not_run) continue;
    if (!run.completed()) {
      parts.push_back(run.kind + " did not finish");
      continue;
    }
    int passed = 0, todo = 0, skipped = 0, optional = 0;
    for (const auto& c : run.cases)
      passed += c.status == "passed", todo += c.status == "todo", skipped += c.skipped_no_device(),
          optional += c.skipped_optional();
    if (skipped == static_cast<int>(run.cases.size())) {
      parts.push_back(run.kind + " skipped");
      continue;
    }
    std::string p = std::to_string(passed) + "/" + std::to_string(run.cases.size() - optional) + " " + run.kind;
    if (todo) p += " (" + std::to_string(todo) + " to do)";
    if (optional) p += " (" + std::to_string(optional) + " skipped here)";
    parts.push_back(p);
  }
  return join(parts, ", ");
}

const TestRun* run_of_kind(const ChapterRuns& runs, const std::string& kind) {
  for (const auto& r : runs.runs)
    if (r.kind == kind) return &r;
  return nullptr;
}

// "00;04" as cached by CMake (unknown ids are simply not matched).
std::vector<std::string> select_ids_lenient(const std::string& list) {
  std::vector<std::string> ids;
  std::string cur;
  for (char ch : list + ";") {
    if (ch == ';' || ch == ',' || ch == ' ') {
      if (!cur.empty()) ids.push_back(cur);
      cur.clear();
    } else {
      cur += ch;
    }
  }
  return ids;
}

// What grading would reject in this chapter before running a test: the source scan and the
// checks of the built objects, `workbook grade`'s own. The first rejecting flag, if any.
std::optional<Flag> grader_rejection(const Chapter& chapter, const CheckOptions& o, const fs::path& student_root) {
  const auto forbidden_headers = test_only_headers(chapter, o.source_dir);
  for (const auto& file : chapter.editable) {
    std::string text;
    try {
      text = read_text_file(student_root / chapter.slug / file, 4u << 20);
    } catch (const std::exception&) {
      continue;  // the build said what is wrong with it
    }
    for (const auto& flag : scan_source(text, chapter.id, file, forbidden_headers))
      if (flag.severity == Severity::reject) return flag;
  }
  BuildSettings bs;
  bs.tree = o.source_dir;
  bs.build_dir = o.build_dir;
  bs.student_root = student_root;
  for (const auto& flag : check_student_objects(bs, chapter, test_code_dirs(o.source_dir)))
    if (flag.severity == Severity::reject) return flag;
  return std::nullopt;
}

}  // namespace

std::string reproduce_command(const fs::path& binary, std::uint64_t seed, const std::string& test) {
  // doctest filters split on commas; an escaped comma matches a literal one.
  std::string filter = test;
  replace_all(filter, ",", "\\,");
  return "WB_SEED=" + std::to_string(seed) + " " + shell_quote(binary.string()) + " " +
         shell_quote("--test-case=" + filter);
}

int check_exit_code(const std::vector<CheckedChapter>& chapters) {
  bool not_gradable = false;
  for (const auto& c : chapters) {
    if (!c.not_configured.empty()) return 1;
    if (c.verdict.state == ChapterState::not_gradable || (!c.verdict.gradable && c.verdict.state == ChapterState::passing_correctness)) {
      not_gradable = true;
      continue;
    }
    if (!c.verdict.complete) return 1;
  }
  return not_gradable ? 77 : 0;
}

std::string render_scorecard(const std::vector<CheckedChapter>& chapters, const CheckOptions& o) {
  std::ostringstream s;
  const char* reset = o.color ? "\033[0m" : "";
  std::size_t width = 0;
  for (const auto& c : chapters) width = std::max(width, c.chapter.title.size());
  int passing = 0, failing = 0, todo = 0, skipped = 0;
  for (const auto& c : chapters) {
    const Verdict& v = c.verdict;
    std::string state = c.not_configured.empty() ? to_string(v.state) : "not_configured";
    std::string label = c.not_configured.empty() ? v.label : "not in this build";
    if (state == "not_gradable") label = "skipped: no GPU";
    std::string title = c.chapter.title + " ";
    while (title.size() < width + 3) title += '.';
    std::string padded = label;
    while (padded.size() < 21) padded += ' ';
    s << "  " << c.chapter.id << "  " << title << " " << (o.color ? color_of(state) : "") << padded << reset;
    std::string detail = counts(c.runs);
    if (state == "not_gradable") detail = (c.runs.build.attempted ? "compiles; " : "") + std::string("GPU tests could not run here");
    if (state == "compile_error") detail = "see the first error below";
    s << " " << detail << "\n";

    if (state == "passing_timing") ++passing;
    else if (state == "not_gradable") ++skipped;
    else if (state == "todo" || state == "in_progress") ++todo;
    else if (state == "passing_correctness" && v.complete) ++passing;
    else ++failing;

    if (!c.not_configured.empty()) {
      s << indent(c.not_configured, "      ");
      continue;
    }
    if (state == "passing_timing" || state == "not_gradable" || (state == "passing_correctness" && v.complete)) continue;
    if (state == "passing_correctness" && !v.gradable && v.reason == "not_gradable") {
      s << "      timing tests could not run here (no CUDA device): skipped, not passed\n";
      continue;
    }
    // The first thing to fix, with its hint and a way to rerun exactly it.
    const bool todo_state = v.reason == "todo";
    if (!v.test.empty())
      s << "      " << (todo_state ? "next: " : "FAIL ") << v.test << (v.kind.empty() ? "" : "  [" + v.kind + "]") << "\n";
    std::string message = v.message;
    // The hint is printed on its own line below.
    std::vector<std::string> kept;
    for (const auto& line : split_lines(message))
      if (!starts_with(trim(line), "hint:")) kept.push_back(line);
    message = clip_text(join(kept, "\n"), o.verbose ? 200 : 14, o.verbose ? 20000 : 2400);
    if (!trim(message).empty()) s << indent(message, "        ");
    if (!v.hint.empty()) s << "        hint: " << v.hint << "\n";
    if (!v.test.empty() && !todo_state) {
      const TestRun* run = run_of_kind(c.runs, v.kind);
      if (run && run->seed)
        s << "        reproduce: "
          << reproduce_command(o.build_dir / "bin" / c.chapter.binary(v.kind), run->seed, v.test) << "\n";
    }
    if (o.verbose) {
      for (const auto& run : c.runs.runs)
        for (const auto& cs : run.cases)
          if ((cs.status == "failed" || cs.status == "todo") && cs.name != v.test)
            s << "      also " << (cs.status == "todo" ? "to do: " : "failing: ") << cs.name << "  [" << run.kind
              << "]\n"
              << indent(clip_text(cs.message, 6, 800), "        ");
    }
  }
  s << "\n";
  std::vector<std::string> parts;
  if (passing) parts.push_back(std::to_string(passing) + " passing");
  if (failing) parts.push_back(std::to_string(failing) + " failing");
  if (todo) parts.push_back(std::to_string(todo) + " to do");
  if (skipped) parts.push_back(std::to_string(skipped) + " skipped");
  s << (parts.empty() ? std::string("nothing checked") : join(parts, ", ")) << ".\n";
  if (skipped)
    s << "No CUDA device here: GPU tests were skipped, not passed. Run `./workbook check` on a machine "
         "with an NVIDIA GPU to grade them.\n";
  return s.str();
}

namespace {

// `check --sanitize`: the chapter's correctness tests again under each tool; the lines it
// prints name the kernel and its file:line (-lineinfo). Full output in the scratch logs.
std::string sanitize_chapter(const Chapter& chapter, const TestRun& gate, const TestRunOptions& gate_options,
                             const fs::path& scratch, int jobs, int& errors, std::ostream& progress) {
  const std::string head = "  " + chapter.id + " " + chapter.title + ": ";
  if (!gate.completed()) return head + "not run (the correctness tests did not finish)\n";
  if (gate.all_skipped()) return head + "not run (no CUDA device on this machine)\n";
  if (find_compute_sanitizer().empty())
    return head + "not run: compute-sanitizer was not found (PATH, $CUDA_HOME/bin, /usr/local/cuda/bin); "
                  "it comes with the CUDA toolkit\n";
  std::string text;
  for (const std::string tool : {"memcheck", "racecheck"}) {
    progress << "running " << chapter.binary("correctness") << " under compute-sanitizer " << tool
             << (tool == "racecheck" ? " (each test case on its own, " + std::to_string(jobs) + " at a time)" : "")
             << " ..." << std::endl;
    TestRunOptions t = gate_options;
    t.limits.timeout_s = std::max(kDefaultSanitizerTimeoutS, 10 * gate_options.limits.timeout_s);  // per racecheck case
    const SanitizerResult r = run_sanitizer_tool(tool, t, jobs, case_names(gate));
    const fs::path log = scratch / (chapter.id + "-sanitizer-" + tool + ".log");
    write_text_atomic(log, r.output);
    text += head + tool + ": ";
    if (!r.problem.empty()) text += "did not finish (" + r.problem + ")\n";
    else if (r.errors == 0) text += "no errors\n";
    else text += std::to_string(r.errors) + " error(s) (full output: " + log.string() + ")\n" + r.excerpt + "\n";
    errors += r.errors;
  }
  return text;
}

}  // namespace

int run_check(const CheckOptions& o, std::ostream& out, std::ostream& progress) {
  const auto all = discover_chapters(o.source_dir);
  const auto selected = select_chapters(all, o.chapters);
  if (!fs::exists(o.build_dir / "CMakeCache.txt"))
    throw InputError("no configured build in " + o.build_dir.string() +
                     ": configure it first, e.g. `cmake --preset default` in " + o.source_dir.string());
  const std::string builds = cached_variable(o.build_dir, "WB_BUILDS");
  if (!builds.empty() && builds.find("student") == std::string::npos)
    throw InputError("the build in " + o.build_dir.string() + " was configured with WB_BUILDS=" + builds +
                     ", without your (student) build: reconfigure with  cmake -B " + o.build_dir.string() +
                     " -DWB_BUILDS=\"solution;student\"");
  const std::string configured = cached_variable(o.build_dir, "WB_CHAPTERS");
  std::vector<std::string> configured_ids;
  for (const auto& c : all)
    for (const auto& id : select_ids_lenient(configured))
      if (c.id == id) configured_ids.push_back(c.id);
  const std::string student_root = cached_variable(o.build_dir, "WB_STUDENT_ROOT");

  out << "workbook check: your chapters from " << (student_root.empty() ? (o.source_dir / "chapters").string() : student_root)
      << ", built in " << o.build_dir.string() << "\n\n";
  out.flush();

  const fs::path scratch = o.build_dir / "check";
  fs::create_directories(scratch);
  std::vector<CheckedChapter> results;
  std::string sanitizer_report;
  int sanitizer_errors = 0;
  for (const auto& chapter : selected) {
    CheckedChapter cc{chapter, {}, {}, ""};
    if (!configured.empty() &&
        std::find(configured_ids.begin(), configured_ids.end(), chapter.id) == configured_ids.end()) {
      cc.not_configured = "this build was configured with WB_CHAPTERS=" + configured + "; add it with  cmake -B " +
                          o.build_dir.string() + " -DWB_CHAPTERS=\"" + configured + ";" + chapter.id + "\"";
      results.push_back(cc);
      continue;
    }
    std::vector<std::string> targets;
    for (const auto& kind : chapter.kinds()) targets.push_back(chapter.binary(kind));
    if (o.build) {
      progress << "building " << chapter.slug << " ..." << std::endl;
      cc.runs.build = build_targets(o.build_dir, targets, 1800, inherited_environment({}), 0,
                                    {o.source_dir, o.build_dir});
      write_text_atomic(scratch / (chapter.id + "-build.log"), cc.runs.build.log);
      if (!cc.runs.build.ok) {
        cc.runs.build.excerpt += "\n(full build output: " + (scratch / (chapter.id + "-build.log")).string() + ")";
        cc.verdict = judge_chapter(chapter, cc.runs);
        results.push_back(cc);
        continue;
      }
    }
    // What `workbook grade` would reject, said now rather than at grading time.
    const auto rejection =
        grader_rejection(chapter, o, student_root.empty() ? o.source_dir / "chapters" : fs::path(student_root));
    if (rejection) {
      cc.runs.rejected = true;
      cc.runs.reject_reason = rejection->code;
      cc.runs.reject_detail = rejection->file + (rejection->line ? ":" + std::to_string(rejection->line) : "") + " " +
                              rejection->message +
                              "\n`workbook grade` rejects this chapter (0 points) before running a test, so its "
                              "tests were not run here either";
      cc.verdict = judge_chapter(chapter, cc.runs);
      results.push_back(cc);
      continue;
    }
    bool gate_passed = false;
    const auto kinds = chapter.kinds();
    for (const auto& kind : kinds) {
      const bool is_gate = kind == kinds.front();
      TestRun run;
      run.kind = kind;
      run.binary = chapter.binary(kind);
      if (!is_gate && (!gate_passed || o.correctness_only)) {
        run.outcome = RunOutcome::not_run;
        run.problem = o.correctness_only ? "not run (--correctness-only)" : "not run: correctness first";
        cc.runs.runs.push_back(run);
        continue;
      }
      progress << "running " << chapter.binary(kind) << " ..." << std::endl;
      TestRunOptions t;
      t.binary = o.build_dir / "bin" / chapter.binary(kind);
      t.chapter_id = chapter.id;
      t.kind = kind;
      t.scratch = scratch / "runs";
      t.seed = o.seed;
      t.scrub_environment = false;
      t.limits.timeout_s = chapter.test_of_kind(kind)->timeout_s;
      t.limits.output_bytes = 1u << 20;
      run = run_test_binary(t);
      write_text_atomic(scratch / (chapter.id + "-" + kind + ".log"), run.output);
      if (run.outcome == RunOutcome::not_built)
        run.problem += " (run without --no-build, or build it: cmake --build " + o.build_dir.string() + ")";
      if (!run.completed() && run.outcome != RunOutcome::not_built)
        run.problem += "\n(full output: " + (scratch / (chapter.id + "-" + kind + ".log")).string() + ")";
      if (is_gate) {
        gate_passed = run.completed() && !run.cases.empty();
        for (const auto& cs : run.cases) gate_passed = gate_passed && (cs.status == "passed" || cs.skipped_optional());
        if (o.sanitize) sanitizer_report += sanitize_chapter(chapter, run, t, scratch,
                                                        o.sanitize_jobs > 0 ? o.sanitize_jobs : default_sanitizer_jobs(),
                                                        sanitizer_errors, progress);
      }
      cc.runs.runs.push_back(std::move(run));
    }
    cc.verdict = judge_chapter(chapter, cc.runs);
    results.push_back(cc);
  }
  out << render_scorecard(results, o);
  if (o.sanitize) out << "\ncompute-sanitizer (correctness tests):\n" << sanitizer_report;
  const int code = check_exit_code(results);
  return sanitizer_errors > 0 && code != 2 ? 1 : code;
}

}  // namespace wb::grader
