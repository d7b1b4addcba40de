#pragma once
// The environment variables that steer the tests, read once.
//
// A test process holds the student's code, and that code can change the process's own
// environment: setenv in a static initializer (before main) or in a host function (during
// the tests). WB_QUICK or a sanitizer's variables would leave out the largest cases (a 32-bit
// index would pass), an unset WB_DATA_DIR would skip the end-to-end cases. So the tests read
// these variables only through here: every value is taken once, when test_main starts (or at
// the first call, in a program without it), and never again. The test report carries the
// values ("environment") and whether the suite runs in its quick form ("quick"), and the
// grader compares them with the environment it started the process with.
#include <array>
#include <optional>
#include <string>

namespace wb {

inline constexpr std::array<const char*, 5> kTestEnvironmentNames = {
    "WB_QUICK", "WB_SANITIZE_TOOL", "WB_DATA_DIR", "WB_L2_FLUSH", "WB_DEBUG_SYNC"};

// Takes the snapshot now, if it has not been taken yet (test_main: first thing in main).
void snapshot_test_environment();

// A variable of kTestEnvironmentNames as the snapshot found it (nullopt: not set). Throws
// std::invalid_argument for any other name.
std::optional<std::string> test_environment(const std::string& name);

// Whether compute-sanitizer's variables were in the environment at the snapshot.
bool started_under_sanitizer();

// A variable used as a switch (WB_QUICK, WB_DEBUG_SYNC) is on when set to anything but "" or "0".
inline bool switched_on(const std::optional<std::string>& value) {
  return value && !value->empty() && *value != "0";
}

}  // namespace wb
