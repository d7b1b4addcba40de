// workbook bench [CHAPTER...]: times the chapters' variants and writes the results files.
//
// For every chapter whose manifest names a bench program (tests/NN_slug/chapter.json,
// "bench"), and every build configured (solution = the reference, student = your files):
//   1. builds build/bin/bench_NN_<build> (cmake --build, one target at a time, so a student
//      build that does not compile costs only that run);
//   2. runs it with --out pointing beside the final file, streaming its progress;
//   3. checks what it wrote (schema, chapter, build, entries) and only then moves it to
//      <results dir>/<NN_slug>-<build>.json, so a failed run never leaves a half-written
//      or stale-looking file behind under the final name.
// The bench programs themselves run every variant (CPU baseline, unfused/naive, fused...)
// through wb::Bench; see docs/CONTRACTS.md, "Bench programs".
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <deque>
#include <filesystem>
#include <fstream>
#include <iomanip>
#include <iostream>
#include <map>
#include <memory>
#include <sstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "commands.hpp"

namespace wb::cli {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;
using Clock = std::chrono::steady_clock;

constexpr int kSkipNoGpu = 77;  // the bench programs' "no CUDA device" exit status

// ---------------------------------------------------------------------------------------
// Running a child process
// ---------------------------------------------------------------------------------------

enum class Output {
  inherit,      // the child writes straight to our terminal
  echo_stderr,  // stdout inherited; stderr echoed line by line and its tail kept
};

struct ProcessResult {
  bool started = true;     // false: the program could not be executed
  bool timed_out = false;
  int exit_code = -1;      // when it exited normally
  int signal = 0;          // when a signal ended it
  std::deque<std::string> tail;  // the last lines of its stderr (echo_stderr)

  bool exited(int code) const { return started && !timed_out && signal == 0 && exit_code == code; }
  std::string describe() const {
    if (!started) return "could not be started";
    if (timed_out) return "timed out";
    if (signal != 0) return std::string("killed by signal ") + std::to_string(signal) + " (" + strsignal(signal) + ")";
    return "exit status " + std::to_string(exit_code);
  }
};

void keep_line(std::deque<std::string>& tail, std::string line) {
  tail.push_back(std::move(line));
  if (tail.size() > 60) tail.pop_front();
}

ProcessResult run_process(const std::vector<std::string>& argv, Output mode, double timeout_s) {
  ProcessResult result;
  int pipe_fd[2] = {-1, -1};
  if (mode == Output::echo_stderr && pipe(pipe_fd) != 0) {
    std::cerr << "workbook bench: cannot create a pipe: " << std::strerror(errno) << "\n";
    result.started = false;
    return result;
  }
  std::cout.flush();
  std::cerr.flush();
  const pid_t pid = fork();
  if (pid < 0) {
    std::cerr << "workbook bench: cannot fork: " << std::strerror(errno) << "\n";
    result.started = false;
    return result;
  }
  if (pid == 0) {
    if (pipe_fd[1] >= 0) {
      dup2(pipe_fd[1], STDERR_FILENO);
      close(pipe_fd[0]);
      close(pipe_fd[1]);
    }
    std::vector<char*> args;
    for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);
    execvp(args[0], args.data());
    std::fprintf(stderr, "cannot run %s: %s\n", args[0], std::strerror(errno));
    _exit(127);
  }

  std::string partial;
  auto flush_partial = [&](bool all) {
    std::size_t nl;
    while ((nl = partial.find('\n')) != std::string::npos) {
      std::string line = partial.substr(0, nl);
      std::cerr << "    " << line << "\n";
      keep_line(result.tail, std::move(line));
      partial.erase(0, nl + 1);
    }
    if (all && !partial.empty()) {
      std::cerr << "    " << partial << "\n";
      keep_line(result.tail, partial);
      partial.clear();
    }
  };
  if (pipe_fd[1] >= 0) close(pipe_fd[1]);
  int read_fd = pipe_fd[0];

