#include "grader/report_writers.hpp"

#include <algorithm>
#include <map>
#include <set>
#include <sstream>

#include "grader/util.hpp"

namespace wb::grader {

namespace {

std::string md_cell(std::string s) {
  replace_all(s, "|", "\\|");
  replace_all(s, "\n", " ");
  return s;
}

std::string fence(const std::string& text) {
  const std::string f = text.find("```") == std::string::npos ? "```" : "~~~~";
  return f + "text\n" + text + "\n" + f + "\n";
}

std::string kind_counts(const json& k) {
  if (!k.contains("tests") || k["tests"].empty()) {
    const std::string st = k.value("status", "");
    if (st == "gated") return "not run";
    if (st == "not_gradable") return "skipped (no GPU)";
    if (st == "failed_to_run") return "did not finish";
    return "-";
  }
  int passed = 0;
  for (const auto& t : k["tests"]) passed += t.value("status", "") == "passed";
  return std::to_string(passed) + "/" + std::to_string(k["tests"].size());
}

std::vector<std::string> all_kinds(const json& report) {
  std::vector<std::string> kinds;
  for (const auto& c : report["chapters"])
    for (const auto& k : c.value("kinds", json::array())) {
      const std::string kind = k.value("kind", "");
      if (std::find(kinds.begin(), kinds.end(), kind) == kinds.end()) kinds.push_back(kind);
    }
  return kinds;
}

std::string capitalized(std::string s) {
  if (!s.empty()) s[0] = static_cast<char>(std::toupper(static_cast<unsigned char>(s[0])));
  return s;
}

std::string reason_words(const std::string& reason) {
  static const std::map<std::string, std::string> words = {
      {"wrong_answer", "wrong answer"},
      {"cuda_fault", "memory fault on the GPU"},
      {"cuda_error", "CUDA error"},
      {"out_of_memory", "out of memory"},
      {"timing_rule", "a timing rule was broken"},
      {"too_slow", "below the timing pass mark"},
      {"timeout", "did not finish in time"},
      {"crashed", "crashed"},
      {"memory", "used too much host memory"},
      {"no_report", "ended without a test report"},
      {"invalid_report", "untrusted test report"},
      {"compile_error", "does not compile"},
      {"build_timeout", "the build took too long"},
      {"forbidden_include", "includes a forbidden file"},
      {"calls_reference", "uses the tests' reference code"},
      {"replaces_harness", "replaces the tests' own code"},
      {"test_channel", "tampers with the test report channel"},
      {"test_harness", "uses the test harness"},
      {"process_group", "escapes the grader's process control"},
      {"instrumentation", "tampers with the tests' API-call counting"},
      {"incbin", "pulls another file into the build"},
      {"bad_file", "unusable file"},
      {"todo", "not implemented yet"},
      {"missing", "not submitted"},
      {"not_gradable", "GPU tests could not run here"},
      {"below_pass_mark", "below the pass mark"},
      {"invalid_submission", "the submission could not be read"},
      {"grader_error", "the grader failed"},
  };
  const auto it = words.find(reason);
  return it == words.end() ? reason : it->second;
}

}  // namespace

std::string render_markdown(const json& r) {
  std::ostringstream md;
  md << "# Grade report: " << r.value("student", "") << "\n\n";
  md << "**Score: " << format_points(r.value("score", 0.0)) << " / " << format_points(r.value("max_score", 0.0))
     << "**";
  const json device = r["grader"].value("device", json(nullptr));
  md << "  (graded " << r.value("graded_at", "") << (device.is_string() ? " on " + device.get<std::string>() : "")
     << ")\n\n";
  const std::string status = r.value("status", "");
  if (status == "invalid" || status == "error") {
    md << "**This submission could not be graded.**\n\n" << fence(r.value("error", ""));
    if (status == "error") md << "\nThis is a problem on the grader's side; your instructor has been told.\n";
    md << "\n";
  }
  if (status == "incomplete")
    md << "> **Incomplete:** GPU tests could not run on the grading machine ("
       << r["grader"].value("no_gpu_reason", std::string("no CUDA device"))
       << "). They are reported as not gradable here, never as passed.\n\n";

  const auto kinds = all_kinds(r);
  md << "| Chapter | Status |";
  for (const auto& k : kinds) md << " " << capitalized(k) << " |";
  md << " Points |\n|---|---|";
  for (std::size_t i = 0; i < kinds.size(); ++i) md << "---|";
  md << "---|\n";
  for (const auto& c : r["chapters"]) {
    md << "| " << md_cell(c.value("id", "") + " " + c.value("title", "")) << " | " << md_cell(c.value("label", "")) << " |";
    for (const auto& kind : kinds) {
      std::string cell = "-";
      for (const auto& k : c.value("kinds", json::array()))
        if (k.value("kind", "") == kind) cell = kind_counts(k);
      md << " " << cell << " |";
    }
    md << " " << format_points(c.value("score", 0.0)) << " / " << format_points(c.value("max_score", 0.0)) << " |\n";
  }
  md << "\n";

  for (const auto& c : r["chapters"]) {
    const std::string state = c.value("state", "");
    md << "## " << c.value("id", "") << " " << c.value("title", "") << ": " << c.value("label", "");
    const std::string reason = c.value("reason", "");
    if (!reason.empty() && reason != state && reason != "todo" && reason != "missing")
      md << " (" << reason_words(reason) << ")";
    md << ", " << format_points(c.value("score", 0.0)) << " / " << format_points(c.value("max_score", 0.0))
       << " points\n\n";
    const std::string message = c.value("message", "");
    if (!message.empty() && state != "passing_timing") {
      if (!c.value("test", "").empty())
        md << "First problem, in test \"" << c.value("test", "") << "\" (" << c.value("kind", "") << "):\n\n";
      md << fence(clip_text(message, 40, 6000)) << "\n";
    }
    if (!c.value("hint", "").empty()) md << "**Hint:** " << c.value("hint", "") << "\n\n";

    for (const auto& k : c.value("kinds", json::array())) {
      md << "**" << capitalized(k.value("kind", "")) << ": " << format_points(k.value("score", 0.0)) << " / "
         << format_points(k.value("max_score", 0.0)) << "**";
      if (!k.value("note", "").empty()) md << ". " << clip_text(k.value("note", ""), 2, 300);
      md << "\n\n";
      for (const auto& t : k.value("tests", json::array())) {
        const std::string ts = t.value("status", "");
        md << "- " << (ts == "passed" && t.value("reason", "") != "below_pass_mark" ? "[x] " : "[ ] ")
           << t.value("name", "") << ": " << ts;
        if (ts == "failed" || ts == "todo") {
          const std::string first = clip_text(trim(t.value("message", "")), 1, 200);
          if (!first.empty()) md << " (" << first << ")";
        }
        if (ts == "skipped" && !t.value("notes", json::array()).empty())
          md << " (" << clip_text(t["notes"][0].get<std::string>(), 1, 200) << "; not counted)";
        if (t.value("reason", "") == "below_pass_mark") md << ", below a pass mark";
        md << ", " << format_points(t.value("score", 0.0)) << " / " << format_points(t.value("max_score", 0.0)) << "\n";
      }
      if (!k.value("tests", json::array()).empty()) md << "\n";
      // Timing vs pass marks.
      std::ostringstream marks;
      for (const auto& t : k.value("tests", json::array()))
        for (const auto& m : t.value("pass_marks", json::array())) {
          const json v = m.value("value", json(nullptr));
          marks << "| " << md_cell(t.value("name", "")) << " | " << m.value("metric", "") << " | "
                << (v.is_number() ? format_points(v.get<double>()) : "not measured") << " | "
                << m.value("mark", "") << " | " << (m.value("ok", false) ? "met" : "**not met**") << " |\n";
        }
      if (!marks.str().empty())
        md << "| Test | Metric | Measured | Pass mark | |\n|---|---|---|---|---|\n" << marks.str() << "\n";
    }
    const json flags = c.value("flags", json::array());
    if (!flags.empty()) {
      md << "Checks of your code:\n\n";
      for (const auto& f : flags)
        md << "- " << (f.value("severity", "") == "reject" ? "**rejected**: " : "note: ") << f.value("file", "")
           << (f.value("line", 0) ? ":" + std::to_string(f.value("line", 0)) : "") << " " << f.value("message", "")
           << "\n";
      md << "\n";
    }
    for (const auto& s : c.value("sanitizer", json::array())) {
      md << "compute-sanitizer " << s.value("tool", "") << ": ";
      if (!s.value("ran", false)) md << "not run (" << s.value("problem", "") << ")\n\n";
      else if (s.value("errors", 0) == 0) md << "no errors\n\n";
      else md << s.value("errors", 0) << " error(s)\n\n" << fence(s.value("excerpt", ""));
    }
  }

  const json sub = r.value("submission", json::object());
  const json filled = sub.value("filled_from_starter", json::object());
  if (!filled.empty()) {
    md << "## Files filled in from the starter\n\nThese editable files were not in your submission; the "
          "workbook's unchanged starter was built in their place:\n\n";
    for (const auto& [id, files] : filled.items())
      for (const auto& f : files) md << "- chapter " << id << ": " << f.get<std::string>() << "\n";
    md << "\n";
  }
  const json ignored = sub.value("ignored", json::array());
  const json notes = sub.value("notes", json::array());
  if (!ignored.empty() || !notes.empty()) {
    md << "## Files not graded\n\nOnly the files each chapter names as editable are taken from a submission; "
          "tests, harness, headers and build files come from the instructor's copy.\n\n";
    for (const auto& n : notes) md << "- " << n.get<std::string>() << "\n";
    for (const auto& i : ignored) md << "- " << i.get<std::string>() << "\n";
    md << "\n";
  }
  // The seed stays in report.json (the instructor's): shown to students, a fixed --seed would
  // let anyone replay the graded inputs and tune code to them (docs/grading.md, "The seed").
  md << "---\nInputs are random, drawn from a hidden seed that your instructor can look up to "
        "reproduce a failure; `./workbook check` draws new ones on every run.\n";
  return md.str();
}

json render_gradescope(const json& r, const std::string& visibility) {
  json tests = json::array();
  for (const auto& c : r["chapters"]) {
    const std::string chapter = c.value("id", "") + " " + c.value("title", "");
    for (const auto& k : c.value("kinds", json::array())) {
      const std::string kind = k.value("kind", "");
      if (k.value("tests", json::array()).empty()) {
        std::string output = c.value("label", "");
        if (!k.value("note", "").empty()) output += ": " + k.value("note", "");
        const std::string st = c.value("state", "");
        if ((st == "failing" || st == "compile_error" || st == "rejected" || st == "missing") &&
            !c.value("message", "").empty())
          output += "\n\n" + clip_text(c.value("message", ""), 40, 6000);
        if (!c.value("hint", "").empty()) output += "\n\nHint: " + c.value("hint", "");
        json entry = {{"name", chapter + " / " + kind},
                      {"score", k.value("score", 0.0)},
                      {"max_score", k.value("max_score", 0.0)},
                      {"output", output},
                      {"visibility", visibility}};
        if (k.value("status", "") == "not_gradable") {
          // Gradescope knows only passed and failed; a test that could not run here is
          // neither. No "status": 0 points with an output that says why (docs/grading.md).
          entry["name"] = chapter + " / " + kind + " (not graded here)";
          entry["output"] = "NOT GRADED: these tests could not run on the grading machine (" +
                            r["grader"].value("no_gpu_reason", std::string("no CUDA device")) +
                            "). This says nothing about your code; your instructor must grade it again "
                            "on a machine with a GPU.";
        } else {
          entry["status"] = k.value("score", 0.0) >= k.value("max_score", 0.0) && k.value("max_score", 0.0) > 0
                                ? "passed" : "failed";
        }
        tests.push_back(entry);
        continue;
      }
      for (const auto& t : k["tests"]) {
        const bool passed = t.value("status", "") == "passed" && t.value("reason", "") != "below_pass_mark" &&
                            k.value("status", "") == "scored";
        std::string output = passed ? "passed" : t.value("status", "");
        if (!t.value("message", "").empty()) output += "\n\n" + clip_text(t.value("message", ""), 40, 6000);
        if (!t.value("hint", "").empty() && !passed) output += "\n\nHint: " + t.value("hint", "");
        for (const auto& m : t.value("pass_marks", json::array())) {
          const json v = m.value("value", json(nullptr));
          output += "\n" + m.value("metric", "") + " = " + (v.is_number() ? format_points(v.get<double>()) : "not measured") +
                    " (pass mark " + m.value("mark", "") + (m.value("ok", false) ? ", met)" : ", not met)");
        }
        if (k.value("status", "") == "gated") output += "\n(no points: every correctness test must pass first)";
        tests.push_back({{"name", chapter + " / " + kind + " / " + t.value("name", "")},
                         {"score", t.value("score", 0.0)},
                         {"max_score", t.value("max_score", 0.0)},
                         {"status", passed ? "passed" : "failed"},
                         {"output", output},
                         {"visibility", visibility}});
      }
    }
  }
  std::string summary = "Score " + format_points(r.value("score", 0.0)) + " / " + format_points(r.value("max_score", 0.0));
  if (r.value("status", "") == "incomplete") summary += "\nIncomplete: GPU tests could not run on the grading machine.";
  if (r.value("status", "") == "invalid" || r.value("status", "") == "error")
    summary += "\nThis submission could not be graded:\n" + r.value("error", "");
  for (const auto& c : r["chapters"])
    summary += "\n" + c.value("id", "") + " " + c.value("title", "") + ": " + c.value("label", "") + " (" +
               format_points(c.value("score", 0.0)) + " / " + format_points(c.value("max_score", 0.0)) + ")";
  return {{"score", r.value("score", 0.0)},
          {"output", summary},
          {"visibility", visibility},
          {"stdout_visibility", "hidden"},
          {"tests", tests}};
}

std::string render_junit(const json& r) {
  std::ostringstream suites;
  int all_tests = 0, all_failures = 0, all_errors = 0, all_skipped = 0;
  double all_time = 0;
  for (const auto& c : r["chapters"]) {
    std::ostringstream cases;
    int tests = 0, failures = 0, errors = 0, skipped = 0;
    double time = 0;
    const std::string slug = c.value("slug", c.value("id", ""));
    const std::string state = c.value("state", "");
    auto testcase = [&](const std::string& cls, const std::string& name, double t, const std::string& body) {
      ++tests;
      time += t;
      cases << "    <testcase classname=\"" << markup_escape(cls) << "\" name=\"" << markup_escape(name) << "\" time=\""
            << t << "\">" << body << "</testcase>\n";
    };
    auto element = [](const char* tag, const std::string& type, const std::string& message, const std::string& text) {
      return std::string("<") + tag + " type=\"" + markup_escape(type) + "\" message=\"" +
             markup_escape(clip_text(trim(message), 1, 200)) + "\">" + markup_escape(text) + "</" + tag + ">";
    };
    if (state == "missing" || state == "rejected" || state == "compile_error") {
      const bool is_error = state == "compile_error";
      (is_error ? errors : failures)++;
      testcase(slug, state == "compile_error" ? "build" : "submission", 0,
               element(is_error ? "error" : "failure", c.value("reason", ""), c.value("label", "") + ": " + c.value("message", ""),
                       c.value("message", "") + (c.value("hint", "").empty() ? "" : "\nhint: " + c.value("hint", ""))));
    } else {
      for (const auto& k : c.value("kinds", json::array())) {
        const std::string cls = slug + "." + k.value("kind", "");
        const std::string ks = k.value("status", "");
        if (k.value("tests", json::array()).empty()) {
          if (ks == "failed_to_run") {
            ++errors;
            testcase(cls, k.value("kind", ""), 0, element("error", c.value("reason", ""), k.value("note", ""), k.value("note", "")));
          } else {
            ++skipped;
            testcase(cls, k.value("kind", ""), 0, "<skipped message=\"" + markup_escape(k.value("note", "")) + "\"/>");
          }
          continue;
        }
        for (const auto& t : k["tests"]) {
          const std::string ts = t.value("status", "");
          const double d = t.value("duration_s", 0.0);
          std::string body;
          if (ts == "failed" || ts == "todo") {
            ++failures;
            body = element("failure", t.value("reason", ts), t.value("message", ""),
                           t.value("message", "") + (t.value("hint", "").empty() ? "" : "\nhint: " + t.value("hint", "")));
          } else if (ts == "skipped") {
            ++skipped;
            body = "<skipped message=\"not gradable here (no CUDA device)\"/>";
          } else if (t.value("reason", "") == "below_pass_mark") {
            ++failures;
            body = element("failure", "below_pass_mark", "below a pass mark", t.value("pass_marks", json::array()).dump());
          } else if (ks == "gated") {
            ++skipped;
            body = "<skipped message=\"no points: every correctness test must pass first\"/>";
          }
          testcase(cls, t.value("name", ""), d, body);
        }
      }
    }
    all_tests += tests, all_failures += failures, all_errors += errors, all_skipped += skipped, all_time += time;
    suites << "  <testsuite name=\"" << markup_escape(slug) << "\" tests=\"" << tests << "\" failures=\"" << failures
           << "\" errors=\"" << errors << "\" skipped=\"" << skipped << "\" time=\"" << time << "\">\n"
           << "    <properties><property name=\"score\" value=\"" << format_points(c.value("score", 0.0))
           << "\"/><property name=\"max_score\" value=\"" << format_points(c.value("max_score", 0.0))
           << "\"/><property name=\"state\" value=\"" << markup_escape(state) << "\"/></properties>\n"
           << cases.str() << "  </testsuite>\n";
  }
  std::ostringstream x;
  x << "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<testsuites name=\"workbook: "
    << markup_escape(r.value("student", "")) << "\" tests=\"" << all_tests << "\" failures=\"" << all_failures
    << "\" errors=\"" << all_errors << "\" skipped=\"" << all_skipped << "\" time=\"" << all_time << "\">\n"
    << suites.str() << "</testsuites>\n";
  return x.str();
}

void write_reports(const json& report, const fs::path& dir, const std::string& visibility) {
  fs::create_directories(dir);
  write_text_atomic(dir / "report.md", render_markdown(report));
  write_text_atomic(dir / "results.json", render_gradescope(report, visibility).dump(2) + "\n");
  write_text_atomic(dir / "junit.xml", render_junit(report));
  // report.json last: its presence means the others are there too.
  write_text_atomic(dir / "report.json", report.dump(2) + "\n");
}

std::string csv_field(const std::string& raw) {
  std::string s = printable(raw);
  replace_all(s, "\n", " ");
  // A spreadsheet must not read a student's name as a formula.
  if (!s.empty() && (s[0] == '=' || s[0] == '+' || s[0] == '-' || s[0] == '@')) s = "'" + s;
  if (s.find_first_of(",\"\n") != std::string::npos) {
    replace_all(s, "\"", "\"\"");
    s = "\"" + s + "\"";
  }
  return s;
}

std::string render_gradebook_csv(const std::vector<json>& reports) {
  std::map<std::string, std::string> chapters;  // id -> slug
  for (const auto& r : reports)
    for (const auto& c : r.value("chapters", json::array())) chapters[c.value("id", "")] = c.value("slug", "");
  std::vector<json> sorted = reports;
  std::sort(sorted.begin(), sorted.end(),
            [](const json& a, const json& b) { return a.value("student", "") < b.value("student", ""); });
  std::ostringstream csv;
  csv << "student";
  for (const auto& [id, slug] : chapters) csv << "," << csv_field(slug);
  csv << ",total,max_score,status,notes\n";
  for (const auto& r : sorted) {
    csv << csv_field(r.value("student", ""));
    std::vector<std::string> notes;
    for (const auto& [id, slug] : chapters) {
      csv << ",";
      for (const auto& c : r.value("chapters", json::array())) {
        if (c.value("id", "") != id) continue;
        csv << format_points(c.value("score", 0.0));
        const std::string st = c.value("state", "");
        if (st == "rejected" || st == "compile_error" || st == "not_gradable" ||
            (st == "failing" && c.value("reason", "") != "wrong_answer"))
          notes.push_back(id + " " + c.value("label", "") +
                          (c.value("reason", "").empty() || c.value("reason", "") == st ? "" : " (" + reason_words(c.value("reason", "")) + ")"));
      }
    }
    if (!r.value("error", "").empty()) notes.insert(notes.begin(), clip_text(trim(r.value("error", "")), 1, 200));
    csv << "," << format_points(r.value("score", 0.0)) << "," << format_points(r.value("max_score", 0.0)) << ","
        << csv_field(r.value("status", "")) << "," << csv_field(join(notes, "; ")) << "\n";
  }
  return csv.str();
}

}  // namespace wb::grader
