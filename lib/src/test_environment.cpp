#include "wb/test_environment.hpp"

#include <cstdlib>
#include <stdexcept>

extern char** environ;

namespace wb {
namespace {

struct Snapshot {
  std::array<std::optional<std::string>, kTestEnvironmentNames.size()> values;
  bool sanitizer = false;
};

// compute-sanitizer marks the processes it runs through variables of its own, or through the
// library it injects.
bool sanitizer_in_environment() {
  for (char** e = environ; e && *e; ++e) {
    const std::string var = *e;
    if (var.rfind("NV_SANITIZER", 0) == 0 || var.rfind("COMPUTE_SANITIZER", 0) == 0) return true;
    if ((var.rfind("LD_PRELOAD=", 0) == 0 || var.rfind("CUDA_INJECTION64_PATH=", 0) == 0) &&
        var.find("sanitizer") != std::string::npos)
      return true;
  }
  return false;
}

const Snapshot& snapshot() {
  static const Snapshot taken = [] {
    Snapshot s;
    for (std::size_t i = 0; i < kTestEnvironmentNames.size(); ++i)
      if (const char* v = std::getenv(kTestEnvironmentNames[i])) s.values[i] = v;
    s.sanitizer = sanitizer_in_environment();
    return s;
  }();
  return taken;
}

}  // namespace

void snapshot_test_environment() { (void)snapshot(); }

std::optional<std::string> test_environment(const std::string& name) {
  for (std::size_t i = 0; i < kTestEnvironmentNames.size(); ++i)
    if (name == kTestEnvironmentNames[i]) return snapshot().values[i];
  throw std::invalid_argument("wb::test_environment: '" + name + "' is not one of kTestEnvironmentNames");
}

bool started_under_sanitizer() { return snapshot().sanitizer; }

}  // namespace wb
