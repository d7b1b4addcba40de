// The workbook CLI: one binary, one subcommand per task. Each subcommand registers itself
// from its own file (cmd_<name>.cpp); see docs/CONTRACTS.md.
#include <CLI/CLI.hpp>

#include <exception>
#include <iostream>

#include "commands.hpp"

int main(int argc, char** argv) {
  CLI::App app{"The CUDA workbook: check your chapters, benchmark them, grade, report."};
  app.require_subcommand(1);
  wb::cli::register_all(app);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  return wb::cli::exit_code();
}
