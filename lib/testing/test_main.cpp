// The workbook's test main (doctest). Beyond doctest's own console output it:
//  - returns 77 when every test that ran was skipped for lack of a CUDA device, so CTest
//    shows GPU tests as skipped on a machine without one (never as passed), and then prints
//    "skipped: ..." instead of doctest's summary;
//  - reports a test that ended in wb::NotImplemented as "todo" (a starter not done yet);
//  - writes the test report (docs/CONTRACTS.md) to $WB_TEST_REPORT when set.
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <mutex>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "wb/device.hpp"
#include "wb/kernel_coverage.hpp"
#include "wb/random.hpp"
#include "wb/results.hpp"
#include "wb/test_environment.hpp"
#include "wb/testing.hpp"

namespace {

struct TestRecord {
  std::string name;
  std::string status = "passed";  // passed | failed | skipped | todo
  std::string message;            // first failure
  bool skipped = false;
  bool todo = false;
  double seconds = 0;
  nlohmann::json metrics = nlohmann::json::object();
  std::vector<std::string> notes;
};

std::vector<TestRecord> g_records;
TestRecord* g_current = nullptr;
std::mutex g_mutex;

void note_failure(const std::string& text) {
  if (g_current && g_current->message.empty()) g_current->message = text;
}

// What the failing check's scope has said: the CHECK_MESSAGE text, INFO and CAPTURE lines,
// innermost first (doctest hands them to reporters as "active contexts").
std::string logged_context() {
  const int count = doctest::IReporter::get_num_active_contexts();
  const doctest::IContextScope* const* contexts = doctest::IReporter::get_active_contexts();
  std::ostringstream text;
  for (int i = count - 1; i >= 0; --i) {
    if (i != count - 1) text << "\n";
    contexts[i]->stringify(&text);
  }
  return text.str();
}

std::string first_hint(const std::string& message) {
  std::size_t pos = 0;
  while (pos < message.size()) {
    std::size_t end = message.find('\n', pos);
    if (end == std::string::npos) end = message.size();
    std::string line = message.substr(pos, end - pos);
    const auto start = line.find_first_not_of(" \t");
    if (start != std::string::npos && line.compare(start, 5, "hint:") == 0) {
      line = line.substr(start + 5);
      return line.substr(line.find_first_not_of(' ') == std::string::npos ? 0 : line.find_first_not_of(' '));
    }
    pos = end + 1;
  }
  return "";
}

// Listens beside the console reporter and keeps one record per test case.
struct WorkbookListener : doctest::IReporter {
  explicit WorkbookListener(const doctest::ContextOptions&) {}
  void report_query(const doctest::QueryData&) override {}
  void test_run_start() override {}
  void test_run_end(const doctest::TestRunStats&) override {}
  void test_case_start(const doctest::TestCaseData& tc) override {
    std::lock_guard lock(g_mutex);
    g_records.push_back(TestRecord{tc.m_name});
    g_current = &g_records.back();
  }
  void test_case_reenter(const doctest::TestCaseData&) override {}
  void test_case_end(const doctest::CurrentTestCaseStats& st) override {
    std::lock_guard lock(g_mutex);
    if (!g_current) return;
    g_current->seconds += st.seconds;
    if (g_current->todo) g_current->status = "todo";
    else if (!st.testCaseSuccess) g_current->status = "failed";
    else if (g_current->skipped) g_current->status = "skipped";
    else g_current->status = "passed";
  }
  void test_case_exception(const doctest::TestCaseException& e) override {
    std::lock_guard lock(g_mutex);
    const std::string text = e.error_string.c_str();
    if (g_current && text.find("not implemented yet") != std::string::npos) g_current->todo = true;
    note_failure(text);
  }
  void subcase_start(const doctest::SubcaseSignature&) override {}
  void subcase_end() override {}
  void log_assert(const doctest::AssertData& ad) override {
    if (!ad.m_failed) return;
    std::lock_guard lock(g_mutex);
    std::string where = std::string(ad.m_expr) + " failed";
    if (ad.m_decomp.size() > 0) where += " (values: " + std::string(ad.m_decomp.c_str()) + ")";
    if (ad.m_threw) where += ": threw " + std::string(ad.m_exception.c_str());
    where += " at " + std::string(ad.m_file) + ":" + std::to_string(ad.m_line);
    // CHECK_MESSAGE's message (and any INFO or CAPTURE) is the lesson: it goes first, the
    // expression after it.
    const std::string said = logged_context();
    note_failure(said.empty() ? where : said + "\n(" + where + ")");
  }
  void log_message(const doctest::MessageData& md) override {
    if (!(md.m_severity & (doctest::assertType::is_check | doctest::assertType::is_require))) return;
    std::lock_guard lock(g_mutex);
    note_failure(md.m_string.c_str());
  }
  void test_case_skipped(const doctest::TestCaseData&) override {}
};

REGISTER_LISTENER("workbook", 1, WorkbookListener);

// "test_04_correctness_student" -> {"04", "correctness", "student"}
struct BinaryName {
  std::string binary, chapter, kind, build;
};
BinaryName parse_binary(const char* argv0) {
  BinaryName b;
  b.binary = std::filesystem::path(argv0).filename().string();
  std::vector<std::string> parts;
  std::string part;
  for (char c : b.binary) {
    if (c == '_') parts.push_back(part), part.clear();
    else part += c;
  }
  parts.push_back(part);
  if (parts.size() >= 4 && parts[0] == "test") {
    b.chapter = parts[1];
    b.kind = parts[2];
    b.build = parts[3];
  }
  return b;
}

void write_report(const char* path, const BinaryName& b, const std::string& nonce) {
  nlohmann::json tests = nlohmann::json::array();
  nlohmann::json summary = {{"passed", 0}, {"failed", 0}, {"skipped", 0}, {"todo", 0}};
  for (const auto& r : g_records) {
    tests.push_back({{"name", r.name},
                     {"status", r.status},
                     {"message", r.message},
                     {"hint", first_hint(r.message)},
                     {"duration_s", r.seconds},
                     {"metrics", r.metrics},
                     {"notes", r.notes}});
    summary[r.status] = summary[r.status].get<int>() + 1;
  }
  nlohmann::json report = {{"schema", "workbook-test-report/1"},
                           {"binary", b.binary},
                           {"chapter", b.chapter},
                           {"kind", b.kind},
                           {"build", b.build},
                           {"seed", wb::base_seed()},
                           {"device", wb::has_cuda_device() ? nlohmann::json(wb::device_info().name)
                                                            : nlohmann::json(nullptr)},
                           {"tests", tests},
                           {"summary", summary}};
  if (!nonce.empty()) report["nonce"] = nonce;
  // The variables that steer the tests, as the tests read them (taken when main started), for
  // the grader to compare with the environment it gave this process.
  nlohmann::json environment = nlohmann::json::object();
  for (const char* name : wb::kTestEnvironmentNames) {
    const std::optional<std::string> value = wb::test_environment(name);
    environment[name] = value ? nlohmann::json(*value) : nlohmann::json(nullptr);
  }
  report["environment"] = environment;
  report["quick"] = wb::coverage::quick();
  wb::write_file_atomic(path, report.dump(1) + "\n");
}

}  // namespace

