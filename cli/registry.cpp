#include "commands.hpp"

namespace wb::cli {
namespace {
int g_exit_code = 0;
}

void set_exit_code(int code) { g_exit_code = code; }
int exit_code() { return g_exit_code; }

// Subcommands whose file is not written yet register a placeholder in their own file;
// the list here is the full CLI.
void register_all(CLI::App& app) {
  register_check(app);
  register_grade(app);
  register_bench(app);
  register_report(app);
  register_generate(app);
  register_lessons(app);
  register_profile(app);
}

}  // namespace wb::cli
