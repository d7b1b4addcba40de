// workbook bench [CHAPTER...]: times the chapters' variants and writes the results files.
//
// For every chapter whose manifest names a bench program (tests/NN_slug/chapter.json,
// "bench"), and every build asked for (solution = the reference, student = your files,
// fast = the record-speed variant in solutions/NN_slug/fast/, where a chapter has one):
//   1. builds build/bin/bench_NN_<build> (cmake --build, one target at a time, so a student
//      build that does not compile costs only that run);
//   2. runs it with --out pointing beside the final file, streaming its progress;
//   3. checks what it wrote (schema, chapter, build, entries) and only then moves it to
//      <results dir>/<NN_slug>-<build>.json, so a failed run never leaves a half-written
//      or stale-looking file behind under the final name.
// The bench programs themselves run every variant (CPU baseline, unfused/naive, fused...)
// through wb::Bench; see docs/CONTRACTS.md, "Bench programs". Programs run through the
// grader's process runner (grader/process.hpp), chapters come from grader/chapters.hpp.
#include <nlohmann/json.hpp>

#include <algorithm>
#include <functional>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <iomanip>
#include <iostream>
#include <memory>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "commands.hpp"
#include "grader/build.hpp"
#include "grader/chapters.hpp"
#include "grader/process.hpp"
#include "grader/util.hpp"