namespace wb::testing {
void mark_skipped(const std::string& why) {
  std::lock_guard lock(g_mutex);
  if (g_current) {
    g_current->skipped = true;
    g_current->notes.push_back(why);
  }
}
void record_metric(const std::string& key, double value) {
  std::lock_guard lock(g_mutex);
  if (g_current) g_current->metrics[key] = value;
}
void record_note(const std::string& text) {
  std::lock_guard lock(g_mutex);
  if (g_current) g_current->notes.push_back(text);
}
}  // namespace wb::testing

int main(int argc, char** argv) {
  // First: the variables that steer the tests are read now and never again, so code in this
  // process cannot change them for the tests from here on (wb/test_environment.hpp).
  wb::snapshot_test_environment();
  // The grader's nonce proves a report came from this run; it is removed from the
  // environment before any test (student) code runs.
  std::string nonce;
  if (const char* n = std::getenv("WB_REPORT_NONCE")) nonce = n, unsetenv("WB_REPORT_NONCE");
  std::string report_path;
  if (const char* p = std::getenv("WB_TEST_REPORT")) report_path = p, unsetenv("WB_TEST_REPORT");

  const BinaryName binary = parse_binary(argv[0]);
  const bool device = wb::has_cuda_device();
  std::cout << "[workbook] " << binary.binary << ": seed " << wb::base_seed()
            << " (set WB_SEED to reproduce), device: "
            << (device ? wb::device_info().name : std::string("none")) << std::endl;

  doctest::Context context;
  context.applyCommandLine(argc, argv);
  // Run by hand without a device, doctest's summary would count skipped tests as passed
  // ("Status: SUCCESS!"): its output is held back, and shown only when some test did run.
  // (Under check and grade it is kept: they compare it with the test report.)
  std::ostringstream held;
  if (!device && report_path.empty()) context.setCout(&held);
  int result = context.run();
  const auto show_held = [&] { std::cout << held.str() << std::flush; };
  if (context.shouldExit()) return show_held(), result;

  if (!report_path.empty()) write_report(report_path.c_str(), binary, nonce);

  std::size_t skipped = 0, ran = g_records.size();
  for (const auto& r : g_records) skipped += r.status == "skipped";
  if (ran > 0 && skipped == ran) {
    // Every test that ran was skipped: tell CTest (SKIP_RETURN_CODE 77) and say why.
    const std::string why = g_records.front().notes.empty() ? "skipped" : g_records.front().notes.front();
    std::cout << why << " (" << skipped << " test" << (skipped == 1 ? "" : "s") << " not run)"
              << std::endl;
    return 77;
  }
  show_held();
  if (skipped > 0) std::cout << "[workbook] " << skipped << " test(s) skipped" << std::endl;
  return result == 0 ? 0 : 1;
}
