#include "grader/process.hpp"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <map>

extern char** environ;

namespace wb::grader {

namespace {

// Process groups of running children, for the interrupt handler (async-signal-safe access).
constexpr int kMaxChildren = 512;
std::array<std::atomic<pid_t>, kMaxChildren> g_groups{};
std::atomic<bool> g_interrupted{false};

void register_group(pid_t pgid) {
  for (auto& slot : g_groups) {
    pid_t expected = 0;
    if (slot.compare_exchange_strong(expected, pgid)) return;
  }
}
void unregister_group(pid_t pgid) {
  for (auto& slot : g_groups) {
    pid_t expected = pgid;
    if (slot.compare_exchange_strong(expected, 0)) return;
  }
}

void on_interrupt(int sig) {
  g_interrupted.store(true);
  for (auto& slot : g_groups) {
    const pid_t pgid = slot.load();
    if (pgid > 0) ::kill(-pgid, SIGKILL);
  }
  // Restore the default action and re-raise: the grader ends with the usual status.
  ::signal(sig, SIG_DFL);
  ::raise(sig);
}

void set_limit(int resource, rlim_t value) {
  struct rlimit rl{value, value};
  ::setrlimit(resource, &rl);
}

// Keeps the first half and the last half of what the child prints.
class OutputCapture {
 public:
  explicit OutputCapture(std::size_t cap) : half_(cap / 2) {}
  void add(const char* data, std::size_t n) {
    total_ += n;
    const std::size_t to_head = std::min(n, half_ - std::min(half_, head_.size()));
    head_.append(data, to_head);
    data += to_head;
    n -= to_head;
    if (n == 0) return;
    tail_.append(data, n);
    if (tail_.size() > 2 * half_) tail_.erase(0, tail_.size() - half_);
  }
  std::string text(bool& truncated) const {
    std::string tail = tail_;
    if (tail.size() > half_) tail.erase(0, tail.size() - half_);
    truncated = total_ > head_.size() + tail.size();
    if (!truncated) return head_ + tail;
    return head_ + "\n[... " + std::to_string(total_ - head_.size() - tail.size()) +
           " bytes of output cut ...]\n" + tail;
  }
  std::uint64_t total() const { return total_; }

 private:
  std::size_t half_;
  std::string head_, tail_;
  std::uint64_t total_ = 0;
};

// Hands complete lines to a callback as output arrives.
class LineSplitter {
 public:
  explicit LineSplitter(const std::function<void(const std::string&)>& on_line) : on_line_(on_line) {}
  void add(const char* data, std::size_t n) {
    if (!on_line_) return;
    pending_.append(data, n);
    std::size_t start = 0, nl;
    while ((nl = pending_.find('\n', start)) != std::string::npos) {
      on_line_(pending_.substr(start, nl - start));
      start = nl + 1;
    }
    pending_.erase(0, start);
  }
  void finish() {
    if (on_line_ && !pending_.empty()) on_line_(pending_);
    pending_.clear();
  }