namespace wb::cli {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;
using Clock = std::chrono::steady_clock;
using grader::Chapter;
using grader::display_path;
using grader::join;
using grader::split_list;

constexpr int kSkipNoGpu = 77;  // the bench programs' "no CUDA device" exit status
const std::vector<std::string> kBuilds = {"solution", "student", "fast"};

// How a program ended, and the last lines it printed (for the first reason of a failure).
struct Ran {
  grader::ProcessResult process;
  std::vector<std::string> tail;
  double timeout_s = 0;
  bool exited(int code) const { return process.started && !process.timed_out && process.signal == 0 && process.exit_code == code; }
  std::string describe() const { return process.describe(timeout_s); }
};

// Runs a program, echoing each line of its output to stderr (indented: it is not ours).
Ran run_echoing(const std::vector<std::string>& argv, double timeout_s, bool quiet_build = false) {
  grader::ProcessSpec spec;
  spec.argv = argv;
  spec.env = grader::inherited_environment({});
  spec.limits.timeout_s = timeout_s;
  spec.limits.output_bytes = 1u << 20;
  spec.on_line = [quiet_build](const std::string& line) {
    if (quiet_build && grader::is_idle_build_line(line)) return;
    std::cerr << "    " << line << "\n";
  };
  Ran ran{grader::run_process(spec), {}, timeout_s};
  ran.tail = grader::split_lines(grader::tail_lines(ran.process.output, 60));
  return ran;
}

// ---------------------------------------------------------------------------------------
// Chapters, the build directory's configuration, results files
// ---------------------------------------------------------------------------------------

// Every chapter whose manifest names a bench program, in chapter order.
std::vector<Chapter> chapters_with_bench(const fs::path& source_dir) {
  std::vector<Chapter> out;
  for (const auto& c : grader::discover_chapters(source_dir))
    if (!c.bench.empty()) out.push_back(c);
  return out;
}

// The fast build exists for a chapter only when solutions/<slug>/fast/ does.
bool has_fast_variant(const fs::path& source_dir, const Chapter& c) {
  return fs::is_directory(source_dir / "solutions" / c.slug / "fast");
}

// "" when `path` is a results file of `chapter` and `build` with at least one entry;
// otherwise what is wrong with it. Fills `summary` ("N entries, M of them <build> code, GPU")
// and `own_entries` (entries whose impl is the build: the rest are CPU or copy baselines).
std::string check_results_file(const fs::path& path, const Chapter& chapter, const std::string& build,
                               std::string& summary, int& own_entries) {
  std::ifstream in(path);
  if (!in) return "the bench program did not write " + path.string();
  json j;
  try {
    j = json::parse(in);
  } catch (const json::parse_error& e) {
    return path.string() + " is not valid JSON (" + e.what() + ")";
  }
  auto str = [&](const json& o, const char* key) {
    return o.is_object() && o.contains(key) && o[key].is_string() ? o[key].get<std::string>() : std::string();
  };
  if (str(j, "schema") != "workbook-results/1")
    return path.string() + ": schema is '" + str(j, "schema") + "', expected 'workbook-results/1'";
  if (str(j, "chapter") != chapter.slug || str(j, "build") != build)
    return path.string() + ": says chapter '" + str(j, "chapter") + "', build '" + str(j, "build") +
           "', expected '" + chapter.slug + "', '" + build + "'";
  if (!j.contains("environment") || str(j["environment"], "gpu").empty())
    return path.string() + ": has no environment.gpu";
  if (!j.contains("results") || !j["results"].is_array() || j["results"].empty())
    return path.string() + ": has no results entries";
  own_entries = 0;
  for (const auto& e : j["results"])
    if (str(e, "impl") == build) ++own_entries;
  summary = std::to_string(j["results"].size()) + " entries, " + std::to_string(own_entries) + " of them " +
            build + " code, " + str(j["environment"], "gpu");
  return "";
}

std::string seconds_text(Clock::time_point since) {
  std::ostringstream s;
  s << std::fixed << std::setprecision(1) << std::chrono::duration<double>(Clock::now() - since).count() << " s";
  return s.str();
}

// ---------------------------------------------------------------------------------------
// The subcommand
// ---------------------------------------------------------------------------------------

struct Options {
  std::vector<std::string> chapters;
  std::string results_dir = std::string(WB_SOURCE_DIR) + "/results";
  std::string build_dir = WB_BINARY_DIR;
  std::string builds = "solution,student";
  std::string python = "python3";
  bool quick = false;
  bool no_build = false;
  bool peers = false;
  double timeout_s = 1800;
};

// A usage problem (unknown chapter, unconfigured build directory): exit status 2.
struct UsageError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// How one run ended: a line of the summary table, and what it means for the exit status.
struct Row {
  enum Outcome { written, todo, skipped_no_gpu, skipped, failed } outcome;
  std::string what, build, result, detail;
};

// The first line of a failure that says what went wrong (the bench's own message).
std::string first_reason(const std::vector<std::string>& tail) {
  for (const auto& line : tail)
    if (line.find("not implemented yet") != std::string::npos) return line;
  for (auto it = tail.rbegin(); it != tail.rend(); ++it)
    if (!grader::trim(*it).empty()) return *it;
  return "";
}

std::vector<Chapter> select_bench_chapters(const std::vector<Chapter>& all, const std::vector<std::string>& wanted) {
  try {
    return grader::select_chapters(all, wanted);
  } catch (const grader::InputError&) {
    std::vector<std::string> names;
    for (const auto& c : all) names.push_back(c.slug);
    throw UsageError("no chapter with a bench program matches '" + join(wanted, " ") + "'; chapters with one: " +
                     join(names, ", "));
  }
}

// "solution,fast" -> the builds; "all" is every build. UsageError for an unknown one.
std::vector<std::string> parse_builds(const std::string& text) {
  std::vector<std::string> builds;
  for (const auto& b : split_list(text)) {
    if (b == "all") return kBuilds;
    if (std::find(kBuilds.begin(), kBuilds.end(), b) == kBuilds.end())
      throw UsageError("unknown build '" + b + "' (builds: " + join(kBuilds, ", ") + ", all; a comma list names several)");
    if (std::find(builds.begin(), builds.end(), b) == builds.end()) builds.push_back(b);
  }
  if (builds.empty()) throw UsageError("--builds names no build (builds: " + join(kBuilds, ", ") + ")");
  return builds;
}

struct Job {
  Chapter chapter;
  std::string build;
};

// What a build directory was configured with (WB_CHAPTERS, WB_BUILDS), and its cmake.
struct BuildConfig {
  fs::path dir;
  std::string chapters_text;
  std::vector<std::string> chapters, builds;
  std::string cmake = "cmake";

