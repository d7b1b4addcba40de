#include "grader/roster.hpp"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <iomanip>
#include <map>
#include <mutex>
#include <optional>
#include <ostream>
#include <set>
#include <thread>

#include "grader/archive.hpp"
#include "grader/build.hpp"
#include "grader/process.hpp"
#include "grader/report_writers.hpp"
#include "grader/util.hpp"

namespace wb::grader {

std::vector<RosterEntry> list_roster(const fs::path& roster, const fs::path& exclude, std::vector<std::string>* skipped) {
  if (!fs::exists(roster)) throw InputError("roster not found: " + roster.string());
  if (!fs::is_directory(roster))
    throw InputError("roster " + roster.string() + " must be a directory holding one directory or archive per student");
  std::vector<RosterEntry> entries;
  std::map<std::string, std::string> seen;
  for (const auto& e : fs::directory_iterator(roster)) {
    const std::string name = e.path().filename().string();
    if (name.empty() || name[0] == '.') continue;
    if (!exclude.empty() && path_inside(e.path(), exclude)) continue;
    const auto st = e.symlink_status();
    std::string student;
    if (fs::is_directory(st)) student = name;
    else if (fs::is_regular_file(st) && is_archive_path(e.path())) student = archive_stem(e.path());
    else {
      if (skipped) skipped->push_back(name + (fs::is_symlink(st) ? " (a symbolic link)" : " (not a directory or archive)"));
      continue;
    }
    RosterEntry entry{safe_name(student), name, e.path()};
    if (auto it = seen.find(entry.student); it != seen.end())
      throw InputError("roster " + roster.string() + ": '" + it->second + "' and '" + name +
                       "' would both be graded as student '" + entry.student + "'; rename one");
    seen[entry.student] = name;
    entries.push_back(entry);
  }
  if (entries.empty())
    throw InputError("roster " + roster.string() + " holds no submissions (one directory or .zip/.tar.gz per student)");
  std::sort(entries.begin(), entries.end(), [](const auto& a, const auto& b) { return a.student < b.student; });
  return entries;
}

json grade_entry(const RosterEntry& entry, const GradeOptions& options, const Workspace& ws, const fs::path& logs,
                 const std::vector<Chapter>& chapters) {
  try {
    return grade_submission(entry.path, entry.student, chapters, options, ws, logs);
  } catch (const InputError& e) {
    return ungradable_report(entry.path, entry.student, chapters, options, "invalid", e.what());
  } catch (const std::exception& e) {
    return ungradable_report(entry.path, entry.student, chapters, options, "error", e.what());
  }
}

namespace {

fs::path state_path(const fs::path& out) { return out / "grade-all.json"; }
fs::path students_dir(const fs::path& out) { return out / "students"; }
fs::path errors_dir(const fs::path& out) { return out / "errors"; }

bool is_done(const fs::path& out, const std::string& student) {
  const fs::path d = students_dir(out) / student;
  return fs::exists(d / "DONE") && fs::exists(d / "report.json");
}

std::vector<std::string> selected_ids(const GradeAllOptions& o) {
  std::vector<std::string> ids;
  for (const auto& c : o.chapters) ids.push_back(c.id);
  return ids;
}

// The run's identity: resuming with another rubric or chapter selection would mix grades.
json load_or_create_state(const GradeAllOptions& o, bool create) {
  const fs::path p = state_path(o.out);
  const json want_chapters = selected_ids(o);
  if (fs::exists(p)) {
    const json s = read_json_file(p, "grade-all state");
    if (s.value("rubric_digest", "") != o.grade.rubric.digest)
      throw InputError(o.out.string() + " holds a run graded with another rubric (" + s.value("rubric_source", "?") +
                       "); use a new --out, or --restart to grade everyone again");
    if (s.value("chapters", json::array()) != want_chapters)
      throw InputError(o.out.string() + " holds a run of chapters " + s.value("chapters", json::array()).dump() +
                       "; this run asks for " + want_chapters.dump() + ". Use a new --out, or --restart");
    if (o.grade.seed != 0 && s.value("seed", std::uint64_t{0}) != o.grade.seed)
      throw InputError(o.out.string() + " holds a run with another --seed; use a new --out, or --restart");
    return s;
  }
  if (!create)
    throw InputError("no grade-all run in " + o.out.string() + ": run `workbook grade-all ROSTER --out " +
                     o.out.string() + " --slurm` first");
  const std::uint64_t seed = o.grade.seed != 0 ? o.grade.seed : (random_u64() & ((1ULL << 53) - 1));
  json s = {{"schema", "workbook-grade-all/1"},
            {"roster", fs::absolute(o.roster).string()},
            {"seed", seed},
            {"rubric_source", o.grade.rubric.source},
            {"rubric_digest", o.grade.rubric.digest},
            {"chapters", want_chapters},
            {"created", utc_now_iso()}};
  write_text_atomic(p, s.dump(2) + "\n");
  ::chmod(p.c_str(), 0600);  // it holds the hidden seed
  return s;
}

// The gradebook from what is on disk now: finished students, grader errors, and the rest
// as pending.
void write_gradebook(const GradeAllOptions& o, const std::vector<RosterEntry>& entries) {
  std::vector<json> reports;
  for (const auto& e : entries) {
    const fs::path done = students_dir(o.out) / e.student / "report.json";
    const fs::path error = errors_dir(o.out) / (e.student + ".json");
    try {
      if (is_done(o.out, e.student)) {
        reports.push_back(read_json_file(done, "report"));
        continue;
      }
      if (fs::exists(error)) {
        reports.push_back(read_json_file(error, "report"));
        continue;
      }
    } catch (const std::exception&) {
    }
    reports.push_back({{"student", e.student}, {"status", "pending"}, {"score", 0.0}, {"max_score", 0.0},
                       {"chapters", json::array()}});
  }
  write_text_atomic(o.out / "gradebook.csv", render_gradebook_csv(reports));
}

// Moves a finished student's results into place in one rename.
void finalize(const GradeAllOptions& o, const RosterEntry& e, const json& report, const fs::path& tmp) {
  if (report.value("status", "") == "error") {
    // The grader failed, not the student: keep the report aside and retry on the next run.
    write_text_atomic(errors_dir(o.out) / (e.student + ".json"), report.dump(2) + "\n");
    std::error_code ec;
    fs::remove_all(tmp, ec);
    return;
  }
  write_reports(report, tmp, o.grade.rubric.visibility);
  write_text_atomic(tmp / "DONE", utc_now_iso() + "\n");
  const fs::path final_dir = students_dir(o.out) / e.student;
  std::error_code ec;
  if (fs::exists(final_dir)) fs::remove_all(final_dir, ec);  // a half-finished leftover (no DONE)
  fs::rename(tmp, final_dir);
  fs::remove(errors_dir(o.out) / (e.student + ".json"), ec);
}

std::string pad(const std::string& s, std::size_t n) { return s.size() >= n ? s : s + std::string(n - s.size(), ' '); }

class Lock {
 public:
  explicit Lock(const fs::path& path) {
    fd_ = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600);
    if (fd_ < 0 || ::flock(fd_, LOCK_EX | LOCK_NB) != 0)
      throw InputError("another grade-all is already working in " + path.parent_path().string());
  }
  ~Lock() {
    if (fd_ >= 0) ::close(fd_);
  }

