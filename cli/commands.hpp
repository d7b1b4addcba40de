#pragma once
// Subcommand registry of the workbook CLI.
#include <CLI/CLI.hpp>

namespace wb::cli {

// Registered by each cmd_<name>.cpp. A subcommand's callback sets the process exit code.
void register_check(CLI::App& app);
void register_grade(CLI::App& app);      // grade and grade-all
void register_bench(CLI::App& app);
void register_report(CLI::App& app);
void register_generate(CLI::App& app);
void register_lessons(CLI::App& app);     // fill lesson numbers from results files
void register_profile(CLI::App& app);     // a chapter's kernels under Nsight Compute

void register_all(CLI::App& app);
void set_exit_code(int code);
int exit_code();

}  // namespace wb::cli
