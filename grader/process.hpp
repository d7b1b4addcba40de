#pragma once
// Running a child process the grader does not trust: its own process group, a wall-clock
// limit, CPU/file-size/open-file limits, a host-memory watch, capped output, an explicit
// environment. When the limit is reached (or the grader is interrupted) the whole group is
// killed, so a test that forked or hung cannot outlive its verdict.
//
// This is containment for mistakes and casual cheating, not a security sandbox: code that
// calls setsid() or attacks the kernel can escape it. docs/grading.md ("Threat model").
#include <cstdint>
#include <filesystem>
#include <functional>
#include <string>
#include <utility>
#include <vector>

namespace wb::grader {

struct ProcessLimits {
  double timeout_s = 0;                  // wall clock; 0 = none
  double cpu_s = 0;                      // RLIMIT_CPU per process (SIGXCPU); 0 = none
  std::uint64_t file_size_bytes = 0;     // RLIMIT_FSIZE (SIGXFSZ); 0 = none
  // RLIMIT_AS. Never for processes that use CUDA: the driver reserves a huge virtual
  // address space (unified addressing) and fails to initialize under a cap.
  std::uint64_t address_space_bytes = 0;
  std::uint64_t memory_bytes = 0;        // resident host memory of the child; 0 = none
  std::uint64_t open_files = 1024;       // RLIMIT_NOFILE
  std::size_t output_bytes = 256 * 1024; // captured: first half + last half kept
  double kill_grace_s = 2;               // SIGTERM, then SIGKILL after this long
};

struct ProcessSpec {
  std::vector<std::string> argv;
  std::vector<std::string> env;  // the child's whole environment, "NAME=value"
  std::filesystem::path cwd;     // empty: the grader's
  ProcessLimits limits;
  // Called with each line of output as it arrives (without its newline; a last line without
  // one comes at the end), e.g. to echo a build's progress. The output is captured all the same.
  std::function<void(const std::string& line)> on_line;
  // The child writes straight to the grader's own stdout and stderr; nothing is captured and
  // on_line is not called (for output that is the user's, like generate's story).
  bool inherit_output = false;
};

struct ProcessResult {
  bool started = false;
  std::string start_error;         // why it could not be started
  int exit_code = -1;              // when it exited
  int signal = 0;                  // when a signal ended it
  bool timed_out = false;
  bool memory_exceeded = false;
  double seconds = 0;
  std::string output;              // stdout and stderr, interleaved, possibly cut
  bool output_truncated = false;
  std::uint64_t output_total_bytes = 0;

  bool ok() const { return started && !timed_out && !memory_exceeded && signal == 0 && exit_code == 0; }
  // "exited with code 1", "killed by SIGSEGV (segmentation fault)", "did not finish within 60 s"
  std::string describe(double timeout_s = 0) const;
};

// The one way the workbook starts a program (check, grade, bench, generate, report, archives).
ProcessResult run_process(const ProcessSpec& spec);

// "SIGSEGV (segmentation fault)"
std::string signal_description(int sig);

// The environment a graded process gets: only `keep` names copied from the grader's own
// environment (when set there), plus `set` (which wins).
std::vector<std::string> make_environment(const std::vector<std::pair<std::string, std::string>>& set,
                                          const std::vector<std::string>& keep);
// Names a build needs (compilers, CUDA location, PATH...).
const std::vector<std::string>& build_environment_names();
// Names a test process needs (PATH, library path, locale).
const std::vector<std::string>& test_environment_names();
// The grader's own environment, with `set` applied (for `check`, which runs the student's
// own code on the student's own machine).
std::vector<std::string> inherited_environment(const std::vector<std::pair<std::string, std::string>>& set,
                                               const std::vector<std::string>& unset = {});

// Installs SIGINT/SIGTERM/SIGHUP handlers that kill every running child's process group
// before the grader exits, so an interrupted grade-all leaves nothing behind on the GPU.
void install_interrupt_handlers();
// True once an interrupt was received (workers stop taking new work).
bool interrupted();

}  // namespace wb::grader