 private:
  int fd_ = -1;
};

GradeFunction default_function(const GradeAllOptions& o) {
  if (o.grade_function) return o.grade_function;
  const auto chapters = o.chapters;
  return [chapters](const RosterEntry& e, const GradeOptions& g, const Workspace& ws, const fs::path& logs) {
    return grade_entry(e, g, ws, logs, chapters);
  };
}

fs::path work_root(const GradeAllOptions& o) { return o.work_dir.empty() ? o.out / ".work" : o.work_dir; }

}  // namespace

namespace {

// One grade-all run, in phases: prepare (restart, leftovers, what is pending), plan the
// workers, copy the pristine tree, grade with one thread per worker while the progress
// display runs, then clean up and summarize. The shared state is guarded by `mutex_`.
class GradeAllRun {
 public:
  GradeAllRun(const GradeAllOptions& o, std::ostream& log) : o_(o), log_(log) {}

  int run() {
    fs::create_directories(o_.out);
    Lock lock(o_.out / ".grade-all.lock");
    prepare();
    plan_workers();
    announce();
    work_ = work_root(o_);
    tree_ = work_ / "tree";
    if (!pending_.empty()) {
      log_ << "grade-all: copying the pristine workbook into " << tree_.string() << "\n";
      sync_source_tree(o_.grade.source_dir, tree_, {o_.out, work_});
    }
    write_gradebook(o_, entries_);
    grade_ = default_function(o_);
    t_start_ = std::chrono::steady_clock::now();
    start_workers();
    show_progress();
    for (auto& t : threads_) t.join();
    return finish();
  }

