#include "grader/submission.hpp"

#include <algorithm>
#include <regex>
#include <set>

#include "grader/archive.hpp"
#include "grader/process.hpp"
#include "grader/util.hpp"

namespace wb::grader {

json Flag::to_json() const {
  return {{"chapter", chapter_id}, {"file", file}, {"line", line},
          {"code", code},          {"severity", severity}, {"message", message}};
}

json PreparedSubmission::to_json() const {
  json chs = json::object();
  for (const auto& [id, c] : chapters) {
    json flags = json::array();
    for (const auto& f : c.flags) flags.push_back(f.to_json());
    chs[id] = {{"present", c.present},           {"taken", c.taken},
               {"from_starter", c.from_starter}, {"reject_reason", c.reject_reason},
               {"reject_detail", c.reject_detail}, {"unchanged_starter", c.unchanged_starter},
               {"flags", flags}};
  }
  return {{"input", input.string()}, {"archive", archive}, {"layout", layout},
          {"prefix", prefix},        {"chapters", chs},    {"ignored", ignored},
          {"notes", notes}};
}

std::string strip_comments(const std::string& s) {
  std::string out;
  out.reserve(s.size());
  enum { Code, Line, Block, Str, Chr } st = Code;
  for (std::size_t i = 0; i < s.size(); ++i) {
    const char c = s[i];
    const char n = i + 1 < s.size() ? s[i + 1] : '\0';
    switch (st) {
      case Code:
        if (c == '/' && n == '/') st = Line, ++i, out += "  ";
        else if (c == '/' && n == '*') st = Block, ++i, out += "  ";
        else {
          if (c == '"') st = Str;
          if (c == '\'') st = Chr;
          out += c;
        }
        break;
      case Line:
        if (c == '\n') st = Code, out += c;
        break;
      case Block:
        if (c == '*' && n == '/') st = Code, ++i, out += "  ";
        else out += c == '\n' ? '\n' : ' ';
        break;
      case Str:
      case Chr:
        out += c;
        if (c == '\\' && n) out += n, ++i;
        else if ((st == Str && c == '"') || (st == Chr && c == '\'') || c == '\n') st = Code;
        break;
    }
  }
  return out;
}

std::string normalized_source(const std::string& text) {
  std::string out;
  for (char c : strip_comments(text))
    if (!std::isspace(static_cast<unsigned char>(c))) out += c;
  return out;
}

std::vector<Flag> scan_source(const std::string& text, const std::string& chapter_id,
                              const std::string& file, const std::vector<std::string>& forbidden_headers) {
  std::vector<Flag> flags;
  auto add = [&](int line, const std::string& code, Severity severity, const std::string& message) {
    // One flag per code and file is enough to act on.
    for (const auto& f : flags)
      if (f.code == code) return;
    flags.push_back({chapter_id, file, line, code, severity, message});
  };
  // .incbin pulls any file into the object, comments or not.
  {
    const auto lines = split_lines(text);
    for (std::size_t i = 0; i < lines.size(); ++i)
      if (lines[i].find(".incbin") != std::string::npos)
        add(static_cast<int>(i + 1), "incbin", Severity::reject,
            "uses the assembler's .incbin to pull another file into the build");
  }
  struct Rule {
    std::regex re;
    const char* code;
    Severity severity;
    const char* message;
  };
  static const std::vector<Rule> rules = [] {
    const auto R = [](const char* p) { return std::regex(p); };
    return std::vector<Rule>{
        {R(R"(WB_TEST_REPORT|WB_REPORT_NONCE)"), "test_channel", Severity::reject,
         "touches the channel that carries test results to the grader (WB_TEST_REPORT/WB_REPORT_NONCE)"},
        {R(R"(\bdoctest\b|DOCTEST_|\bTEST_CASE\b|wb::testing|wb/testing\.hpp|\bmark_skipped\b|\brecord_metric\b)"),
         "test_harness", Severity::reject, "uses the test harness from chapter code (only tests may)"},
        {R(R"(\bnamespace\s+(wb|doctest)\b|\bnamespace\s+(\w+\s*::\s*)*reference\b|\bnamespace\s+ch\d+_build\b)"),
         "replaces_harness", Severity::reject,
         "opens a namespace of the tests' own code (wb, doctest, a chapter's reference): chapter code defines "
         "only its own functions, in its chapter's namespace"},
        {R(R"(\bsetsid\s*\(|\bsetpgid\s*\(|\bdaemon\s*\(|\bptrace\s*\()"), "process_group", Severity::reject,
         "leaves the grader's process group or traces processes"},
        {R(R"(\bcupti\w*|CUPTI_|\bwb::ApiCounter\b|\bapi_totals\b)"), "instrumentation", Severity::reject,
         "uses CUPTI or the workbook's API counter, which the tests use to count CUDA calls"},
        {R(R"(\b(getenv|secure_getenv|environ)\b)"), "reads_environment", Severity::warning,
         "reads environment variables (the grader's seed and channel live there)"},
        {R(R"(\bWB_SEED\b)"), "reads_seed", Severity::warning, "mentions WB_SEED, the grader's hidden seed"},
        {R(R"(\b(_exit|_Exit|quick_exit|exit|abort|terminate)\s*\()"), "ends_process", Severity::warning,
         "ends the process itself; a test then cannot report what went wrong"},
        {R(R"(\b(system|popen|fork|vfork|execl|execlp|execle|execv|execvp|execve|posix_spawn|dlopen|dlsym)\s*\()"),
         "starts_processes", Severity::warning, "starts processes or loads code at run time"},
        {R(R"(__attribute__\s*\(\(\s*constructor|\batexit\s*\(|\bat_quick_exit\s*\()"), "static_init", Severity::warning,
         "runs code before main or at exit"},
        {R(R"(std::thread|std::jthread|std::async|pthread_create|#\s*pragma\s+omp)"), "cpu_threads", Severity::warning,
         "starts CPU threads: the work is meant to run on the GPU"},
        {R(R"(\b(fopen|freopen|ofstream|ifstream|fstream|open|creat|unlink|remove|rename)\s*[(<])"), "file_io", Severity::warning,
         "reads or writes files"},
        {R(R"(\bkill\s*\(|\braise\s*\(|\bsignal\s*\(|\bsigaction\b)"), "signals", Severity::warning,
         "sends or handles signals"},
    };
  }();

  const std::string code = strip_comments(text);
  const auto lines = split_lines(code);
  static const std::regex directive(R"(^\s*#\s*(include|include_next|import|embed)\b\s*(.*)$)");
  static const std::regex quoted(R"(^"([^"]*)\"|^<([^>]*)>)");
  for (std::size_t i = 0; i < lines.size(); ++i) {
    const int ln = static_cast<int>(i + 1);
    const std::string& line = lines[i];
    std::smatch m;
    if (std::regex_match(line, m, directive)) {
      const std::string target = trim(m[2].str());
      std::smatch t;
      if (!std::regex_search(target, t, quoted)) {
        add(ln, "forbidden_include", Severity::reject,
            "#" + m[1].str() + " with a computed name (" + target + "): only literal includes are allowed");
        continue;
      }
      const std::string name = t[1].matched ? t[1].str() : t[2].str();
      const fs::path p(name);
      bool climbs = false;
      for (const auto& part : p) climbs = climbs || part == "..";
      if (p.is_absolute() || climbs || name.find("solutions") != std::string::npos) {
        add(ln, "forbidden_include", Severity::reject,
            "#include \"" + name + "\" reaches outside the chapter (absolute path, '..' or solutions/)");
        continue;
      }
      if (m[1].str() == "embed")
        add(ln, "forbidden_include", Severity::reject, "#embed pulls another file into the build");
      const std::string base = p.filename().string();
      if (std::find(forbidden_headers.begin(), forbidden_headers.end(), base) != forbidden_headers.end())
        add(ln, "calls_reference", Severity::reject,
            "#include \"" + name + "\" is the tests' own code (the CPU reference or the harness): "
            "chapter code must compute the answer itself");
    }
    for (const auto& rule : rules)
      if (std::regex_search(line, rule.re)) add(ln, rule.code, rule.severity, rule.message);
  }
  return flags;
}

namespace {

struct Walked {
  std::vector<std::string> files;     // regular files, relative, generic form
  std::set<std::string> links;        // symbolic links (never followed)
};

Walked walk(const fs::path& root) {
  Walked w;
  std::size_t count = 0;
  std::error_code ec;
  for (auto it = fs::recursive_directory_iterator(root, fs::directory_options::skip_permission_denied, ec);
       it != fs::recursive_directory_iterator(); it.increment(ec)) {
    if (ec) break;
    if (++count > 200000)
      throw InputError("submission " + root.string() + " has more than 200000 entries; refusing to search it");
    const auto st = it->symlink_status();
    const std::string rel = it->path().lexically_relative(root).generic_string();
    if (fs::is_symlink(st)) {
      w.links.insert(rel);
      continue;
    }
    if (fs::is_directory(st)) {
      const std::string name = it->path().filename().string();
      // Version control and build outputs never hold the student's editable files.
      if (name == ".git" || name == "node_modules" || name == "__pycache__" || it.depth() > 12)
        it.disable_recursion_pending();
      continue;
    }
    if (fs::is_regular_file(st)) w.files.push_back(rel);
  }
  return w;
}

// The submitted path of chapter `c`'s `file` under a layout and prefix.
std::string located(Layout layout, const std::string& prefix, const Chapter& c, const std::string& file) {
  return prefix + (layout == Layout::workbook ? "chapters/" : "") + c.slug + "/" + file;
}

bool same_content(const fs::path& a, const fs::path& b) {
  std::error_code ec;
  const auto sa = fs::file_size(a, ec);
  if (ec) return false;
  const auto sb = fs::file_size(b, ec);
  if (ec || sa != sb) return false;
  if (sa > (4u << 20)) return true;  // large and same size: not worth reading
  try {
    return read_text_file(a) == read_text_file(b);
  } catch (const std::exception&) {
    return false;
  }
}

// Files the student may have edited that the grader ignores: say so, so nobody believes
// an edited test or header counted.
void note_ignored(PreparedSubmission& s, const fs::path& root, const Walked& w,
                  const std::vector<Chapter>& chapters, const fs::path& pristine) {
  std::set<std::string> taken;
  for (const auto& c : chapters)
    for (const auto& f : c.editable) taken.insert(located(s.layout, s.prefix, c, f));
  std::size_t shown = 0, more = 0;
  auto add = [&](const std::string& text) {
    if (shown < 40) s.ignored.push_back(text), ++shown;
    else ++more;
  };
  bool solutions_seen = false;
  for (const auto& rel : w.files) {
    if (taken.count(rel) || !starts_with(rel, s.prefix)) continue;
    const std::string inside = rel.substr(s.prefix.size());
    if (starts_with(inside, "solutions/")) {
      solutions_seen = true;
      continue;
    }
    // The pristine counterpart of this file, if the layout gives one.
    fs::path counterpart;
    if (s.layout == Layout::workbook) {
      counterpart = pristine / inside;
    } else {
      for (const auto& c : chapters)
        if (starts_with(inside, c.slug + "/")) counterpart = pristine / "chapters" / inside;
    }
    if (counterpart.empty()) continue;
    const bool guarded = starts_with(inside, "tests/") || starts_with(inside, "lib/") ||
                         starts_with(inside, "cmake/") || starts_with(inside, "chapters/") ||
                         starts_with(inside, "grader/") || inside == "CMakeLists.txt" ||
                         s.layout == Layout::chapters;
    if (!guarded) continue;
    if (fs::exists(counterpart)) {
      if (!same_content(root / rel, counterpart))
        add(rel + ": modified, ignored (tests, harness, headers and build files come from the "
                  "instructor's copy)");
    } else if (starts_with(inside, "tests/") || starts_with(inside, "lib/") ||
               starts_with(inside, "chapters/") || s.layout == Layout::chapters) {
      add(rel + ": not part of the workbook, ignored (only the editable files are taken)");
    }
  }
  if (more) s.ignored.push_back("... and " + std::to_string(more) + " more ignored file(s)");
  if (solutions_seen)
    s.notes.push_back("the submission contains a solutions/ directory: ignored (never graded)");
}

}  // namespace

namespace {

// Phase 1: the submission as a directory tree: itself, or its archive extracted into `work`.
struct Opened {
  fs::path root;
  bool archive = false;
  std::vector<std::pair<std::string, std::string>> skipped_members;  // member, why not extracted
  std::vector<std::string> replaced_members;  // paths held more than once: the last copy is graded
};

Opened open_submission(const fs::path& input, const fs::path& work, const GradingLimits& limits) {
  Opened o;
  std::error_code ec;
  const auto st = fs::symlink_status(input, ec);
  if (ec || !fs::exists(st)) throw InputError("submission not found: " + input.string());
  o.root = input;
  if (fs::is_regular_file(fs::status(input))) {
    if (!is_archive_path(input))
      throw InputError("submission " + input.string() +
                       " is a file but not an archive (.zip, .tar, .tar.gz, .tgz, .tar.bz2, .tar.xz)");
    o.archive = true;
    ArchiveLimits al;
    al.archive_bytes = static_cast<std::uint64_t>(limits.archive_mb * (1 << 20));
    al.member_bytes = static_cast<std::uint64_t>(limits.archive_member_mb * (1 << 20));
    al.total_bytes = al.archive_bytes;
    al.members = static_cast<std::size_t>(limits.archive_members);
    o.root = work / "extracted";
    fs::remove_all(o.root);
    const ExtractResult ex = extract_archive(input, o.root, al);
    o.skipped_members = ex.skipped;
    o.replaced_members = ex.replaced;
    if (ex.extracted.empty() && ex.skipped.empty())
      throw InputError("submission archive " + input.string() + " is empty");
  } else if (!fs::is_directory(fs::status(input))) {
    throw InputError("submission " + input.string() + " is neither a directory nor an archive");
  }
  return o;
}

// Phase 2: where the editable files are (layout and prefix); InputError when nowhere.
void find_layout(PreparedSubmission& s, const fs::path& input, const Walked& w, const Opened& opened,
                 const std::vector<Chapter>& chapters, std::set<std::string>& present) {
  const auto& skipped_members = opened.skipped_members;
  // Which layout and prefix hold the most editable files? chapters/<slug>/<file> (a copy
  // of the workbook) wins ties over <slug>/<file> (just the chapters); never solutions/.
  struct Candidate {
    Layout layout = Layout::workbook;
    std::string prefix;
    int matches = 0;
  };
  std::map<std::pair<Layout, std::string>, int> counts;
  present.insert(w.files.begin(), w.files.end());
  present.insert(w.links.begin(), w.links.end());
  for (const auto& [name, why] : skipped_members) present.insert(name);
  for (const auto& rel : present) {
    for (const auto& c : chapters) {
      for (const auto& f : c.editable) {
        const std::string b_tail = c.slug + "/" + f;
        const std::string a_tail = "chapters/" + b_tail;
        if (rel == a_tail || ends_with(rel, "/" + a_tail))
          ++counts[{Layout::workbook, rel.substr(0, rel.size() - a_tail.size())}];
        if (rel == b_tail || ends_with(rel, "/" + b_tail)) {
          const std::string prefix = rel.substr(0, rel.size() - b_tail.size());
          if (!ends_with(prefix, "chapters/") && !ends_with(prefix, "solutions/") && prefix != "solutions/")
            ++counts[{Layout::chapters, prefix}];
        }
      }
    }
  }
  Candidate best;
  for (const auto& [key, n] : counts) {
    const Candidate c{key.first, key.second, n};
    auto depth = [](const std::string& p) { return std::count(p.begin(), p.end(), '/'); };
    const bool better = c.matches > best.matches ||
                        (c.matches == best.matches && c.layout == Layout::workbook && best.layout != Layout::workbook) ||
                        (c.matches == best.matches && c.layout == best.layout && depth(c.prefix) < depth(best.prefix));
    if (best.matches == 0 || better) best = c;
  }
  if (best.matches == 0) {
    std::string expected;
    for (const auto& c : chapters)
      for (const auto& f : c.editable) expected += "\n  chapters/" + c.slug + "/" + f;
    std::string hint = w.links.empty() ? "" : " (symbolic links are not followed)";
    throw InputError("submission " + input.string() + " holds none of the chapters' editable files" + hint +
                     "; expected files such as (with or without the chapters/ prefix):" + expected);
  }
  s.layout = best.layout;
  s.prefix = best.prefix;
}

// The student root is reused from one submission to the next (same paths, so a build
// directory's objects can be reused): a file is rewritten only when its content changes,
// and whatever the last submission left that this one does not have is removed.
class StudentRoot {
 public:
  explicit StudentRoot(fs::path root) : root_(std::move(root)) { fs::create_directories(root_); }
  void put(const fs::path& dst, const std::string& text) {
    written_.insert(dst.lexically_relative(root_).generic_string());
    std::error_code ec;
    if (fs::is_regular_file(fs::symlink_status(dst, ec))) {
      try {
        if (read_text_file(dst) == text) return;
      } catch (const std::exception&) {
      }
    }
    write_text_atomic(dst, text);
  }
  void remove_stale() {
    std::vector<fs::path> stale;
    for (auto it = fs::recursive_directory_iterator(root_); it != fs::recursive_directory_iterator(); ++it)
      if (!it->is_directory() && !written_.count(it->path().lexically_relative(root_).generic_string()))
        stale.push_back(it->path());
    for (const auto& p : stale) fs::remove(p);
  }
  const fs::path& path() const { return root_; }

 private:
  fs::path root_;
  std::set<std::string> written_;
};

}  // namespace

std::vector<std::string> test_only_headers(const Chapter& c, const fs::path& pristine) {
  std::vector<std::string> forbidden;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(pristine / "tests" / c.slug, ec)) {
    const std::string name = e.path().filename().string();
    if (e.is_regular_file() && !fs::exists(pristine / "chapters" / c.slug / name)) forbidden.push_back(name);
  }
  return forbidden;
}

namespace {

// Phase 3: one chapter's editable files: taken (checked and scanned), missing (the
// committed starter fills in), or unusable (the chapter is rejected with why).
SubmittedChapter take_chapter(const Chapter& c, const PreparedSubmission& s, const Opened& opened, const Walked& w,
                              const std::set<std::string>& present, const SourceTrees& trees,
                              const GradingLimits& limits, StudentRoot& out) {
  const auto& skipped_members = opened.skipped_members;
  const auto max_bytes = static_cast<std::uintmax_t>(limits.editable_file_kb * 1024);
  SubmittedChapter sc;
  sc.id = c.id;
  const std::vector<std::string> forbidden = test_only_headers(c, trees.pristine);
  std::error_code ec2;
  bool all_starter = true;
  for (const auto& f : c.editable) {
    const std::string rel = located(s.layout, s.prefix, c, f);
    const fs::path src = opened.root / rel;
    const fs::path starter = trees.pristine / "chapters" / c.slug / f;
    const fs::path dst = out.path() / c.slug / f;
    fs::create_directories(dst.parent_path());
    auto skipped = std::find_if(skipped_members.begin(), skipped_members.end(),
                                [&](const auto& p) { return p.first == rel; });
    if (w.links.count(rel)) {
      sc.reject_reason = "bad_file";
      sc.reject_detail = rel + " is a symbolic link: submit the file itself";
      sc.present = true;
      continue;
    }
    if (skipped != skipped_members.end()) {
      sc.reject_reason = "bad_file";
      sc.reject_detail = rel + " was not extracted from the archive: " + skipped->second;
      sc.present = true;
      continue;
    }
    if (!present.count(rel)) {
      sc.from_starter.push_back(f);
      continue;
    }
    sc.present = true;
    const auto size = fs::file_size(src, ec2);
    if (ec2 || size > max_bytes) {
      sc.reject_reason = "bad_file";
      sc.reject_detail = rel + (ec2 ? " cannot be read: " + ec2.message()
                                    : " is " + std::to_string(size / 1024) + " KB, more than the " +
                                          std::to_string(max_bytes / 1024) + " KB an editable file may have");
      continue;
    }
    std::string text;
    try {
      text = read_text_file(src, max_bytes);
    } catch (const std::exception& e) {
      sc.reject_reason = "bad_file";
      sc.reject_detail = e.what();
      continue;
    }
    if (text.find('\0') != std::string::npos) {
      sc.reject_reason = "bad_file";
      sc.reject_detail = rel + " is not a text file";
      continue;
    }
    out.put(dst, text);
    sc.taken.push_back(f);
    for (auto& flag : scan_source(text, c.id, f, forbidden)) sc.flags.push_back(flag);
    const std::string norm = normalized_source(text);
    try {
      if (fs::exists(starter) && normalized_source(read_text_file(starter)) != norm) all_starter = false;
      const fs::path reference = trees.solutions / c.slug / f;
      if (!trees.solutions.empty() && fs::exists(reference) && normalized_source(read_text_file(reference)) == norm)
        sc.flags.push_back({c.id, f, 0, "same_as_reference", Severity::warning,
                            "is identical to the reference solution (comments and spacing aside)"});
    } catch (const std::exception&) {
    }
  }
  sc.unchanged_starter = sc.present && all_starter && sc.reject_reason.empty();
  if (sc.present && sc.reject_reason.empty()) {
    for (const auto& flag : sc.flags) {
      if (flag.severity == Severity::reject) {
        sc.reject_reason = flag.code;
        sc.reject_detail = flag.file + (flag.line ? ":" + std::to_string(flag.line) : "") + " " + flag.message;
        break;
      }
    }
    // Editable files the student did not submit: the starter's copy keeps the build whole.
    for (const auto& f : sc.from_starter) {
      const fs::path starter = trees.pristine / "chapters" / c.slug / f;
      if (fs::exists(starter)) out.put(out.path() / c.slug / f, read_text_file(starter));
    }
  }
  return sc;
}

// Phase 4: what the archive held that was not extracted, for the report.
// Appends `lines` to `notes`, at most `most` of them, then one line that counts the rest.
void note_at_most(std::vector<std::string>& notes, const std::vector<std::string>& lines, std::size_t most,
                  const std::string& rest) {
  for (std::size_t i = 0; i < lines.size() && i < most; ++i) notes.push_back(lines[i]);
  if (lines.size() > most) notes.push_back("... and " + std::to_string(lines.size() - most) + " more " + rest);
}

void note_skipped_members(PreparedSubmission& s, const Opened& opened) {
  std::vector<std::string> skipped, replaced;
  for (const auto& [name, why] : opened.skipped_members) skipped.push_back(name + ": not extracted: " + why);
  for (const auto& path : opened.replaced_members)
    replaced.push_back(path + ": held more than once in the archive; its last copy was extracted, as tar does");
  note_at_most(s.ignored, skipped, 20, "archive member(s) not extracted");
  note_at_most(s.ignored, replaced, 20, "path(s) held more than once (the last copy of each was extracted)");
}

}  // namespace

PreparedSubmission prepare_submission(const fs::path& input, const std::vector<Chapter>& chapters,
                                      const SourceTrees& trees, const fs::path& work,
                                      const GradingLimits& limits) {
  PreparedSubmission s;
  s.input = input;
  const Opened opened = open_submission(input, work, limits);
  s.archive = opened.archive;
  const Walked w = walk(opened.root);
  if (w.files.empty() && w.links.empty())
    throw InputError("submission " + input.string() + " is empty: no files in it");
  std::set<std::string> present;
  find_layout(s, input, w, opened, chapters, present);

  StudentRoot out(work / "student");
  s.student_root = out.path();
  for (const auto& c : chapters) s.chapters[c.id] = take_chapter(c, s, opened, w, present, trees, limits, out);
  out.remove_stale();
  note_ignored(s, opened.root, w, chapters, trees.pristine);
  note_skipped_members(s, opened);
  return s;
}

std::string check_committed_starters(const fs::path& source_dir) {
  const fs::path git = find_program("git");
  if (git.empty() || !fs::exists(source_dir / ".git"))
    return "starters for missing files are taken from " + (source_dir / "chapters").string() +
           " as it is (not a git checkout: it cannot be compared with the committed starters)";
  ProcessSpec spec;
  // The lessons (README.md) are not built: an edited lesson changes no grade.
  spec.argv = {git.string(), "-C", source_dir.string(), "status", "--porcelain", "--untracked-files=no", "--",
               "chapters", ":(exclude)chapters/*/README.md"};
  spec.env = make_environment({{"LC_ALL", "C"}}, {"PATH", "HOME"});
  spec.limits.timeout_s = 60;
  const ProcessResult r = run_process(spec);
  if (!r.ok())
    return "could not compare chapters/ with the committed starters (git status " + r.describe(60) + ")";
  const std::string changed = trim(r.output);
  if (changed.empty()) return "";
  throw InputError("the starters in " + (source_dir / "chapters").string() +
                   " differ from the committed ones:\n" + clip_text(changed, 10, 800) +
                   "\nA submission's missing files are filled with the starters, so grading now would fill "
                   "them with these edits. Grade from a clean checkout (git stash, or a fresh clone).");
}

}  // namespace wb::grader
