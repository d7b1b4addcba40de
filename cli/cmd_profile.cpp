// workbook profile CHAPTER [--build student|solution|fast] [--kernel REGEX] [--raw]
//
// Why is a kernel slow? Runs the chapter's bench program (--quick) under Nsight Compute's
// CLI and prints, per kernel and launch shape: duration, DRAM throughput as % of peak,
// achieved occupancy, registers per thread, shared memory per block, grid and block, and
// one line saying what bounds it (docs/profile.md).
//   1. builds bin/bench_NN_<build> (as `bench` does; the timing test when a chapter has no
//      bench program);
//   2. runs it under `ncu --clock-control none` (the clocks as the bench runs them) with the
//      harness's own kernels (namespace wb: L2 flush, copy ceiling, launch latency) left out,
//      and at most --launch-count launches profiled;
//   3. reads the report back as CSV (`ncu --import --csv --page raw`), groups the launches
//      by kernel and shape, and prints the table (--raw: ncu's CSV itself).
// The report stays in <build>/profile/NN-<build>.ncu-rep for Nsight Compute's GUI (ncu-ui).
#include <nlohmann/json.hpp>

#include <algorithm>
#include <fstream>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include "commands.hpp"
#include "grader/build.hpp"
#include "grader/chapters.hpp"
#include "grader/ncu_report.hpp"
#include "grader/process.hpp"
#include "grader/util.hpp"
#include "wb/device.hpp"