 private:
  // Phase 1: forget an earlier run when asked; drop leftovers; who still needs grading.
  void prepare() {
    if (o_.restart) {
      std::error_code ec;
      for (const fs::path& p : {students_dir(o_.out), errors_dir(o_.out), o_.out / "gradebook.csv", state_path(o_.out)})
        fs::remove_all(p, ec);
    }
    std::vector<std::string> skipped;
    entries_ = list_roster(o_.roster, o_.out, &skipped);
    for (const auto& s : skipped) log_ << "grade-all: skipping " << s << "\n";
    const json state = load_or_create_state(o_, true);
    base_seed_ = state["seed"];
    // Leftovers of an interrupted run: never results, always redone.
    fs::create_directories(students_dir(o_.out));
    for (const auto& e : fs::directory_iterator(students_dir(o_.out)))
      if (starts_with(e.path().filename().string(), ".tmp-")) fs::remove_all(e.path());
    for (const auto& e : entries_)
      if (!is_done(o_.out, e.student)) pending_.push_back(e);
    finished_ = entries_.size() - pending_.size();
  }

  // Phase 2: one worker per GPU (CPU only: a few), never more than there is work.
  void plan_workers() {
    gpu_mode_ = o_.grade.gpu_tests && !o_.gpus.empty();
    const unsigned cores = std::max(1u, std::thread::hardware_concurrency());
    workers_ = o_.workers > 0 ? o_.workers
               : gpu_mode_   ? static_cast<int>(o_.gpus.size())
                             : static_cast<int>(std::clamp(cores / 4, 1u, 4u));
    workers_ = std::max(1, std::min<int>(workers_, static_cast<int>(std::max<std::size_t>(pending_.size(), 1))));
    jobs_ = std::max(1, static_cast<int>(cores) / workers_);
    doing_.assign(static_cast<std::size_t>(workers_), "");
  }

  void announce() {
    log_ << "grade-all: " << entries_.size() << " submission(s) in " << o_.roster.string() << "; " << finished_
         << " already graded, " << pending_.size() << " to grade with " << workers_ << " worker(s)";
    if (gpu_mode_) log_ << " on GPU(s) " << join(o_.gpus, ", ");
    else log_ << ", CPU only (" << o_.grade.no_gpu_reason << "): GPU tests are reported as not gradable here";
    log_ << "\n";
    if (gpu_mode_ && workers_ > static_cast<int>(o_.gpus.size()))
      log_ << "grade-all: warning: " << workers_ << " workers share " << o_.gpus.size()
           << " GPU(s): timing tests running side by side disturb each other\n";
    log_.flush();
  }

  // On a terminal the status line is redrawn in place; elsewhere it is printed every minute.
  void clear_status() {
    if (status_shown_) log_ << "\r\033[K";
    status_shown_ = false;
  }

  // Takes the next pending student (under the lock); false when there is none.
  bool take(int k, const std::string& name, RosterEntry& e) {
    std::lock_guard g(mutex_);
    if (pending_.empty() || interrupted()) return false;
    e = pending_.front();
    pending_.pop_front();
    doing_[static_cast<std::size_t>(k)] = e.student + ": starting";
    if (o_.verbose) {
      clear_status();
      log_ << "[" << name << "] " << e.student << ": started\n" << std::flush;
    }
    return true;
  }

  GradeOptions options_for(int k, const std::string& name, const RosterEntry& e) {
    GradeOptions g = o_.grade;
    g.seed = student_seed(base_seed_, e.student);
    if (gpu_mode_) g.gpu = o_.gpus[static_cast<std::size_t>(k) % o_.gpus.size()];
    g.build_jobs = jobs_;
    g.progress = [this, k, name, student = e.student](const std::string& step) {
      std::lock_guard lg(mutex_);
      doing_[static_cast<std::size_t>(k)] = student + ": " + step;
      if (o_.verbose) {
        clear_status();
        log_ << "[" << name << "] " << student << ": " << step << "\n" << std::flush;
      }
    };
    return g;
  }

