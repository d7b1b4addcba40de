// grade-all: roster listing, parallel workers, atomic results, resumption after a kill,
// retries of grader errors, and the Slurm path. The grading itself is a stand-in here.
#include <doctest/doctest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <mutex>
#include <set>
#include <sstream>

#include "grader/report_writers.hpp"
#include "grader/roster.hpp"
#include "grader/util.hpp"
#include "test_common.hpp"

using namespace wb::grader;
using grader_test::TempDir;
using grader_test::write;
using nlohmann::json;

namespace {

struct Class {
  TempDir dir;
  GradeAllOptions options;
  std::atomic<int> calls{0};
  std::mutex mutex;
  std::set<std::string> graded;

  Class() {
    for (const char* s : {"alice", "bob", "carol", "dave", "erin"}) write(dir / "roster" / s / "chapters/07_x/k.cu", "x");
    write(dir / "roster/frank.tar.gz", "not read by the stand-in");
    write(dir / "roster/README.txt", "instructions");
    write(dir / "pristine/tests/07_x/chapter.json", "{}");
    options.roster = dir / "roster";
    options.out = dir / "out";
    options.grade.source_dir = dir / "pristine";
    options.grade.rubric = parse_rubric(json::parse(R"({"schema":"workbook-rubric/1"})"), "test");
    options.grade.gpu_tests = false;
    options.grade.no_gpu_reason = "test";
    options.workers = 2;
    Chapter c;
    c.id = "07";
    c.slug = "07_x";
    c.title = "X";
    options.chapters = {c};
    options.grade_function = [this](const RosterEntry& e, const GradeOptions& g, const Workspace&, const fs::path& logs) {
      ++calls;
      {
        std::lock_guard lock(mutex);
        graded.insert(e.student);
      }
      write(logs / "07-build.log", "log of " + e.student);
      return report_for(e.student, g.seed);
    };
  }

  // A deterministic report: the score depends on the student only.
  static json report_for(const std::string& student, std::uint64_t seed) {
    const double score = static_cast<double>(student.size());
    json chapter = {{"id", "07"}, {"slug", "07_x"}, {"title", "X"}, {"state", "failing"}, {"label", "failing"},
                    {"reason", "wrong_answer"}, {"message", ""}, {"hint", ""}, {"score", score},
                    {"max_score", 10}, {"gradable", true}, {"kinds", json::array()}};
    json r = {{"schema", "workbook-grade-report/1"}, {"student", student}, {"status", "graded"}, {"error", ""},
              {"seed", seed}, {"score", score}, {"max_score", 10}, {"grader", {{"device", nullptr}}}};
    r["chapters"] = json::array({chapter});
    return r;
  }

  std::string gradebook() { return grader_test::read(dir / "out/gradebook.csv"); }
};

}  // namespace

TEST_CASE("the roster: one directory or archive per student; other files skipped") {
  Class c;
  std::vector<std::string> skipped;
  const auto entries = list_roster(c.options.roster, c.options.out, &skipped);
  REQUIRE(entries.size() == 6);
  CHECK(entries.front().student == "alice");
  CHECK(entries.back().student == "frank");
  CHECK(entries.back().name == "frank.tar.gz");
  REQUIRE(skipped.size() == 1);
  CHECK(skipped[0].find("README.txt") != std::string::npos);

  write(c.dir / "roster/alice.zip", "x");
  CHECK_THROWS_WITH_AS(list_roster(c.options.roster, c.options.out), doctest::Contains("rename one"), InputError);
  CHECK_THROWS_AS(list_roster(c.dir / "nowhere", {}), InputError);
  fs::create_directories(c.dir / "empty");
  CHECK_THROWS_AS(list_roster(c.dir / "empty", {}), InputError);
}

TEST_CASE("grade-all grades everyone once, in parallel, into a gradebook") {
  Class c;
  std::ostringstream log;
  CHECK(grade_all(c.options, log) == 0);
  CHECK(c.calls == 6);
  for (const char* s : {"alice", "bob", "carol", "dave", "erin", "frank"}) {
    CAPTURE(s);
    CHECK(fs::exists(c.dir / "out/students" / s / "DONE"));
    CHECK(fs::exists(c.dir / "out/students" / s / "report.md"));
    CHECK(fs::exists(c.dir / "out/students" / s / "logs/07-build.log"));
  }
  const auto lines = split_lines(c.gradebook());
  REQUIRE(lines.size() == 7);
  CHECK(lines[0] == "student,07_x,total,max_score,status,notes");
  CHECK(lines[1] == "alice,5,5,10,graded,");
  CHECK(log.str().find("[6/6]") != std::string::npos);

  // Seeds are hidden, per student, and stable across runs.
  const json state = read_json_file(c.dir / "out/grade-all.json", "state");
  const json alice = read_json_file(c.dir / "out/students/alice/report.json", "report");
  CHECK(alice["seed"] == student_seed(state["seed"], "alice"));
  CHECK(alice["seed"] != read_json_file(c.dir / "out/students/bob/report.json", "report")["seed"]);
  CHECK((fs::status(c.dir / "out/grade-all.json").permissions() & fs::perms::others_read) == fs::perms::none);

  // A second run has nothing left to do.
  std::ostringstream again;
  CHECK(grade_all(c.options, again) == 0);
  CHECK(c.calls == 6);
  CHECK(again.str().find("6 already graded, 0 to grade") != std::string::npos);
}