 private:
  const std::function<void(const std::string&)>& on_line_;
  std::string pending_;
};

std::uint64_t resident_bytes(pid_t pid) {
  char path[64];
  std::snprintf(path, sizeof path, "/proc/%d/statm", static_cast<int>(pid));
  std::ifstream in(path);
  unsigned long long size = 0, resident = 0;
  if (!(in >> size >> resident)) return 0;
  return resident * static_cast<std::uint64_t>(::sysconf(_SC_PAGESIZE));
}

}  // namespace

std::string signal_description(int sig) {
  std::string name;
  switch (sig) {
    case SIGSEGV: name = "SIGSEGV"; break;
    case SIGABRT: name = "SIGABRT"; break;
    case SIGBUS: name = "SIGBUS"; break;
    case SIGFPE: name = "SIGFPE"; break;
    case SIGILL: name = "SIGILL"; break;
    case SIGKILL: name = "SIGKILL"; break;
    case SIGTERM: name = "SIGTERM"; break;
    case SIGXCPU: name = "SIGXCPU"; break;
    case SIGXFSZ: name = "SIGXFSZ"; break;
    case SIGPIPE: name = "SIGPIPE"; break;
    case SIGINT: name = "SIGINT"; break;
    default: name = "signal " + std::to_string(sig);
  }
  const char* what = nullptr;
  switch (sig) {
    case SIGSEGV: what = "segmentation fault: a bad host pointer, e.g. a device pointer dereferenced on the host"; break;
    case SIGABRT: what = "aborted: an uncaught exception, a failed assert or a corrupted heap"; break;
    case SIGBUS: what = "bus error"; break;
    case SIGFPE: what = "arithmetic exception, e.g. an integer division by zero on the host"; break;
    case SIGKILL: what = "killed, often by the system when the machine ran out of memory"; break;
    case SIGXCPU: what = "used more CPU time than allowed"; break;
    case SIGXFSZ: what = "wrote a file larger than allowed"; break;
    default: break;
  }
  return what ? name + " (" + what + ")" : name;
}

std::string ProcessResult::describe(double timeout_s) const {
  if (!started) return "could not be started: " + start_error;
  if (timed_out) {
    if (timeout_s > 0) {
      char buf[64];
      std::snprintf(buf, sizeof buf, "did not finish within %.0f s and was stopped", timeout_s);
      return buf;
    }
    return "did not finish in time and was stopped";
  }
  if (memory_exceeded) return "used more host memory than allowed and was stopped";
  if (signal) return "was killed by " + signal_description(signal);
  return "exited with code " + std::to_string(exit_code);
}

namespace {

// Everything the child needs, prepared before fork: between fork and exec only
// async-signal-safe calls are allowed (the grader is multithreaded).
struct ChildPlan {
  std::vector<char*> argv, envp;
  std::string cwd;
  ProcessLimits limits;
  rlim_t cpu = 0;
  bool inherit_output = false;
  int out_fd = -1;     // the output pipe's write end
  int report_fd = -1;  // the exec-error pipe's write end
};

ChildPlan plan_child(const ProcessSpec& spec) {
  ChildPlan c;
  for (const auto& a : spec.argv) c.argv.push_back(const_cast<char*>(a.c_str()));
  c.argv.push_back(nullptr);
  for (const auto& e : spec.env) c.envp.push_back(const_cast<char*>(e.c_str()));
  c.envp.push_back(nullptr);
  c.cwd = spec.cwd.string();
  c.limits = spec.limits;
  c.cpu = c.limits.cpu_s > 0 ? static_cast<rlim_t>(c.limits.cpu_s + 1) : 0;
  c.inherit_output = spec.inherit_output;
  return c;
}

// execve does not search PATH: try each directory of the child's own PATH.
void exec_on_path(const ChildPlan& c) {
  char* const* argv = c.argv.data();
  char* const* envp = c.envp.data();
  if (std::strchr(argv[0], '/') != nullptr) return;
  const char* path = nullptr;
  for (char* const* e = envp; *e; ++e)
    if (std::strncmp(*e, "PATH=", 5) == 0) path = *e + 5;
  if (!path) return;
  char candidate[4096];
  const char* p = path;
  while (*p) {
    const char* colon = std::strchr(p, ':');
    const std::size_t len = colon ? static_cast<std::size_t>(colon - p) : std::strlen(p);
    const std::size_t name_len = std::strlen(argv[0]);
    if (len > 0 && len + name_len + 2 < sizeof candidate) {
      std::memcpy(candidate, p, len);
      candidate[len] = '/';
      std::memcpy(candidate + len + 1, argv[0], name_len + 1);
      ::execve(candidate, argv, envp);
    }
    if (!colon) break;
    p = colon + 1;
  }
}

// In the child: own process group; dies with the grader; limits; output into the pipe; exec.
[[noreturn]] void become_child(const ChildPlan& c, pid_t parent) {
  ::setpgid(0, 0);
  ::prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (::getppid() != parent) ::_exit(127);
  if (!c.inherit_output) {
    ::dup2(c.out_fd, 1);
    ::dup2(c.out_fd, 2);
  }
  const int devnull = ::open("/dev/null", O_RDONLY);
  if (devnull >= 0) ::dup2(devnull, 0);
  if (c.report_fd != 3) ::dup2(c.report_fd, 3);  // keep the exec-error pipe at fd 3, close the rest
  ::fcntl(3, F_SETFD, FD_CLOEXEC);
  // close_range from 4: fd 3 is the exec-error pipe (closed on exec).
#ifdef SYS_close_range
  if (::syscall(SYS_close_range, 4u, ~0u, 0u) != 0)
#endif
    for (int fd = 4; fd < 4096; ++fd) ::close(fd);
  for (int s = 1; s < 32; ++s) ::signal(s, SIG_DFL);
  sigset_t none;
  sigemptyset(&none);
  ::sigprocmask(SIG_SETMASK, &none, nullptr);
  set_limit(RLIMIT_CORE, 0);
  if (c.cpu) set_limit(RLIMIT_CPU, c.cpu);
  if (c.limits.file_size_bytes) set_limit(RLIMIT_FSIZE, c.limits.file_size_bytes);
  if (c.limits.address_space_bytes) set_limit(RLIMIT_AS, c.limits.address_space_bytes);
  if (c.limits.open_files) set_limit(RLIMIT_NOFILE, c.limits.open_files);
  if (!c.cwd.empty() && ::chdir(c.cwd.c_str()) != 0) {
    const int e = errno;
    [[maybe_unused]] auto w = ::write(3, &e, sizeof e);
    ::_exit(127);
  }
  ::execve(c.argv[0], c.argv.data(), c.envp.data());
  exec_on_path(c);
  const int e = errno;
  [[maybe_unused]] auto w = ::write(3, &e, sizeof e);
  ::_exit(127);
}

using SteadyClock = std::chrono::steady_clock;

// In the parent: reads the output as it comes, enforces the time and memory limits, and
// returns the child's wait status once it has exited.
int supervise(pid_t pid, int out_fd, const ProcessLimits& lim, SteadyClock::time_point t0,
              const std::function<void(const char*, std::size_t)>& take, ProcessResult& result, bool& out_open) {
  ::fcntl(out_fd, F_SETFL, O_NONBLOCK);
  int status = 0;
  double term_sent_at = -1;
  auto elapsed = [&] { return std::chrono::duration<double>(SteadyClock::now() - t0).count(); };
  double next_memory_check = 0.2;
  char buf[65536];
  for (;;) {
    if (out_open) {
      pollfd pfd{out_fd, POLLIN, 0};
      ::poll(&pfd, 1, 50);
      for (;;) {
        const ssize_t n = ::read(out_fd, buf, sizeof buf);
        if (n > 0) {
          take(buf, static_cast<std::size_t>(n));
          continue;
        }
        if (n == 0) out_open = false;  // every writer closed it
        break;
      }
    } else {
      ::usleep(20000);
    }
    if (::waitpid(pid, &status, WNOHANG) == pid) return status;
    const double now = elapsed();
    if (term_sent_at < 0) {
      if (lim.timeout_s > 0 && now > lim.timeout_s) {
        result.timed_out = true;
        ::kill(-pid, SIGTERM);
        term_sent_at = now;
      } else if (lim.memory_bytes > 0 && now >= next_memory_check) {
        next_memory_check = now + 0.2;
        if (resident_bytes(pid) > lim.memory_bytes) {
          result.memory_exceeded = true;
          ::kill(-pid, SIGKILL);
          term_sent_at = now;
        }
      }
    } else if (now - term_sent_at > lim.kill_grace_s) {
      ::kill(-pid, SIGKILL);
    }
    if (g_interrupted.load()) ::kill(-pid, SIGKILL);
  }
}

// What is left in the pipe once the child is gone (a grandchild may still hold it: briefly).
void drain(int out_fd, bool& out_open, const std::function<void(const char*, std::size_t)>& take) {
  const auto until = SteadyClock::now() + std::chrono::milliseconds(500);
  char buf[65536];
  while (out_open && SteadyClock::now() < until) {
    const ssize_t n = ::read(out_fd, buf, sizeof buf);
    if (n > 0) take(buf, static_cast<std::size_t>(n));
    else if (n == 0) out_open = false;
    else ::usleep(10000);
  }
}

}  // namespace

ProcessResult run_process(const ProcessSpec& spec) {
  ProcessResult result;
  if (spec.argv.empty()) {
    result.start_error = "no command";
    return result;
  }
  ChildPlan plan = plan_child(spec);
  int out_pipe[2], err_pipe[2];
  if (::pipe2(out_pipe, O_CLOEXEC) != 0 || ::pipe2(err_pipe, O_CLOEXEC) != 0) {
    result.start_error = std::string("pipe: ") + std::strerror(errno);
    return result;
  }
  plan.out_fd = out_pipe[1];
  plan.report_fd = err_pipe[1];
  if (spec.inherit_output) std::fflush(nullptr);  // what we printed comes before the child's
  const pid_t parent = ::getpid();
  const auto t0 = SteadyClock::now();
  const pid_t pid = ::fork();
  if (pid < 0) {
    result.start_error = std::string("fork: ") + std::strerror(errno);
    ::close(out_pipe[0]), ::close(out_pipe[1]), ::close(err_pipe[0]), ::close(err_pipe[1]);
    return result;
  }
  if (pid == 0) become_child(plan, parent);

  ::setpgid(pid, pid);  // also here: no race with the child's own call
  register_group(pid);
  ::close(out_pipe[1]);
  ::close(err_pipe[1]);
  result.started = true;

  OutputCapture capture(spec.limits.output_bytes);
  LineSplitter lines(spec.on_line);
  const std::function<void(const char*, std::size_t)> take = [&](const char* data, std::size_t n) {
    capture.add(data, n);
    lines.add(data, n);
  };
  bool out_open = true;
  const int status = supervise(pid, out_pipe[0], spec.limits, t0, take, result, out_open);
  // The child is gone; anything it left in its group goes too, then the pipe drains.
  ::kill(-pid, SIGKILL);
  unregister_group(pid);
  drain(out_pipe[0], out_open, take);
  ::close(out_pipe[0]);
  lines.finish();
  int exec_errno = 0;
  if (::read(err_pipe[0], &exec_errno, sizeof exec_errno) == static_cast<ssize_t>(sizeof exec_errno)) {
    result.started = false;
    result.start_error = spec.argv[0] + ": " + std::strerror(exec_errno);
  }
  ::close(err_pipe[0]);

  result.seconds = std::chrono::duration<double>(SteadyClock::now() - t0).count();
  if (WIFEXITED(status)) result.exit_code = WEXITSTATUS(status);
  if (WIFSIGNALED(status)) result.signal = WTERMSIG(status);
  // A group killed because of the time or memory limit: report the limit, not the signal.
  if (result.timed_out || result.memory_exceeded) result.signal = 0;
  result.output = capture.text(result.output_truncated);
  result.output_total_bytes = capture.total();
  return result;
}

std::vector<std::string> make_environment(const std::vector<std::pair<std::string, std::string>>& set,
                                          const std::vector<std::string>& keep) {
  std::map<std::string, std::string> env;
  for (const auto& name : keep)
    if (const char* v = std::getenv(name.c_str())) env[name] = v;
  for (const auto& [k, v] : set) env[k] = v;
  std::vector<std::string> out;
  for (const auto& [k, v] : env) out.push_back(k + "=" + v);
  return out;
}

const std::vector<std::string>& build_environment_names() {
  static const std::vector<std::string> names = {
      "PATH", "LD_LIBRARY_PATH", "CUDA_HOME", "CUDA_PATH", "CUDACXX", "CUDAARCHS", "CC",
      "CXX", "CUDAHOSTCXX", "NVCC_PREPEND_FLAGS", "NVCC_APPEND_FLAGS", "CPATH",
      "LIBRARY_PATH", "CMAKE_PREFIX_PATH", "SOURCE_DATE_EPOCH", "CUDA_DEVICE_ORDER"};
  return names;
}

const std::vector<std::string>& test_environment_names() {
  // WB_DATA_DIR: the optional llama2.c checkpoint some end-to-end tests use.
  static const std::vector<std::string> names = {"PATH", "LD_LIBRARY_PATH", "CUDA_HOME", "CUDA_PATH",
                                                 "CUDA_DEVICE_ORDER", "WB_DATA_DIR"};
  return names;
}

std::vector<std::string> inherited_environment(const std::vector<std::pair<std::string, std::string>>& set,
                                               const std::vector<std::string>& unset) {
  std::map<std::string, std::string> env;
  for (char** e = environ; e && *e; ++e) {
    const std::string kv = *e;
    const auto eq = kv.find('=');
    if (eq != std::string::npos) env[kv.substr(0, eq)] = kv.substr(eq + 1);
  }
  for (const auto& name : unset) env.erase(name);
  for (const auto& [k, v] : set) env[k] = v;
  std::vector<std::string> out;
  for (const auto& [k, v] : env) out.push_back(k + "=" + v);
  return out;
}

void install_interrupt_handlers() {
  struct sigaction sa{};
  sa.sa_handler = on_interrupt;
  sigemptyset(&sa.sa_mask);
  for (int sig : {SIGINT, SIGTERM, SIGHUP}) ::sigaction(sig, &sa, nullptr);
}

bool interrupted() { return g_interrupted.load(); }

}  // namespace wb::grader