  const auto start = Clock::now();
  bool reaped = false, term_sent = false;
  int status = 0;
  Clock::time_point term_time;
  while (!reaped || read_fd >= 0) {
    if (read_fd >= 0) {
      pollfd p{read_fd, POLLIN, 0};
      if (poll(&p, 1, 100) > 0) {
        char buf[4096];
        const ssize_t n = read(read_fd, buf, sizeof buf);
        if (n > 0) {
          partial.append(buf, static_cast<std::size_t>(n));
          flush_partial(false);
        } else if (n == 0 || errno != EINTR) {
          close(read_fd);
          read_fd = -1;
        }
      }
    } else {
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    if (!reaped) {
      const pid_t w = waitpid(pid, &status, WNOHANG);
      if (w == pid) {
        reaped = true;
        // A grandchild may still hold the pipe; give the output a moment, then stop reading.
        if (read_fd >= 0) {
          const auto drain_until = Clock::now() + std::chrono::seconds(2);
          while (read_fd >= 0 && Clock::now() < drain_until) {
            pollfd p{read_fd, POLLIN, 0};
            if (poll(&p, 1, 100) <= 0) continue;
            char buf[4096];
            const ssize_t n = read(read_fd, buf, sizeof buf);
            if (n <= 0) {
              close(read_fd);
              read_fd = -1;
            } else {
              partial.append(buf, static_cast<std::size_t>(n));
            }
          }
          if (read_fd >= 0) close(read_fd);
          read_fd = -1;
        }
        continue;
      }
      const double elapsed = std::chrono::duration<double>(Clock::now() - start).count();
      if (timeout_s > 0 && elapsed > timeout_s) {
        if (!term_sent) {
          result.timed_out = true;
          kill(pid, SIGTERM);
          term_sent = true;
          term_time = Clock::now();
        } else if (Clock::now() - term_time > std::chrono::seconds(5)) {
          kill(pid, SIGKILL);
        }
      }
    }
  }
  flush_partial(true);
  if (WIFEXITED(status)) {
    result.exit_code = WEXITSTATUS(status);
    if (result.exit_code == 127 && !result.tail.empty() &&
        result.tail.back().rfind("cannot run ", 0) == 0)
      result.started = false;
  } else if (WIFSIGNALED(status)) {
    result.signal = WTERMSIG(status);
  }
  return result;
}

// ---------------------------------------------------------------------------------------
// Chapters, the build directory's configuration, results files
// ---------------------------------------------------------------------------------------

struct Chapter {
  std::string id;    // "04"
  std::string slug;  // "04_fused_softmax"
};

// Every chapter whose manifest names a bench program, in chapter order.
std::vector<Chapter> chapters_with_bench(const fs::path& source_dir) {
  std::vector<Chapter> out;
  const fs::path tests = source_dir / "tests";
  if (!fs::is_directory(tests)) return out;
  for (const auto& dir : fs::directory_iterator(tests)) {
    const fs::path manifest = dir.path() / "chapter.json";
    if (!fs::is_regular_file(manifest)) continue;
    try {
      std::ifstream in(manifest);
      const json j = json::parse(in);
      if (j.contains("bench") && j.contains("id") && j.contains("slug"))
        out.push_back({j.at("id").get<std::string>(), j.at("slug").get<std::string>()});
    } catch (const std::exception& e) {
      std::cerr << "workbook bench: warning: " << manifest.string() << " is not a valid manifest ("
                << e.what() << "); chapter skipped\n";
    }
  }
  std::sort(out.begin(), out.end(), [](const Chapter& a, const Chapter& b) { return a.slug < b.slug; });
  return out;
}

// "4", "04", "04_fused_softmax" and "fused_softmax" all name chapter 04.
bool names_chapter(std::string arg, const Chapter& c) {
  if (arg.size() == 1 && std::isdigit(static_cast<unsigned char>(arg[0]))) arg = "0" + arg;
  if (arg == c.id || arg == c.slug) return true;
  return c.slug.size() > 3 && c.slug.substr(3) == arg;
}

std::string join(const std::vector<std::string>& items, const std::string& sep) {
  std::string out;
  for (const auto& s : items) out += (out.empty() ? "" : sep) + s;
  return out;
}

std::vector<std::string> split_list(const std::string& text) {  // "a;b" or "a,b"
  std::vector<std::string> out;
  std::string cur;
  for (char ch : text + ";") {
    if (ch == ';' || ch == ',') {
      if (!cur.empty()) out.push_back(cur);
      cur.clear();
    } else if (!std::isspace(static_cast<unsigned char>(ch))) {
      cur += ch;
    }
  }
  return out;
}

// The values of a build directory's CMakeCache.txt (NAME:TYPE=VALUE lines).
std::map<std::string, std::string> read_cmake_cache(const fs::path& build_dir) {
  std::map<std::string, std::string> out;
  std::ifstream in(build_dir / "CMakeCache.txt");
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty() || line[0] == '#' || line[0] == '/') continue;
    const auto colon = line.find(':'), eq = line.find('=');
    if (colon == std::string::npos || eq == std::string::npos || colon > eq) continue;
    out[line.substr(0, colon)] = line.substr(eq + 1);
  }
  return out;
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