namespace wb::cli {
namespace {

using namespace wb::grader;

constexpr int kSkipNoGpu = 77;

struct ProfileOptions {
  std::string chapter;
  std::string build = "solution";
  std::string kernel_regex;
  bool raw = false;
  bool no_build = false;
  int launch_count = 200;
  std::string ncu;
  std::string build_dir = WB_BINARY_DIR;
  double timeout_s = 600;
};

// "04;05" or "04,05" as CMake caches it.
std::vector<std::string> cached_list(const fs::path& build_dir, const std::string& name) {
  std::vector<std::string> out;
  std::string cur;
  for (char c : cached_variable(build_dir, name) + ";") {
    if (c == ';' || c == ',' || c == ' ') {
      if (!cur.empty()) out.push_back(cur);
      cur.clear();
    } else {
      cur += c;
    }
  }
  return out;
}

// The program to profile: the chapter's bench program, or its timing test when the
// manifest names no bench. Returns the target and its arguments.
std::pair<std::string, std::vector<std::string>> program_of(const Chapter& chapter, const std::string& build,
                                                            const fs::path& scratch) {
  const json manifest = read_json_file(fs::path(WB_SOURCE_DIR) / "tests" / chapter.slug / "chapter.json", "manifest");
  if (manifest.contains("bench"))
    return {"bench_" + chapter.id + "_" + build, {"--quick", "--out", (scratch / "bench-results.json").string()}};
  const std::string kind = chapter.test_of_kind("timing") ? "timing" : chapter.kinds().front();
  return {chapter.binary(kind, build), {}};
}

int run_profile(const ProfileOptions& o) {
  const fs::path source_dir = WB_SOURCE_DIR;
  const fs::path build_dir = fs::absolute(o.build_dir);
  const auto chapters = discover_chapters(source_dir);
  const Chapter& chapter = find_chapter(chapters, o.chapter);
  if (o.build != "solution" && o.build != "student" && o.build != "fast")
    throw InputError("--build must be student, solution or fast, not '" + o.build + "'");
  if (o.launch_count < 1) throw InputError("--launch-count must be at least 1");
  if (!fs::exists(build_dir / "CMakeCache.txt"))
    throw InputError("no configured build in " + build_dir.string() + ": configure it first, e.g. `cmake --preset default` in " +
                     source_dir.string() + ", or name one with --build-dir");
  const auto builds = cached_list(build_dir, "WB_BUILDS");
  const auto configured = cached_list(build_dir, "WB_CHAPTERS");
  if (!builds.empty() && std::find(builds.begin(), builds.end(), o.build) == builds.end())
    throw InputError("the build in " + build_dir.string() + " has no " + o.build + " build (WB_BUILDS=" +
                     join(builds, ";") + "): reconfigure with  cmake -B " + build_dir.string() + " -DWB_BUILDS=\"" +
                     join(builds, ";") + ";" + o.build + "\"");
  if (!configured.empty() && std::find(configured.begin(), configured.end(), chapter.id) == configured.end())
    throw InputError("the build in " + build_dir.string() + " was configured with WB_CHAPTERS=" + join(configured, ";") +
                     ": add chapter " + chapter.id + " with  cmake -B " + build_dir.string() + " -DWB_CHAPTERS=\"" +
                     join(configured, ";") + ";" + chapter.id + "\"");

  const fs::path scratch = build_dir / "profile";
  fs::create_directories(scratch);
  const auto [target, program_args] = program_of(chapter, o.build, scratch);
  const std::string tag = "workbook profile: " + chapter.id + " " + chapter.title + " (" + o.build + " build)";

  // 1. Build, as bench does.
  if (!o.no_build) {
    std::cerr << tag << ": building " << target << " ..." << std::endl;
    const auto built = build_targets(build_dir, {target}, 1800, inherited_environment({}), 0, {source_dir, build_dir});
    if (!built.ok) {
      write_text_atomic(scratch / (chapter.id + "-" + o.build + "-build.log"), built.log);
      std::cerr << tag << ": the build of " << target << " failed:\n" << built.excerpt << "\n(full build output: "
                << (scratch / (chapter.id + "-" + o.build + "-build.log")).string() << ")\n";
      return 1;
    }
  }
  const fs::path binary = build_dir / "bin" / target;
  if (!fs::exists(binary)) {
    std::cerr << tag << ": " << binary.string() << " does not exist; build it or drop --no-build\n";
    return 1;
  }

  // 2. A GPU, then the profiler.
  if (!wb::has_cuda_device()) {
    std::cerr << tag << ": skipped: no CUDA device\n";
    return kSkipNoGpu;
  }
  const auto search = default_ncu_dirs();
  const fs::path ncu = find_ncu(o.ncu, search);
  if (ncu.empty()) {
    if (!o.ncu.empty())
      std::cerr << tag << ": --ncu " << o.ncu << " is not a file\n";
    else
      std::cerr << tag << ": " << ncu_missing_message(search) << "\n";
    return 1;
  }

  // 3. Profile. Kernel replay with ncu's default cache control (L2 flushed before each
  // profiled launch: cold, as the bench times them); clocks left as they are.
  const fs::path report = scratch / (chapter.id + "-" + o.build);  // ncu adds .ncu-rep
  std::vector<std::string> argv = {ncu.string(), "--clock-control", "none", "--metrics", ncu_metrics_argument(),
                                   "--launch-count", std::to_string(o.launch_count), "-f", "-o", report.string()};
  if (o.kernel_regex.empty()) {
    // Every kernel but the harness's own (namespace wb: mangled names start _ZN2wb).
    argv.insert(argv.end(), {"--kernel-name-base", "mangled", "--kernel-name", "regex:^(?!_ZN2wb)"});
  } else {
    argv.insert(argv.end(), {"--kernel-name-base", "function", "--kernel-name", "regex:" + o.kernel_regex});
  }
  argv.push_back(binary.string());
  argv.insert(argv.end(), program_args.begin(), program_args.end());
  std::cerr << tag << ": running " << target << " under Nsight Compute (" << ncu.string()
            << "); each profiled launch is replayed, so this takes a minute or so ..." << std::endl;
  ProcessSpec spec;
  spec.argv = argv;
  spec.env = inherited_environment({});
  spec.limits.timeout_s = o.timeout_s;
  spec.limits.output_bytes = 4u << 20;
  const ProcessResult ran = run_process(spec);
  write_text_atomic(scratch / (chapter.id + "-" + o.build + "-ncu.log"), ran.output);
  const std::string log_note = "(ncu's output: " + (scratch / (chapter.id + "-" + o.build + "-ncu.log")).string() + ")";

  if (const std::string why = explain_ncu_failure(ran.output); !why.empty()) {
    std::cerr << tag << ": " << why << "\n";
    return 1;
  }
  if (!ran.started) {
    std::cerr << tag << ": could not start " << ncu.string() << ": " << ran.start_error << "\n";
    return 1;
  }
  if (ran.timed_out) {
    std::cerr << tag << ": ncu did not finish within " << format_points(o.timeout_s)
              << " s (raise --timeout, or profile fewer launches: --launch-count, --kernel) " << log_note << "\n";
    return 1;
  }
  const auto todo = not_implemented_lines(ran.output);
  if (ran.exit_code == kSkipNoGpu && ran.output.find("no CUDA device") != std::string::npos) {
    std::cerr << tag << ": skipped: no CUDA device\n";
    return kSkipNoGpu;
  }
  if (!ran.ok()) {
    std::cerr << tag << ": " << target << " under ncu " << ran.describe(o.timeout_s) << "; its last lines:\n"
              << tail_lines(ran.output, 15) << "\n" << log_note << "\n";
    return 1;
  }
  if (ncu_profiled_nothing(ran.output)) {
    if (!todo.empty()) {
      std::cout << chapter.id << " " << chapter.title << " (" << o.build
                << " build): nothing to profile yet: no kernel of yours ran. The bench says:\n";
      for (const auto& l : todo) std::cout << "  " << trim(l) << "\n";
      std::cout << "Write those steps (chapters/" << chapter.slug
                << "/README.md), check them with ./workbook check " << chapter.id << ", then profile again.\n";
      return 0;
    }
    std::cerr << tag << ": ncu profiled no kernel"
              << (o.kernel_regex.empty() ? " of the chapter" : " whose name matches '" + o.kernel_regex + "'")
              << " " << log_note << "\n";
    return 1;
  }

  // 4. The report as CSV, in base units (ns, bytes).
  ProcessSpec import;
  import.argv = {ncu.string(), "--import", report.string() + ".ncu-rep", "--csv", "--page", "raw",
                 "--print-units", "base", "--print-kernel-base", "demangled"};
  import.env = spec.env;
  import.limits.timeout_s = 300;
  import.limits.output_bytes = 256u << 20;
  const ProcessResult csv = run_process(import);
  if (!csv.ok() || csv.output_truncated) {
    std::cerr << tag << ": ncu --import " << report.string() << ".ncu-rep " << csv.describe(300) << ":\n"
              << tail_lines(csv.output, 10) << "\n";
    return 1;
  }
  if (o.raw) {
    std::cout << csv.output;
    return 0;
  }
  std::vector<KernelSummary> kernels;
  try {
    kernels = summarize_launches(parse_ncu_csv(csv.output));
  } catch (const NcuCsvError& e) {
    std::cerr << tag << ": cannot read ncu's CSV: " << e.what() << "\n(see it with --raw)\n";
    return 1;
  }
  int launches = 0;
  for (const auto& k : kernels) launches += k.launches;
  const std::string device = kernels.empty() || kernels.front().median.device.empty()
                                 ? std::string()
                                 : " on " + kernels.front().median.device;
  std::cout << chapter.id << " " << chapter.title << ", " << o.build << " build" << device << ": " << kernels.size()
            << " kernel shape(s) from " << launches << " profiled launch(es) of " << target << " --quick"
            << (launches >= o.launch_count ? " (stopped at --launch-count " + std::to_string(o.launch_count) + ")" : "")
            << "\n\n"
            << format_profile_table(kernels);
  for (const auto& l : todo) std::cout << "not profiled: " << trim(l) << "\n";
  std::cout << "Full report: " << report.string() << ".ncu-rep (open it in Nsight Compute: ncu-ui)\n";
  return 0;
}

}  // namespace

void register_profile(CLI::App& app) {
  auto o = std::make_shared<ProfileOptions>();
  auto* cmd = app.add_subcommand(
      "profile",
      "Run a chapter's kernels under Nsight Compute (ncu) and print, per kernel: time, DRAM throughput, "
      "occupancy, registers, shared memory, and what bounds it");
  cmd->add_option("CHAPTER", o->chapter, "The chapter, e.g. 05 or 05_fused_gelu")->required();
  cmd->add_option("--build", o->build, "Whose kernels: solution (the reference), student (yours) or fast")
      ->capture_default_str();
  cmd->add_option("--kernel", o->kernel_regex,
                  "Profile only kernels whose function name matches this regular expression (default: every "
                  "kernel but the timing harness's own)");
  cmd->add_flag("--raw", o->raw, "Print ncu's CSV (every metric of every launch) instead of the table");
  cmd->add_option("--launch-count", o->launch_count, "Profile at most this many launches")->capture_default_str();
  cmd->add_flag("--no-build", o->no_build, "Profile the program as it is, without rebuilding it");
  cmd->add_option("--ncu", o->ncu, "Path of the ncu program (default: PATH, $CUDA_HOME/bin, /usr/local/cuda/bin, "
                                   "/opt/nvidia/nsight-compute/*)");
  cmd->add_option("--build-dir", o->build_dir, "The CMake build directory")->capture_default_str();
  cmd->add_option("--timeout", o->timeout_s, "Seconds the profiled run may take")->capture_default_str();
  cmd->callback([o] {
    try {
      install_interrupt_handlers();
      set_exit_code(run_profile(*o));
    } catch (const InputError& e) {
      std::cerr << "workbook profile: " << e.what() << "\n";
      set_exit_code(2);
    } catch (const std::exception& e) {
      std::cerr << "workbook profile: internal error: " << e.what() << "\n";
      set_exit_code(3);
    }
  });
}

}  // namespace wb::cli
