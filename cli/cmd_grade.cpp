// `workbook grade SUBMISSION --out DIR` and `workbook grade-all ROSTER --out DIR`: grading
// for instructors (docs/grading.md). The engine lives in grader/; this file is options.
#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <iostream>
#include <memory>

#include "commands.hpp"
#include "grader/archive.hpp"
#include "grader/build.hpp"
#include "grader/grade.hpp"
#include "grader/process.hpp"
#include "grader/report_writers.hpp"
#include "grader/roster.hpp"
#include "grader/util.hpp"

namespace wb::cli {

namespace fs = std::filesystem;
using grader::InputError;
using nlohmann::json;

namespace {

// Options both commands share.
struct Common {
  std::string out;
  std::string rubric = std::string(WB_SOURCE_DIR) + "/data/rubric.json";
  std::vector<std::string> chapters;
  std::string seed;
  bool cpu_only = false;
  bool sanitize = false;
  double timeout = 0;
  std::string work_dir;
  bool keep_work = false;
  std::string cuda_arch;
  bool verbose = false;
};

void add_common(CLI::App* cmd, Common& c) {
  cmd->add_option("--out", c.out, "Directory for the results (created; nothing is written outside it)")->required();
  cmd->add_option("--rubric", c.rubric, "Rubric file: points, weights, pass marks, limits")->capture_default_str();
  cmd->add_option("--chapters", c.chapters, "Grade only these chapters, e.g. 04,05 (default: all)")->delimiter(',');
  cmd->add_option("--seed", c.seed, "Hidden base seed (default: a fresh random one, kept in the results)");
  cmd->add_flag("--cpu-only", c.cpu_only, "Compile and run host checks only; GPU tests are reported as not gradable here");
  cmd->add_flag("--sanitize", c.sanitize, "Also run each chapter's correctness tests under compute-sanitizer (memcheck, racecheck)");
  cmd->add_option("--timeout", c.timeout, "Time limit in seconds for every test binary (default: the rubric's, else the chapter's)");
  cmd->add_option("--work-dir", c.work_dir, "Scratch directory for copies and builds (default: <out>/.work); reusing one across runs saves rebuilding the library");
  cmd->add_flag("--keep-work", c.keep_work, "Keep the scratch directory (builds, extracted files) afterwards");
  cmd->add_option("--cuda-arch", c.cuda_arch, "CUDA architectures for the student builds (default: those of " WB_BINARY_DIR ")");
  cmd->add_flag("-v,--verbose", c.verbose, "Print each step");
}

std::uint64_t parse_seed(const std::string& s) {
  if (s.empty()) return 0;
  char* end = nullptr;
  const unsigned long long v = std::strtoull(s.c_str(), &end, 10);
  if (*end || v == 0) throw InputError("--seed must be a positive decimal integer, got '" + s + "'");
  return v;
}

grader::GradeOptions base_options(const Common& c, std::vector<grader::Chapter>& chapters_out) {
  grader::GradeOptions g;
  g.source_dir = WB_SOURCE_DIR;
  g.rubric = grader::load_rubric(c.rubric);
  const auto all = grader::discover_chapters(g.source_dir);
  const auto selected = grader::select_chapters(all, c.chapters);
  if (!c.chapters.empty())
    for (const auto& ch : selected) g.only_chapters.push_back(ch.id);
  chapters_out = all;
  for (const auto& [id, unused] : g.rubric.chapters) {
    bool known = false;
    for (const auto& ch : all) known = known || ch.id == id;
    if (!known) std::cerr << "workbook: note: the rubric has settings for chapter " << id << ", which does not exist\n";
  }
  // Missing editable files are filled from chapters/: it must hold the committed starters.
  if (const std::string note = grader::check_committed_starters(g.source_dir); !note.empty())
    std::cerr << "workbook: note: " << note << "\n";
  g.seed = parse_seed(c.seed);
  g.sanitize = c.sanitize;
  g.timeout_override_s = c.timeout;
  g.cuda_architectures = c.cuda_arch.empty() ? grader::cached_cuda_architectures(WB_BINARY_DIR) : c.cuda_arch;
  g.dependency_args = grader::cached_dependency_args(WB_BINARY_DIR);
  if (c.cpu_only) {
    g.gpu_tests = false;
    g.no_gpu_reason = "--cpu-only";
  } else if (grader::visible_gpus().empty()) {
    g.gpu_tests = false;
    g.no_gpu_reason = "no CUDA device on this machine";
  }
  return g;
}

void refuse_out_inside(const fs::path& out, const fs::path& input, const char* what) {
  if (grader::path_inside(out, input) && fs::is_directory(input))
    throw InputError(std::string("--out ") + out.string() + " is inside the " + what + " " + input.string() +
                     ": put the results somewhere else");
}

// Holds a directory for one grader at a time.
class DirLock {
 public:
  explicit DirLock(const fs::path& dir) {
    fs::create_directories(dir);
    fd_ = ::open((dir / ".lock").c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600);
    if (fd_ < 0 || ::flock(fd_, LOCK_EX | LOCK_NB) != 0)
      throw InputError("another grader is using " + dir.string() + "; wait for it or pick another --work-dir");
  }
  ~DirLock() {
    if (fd_ >= 0) ::close(fd_);
  }