std::string display_path(const fs::path& p) {
  const fs::path rel = p.lexically_relative(fs::current_path());
  return !rel.empty() && rel.native().rfind("..", 0) != 0 ? rel.string() : p.string();
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
std::string first_reason(const std::deque<std::string>& tail) {
  for (const auto& line : tail)
    if (line.find("not implemented yet") != std::string::npos) return line;
  for (auto it = tail.rbegin(); it != tail.rend(); ++it)
    if (!it->empty()) return *it;
  return "";
}

std::vector<Chapter> select_chapters(const std::vector<Chapter>& all, const std::vector<std::string>& wanted) {
  std::vector<Chapter> selected;
  for (const auto& arg : wanted) {
    auto it = std::find_if(all.begin(), all.end(), [&](const Chapter& c) { return names_chapter(arg, c); });
    if (it == all.end()) {
      std::vector<std::string> names;
      for (const auto& c : all) names.push_back(c.slug);
      throw UsageError("no chapter with a bench program matches '" + arg + "'; chapters with one: " +
                       join(names, ", "));
    }
    if (std::none_of(selected.begin(), selected.end(), [&](const Chapter& c) { return c.slug == it->slug; }))
      selected.push_back(*it);
  }
  return selected.empty() ? all : selected;
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
    return chapter_on && std::find(builds.begin(), builds.end(), j.build) != builds.end();
  }
};

BuildConfig read_build_config(const fs::path& build_dir, const fs::path& source_dir, bool must_exist) {
  const auto cache = read_cmake_cache(build_dir);
  if (cache.empty() && must_exist)
    throw UsageError(build_dir.string() + " is not a configured build directory (no CMakeCache.txt). Configure it first:\n  cmake -S " +
                     source_dir.string() + " -B " + build_dir.string() +
                     " -G Ninja -DCMAKE_BUILD_TYPE=Release\nor name another one with --build-dir.");
  BuildConfig c;
  c.dir = build_dir;
  c.chapters_text = cache.count("WB_CHAPTERS") ? cache.at("WB_CHAPTERS") : "";
  c.chapters = split_list(c.chapters_text);
  c.builds = split_list(cache.count("WB_BUILDS") ? cache.at("WB_BUILDS") : "solution;student");
  if (cache.count("CMAKE_COMMAND")) c.cmake = cache.at("CMAKE_COMMAND");
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
    std::cerr << tag << ": building " << target << "\n";
    const auto built = run_process({config.cmake, "--build", config.dir.string(), "--target", target}, Output::inherit, 0);
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
  const auto ran = run_process(argv, Output::echo_stderr, opt.timeout_s);

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
  return {Row::failed, slug, job.build, ran.timed_out ? "timed out" : "failed", why};
}