  bool has(const Job& j) const {
    const bool chapter_on = chapters.empty() || std::find(chapters.begin(), chapters.end(), j.chapter.id) != chapters.end();
    auto configured = [&](const char* b) { return std::find(builds.begin(), builds.end(), b) != builds.end(); };
    // The fast build comes with the solution build (cmake/Workbook.cmake).
    if (j.build == "fast") return chapter_on && (configured("solution") || configured("fast"));
    return chapter_on && configured(j.build.c_str());
  }
};

BuildConfig read_build_config(const fs::path& build_dir, const fs::path& source_dir, bool must_exist) {
  if (!fs::exists(build_dir / "CMakeCache.txt") && must_exist)
    throw UsageError(build_dir.string() + " is not a configured build directory (no CMakeCache.txt). Configure it first:\n  cmake -S " +
                     source_dir.string() + " -B " + build_dir.string() +
                     " -G Ninja -DCMAKE_BUILD_TYPE=Release\nor name another one with --build-dir.");
  BuildConfig c;
  c.dir = build_dir;
  c.chapters_text = grader::cached_variable(build_dir, "WB_CHAPTERS");
  c.chapters = split_list(c.chapters_text);
  const std::string builds = grader::cached_variable(build_dir, "WB_BUILDS");
  c.builds = split_list(builds.empty() ? "solution;student" : builds);
  if (const std::string cmake = grader::cached_variable(build_dir, "CMAKE_COMMAND"); !cmake.empty()) c.cmake = cmake;
  return c;
}

// Builds, runs and checks one chapter's bench program; the file lands under its final name
// only when the run succeeded and what it wrote is a results file of that chapter and build.
Row run_job(const Job& job, const Options& opt, const BuildConfig& config, const fs::path& results_dir,
            const std::string& tag) {
  const std::string& slug = job.chapter.slug;
  const std::string target = "bench_" + job.chapter.id + "_" + job.build;
  const auto started = Clock::now();
  if (!opt.no_build) {
    std::cerr << tag << ": building " << target << "\n";  // the build's own lines follow, indented
    const auto built = run_echoing({config.cmake, "--build", config.dir.string(), "--target", target}, 0, true);
    if (!built.exited(0)) {
      std::cerr << tag << ": the build of " << target << " failed (" << built.describe()
                << "); the compiler's messages are above\n";
      return {Row::failed, slug, job.build, "build failed", "cmake --build --target " + target};
    }
  }
  const fs::path binary = config.dir / "bin" / target;
  if (!fs::exists(binary)) {
    std::cerr << tag << ": " << binary.string() << " does not exist; build it or drop --no-build\n";
    return {Row::failed, slug, job.build, "failed", "no " + binary.filename().string()};
  }

  const fs::path final_path = results_dir / (slug + "-" + job.build + ".json");
  const fs::path new_path = results_dir / (slug + "-" + job.build + ".json.new");  // not *.json: never read
  std::error_code ec;
  fs::remove(new_path, ec);
  std::vector<std::string> argv = {binary.string(), "--out", new_path.string()};
  if (opt.quick) argv.push_back("--quick");
  std::cerr << tag << ": running " << target << (opt.quick ? " --quick" : "") << "\n";
  const auto ran = run_echoing(argv, opt.timeout_s);

  if (ran.exited(kSkipNoGpu)) {
    fs::remove(new_path, ec);
    std::cerr << tag << ": skipped: no CUDA device on this machine\n";
    return {Row::skipped_no_gpu, slug, job.build, "skipped", "no CUDA device"};
  }
  const std::string reason = first_reason(ran.tail);
  const bool todo = reason.find("not implemented yet") != std::string::npos;
  std::string summary;
  int own_entries = 0;
  const std::string problem =
      ran.exited(0) ? check_results_file(new_path, job.chapter, job.build, summary, own_entries) : std::string();
  if (ran.exited(0) && problem.empty()) {
    fs::rename(new_path, final_path, ec);
    if (ec) {
      std::cerr << tag << ": cannot move " << new_path.string() << " to " << final_path.string() << ": "
                << ec.message() << "\n";
      return {Row::failed, slug, job.build, "failed", ec.message()};
    }
    std::cerr << tag << ": wrote " << display_path(final_path) << " (" << summary << ") in "
              << seconds_text(started) << "\n";
    if (own_entries == 0 && job.build == "student")  // the bench skipped what is not implemented
      return {Row::todo, slug, job.build, "todo",
              display_path(final_path) + " has baselines only: your code is not implemented yet" +
                  (todo ? " (" + reason + ")" : "")};
    return {Row::written, slug, job.build, "written", display_path(final_path)};
  }

  fs::remove(new_path, ec);
  const std::string stale =
      fs::exists(final_path) ? " (" + display_path(final_path) + " is left from an earlier run)" : "";
  if (todo && job.build == "student") {
    std::cerr << tag << ": to do: " << reason << stale << "\n";
    return {Row::todo, slug, job.build, "todo", reason};
  }
  const std::string why = !problem.empty()
                              ? "wrote a malformed results file: " + problem
                              : target + " " + ran.describe() + (reason.empty() ? "" : ": " + reason);
  std::cerr << tag << ": failed: " << why << stale << "\n";
  return {Row::failed, slug, job.build, ran.process.timed_out ? "timed out" : "failed", why};
}

// One PyTorch peer script of notebooks/peers/ (needs torch): writes results_dir/<name>.json.
Row run_peer_script(const Options& opt, const fs::path& source_dir, const fs::path& results_dir,
                    const std::string& script, std::vector<std::string> extra, const std::string& tag) {
  const std::string name = fs::path(script).stem().string();
  const fs::path out = results_dir / (name + ".json");
  std::vector<std::string> argv = {opt.python, (source_dir / "notebooks/peers" / script).string(),
                                   "--out", out.string()};
  argv.insert(argv.end(), extra.begin(), extra.end());
  if (opt.quick) argv.push_back("--quick");
  std::cerr << tag << ": running notebooks/peers/" << script << "\n";
  const auto started = Clock::now();
  const auto ran = run_echoing(argv, opt.timeout_s);
  if (ran.exited(0)) {
    std::cerr << tag << ": wrote " << display_path(out) << " in " << seconds_text(started) << "\n";
    return {Row::written, name, "peer", "written", display_path(out)};
  }
  if (ran.exited(kSkipNoGpu)) return {Row::skipped_no_gpu, name, "peer", "skipped", first_reason(ran.tail)};
  return {Row::failed, name, "peer", "failed", ran.describe() + ": " + first_reason(ran.tail)};
}

// The peers: pytorch_peers.py over the sizes of the fusion results just written, then the
// peer script each benched chapter's manifest names ("peer_script"), once each.
std::vector<Row> run_peers(const Options& opt, const fs::path& source_dir, const fs::path& results_dir,
                           const std::vector<Job>& jobs, const std::function<std::string(const std::string&)>& tag) {
  std::vector<Row> rows;
  rows.push_back(run_peer_script(opt, source_dir, results_dir, "pytorch_peers.py",
                                 {"--sweep-from", results_dir.string()}, tag("PyTorch peers")));
  std::vector<std::string> scripts;
  for (const auto& job : jobs)
    if (!job.chapter.peer_script.empty() &&
        std::find(scripts.begin(), scripts.end(), job.chapter.peer_script) == scripts.end())
      scripts.push_back(job.chapter.peer_script);
  for (const auto& script : scripts)
    rows.push_back(run_peer_script(opt, source_dir, results_dir, script, {}, tag("PyTorch peer " + script)));
  return rows;
}

void print_summary(const std::vector<Row>& rows) {
  std::size_t w1 = 7, w2 = 5, w3 = 6;
  for (const auto& r : rows) {
    w1 = std::max(w1, r.what.size());
    w2 = std::max(w2, r.build.size());
    w3 = std::max(w3, r.result.size());
  }
  auto line = [&](const std::string& a, const std::string& b, const std::string& c, const std::string& d) {
    std::cout << std::left << std::setw(static_cast<int>(w1 + 2)) << a << std::setw(static_cast<int>(w2 + 2)) << b
              << std::setw(static_cast<int>(w3 + 2)) << c << d << "\n";
  };
  std::cout << "\n";
  line("chapter", "build", "result", "details");
  for (const auto& r : rows) line(r.what, r.build, r.result, r.detail);
}

// The runs asked for: every selected chapter times every build asked for that the build
// directory has. A chapter asked for by name says why a build of it does not run.
struct Plan {
  std::vector<Job> jobs;
  std::vector<Row> skipped;
  BuildConfig config;
};

Plan plan_runs(const Options& opt, const fs::path& source_dir) {
  const auto all = chapters_with_bench(source_dir);
  if (all.empty())
    throw UsageError("no chapter names a bench program yet (\"bench\" in tests/NN_slug/chapter.json)");
  const auto selected = select_bench_chapters(all, opt.chapters);
  const auto builds = parse_builds(opt.builds);
  Plan plan;
  plan.config = read_build_config(fs::absolute(opt.build_dir), source_dir, !opt.no_build);
  for (const auto& c : selected)
    for (const auto& b : builds) {
      const Job job{c, b};
      if (b == "fast" && !has_fast_variant(source_dir, c)) {
        if (!opt.chapters.empty())
          plan.skipped.push_back({Row::skipped, c.slug, b, "skipped", "no fast variant (solutions/" + c.slug + "/fast/)"});
      } else if (plan.config.has(job)) {
        plan.jobs.push_back(job);
      } else if (!opt.chapters.empty()) {
        plan.skipped.push_back({Row::skipped, c.slug, b, "skipped",
                                "not configured in " + display_path(plan.config.dir) + " (WB_CHAPTERS='" +
                                    plan.config.chapters_text + "', WB_BUILDS='" + join(plan.config.builds, ";") +
                                    "'): reconfigure with cmake -D..."});
      }
    }
  return plan;
}

// The exit status: 1 when a run failed, 77 when nothing could be measured for want of a GPU.
int summarize(const std::vector<Row>& rows) {
  print_summary(rows);
  const auto count = [&](Row::Outcome o) {
    return std::count_if(rows.begin(), rows.end(), [o](const Row& r) { return r.outcome == o; });
  };
  if (count(Row::written) + count(Row::todo) > 0)
    std::cout << "\nSee them as plots: ./workbook report (HTML into report/)\n";
  if (count(Row::failed) > 0) return 1;
  if (count(Row::written) + count(Row::todo) == 0 && count(Row::skipped_no_gpu) > 0) {
    std::cerr << "workbook bench: nothing was measured: this machine has no CUDA device\n";
    return kSkipNoGpu;
  }
  return 0;
}

int run_bench(const Options& opt) {
  grader::install_interrupt_handlers();  // Ctrl-C stops the bench program's whole group too
  const fs::path source_dir = WB_SOURCE_DIR;
  const fs::path results_dir = fs::absolute(opt.results_dir);
  Plan plan;
  const bool results_dir_existed = fs::exists(results_dir);
  try {
    plan = plan_runs(opt, source_dir);
    std::error_code ec;
    fs::create_directories(results_dir, ec);
    if (ec) throw UsageError("cannot create the results directory " + results_dir.string() + ": " + ec.message());
  } catch (const std::exception& e) {  // UsageError, or a manifest the grader cannot read
    std::cerr << "workbook bench: " << e.what() << "\n";
    return 2;
  }

  std::size_t peer_runs = 1;
  {
    std::vector<std::string> scripts;
    for (const auto& job : plan.jobs)
      if (!job.chapter.peer_script.empty() &&
          std::find(scripts.begin(), scripts.end(), job.chapter.peer_script) == scripts.end())
        scripts.push_back(job.chapter.peer_script);
    peer_runs += scripts.size();
  }
  const std::size_t total = plan.jobs.size() + (opt.peers ? peer_runs : 0);
  std::cerr << "workbook bench: " << plan.jobs.size() << " run(s)" << (opt.quick ? ", quick" : "")
            << "; results go to " << display_path(results_dir) << "\n";
  std::size_t k = 0;
  auto tag = [&](const std::string& what) {
    return "[" + std::to_string(++k) + "/" + std::to_string(total) + "] " + what;
  };
  std::vector<Row> rows = plan.skipped;
  for (const auto& job : plan.jobs)
    rows.push_back(run_job(job, opt, plan.config, results_dir, tag(job.chapter.slug + " (" + job.build + ")")));
  if (opt.peers)
    for (auto& row : run_peers(opt, source_dir, results_dir, plan.jobs, tag)) rows.push_back(std::move(row));

  // A results directory made for this run and left empty (no GPU, every run failed) goes.
  std::error_code ec;
  if (!results_dir_existed && fs::is_empty(results_dir, ec)) fs::remove(results_dir, ec);
  return summarize(rows);
}

}  // namespace

