// Runs this test binary again under compute-sanitizer. See wb/sanitize_self.hpp.
#include "wb/sanitize_self.hpp"

#include <sys/wait.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <regex>
#include <sstream>
#include <vector>

namespace wb {
namespace {

namespace fs = std::filesystem;

std::string find_sanitizer() {
  std::vector<fs::path> dirs;
  if (const char* path = std::getenv("PATH")) {
    std::stringstream s(path);
    for (std::string d; std::getline(s, d, ':');)
      if (!d.empty()) dirs.emplace_back(d);
  }
  if (const char* home = std::getenv("CUDA_HOME")) dirs.emplace_back(fs::path(home) / "bin");
  dirs.emplace_back("/usr/local/cuda/bin");
  for (const fs::path& d : dirs) {
    std::error_code ec;
    const fs::path tool = d / "compute-sanitizer";
    if (fs::is_regular_file(tool, ec)) return tool.string();
  }
  return "";
}

std::string quoted(const std::string& s) {
  std::string out = "'";
  for (char c : s) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

}  // namespace

bool is_sanitizer_child() { return std::getenv("WB_SANITIZER_CHILD") != nullptr; }

SanitizerRun run_self_under_sanitizer(const std::string& tool, const std::string& test_case) {
  SanitizerRun run;
  const std::string sanitizer = find_sanitizer();
  if (sanitizer.empty()) {
    run.problem = "compute-sanitizer was not found (PATH, $CUDA_HOME/bin, /usr/local/cuda/bin)";
    return run;
  }
  std::error_code ec;
  const std::string self = fs::read_symlink("/proc/self/exe", ec).string();
  std::string command = "WB_SANITIZER_CHILD=1 " + quoted(sanitizer) + " --tool " + tool +
                        " --error-exitcode 86 --print-limit 20";
  if (tool == "racecheck") command += " --racecheck-report hazard";
  command += " " + quoted(self) + " --no-skip " + quoted("-tc=" + test_case) + " 2>&1";
  const auto start = std::chrono::steady_clock::now();
  FILE* pipe = popen(command.c_str(), "r");
  if (pipe == nullptr) {
    run.problem = "could not start " + sanitizer;
    return run;
  }
  std::string output;
  std::array<char, 4096> chunk;
  while (std::fgets(chunk.data(), chunk.size(), pipe)) output += chunk.data();
  const int status = pclose(pipe);
  run.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  run.ran = true;
  // "ERROR SUMMARY: 3 errors" (memcheck); "RACECHECK SUMMARY: 2 hazards displayed (2 errors,
  // 0 warnings)" (racecheck).
  static const std::regex summary(R"(ERROR SUMMARY:\s*([0-9]+) error)");
  static const std::regex race(R"(RACECHECK SUMMARY:.*\(([0-9]+) error)");
  static const std::regex hazards(R"(RACECHECK SUMMARY:\s*([0-9]+) hazard)");  // warnings too
  for (auto it = std::sregex_iterator(output.begin(), output.end(), summary); it != std::sregex_iterator(); ++it)
    run.errors = std::max(run.errors, std::stoi((*it)[1]));
  for (const std::regex* r : {&race, &hazards})
    for (auto it = std::sregex_iterator(output.begin(), output.end(), *r); it != std::sregex_iterator(); ++it)
      run.errors = std::max(run.errors, std::stoi((*it)[1]));
  const int code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  if (run.errors == 0 && code == 86) run.errors = 1;
  std::istringstream lines(output);
  int kept = 0;
  for (std::string line; std::getline(lines, line) && kept < 24;)
    if (line.rfind("=========", 0) == 0) run.excerpt += line + "\n", ++kept;
  if (code != 0 && code != 86 && run.errors == 0) {
    run.problem = "the run under " + tool + " exited with status " + std::to_string(code) +
                  "; its last output:\n" + output.substr(output.size() > 3000 ? output.size() - 3000 : 0);
  }
  return run;
}

}  // namespace wb
