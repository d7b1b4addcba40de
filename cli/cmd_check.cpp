// `workbook check [CHAPTER...]`: build your chapters, run their correctness tests, then
// their timing tests, and print a scorecard with the first thing to fix (docs/grading.md).
#include <unistd.h>

#include <cstdlib>
#include <iostream>
#include <memory>

#include "commands.hpp"
#include "grader/check.hpp"
#include "grader/process.hpp"
#include "grader/util.hpp"

namespace wb::cli {

void register_check(CLI::App& app) {
  struct Args {
    std::vector<std::string> chapters;
    bool no_build = false;
    bool correctness_only = false;
    bool verbose = false;
    bool sanitize = false;
    int sanitize_jobs = 0;
    std::string seed;
    std::string build_dir = WB_BINARY_DIR;
  };
  auto args = std::make_shared<Args>();
  auto* cmd = app.add_subcommand(
      "check", "Build your chapters, run their correctness then timing tests, and print a scorecard");
  cmd->add_option("CHAPTER", args->chapters, "Chapters to check, e.g. 04 or 04_fused_softmax (default: all)");
  cmd->add_flag("--no-build", args->no_build, "Run the tests without building first");
  cmd->add_flag("--correctness-only", args->correctness_only, "Skip the timing tests");
  cmd->add_flag("-v,--verbose", args->verbose, "Show every failing test, not just the first of each chapter");
  cmd->add_flag("--sanitize", args->sanitize,
                "Also run the correctness tests under compute-sanitizer memcheck and racecheck (errors name file:line)");
  cmd->add_option("--sanitize-jobs", args->sanitize_jobs,
                  "racecheck runs each test case on its own: this many at a time (default: half the cores, at most 8)")
      ->check(CLI::Range(0, 64));
  cmd->add_option("--seed", args->seed, "Base seed of the random inputs (default: $WB_SEED, else fresh)");
  cmd->add_option("--build-dir", args->build_dir, "Build directory")->capture_default_str();
  cmd->callback([args] {
    try {
      grader::install_interrupt_handlers();
      grader::CheckOptions o;
      o.source_dir = WB_SOURCE_DIR;
      o.build_dir = args->build_dir;
      o.chapters = args->chapters;
      o.build = !args->no_build;
      o.correctness_only = args->correctness_only;
      o.verbose = args->verbose;
      o.sanitize = args->sanitize;
      o.sanitize_jobs = args->sanitize_jobs;
      if (!args->seed.empty()) {
        char* end = nullptr;
        const unsigned long long v = std::strtoull(args->seed.c_str(), &end, 10);
        if (*end) throw grader::InputError("--seed must be a decimal integer, got '" + args->seed + "'");
        o.seed = v;
      }
      o.color = ::isatty(1) && !std::getenv("NO_COLOR");
      set_exit_code(grader::run_check(o, std::cout, std::cerr));
    } catch (const grader::InputError& e) {
      std::cerr << "workbook check: " << e.what() << "\n";
      set_exit_code(2);
    } catch (const std::exception& e) {
      std::cerr << "workbook check: internal error: " << e.what() << "\n";
      set_exit_code(3);
    }
  });
}

}  // namespace wb::cli
