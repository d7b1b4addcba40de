// A stand-in for the programs the grader runs, so the grader's host tests can make it face
// every behaviour without a GPU: honest and dishonest test binaries, crashes, hangs,
// memory hogs, chatter, forks.
//
//   grader_test_helper sleep S | spin | segv | hog MB | print BYTES | fork-sleep-group | env
//   <name>/test_NN_kind_build report MODE   (called through a link with a test binary's name)
#include <signal.h>
#include <unistd.h>

#include <nlohmann/json.hpp>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iostream>
#include <string>
#include <thread>
#include <vector>

#include "wb/test_environment.hpp"

extern char** environ;

namespace {

std::string env(const char* name) {
  const char* v = std::getenv(name);
  return v ? v : "";
}

// Plays test_main: a report at $WB_TEST_REPORT, doctest's summary line, test_main's exit code.
int report(const std::string& mode, const char* argv0) {
  std::string binary = argv0;
  binary = binary.substr(binary.find_last_of('/') + 1);
  // test_99_correctness_student -> chapter 99
  std::string chapter = binary.size() > 7 ? binary.substr(5, 2) : "";
  const std::string path = env("WB_TEST_REPORT");
  std::string nonce = env("WB_REPORT_NONCE");
  const std::string seed_text = env("WB_SEED");
  unsigned long long seed = seed_text.empty() ? 42 : std::strtoull(seed_text.c_str(), nullptr, 10);
  if (mode == "wrong-nonce") nonce = "0123456789abcdef";
  if (mode == "wrong-seed") seed += 1;

  using nlohmann::json;
  json tests = json::array();
  auto add = [&](const std::string& name, const std::string& status, const std::string& message) {
    std::string hint;
    if (auto p = message.find("hint: "); p != std::string::npos) hint = message.substr(p + 6);
    tests.push_back({{"name", name}, {"status", status}, {"message", message}, {"hint", hint},
                     {"duration_s", 0.01}, {"metrics", {{"speedup", 2.5}}}, {"notes", json::array()}});
  };
  int doctest_failed = 0;
  if (mode == "fail") {
    add("first", "passed", "");
    add("second", "failed", "ch99 second 3x5: 2 of 15 elements differ\nhint: check the tail");
    doctest_failed = 1;
  } else if (mode == "todo") {
    add("first", "todo", "not implemented yet: ch99 kernel");
    add("second", "todo", "not implemented yet: ch99 kernel");
    doctest_failed = 2;
  } else if (mode == "skip") {
    add("first", "skipped", "");
    add("second", "skipped", "");
  } else if (mode == "illegal") {
    add("first", "failed", "CUDA error cudaErrorIllegalAddress (an illegal memory access was encountered)\nhint: bounds");
    doctest_failed = 1;
  } else {
    add("first", "passed", "");
    add("second", "passed", "");
  }
  if (mode == "exit-early") std::exit(0);
  if (mode == "hang") for (;;) std::this_thread::sleep_for(std::chrono::seconds(1));
  json summary = {{"passed", 0}, {"failed", 0}, {"skipped", 0}, {"todo", 0}};
  for (const auto& t : tests) summary[t["status"].get<std::string>()] = summary[t["status"].get<std::string>()].get<int>() + 1;
  json r = {{"schema", "workbook-test-report/1"}, {"binary", binary}, {"chapter", chapter}, {"build", "student"},
            {"seed", seed}, {"device", "Test GPU"}, {"tests", tests}, {"summary", summary}};
  if (!nonce.empty()) r["nonce"] = nonce;
  // The environment as test_main reports it, or as code in the process changed it.
  json environment = json::object();
  for (const char* name : wb::kTestEnvironmentNames) {
    const char* v = std::getenv(name);
    environment[name] = v ? json(v) : json(nullptr);
  }
  bool quick = !env("WB_QUICK").empty() && env("WB_QUICK") != "0";
  if (mode == "set-quick") environment["WB_QUICK"] = "1", quick = true;  // setenv before main
  if (mode == "unset-data-dir") environment["WB_DATA_DIR"] = nullptr;   // unsetenv before main
  if (mode == "sanitizer-quick") quick = true;  // a sanitizer's variable set by the code under test
  r["environment"] = environment;
  r["quick"] = quick;
  if (!path.empty()) std::ofstream(path) << r.dump(1);
  if (mode != "no-summary")
    std::cout << "[doctest] test cases: " << tests.size() << " | " << tests.size() - doctest_failed
              << " passed | " << doctest_failed << " failed | 0 skipped\n";
  if (mode == "skip") return 77;
  if (mode == "mismatch-exit") return 1;
  return doctest_failed ? 1 : 0;
}

}  // namespace

int main(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "";
  const std::string arg = argc > 2 ? argv[2] : "";
  if (mode == "sleep") {
    std::this_thread::sleep_for(std::chrono::duration<double>(std::atof(arg.c_str())));
    return 0;
  }
  if (mode == "spin") {
    volatile unsigned long long x = 0;
    for (;;) x = x + 1;
  }
  if (mode == "segv") {
    raise(SIGSEGV);
    return 1;
  }
  if (mode == "hog") {
    const std::size_t bytes = std::strtoull(arg.c_str(), nullptr, 10) << 20;
    std::vector<char> v(bytes, 1);
    std::this_thread::sleep_for(std::chrono::seconds(20));
    return v[bytes / 2];
  }
  if (mode == "print") {
    const std::string chunk(4096, 'x');
    std::size_t left = std::strtoull(arg.c_str(), nullptr, 10);
    while (left > 0) {
      const std::size_t n = std::min(left, chunk.size());
      std::cout.write(chunk.data(), static_cast<std::streamsize>(n));
      left -= n;
    }
    std::cout << "\nEND\n";
    return 0;
  }
  if (mode == "fork-sleep-group") {
    const pid_t child = fork();
    if (child == 0) {
      std::this_thread::sleep_for(std::chrono::seconds(60));
      _exit(0);
    }
    std::cout << child << std::endl;
    std::this_thread::sleep_for(std::chrono::seconds(60));
    return 0;
  }
  if (mode == "env") {
    for (char** e = environ; *e; ++e) std::cout << *e << "\n";
    return 0;
  }
  if (mode == "report") return report(arg, argv[0]);
  std::cerr << "grader_test_helper: unknown mode '" << mode << "'\n";
  return 2;
}