TEST_CASE("killed in the middle, then rerun: the same gradebook, no half-written student") {
  Class reference;
  std::ostringstream log;
  REQUIRE(grade_all(reference.options, log) == 0);
  const std::string expected = reference.gradebook();

  Class c;
  c.options.workers = 1;
  const pid_t pid = fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    // The child grades two students, then dies abruptly in the middle of the third.
    int n = 0;
    auto inner = c.options.grade_function;
    c.options.grade_function = [&](const RosterEntry& e, const GradeOptions& g, const Workspace& ws, const fs::path& logs) {
      if (++n == 3) {
        write(logs / "07-build.log", "half");
        _exit(9);
      }
      return inner(e, g, ws, logs);
    };
    std::ostringstream child_log;
    grade_all(c.options, child_log);
    _exit(0);
  }
  int status = 0;
  waitpid(pid, &status, 0);
  REQUIRE(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 9);
  // Two finished, one temporary directory left behind, nothing else.
  int done = 0, tmp = 0;
  for (const auto& e : fs::directory_iterator(c.dir / "out/students")) {
    const std::string n = e.path().filename().string();
    if (starts_with(n, ".tmp-")) ++tmp;
    else {
      CHECK(fs::exists(e.path() / "DONE"));
      ++done;
    }
  }
  CHECK(done == 2);
  CHECK(tmp == 1);
  CHECK(c.gradebook().find("pending") != std::string::npos);

  std::ostringstream rerun;
  CHECK(grade_all(c.options, rerun) == 0);
  CHECK(c.calls == 4);  // only the four not finished before the kill
  for (const auto& e : fs::directory_iterator(c.dir / "out/students"))
    CHECK_FALSE(starts_with(e.path().filename().string(), ".tmp-"));
  CHECK(c.gradebook() == expected);
}

TEST_CASE("a grader error is kept aside and retried by the next run") {
  Class c;
  bool fail = true;
  auto inner = c.options.grade_function;
  c.options.grade_function = [&](const RosterEntry& e, const GradeOptions& g, const Workspace& ws, const fs::path& logs) {
    if (e.student == "erin" && fail) {
      json r = Class::report_for("erin", g.seed);
      r["status"] = "error";
      r["error"] = "the pristine workbook did not configure";
      return r;
    }
    return inner(e, g, ws, logs);
  };
  std::ostringstream log;
  CHECK(grade_all(c.options, log) == 1);
  CHECK(fs::exists(c.dir / "out/errors/erin.json"));
  CHECK_FALSE(fs::exists(c.dir / "out/students/erin"));
  CHECK(c.gradebook().find("erin,4,4,10,error,the pristine workbook did not configure") != std::string::npos);
  fail = false;
  CHECK(grade_all(c.options, log) == 0);
  CHECK(fs::exists(c.dir / "out/students/erin/DONE"));
  CHECK_FALSE(fs::exists(c.dir / "out/errors/erin.json"));
}

TEST_CASE("resuming with another rubric is refused; --restart starts over") {
  Class c;
  std::ostringstream log;
  REQUIRE(grade_all(c.options, log) == 0);
  c.options.grade.rubric = parse_rubric(json::parse(R"({"schema":"workbook-rubric/1","defaults":{"points":{"correctness":1}}})"), "other");
  CHECK_THROWS_WITH_AS(grade_all(c.options, log), doctest::Contains("another rubric"), InputError);
  c.options.restart = true;
  CHECK(grade_all(c.options, log) == 0);
  CHECK(c.calls == 12);
}

TEST_CASE("Slurm: scripts, one task per submission, and a merge that waits for all") {
  Class c;
  std::ostringstream log;
  c.options.passthrough = {"--rubric", "/path/rubric.json"};
  write_slurm_scripts(c.options, {"--partition=gpu"}, log);
  const std::string sbatch = grader_test::read(c.dir / "out/slurm/grade.sbatch");
  CHECK(sbatch.find("#SBATCH --array=0-5") != std::string::npos);
  CHECK(sbatch.find("#SBATCH --partition=gpu") != std::string::npos);
  CHECK(sbatch.find("--task \"$SLURM_ARRAY_TASK_ID\"") != std::string::npos);
  CHECK(sbatch.find("'--rubric' '/path/rubric.json'") != std::string::npos);
  CHECK(grader_test::read(c.dir / "out/slurm/merge.sbatch").find("--merge") != std::string::npos);
  CHECK(grader_test::read(c.dir / "out/slurm/submit.sh").find("--dependency=afterany") != std::string::npos);

  CHECK(grade_task(c.options, 1, log) == 0);
  CHECK(fs::exists(c.dir / "out/students/bob/DONE"));
  CHECK(merge_results(c.options, log) == 1);  // five still missing
  CHECK_THROWS_AS(grade_task(c.options, 6, log), InputError);
  for (int i = 0; i < 6; ++i) grade_task(c.options, i, log);
  CHECK(merge_results(c.options, log) == 0);
  CHECK(split_lines(c.gradebook()).size() == 7);
}