void register_bench(CLI::App& app) {
  auto opt = std::make_shared<Options>();
  auto* cmd = app.add_subcommand(
      "bench",
      "Time a chapter's variants (CPU baseline, naive/unfused, fused; your build and the reference) "
      "and write one results file per run into the results directory");
  cmd->add_option("chapters", opt->chapters, "Chapters to run (04, 04_fused_softmax or fused_softmax); default: all with a bench program");
  cmd->add_option("--results-dir", opt->results_dir, "Where the results files go")->capture_default_str();
  cmd->add_option("--builds", opt->builds, "Which builds to run: solution, student, fast (where solutions/NN_slug/fast/ exists), all, or a comma list (solution,fast)")->capture_default_str();
  cmd->add_option("--build-dir", opt->build_dir, "The CMake build directory")->capture_default_str();
  cmd->add_flag("--quick", opt->quick, "Fewer sizes and samples (passed to the bench programs)");
  cmd->add_flag("--no-build", opt->no_build, "Run the bench programs as they are, without rebuilding them");
  cmd->add_flag("--peers", opt->peers,
                "Also run the PyTorch peers (notebooks/peers/pytorch_peers.py over the same sizes, and each benched chapter's \"peer_script\"); needs torch");
  cmd->add_option("--python", opt->python, "Python for --peers")->capture_default_str();
  cmd->add_option("--timeout", opt->timeout_s, "Seconds one bench program may run (0: no limit)")->capture_default_str();
  cmd->callback([opt] { set_exit_code(run_bench(*opt)); });
}

}  // namespace wb::cli