// The PyTorch peer over the sizes of the chapter 04/05 results just written (needs torch).
Row run_peers(const Options& opt, const fs::path& source_dir, const fs::path& results_dir, const std::string& tag) {
  const fs::path out = results_dir / "pytorch_peers.json";
  std::vector<std::string> argv = {opt.python, (source_dir / "notebooks/peers/pytorch_peers.py").string(),
                                   "--sweep-from", results_dir.string(), "--out", out.string()};
  if (opt.quick) argv.push_back("--quick");
  std::cerr << tag << ": running notebooks/peers/pytorch_peers.py\n";
  const auto started = Clock::now();
  const auto ran = run_process(argv, Output::echo_stderr, opt.timeout_s);
  if (ran.exited(0)) {
    std::cerr << tag << ": wrote " << display_path(out) << " in " << seconds_text(started) << "\n";
    return {Row::written, "pytorch_peers", "peer", "written", display_path(out)};
  }
  if (ran.exited(kSkipNoGpu)) return {Row::skipped_no_gpu, "pytorch_peers", "peer", "skipped", first_reason(ran.tail)};
  return {Row::failed, "pytorch_peers", "peer", "failed", ran.describe() + ": " + first_reason(ran.tail)};
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

int run_bench(const Options& opt) {
  const fs::path source_dir = WB_SOURCE_DIR;
  const fs::path results_dir = fs::absolute(opt.results_dir);
  std::vector<Job> jobs;
  std::vector<Row> rows;
  BuildConfig config;
  try {
    const auto all = chapters_with_bench(source_dir);
    if (all.empty())
      throw UsageError("no chapter names a bench program yet (\"bench\" in tests/NN_slug/chapter.json)");
    const auto selected = select_chapters(all, opt.chapters);
    const auto builds = split_list(opt.builds);
    for (const auto& b : builds)
      if (b != "solution" && b != "student")
        throw UsageError("unknown build '" + b + "' (builds are solution and student)");
    config = read_build_config(fs::absolute(opt.build_dir), source_dir, !opt.no_build);
    for (const auto& c : selected)
      for (const auto& b : builds) {
        const Job job{c, b};
        if (config.has(job))
          jobs.push_back(job);
        else if (!opt.chapters.empty())  // asked for by name: say why it does not run
          rows.push_back({Row::skipped, c.slug, b, "skipped",
                          "not configured in " + display_path(config.dir) + " (WB_CHAPTERS='" + config.chapters_text +
                              "', WB_BUILDS='" + join(config.builds, ";") + "'): reconfigure with cmake -D..."});
      }
    std::error_code ec;
    fs::create_directories(results_dir, ec);
    if (ec) throw UsageError("cannot create the results directory " + results_dir.string() + ": " + ec.message());
  } catch (const UsageError& e) {
    std::cerr << "workbook bench: " << e.what() << "\n";
    return 2;
  }

  const std::size_t total = jobs.size() + (opt.peers ? 1 : 0);
  std::cerr << "workbook bench: " << jobs.size() << " run(s)" << (opt.quick ? ", quick" : "")
            << "; results go to " << display_path(results_dir) << "\n";
  std::size_t k = 0;
  auto tag = [&](const std::string& what) {
    return "[" + std::to_string(++k) + "/" + std::to_string(total) + "] " + what;
  };
  for (const auto& job : jobs)
    rows.push_back(run_job(job, opt, config, results_dir, tag(job.chapter.slug + " (" + job.build + ")")));
  if (opt.peers) rows.push_back(run_peers(opt, source_dir, results_dir, tag("PyTorch peers")));

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

}  // namespace

void register_bench(CLI::App& app) {
  auto opt = std::make_shared<Options>();
  auto* cmd = app.add_subcommand(
      "bench",
      "Time a chapter's variants (CPU baseline, naive/unfused, fused; your build and the reference) "
      "and write one results file per run into the results directory");
  cmd->add_option("chapters", opt->chapters, "Chapters to run (04, 04_fused_softmax or fused_softmax); default: all with a bench program");
  cmd->add_option("--results-dir", opt->results_dir, "Where the results files go")->capture_default_str();
  cmd->add_option("--builds", opt->builds, "Which builds to run: solution, student or both")->capture_default_str();
  cmd->add_option("--build-dir", opt->build_dir, "The CMake build directory")->capture_default_str();
  cmd->add_flag("--quick", opt->quick, "Fewer sizes and samples (passed to the bench programs)");
  cmd->add_flag("--no-build", opt->no_build, "Run the bench programs as they are, without rebuilding them");
  cmd->add_flag("--peers", opt->peers,
                "Also run the PyTorch peer (notebooks/peers/pytorch_peers.py) over the same sizes; needs torch");
  cmd->add_option("--python", opt->python, "Python for --peers")->capture_default_str();
  cmd->add_option("--timeout", opt->timeout_s, "Seconds one bench program may run (0: no limit)")->capture_default_str();
  cmd->callback([opt] { set_exit_code(run_bench(*opt)); });
}

}  // namespace wb::cli
