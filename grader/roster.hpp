#pragma once
// grade-all: every submission of a class, one worker per local GPU (or CPU-only), with a
// progress display, a gradebook CSV, and resumption: a student's results are written into
// a temporary directory and renamed into place only when complete, so an interrupted run
// continues where it stopped and never loses or half-writes a finished student. For
// clusters it writes a Slurm array job (one submission per task) and a merge step.
#include <nlohmann/json.hpp>

#include <filesystem>
#include <functional>
#include <iosfwd>
#include <string>
#include <vector>

#include "grader/chapters.hpp"
#include "grader/grade.hpp"

namespace wb::grader {

struct RosterEntry {
  std::string student;           // safe name: the directory name under students/
  std::string name;              // as found in the roster
  std::filesystem::path path;
};

// One directory or archive per student; hidden entries and `exclude` are skipped; other
// files are listed in `skipped`. InputError when the roster is missing, empty or ambiguous.
std::vector<RosterEntry> list_roster(const std::filesystem::path& roster, const std::filesystem::path& exclude,
                                     std::vector<std::string>* skipped = nullptr);

using GradeFunction = std::function<nlohmann::json(const RosterEntry&, const GradeOptions&, const Workspace&,
                                                   const std::filesystem::path& logs_dir)>;

struct GradeAllOptions {
  std::filesystem::path roster;
  std::filesystem::path out;
  std::filesystem::path work_dir;      // default: <out>/.work
  GradeOptions grade;                  // per-student seed and GPU are filled in
  std::vector<Chapter> chapters;
  std::vector<std::string> gpus;       // CUDA_VISIBLE_DEVICES values, one worker each
  int workers = 0;                     // 0: one per GPU, or a CPU-only default
  bool restart = false;                // forget an earlier run in <out>
  bool keep_work = false;
  bool verbose = false;
  bool live_status = false;            // redraw a status line in place (a terminal)
  std::vector<std::string> passthrough;  // options repeated in the Slurm scripts
  GradeFunction grade_function;        // default: grade_submission (tests inject their own)
};

// The whole roster; returns the exit code (0: every student has a result).
int grade_all(const GradeAllOptions& options, std::ostream& log);
// Slurm: one task grades the `index`-th submission of the sorted roster.
int grade_task(const GradeAllOptions& options, int index, std::ostream& log);
// Slurm: the gradebook from the finished students; non-zero while some are missing.
int merge_results(const GradeAllOptions& options, std::ostream& log);
// Writes <out>/slurm/{grade.sbatch, merge.sbatch, submit.sh}.
void write_slurm_scripts(const GradeAllOptions& options, const std::vector<std::string>& sbatch_lines,
                         std::ostream& log);

// The default grade function: grade_submission, turning bad input into an "invalid"
// report and a grader failure into an "error" report.
nlohmann::json grade_entry(const RosterEntry& entry, const GradeOptions& options, const Workspace& ws,
                           const std::filesystem::path& logs_dir, const std::vector<Chapter>& chapters);

}  // namespace wb::grader