 private:
  int fd_ = -1;
};

void print_summary(const json& report, const fs::path& out) {
  std::cout << "grade: " << report.value("student", "") << ": " << grader::format_points(report.value("score", 0.0))
            << " / " << grader::format_points(report.value("max_score", 0.0)) << " (" << report.value("status", "") << ")\n";
  if (!report.value("error", "").empty()) std::cout << "  " << report.value("error", "") << "\n";
  for (const auto& c : report["chapters"]) {
    std::cout << "  " << c.value("id", "") << " " << c.value("title", "") << ": " << c.value("label", "");
    const std::string reason = c.value("reason", "");
    if (!reason.empty() && reason != c.value("state", "")) std::cout << " [" << reason << "]";
    std::cout << "  " << grader::format_points(c.value("score", 0.0)) << " / "
              << grader::format_points(c.value("max_score", 0.0)) << "\n";
  }
  std::cout << "  report: " << (out / "report.md").string() << "\n";
}

int run_grade(const Common& c, const std::string& submission, const std::string& student_name,
              const std::string& expect) {
  grader::install_interrupt_handlers();
  const fs::path out = fs::absolute(c.out);
  const fs::path input = fs::absolute(submission);
  refuse_out_inside(out, input, "submission");
  std::vector<grader::Chapter> chapters;
  grader::GradeOptions g = base_options(c, chapters);
  if (g.seed == 0) g.seed = grader::random_u64() & ((1ULL << 53) - 1);
  const auto gpus = grader::visible_gpus();
  // One GPU per grading: the first visible one (the grader's own CUDA_VISIBLE_DEVICES is honoured).
  if (g.gpu_tests) g.gpu = gpus.front();
  if (c.verbose) g.progress = [](const std::string& s) { std::cerr << "grade: " << s << std::endl; };
  std::string student = student_name;
  if (student.empty()) {
    fs::path p = input;
    if (p.filename().empty()) p = p.parent_path();
    student = grader::safe_name(fs::is_regular_file(p) ? grader::archive_stem(p) : p.filename().string());
  }

  std::error_code ec;
  fs::create_directories(out, ec);
  if (ec) throw InputError("cannot create --out " + out.string() + ": " + ec.message());
  fs::remove_all(out / "logs", ec);  // an earlier grade's logs would mislead
  const bool own_work = c.work_dir.empty();
  const fs::path work = own_work ? out / ".work" : fs::absolute(c.work_dir);
  json report;
  {
    DirLock lock(work);
    // Held under the lock: the same scratch paths from one grade to the next let the build
    // reuse the objects of files that did not change.
    grader::Workspace ws{work / "tree", work / "build", work / "scratch"};
    try {
      if (!fs::exists(input)) throw InputError("submission not found: " + input.string());
      grader::sync_source_tree(g.source_dir, ws.tree, {out, work});
      report = grader::grade_submission(input, student, chapters, g, ws, out / "logs");
    } catch (const InputError& e) {
      report = grader::ungradable_report(input, student, chapters, g, "invalid", e.what());
    } catch (const std::exception& e) {
      report = grader::ungradable_report(input, student, chapters, g, "error", e.what());
    }
  }
  if (own_work && !c.keep_work) {
    std::error_code ec;
    fs::remove_all(work, ec);
  }
  if (fs::is_directory(out / "logs", ec) && fs::is_empty(out / "logs", ec)) fs::remove(out / "logs", ec);
  grader::write_reports(report, out, g.rubric.visibility);
  print_summary(report, out);
  // Said once the submission was read: an invalid one has nothing to grade on any machine.
  if (!g.gpu_tests && report.value("status", "") != "invalid")
    std::cerr << "grade: GPU tests were reported as not gradable here (" << g.no_gpu_reason << ")\n";

  int code = 0;
  const std::string status = report.value("status", "");
  if (status == "invalid") code = 2;
  if (status == "error") code = 3;
  if (!expect.empty()) {
    // A fixture file (grader/acceptance/*/expected.json) keeps its expectations under "expect".
    json expected = grader::read_json_file(expect, "expectations");
    if (expected.contains("expect")) expected = json(expected["expect"]);
    std::vector<std::string> skipped;
    const auto problems = grader::check_expectations(report, expected, skipped);
    for (const auto& s : skipped) std::cout << "  expectation not checkable here: " << s << "\n";
    for (const auto& p : problems) std::cout << "  EXPECTATION NOT MET: " << p << "\n";
    std::cout << (problems.empty() ? "  expectations met" : "  expectations NOT met") << " (" << expect << ")\n";
    code = problems.empty() ? 0 : 1;
  }
  return code;
}

}  // namespace

void register_grade(CLI::App& app) {
  // grade
  {
    struct Args {
      Common common;
      std::string submission, student, expect;
    };
    auto a = std::make_shared<Args>();
    auto* cmd = app.add_subcommand(
        "grade", "Grade one submission (a directory, .zip or .tar.gz): report.json, report.md, results.json, junit.xml");
    cmd->add_option("SUBMISSION", a->submission, "A student's copy of the workbook, or just their chapters")->required();
    add_common(cmd, a->common);
    cmd->add_option("--student", a->student, "Name in the reports (default: the submission's name)");
    cmd->add_option("--expect", a->expect, "Check the report against expectations (grader/acceptance/*/expected.json); exit 1 when not met");
    cmd->callback([a] {
      try {
        set_exit_code(run_grade(a->common, a->submission, a->student, a->expect));
      } catch (const InputError& e) {
        std::cerr << "workbook grade: " << e.what() << "\n";
        set_exit_code(2);
      } catch (const std::exception& e) {
        std::cerr << "workbook grade: internal error: " << e.what() << "\n";
        set_exit_code(3);
      }
    });
  }
  // grade-all
  {
    struct Args {
      Common common;
      std::string roster;
      std::vector<std::string> gpus;
      int jobs = 0;
      bool restart = false, slurm = false, merge = false;
      int task = -1;
      std::vector<std::string> sbatch;
    };
    auto a = std::make_shared<Args>();
    auto* cmd = app.add_subcommand(
        "grade-all", "Grade every submission in ROSTER in parallel (one worker per GPU), resumably, into a gradebook CSV");
    cmd->add_option("ROSTER", a->roster, "Directory with one directory or archive per student")->required();
    add_common(cmd, a->common);
    cmd->add_option("--gpus", a->gpus, "GPUs to use, e.g. 0,1 (default: every visible GPU)")->delimiter(',');
    cmd->add_option("--jobs", a->jobs, "Number of workers (default: one per GPU; CPU-only: a few)");
    cmd->add_flag("--restart", a->restart, "Forget the earlier run in --out and grade everyone again");
    cmd->add_flag("--slurm", a->slurm, "Write a Slurm array job (one submission per task) and a merge step, then stop");
    cmd->add_option("--sbatch-option", a->sbatch, "Extra #SBATCH line for --slurm, e.g. --sbatch-option=--partition=gpu");
    cmd->add_option("--task", a->task, "Grade only the N-th submission of the roster (what a Slurm task runs)");
    cmd->add_flag("--merge", a->merge, "Build the gradebook from finished tasks (the Slurm merge step)");
    cmd->callback([a] {
      try {
        grader::install_interrupt_handlers();
        const Common& c = a->common;
        grader::GradeAllOptions o;
        o.roster = fs::absolute(a->roster);
        o.out = fs::absolute(c.out);
        refuse_out_inside(o.roster, o.out, "--out");  // the roster inside --out would be odd but harmless
        o.work_dir = c.work_dir.empty() ? fs::path() : fs::absolute(c.work_dir);
        std::vector<grader::Chapter> all;
        o.grade = base_options(c, all);
        o.chapters = o.grade.only_chapters.empty() ? all : grader::select_chapters(all, o.grade.only_chapters);
        o.grade.only_chapters.clear();
        for (const auto& ch : o.chapters) o.grade.only_chapters.push_back(ch.id);
        if (c.chapters.empty()) o.grade.only_chapters.clear();
        const auto visible = grader::visible_gpus();
        o.gpus = a->gpus.empty() ? visible : a->gpus;
        for (const auto& g : a->gpus)
          if (std::find(visible.begin(), visible.end(), g) == visible.end())
            throw InputError("--gpus: GPU '" + g + "' is not visible here (visible: " +
                             (visible.empty() ? std::string("none") : grader::join(visible, ",")) + ")");
        if (!o.grade.gpu_tests) o.gpus.clear();
        o.workers = a->jobs;
        o.restart = a->restart;
        o.keep_work = c.keep_work;
        o.verbose = c.verbose;
        o.live_status = ::isatty(1) && !std::getenv("NO_COLOR");
        o.passthrough = {"--rubric", fs::absolute(c.rubric).string()};
        if (!c.chapters.empty()) o.passthrough.insert(o.passthrough.end(), {"--chapters", grader::join(c.chapters, ",")});
        if (c.timeout > 0) o.passthrough.insert(o.passthrough.end(), {"--timeout", grader::format_points(c.timeout)});
        if (c.sanitize) o.passthrough.push_back("--sanitize");
        if (c.cpu_only) o.passthrough.push_back("--cpu-only");
        if (!o.grade.cuda_architectures.empty())
          o.passthrough.insert(o.passthrough.end(), {"--cuda-arch", o.grade.cuda_architectures});
        if (a->slurm) {
          grader::write_slurm_scripts(o, a->sbatch, std::cout);
          set_exit_code(0);
        } else if (a->merge) {
          set_exit_code(grader::merge_results(o, std::cout));
        } else if (a->task >= 0) {
          set_exit_code(grader::grade_task(o, a->task, std::cout));
        } else {
          set_exit_code(grader::grade_all(o, std::cout));
        }
      } catch (const InputError& e) {
        std::cerr << "workbook grade-all: " << e.what() << "\n";
        set_exit_code(2);
      } catch (const std::exception& e) {
        std::cerr << "workbook grade-all: internal error: " << e.what() << "\n";
        set_exit_code(3);
      }
    });
  }
}

}  // namespace wb::cli
