// The child-process runner: limits, output caps, process-group kills, environment.
#include <doctest/doctest.h>
#include <signal.h>

#include <fstream>
#include <thread>

#include "grader/process.hpp"
#include "grader/util.hpp"
#include "test_common.hpp"

using namespace wb::grader;
using grader_test::helper;

namespace {
ProcessResult run(std::vector<std::string> args, ProcessLimits limits = {}) {
  ProcessSpec spec;
  spec.argv = {helper().string()};
  spec.argv.insert(spec.argv.end(), args.begin(), args.end());
  spec.env = make_environment({{"WB_MARKER", "yes"}}, {"PATH"});
  spec.limits = limits;
  return run_process(spec);
}

bool process_alive(pid_t pid) {
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  if (!stat) return false;
  std::string pid_s, comm, state;
  stat >> pid_s >> comm >> state;
  return state != "Z" && state != "X";
}
}  // namespace

TEST_CASE("an ordinary run: exit code and output") {
  const ProcessResult r = run({"print", "10"});
  CHECK(r.started);
  CHECK(r.ok());
  CHECK(r.exit_code == 0);
  CHECK(r.output.find("xxxxxxxxxx\nEND") != std::string::npos);
  CHECK_FALSE(r.output_truncated);
}

TEST_CASE("the environment is exactly the one given") {
  const ProcessResult r = run({"env"});
  CHECK(r.output.find("WB_MARKER=yes") != std::string::npos);
  CHECK(r.output.find("HOME=") == std::string::npos);  // not passed on
}

TEST_CASE("a program that cannot be started says why") {
  ProcessSpec spec;
  spec.argv = {"/nonexistent/program"};
  const ProcessResult r = run_process(spec);
  CHECK_FALSE(r.started);
  CHECK(r.start_error.find("No such file") != std::string::npos);
  CHECK(r.describe().find("could not be started") != std::string::npos);
}

TEST_CASE("a crash is reported with its signal") {
  const ProcessResult r = run({"segv"});
  CHECK(r.signal == SIGSEGV);
  CHECK_FALSE(r.ok());
  CHECK(r.describe().find("SIGSEGV") != std::string::npos);
}

TEST_CASE("a hang is stopped at the time limit, with its whole process group") {
  ProcessLimits limits;
  limits.timeout_s = 1;
  limits.kill_grace_s = 0.5;
  const auto t0 = std::chrono::steady_clock::now();
  const ProcessResult r = run({"fork-sleep-group"}, limits);
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  CHECK(r.timed_out);
  CHECK(r.signal == 0);
  CHECK(secs < 10);
  CHECK(r.describe(1).find("did not finish within 1 s") != std::string::npos);
  // The forked grandchild was in the group: it is gone too.
  const pid_t grandchild = std::atoi(trim(r.output).c_str());
  REQUIRE(grandchild > 0);
  for (int i = 0; i < 50 && process_alive(grandchild); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(100));
  CHECK_FALSE(process_alive(grandchild));
}

TEST_CASE("a busy loop is stopped by the time limit") {
  ProcessLimits limits;
  limits.timeout_s = 1;
  const ProcessResult r = run({"spin"}, limits);
  CHECK(r.timed_out);
}

TEST_CASE("output beyond the cap is cut in the middle, keeping both ends") {
  ProcessLimits limits;
  limits.output_bytes = 8192;
  const ProcessResult r = run({"print", "1000000"}, limits);
  CHECK(r.ok());
  CHECK(r.output_truncated);
  CHECK(r.output_total_bytes > 1000000);
  CHECK(r.output.size() < 9000);
  CHECK(r.output.find("bytes of output cut") != std::string::npos);
  CHECK(r.output.find("END") != std::string::npos);  // the tail is kept
}

TEST_CASE("host memory above the limit stops the process") {
  ProcessLimits limits;
  limits.memory_bytes = 64ull << 20;
  limits.timeout_s = 30;
  const ProcessResult r = run({"hog", "256"}, limits);
  CHECK(r.memory_exceeded);
  CHECK(r.describe().find("memory") != std::string::npos);
}

TEST_CASE("the file-size limit stops a runaway writer") {
  grader_test::TempDir dir;
  ProcessSpec spec;
  spec.argv = {"/bin/sh", "-c", "exec head -c 4000000 /dev/zero > big"};
  spec.env = make_environment({}, {"PATH"});
  spec.cwd = dir.path();
  spec.limits.file_size_bytes = 1 << 20;
  const ProcessResult r = run_process(spec);
  CHECK(r.signal == SIGXFSZ);
  CHECK(fs::file_size(dir / "big") <= (1u << 20));
}

TEST_CASE("the CPU-time limit stops a spinning process") {
  ProcessLimits limits;
  limits.cpu_s = 1;
  limits.timeout_s = 60;
  const ProcessResult r = run({"spin"}, limits);
  CHECK_FALSE(r.timed_out);
  CHECK((r.signal == SIGXCPU || r.signal == SIGKILL));
}