  // One line per graded student, then the gradebook again.
  void record_done(int k, const std::string& name, const RosterEntry& e, const json& report, double secs) {
    std::lock_guard lg(mutex_);
    doing_[static_cast<std::size_t>(k)].clear();
    clear_status();
    ++finished_;
    const std::string status = report.value("status", "");
    if (status == "error") ++errors_;
    log_ << "[" << std::setw(static_cast<int>(std::to_string(entries_.size()).size())) << finished_ << "/"
         << entries_.size() << "] " << pad(e.student, 20) << " " << std::setw(7)
         << format_points(report.value("score", 0.0)) << " / " << pad(format_points(report.value("max_score", 0.0)), 6)
         << " " << pad(status, 10) << " " << human_seconds(secs) << "  (" << name << ")";
    if (status == "invalid" || status == "error") log_ << "  " << clip_text(trim(report.value("error", "")), 1, 160);
    log_ << "\n" << std::flush;
    try {
      write_gradebook(o_, entries_);
    } catch (const std::exception& ex) {
      log_ << "grade-all: cannot write the gradebook: " << ex.what() << "\n" << std::flush;
    }
  }

  // Phase 3: a worker grades students until none is pending (or the run is interrupted).
  void worker(int k) {
    const std::string name = gpu_mode_ ? "gpu" + o_.gpus[static_cast<std::size_t>(k) % o_.gpus.size()]
                                       : "cpu" + std::to_string(k);
    const fs::path wdir = work_ / ("worker-" + std::to_string(k));
    const Workspace ws{tree_, wdir / "build", wdir / "scratch"};
    RosterEntry e;
    while (take(k, name, e)) {
      const GradeOptions g = options_for(k, name, e);
      const fs::path tmp = students_dir(o_.out) / (".tmp-" + e.student + "-" + random_hex(4));
      const auto t0 = std::chrono::steady_clock::now();
      json report;
      try {
        report = grade_(e, g, ws, tmp / "logs");
      } catch (const std::exception& ex) {
        report = ungradable_report(e.path, e.student, o_.chapters, g, "error", ex.what());
      }
      if (interrupted()) return;  // a half-graded student is never recorded
      try {
        finalize(o_, e, report, tmp);
      } catch (const std::exception& ex) {
        // Disk full, permissions: the student stays pending and the next run retries.
        std::lock_guard lg(mutex_);
        clear_status();
        log_ << "grade-all: cannot record " << e.student << "'s results: " << ex.what() << "\n" << std::flush;
        ++errors_;
        doing_[static_cast<std::size_t>(k)].clear();
        continue;
      }
      record_done(k, name, e, report, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    }
  }

  void start_workers() {
    running_ = static_cast<int>(std::min<std::size_t>(static_cast<std::size_t>(workers_), pending_.size()));
    for (int k = 0; k < running_; ++k)
      threads_.emplace_back([this, k] {
        worker(k);
        std::lock_guard lg(mutex_);
        if (--running_ == 0) all_done_.notify_all();
      });
  }

  // The progress display: who is being graded, and at which step.
  void show_progress() {
    std::unique_lock lk(mutex_);
    auto last_line = std::chrono::steady_clock::now();
    while (running_ > 0) {
      all_done_.wait_for(lk, std::chrono::seconds(1));
      if (running_ == 0) break;
      const auto now = std::chrono::steady_clock::now();
      if (!o_.live_status && now - last_line < std::chrono::seconds(60)) continue;
      last_line = now;
      std::vector<std::string> busy;
      for (const auto& d : doing_)
        if (!d.empty()) busy.push_back(d);
      const std::string line = "[" + std::to_string(finished_) + "/" + std::to_string(entries_.size()) + " done, " +
                               human_seconds(std::chrono::duration<double>(now - t_start_).count()) + "] " +
                               join(busy, " | ");
      if (o_.live_status) {
        log_ << "\r\033[K" << line.substr(0, 200) << std::flush;
        status_shown_ = true;
      } else {
        log_ << line << "\n" << std::flush;
      }
    }
    clear_status();
  }

  // Phase 4: the final gradebook, scratch removed, a summary; 1 when a grader error remains.
  int finish() {
    write_gradebook(o_, entries_);
    if (!o_.keep_work) {
      std::error_code ec;
      for (int k = 0; k < workers_; ++k) fs::remove_all(work_ / ("worker-" + std::to_string(k)) / "scratch", ec);
    }
    const double total = std::chrono::duration<double>(std::chrono::steady_clock::now() - t_start_).count();
    log_ << "grade-all: done in " << human_seconds(total) << ". Gradebook: " << (o_.out / "gradebook.csv").string()
         << "; reports: " << students_dir(o_.out).string() << "/<student>/\n";
    if (errors_ > 0) {
      log_ << "grade-all: " << errors_ << " submission(s) hit a grader error (see " << errors_dir(o_.out).string()
           << "); run the same command again to retry them\n";
      return 1;
    }
    return 0;
  }

  const GradeAllOptions& o_;
  std::ostream& log_;
  std::vector<RosterEntry> entries_;
  std::deque<RosterEntry> pending_;
  std::uint64_t base_seed_ = 0;
  bool gpu_mode_ = false;
  int workers_ = 1, jobs_ = 1;
  fs::path work_, tree_;
  GradeFunction grade_;
  std::chrono::steady_clock::time_point t_start_;
  std::vector<std::thread> threads_;
  std::mutex mutex_;
  std::condition_variable all_done_;
  std::size_t finished_ = 0;
  int running_ = 0;
  std::vector<std::string> doing_;  // per worker: "alice: 04: building"
  bool status_shown_ = false;
  int errors_ = 0;
};

}  // namespace

int grade_all(const GradeAllOptions& o, std::ostream& log) { return GradeAllRun(o, log).run(); }

int grade_task(const GradeAllOptions& o, int index, std::ostream& log) {
  const auto entries = list_roster(o.roster, o.out);
  const json state = load_or_create_state(o, false);
  if (state.contains("roster_size") && state["roster_size"].get<std::size_t>() != entries.size())
    throw InputError("the roster changed since the Slurm scripts were written (" +
                     std::to_string(state["roster_size"].get<std::size_t>()) + " submissions then, " +
                     std::to_string(entries.size()) + " now); write them again with --slurm");
  if (index < 0 || static_cast<std::size_t>(index) >= entries.size())
    throw InputError("--task " + std::to_string(index) + " is outside the roster (0 to " +
                     std::to_string(entries.size() - 1) + ")");
  const RosterEntry& e = entries[index];
  if (is_done(o.out, e.student)) {
    log << "grade-all: " << e.student << " is already graded\n";
    return 0;
  }
  const fs::path work = work_root(o) / ("task-" + std::to_string(index));
  Workspace ws{work / "tree", work / "build", work / "scratch"};
  sync_source_tree(o.grade.source_dir, ws.tree, {o.out, work_root(o)});
  GradeOptions g = o.grade;
  g.seed = student_seed(state["seed"].get<std::uint64_t>(), e.student);
  if (g.gpu_tests && !o.gpus.empty()) g.gpu = o.gpus.front();
  g.progress = [&](const std::string& step) { log << e.student << ": " << step << "\n" << std::flush; };
  fs::create_directories(students_dir(o.out));
  const fs::path tmp = students_dir(o.out) / (".tmp-" + e.student + "-" + random_hex(4));
  const json report = default_function(o)(e, g, ws, tmp / "logs");
  finalize(o, e, report, tmp);
  if (!o.keep_work) {
    std::error_code ec;
    fs::remove_all(work, ec);
  }
  log << e.student << ": " << format_points(report.value("score", 0.0)) << " / "
      << format_points(report.value("max_score", 0.0)) << " (" << report.value("status", "") << ")\n";
  return report.value("status", "") == "error" ? 1 : 0;
}

int merge_results(const GradeAllOptions& o, std::ostream& log) {
  const auto entries = list_roster(o.roster, o.out);
  load_or_create_state(o, false);
  write_gradebook(o, entries);
  std::vector<std::string> missing;
  for (const auto& e : entries)
    if (!is_done(o.out, e.student)) missing.push_back(e.student);
  log << "grade-all: gradebook written to " << (o.out / "gradebook.csv").string() << " ("
      << entries.size() - missing.size() << " of " << entries.size() << " graded)\n";
  if (!missing.empty()) {
    log << "grade-all: not graded yet: " << join(missing, ", ")
        << "\n  rerun their tasks (sbatch --array=<indices> grade.sbatch) or `workbook grade-all` here\n";
    return 1;
  }
  return 0;
}

void write_slurm_scripts(const GradeAllOptions& o, const std::vector<std::string>& sbatch_lines, std::ostream& log) {
  const auto entries = list_roster(o.roster, o.out);
  fs::create_directories(o.out);
  json state = load_or_create_state(o, true);
  state["roster_size"] = entries.size();
  write_text_atomic(state_path(o.out), state.dump(2) + "\n");
  ::chmod(state_path(o.out).c_str(), 0600);

  const fs::path dir = o.out / "slurm";
  fs::create_directories(dir / "logs");
  const std::string exe = shell_quote(self_executable().string());
  const std::string roster = shell_quote(fs::absolute(o.roster).string());
  const std::string out = shell_quote(fs::absolute(o.out).string());
  std::string pass;
  for (const auto& p : o.passthrough) pass += " " + shell_quote(p);

  std::string roster_list;
  for (std::size_t i = 0; i < entries.size(); ++i)
    roster_list += std::to_string(i) + "\t" + entries[i].student + "\t" + entries[i].path.string() + "\n";
  write_text_atomic(dir / "roster.tsv", roster_list);

  std::string grade = "#!/bin/bash\n# One task per submission (index = line of roster.tsv). Written by workbook grade-all --slurm.\n"
                      "#SBATCH --job-name=workbook-grade\n#SBATCH --array=0-" +
                      std::to_string(entries.size() - 1) +
                      "\n#SBATCH --gres=gpu:1\n#SBATCH --cpus-per-task=8\n#SBATCH --time=01:00:00\n"
                      "#SBATCH --output=" + (fs::absolute(dir) / "logs" / "grade-%A_%a.out").string() + "\n";
  for (const auto& l : sbatch_lines) grade += "#SBATCH " + l + "\n";
  grade += "set -euo pipefail\n"
           "work=\"${SLURM_TMPDIR:-${TMPDIR:-/tmp}}/workbook-grade-${SLURM_ARRAY_JOB_ID:-0}-${SLURM_ARRAY_TASK_ID}\"\n"
           "exec " + exe + " grade-all " + roster + " --out " + out + pass +
           " --task \"$SLURM_ARRAY_TASK_ID\" --work-dir \"$work\"\n";
  write_text_atomic(dir / "grade.sbatch", grade);

  std::string merge = "#!/bin/bash\n# Builds the gradebook once every task has ended. Written by workbook grade-all --slurm.\n"
                      "#SBATCH --job-name=workbook-merge\n#SBATCH --time=00:10:00\n#SBATCH --output=" +
                      (fs::absolute(dir) / "logs" / "merge-%j.out").string() + "\n";
  for (const auto& l : sbatch_lines)
    if (!starts_with(l, "--gres") && !starts_with(l, "--array")) merge += "#SBATCH " + l + "\n";
  merge += "set -euo pipefail\nexec " + exe + " grade-all " + roster + " --out " + out + pass + " --merge\n";
  write_text_atomic(dir / "merge.sbatch", merge);

  const std::string submit = "#!/bin/bash\n# Submits the grading array, then the merge step after it (whatever the tasks' outcome).\n"
                             "set -euo pipefail\ncd " + shell_quote(fs::absolute(dir).string()) +
                             "\njob=$(sbatch --parsable grade.sbatch)\n"
                             "sbatch --dependency=afterany:${job%%;*} merge.sbatch\n"
                             "echo \"grading job $job submitted; the gradebook will be " +
                             (fs::absolute(o.out) / "gradebook.csv").string() + "\"\n";
  write_text_atomic(dir / "submit.sh", submit);
  for (const char* f : {"grade.sbatch", "merge.sbatch", "submit.sh"}) fs::permissions(dir / f, fs::perms::owner_exec, fs::perm_options::add);
  log << "grade-all: Slurm scripts for " << entries.size() << " submission(s) written to " << dir.string()
      << "\n  submit with:  bash " << (dir / "submit.sh").string()
      << "\n  (each task grades one submission; the merge step writes " << (o.out / "gradebook.csv").string()
      << ")\n";
}

}  // namespace wb::grader
