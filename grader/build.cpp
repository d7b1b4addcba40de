#include "grader/build.hpp"

#include <algorithm>
#include <fstream>
#include <map>
#include <regex>
#include <set>
#include <thread>

#include "grader/chapters.hpp"
#include "grader/util.hpp"

namespace wb::grader {

namespace {

bool excluded_top(const std::string& name) {
  return name == ".git" || name == "solutions" || name == "build" || starts_with(name, "build-") ||
         name == "results" || name == "report" || name == "out" || name == ".whl" ||
         name == ".ipynb_checkpoints" || name == "__pycache__";
}

// The reference files that chapters build on ("uses" in their manifests), with the
// directories that hold them: "solutions", "solutions/07_gpu_sampler",
// "solutions/07_gpu_sampler/sampler_fused.cu", ... Nothing else of solutions/ is copied.
std::set<std::string> used_reference_paths(const fs::path& src) {
  std::set<std::string> paths;
  try {
    const std::vector<Chapter> chapters = discover_chapters(src);
    for (const auto& c : chapters)
      for (const auto& id : c.uses) {
        const Chapter& used = find_chapter(chapters, id);
        paths.insert("solutions");
        paths.insert("solutions/" + used.slug);
        for (const auto& f : used.editable) paths.insert("solutions/" + used.slug + "/" + f);
      }
  } catch (const InputError&) {
    return {};  // a broken manifest, or a "uses" of no chapter: reported where chapters are read and built
  }
  return paths;
}

}  // namespace

std::vector<fs::path> test_code_dirs(const fs::path& tree) {
  std::vector<fs::path> dirs;
  for (const char* part : {"tests", "grader", "solutions"}) dirs.push_back(tree / part);
  return dirs;
}

void sync_source_tree(const fs::path& src, const fs::path& dst, const std::vector<fs::path>& exclude) {
  fs::create_directories(dst);
  std::set<std::string> wanted;  // relative paths that belong in dst
  const std::set<std::string> references = used_reference_paths(src);
  std::error_code ec;
  for (auto it = fs::recursive_directory_iterator(src, fs::directory_options::skip_permission_denied);
       it != fs::recursive_directory_iterator(); ++it) {
    const fs::path rel = it->path().lexically_relative(src);
    const std::string name = it->path().filename().string();
    const bool reference = references.count(rel.generic_string()) > 0;
    bool skip = false;
    if (it.depth() == 0 && excluded_top(name) && !reference) skip = true;
    if (starts_with(rel.generic_string(), "solutions/") && !reference) skip = true;
    if (name == "__pycache__" || name == ".ipynb_checkpoints") skip = true;
    for (const auto& ex : exclude)
      if (!ex.empty() && path_inside(it->path(), ex)) skip = true;
    if (it->is_directory() && fs::exists(it->path() / "CMakeCache.txt")) skip = true;  // a build dir
    if (skip) {
      if (it->is_directory()) it.disable_recursion_pending();
      continue;
    }
    wanted.insert(rel.generic_string());
    const fs::path target = dst / rel;
    if (it->is_directory()) {
      fs::create_directories(target);
      continue;
    }
    if (!it->is_regular_file()) continue;
    const auto src_time = fs::last_write_time(it->path());
    const bool same = fs::exists(target) && fs::file_size(target, ec) == it->file_size() &&
                      fs::last_write_time(target, ec) == src_time;
    if (same) continue;
    fs::copy_file(it->path(), target, fs::copy_options::overwrite_existing);
    fs::last_write_time(target, src_time);
  }
  // Files that left the instructor's tree leave the copy too.
  std::vector<fs::path> stale;
  for (auto it = fs::recursive_directory_iterator(dst); it != fs::recursive_directory_iterator(); ++it)
    if (!wanted.count(it->path().lexically_relative(dst).generic_string())) {
      stale.push_back(it->path());
      if (it->is_directory()) it.disable_recursion_pending();
    }
  for (const auto& p : stale) fs::remove_all(p, ec);
}

std::string cached_variable(const fs::path& build_dir, const std::string& name) {
  std::ifstream in(build_dir / "CMakeCache.txt");
  std::string line;
  while (std::getline(in, line)) {
    if (starts_with(line, name + ":") || starts_with(line, name + "=")) {
      const auto eq = line.find('=');
      if (eq != std::string::npos) return trim(line.substr(eq + 1));
    }
  }
  return "";
}

bool is_idle_build_line(const std::string& line) {
  return line.find("ninja: no work to do") != std::string::npos ||
         line.find("Re-checking globbed directories") != std::string::npos;
}

std::vector<std::string> cached_dependency_args(const fs::path& build_dir) {
  std::vector<std::string> args;
  for (const char* name : {"WB_ARCHIVE_INCLUDE_DIR", "WB_ARCHIVE_LIBRARY"})
    if (const std::string v = cached_variable(build_dir, name); !v.empty() && !ends_with(v, "-NOTFOUND"))
      args.push_back(std::string("-D") + name + "=" + v);
  return args;
}

std::string cached_cuda_architectures(const fs::path& build_dir) {
  return cached_variable(build_dir, "CMAKE_CUDA_ARCHITECTURES");
}

namespace {

std::vector<std::string> build_env(const BuildSettings& s) {
  const fs::path home = s.scratch / "home";
  fs::create_directories(home / "tmp");
  std::vector<std::pair<std::string, std::string>> set = {
      {"HOME", home.string()}, {"TMPDIR", (home / "tmp").string()}, {"LC_ALL", "C"}};
  if (!s.scrub_environment) return inherited_environment(set);
  return make_environment(set, build_environment_names());
}

ProcessLimits build_limits(double timeout_s) {
  ProcessLimits l;
  l.timeout_s = timeout_s;
  l.cpu_s = std::max(600.0, timeout_s);        // per compiler process
  l.file_size_bytes = 4ull << 30;
  l.output_bytes = 1u << 20;
  l.kill_grace_s = 5;
  return l;
}

fs::path cmake_path() {
  const fs::path p = find_program("cmake");
  if (p.empty()) throw std::runtime_error("`cmake` is not on PATH: the grader needs it to build submissions");
  return p;
}

}  // namespace

ProcessResult configure_student_build(const BuildSettings& s, const std::vector<std::string>& chapter_ids) {
  fs::create_directories(s.build_dir);
  ProcessSpec spec;
  spec.argv = {cmake_path().string(), "-S", s.tree.string(), "-B", s.build_dir.string(),
               "-DCMAKE_BUILD_TYPE=Release", "-DWB_BUILDS=student",
               "-DWB_STUDENT_ROOT=" + s.student_root.string(),
               "-DWB_CHAPTERS=" + join(chapter_ids, ";"), "-DBUILD_TESTING=ON"};
  if (!fs::exists(s.build_dir / "CMakeCache.txt") && !find_program("ninja").empty())
    spec.argv.insert(spec.argv.begin() + 5, {"-G", "Ninja"});
  if (!s.cuda_architectures.empty())
    spec.argv.push_back("-DCMAKE_CUDA_ARCHITECTURES=" + s.cuda_architectures);
  spec.argv.insert(spec.argv.end(), s.dependency_args.begin(), s.dependency_args.end());
  spec.env = build_env(s);
  spec.cwd = s.build_dir;
  spec.limits = build_limits(s.timeout_s);
  return run_process(spec);
}

void remove_student_binaries(const fs::path& build_dir) {
  std::error_code ec;
  const fs::path bin = build_dir / "bin";
  if (!fs::is_directory(bin)) return;
  for (const auto& e : fs::directory_iterator(bin, ec)) {
    const std::string n = e.path().filename().string();
    if ((starts_with(n, "test_") || starts_with(n, "bench_")) && ends_with(n, "_student")) fs::remove(e.path(), ec);
  }
}

std::string compile_error_excerpt(const std::string& log, const std::vector<fs::path>& strip_prefixes) {
  std::string text = log;
  for (const auto& p : strip_prefixes) {
    if (p.empty()) continue;
    replace_all(text, fs::absolute(p).lexically_normal().string() + "/", "");
  }
  const auto lines = split_lines(text);
  static const std::regex marker(R"((\berror\b|undefined reference|multiple definition|\bFAILED\b.*timed out|cannot find -l))",
                                 std::regex::icase);
  std::size_t first = lines.size();
  for (std::size_t i = 0; i < lines.size(); ++i) {
    if (starts_with(lines[i], "FAILED:") || starts_with(lines[i], "[")) continue;
    if (std::regex_search(lines[i], marker)) {
      first = i;
      break;
    }
  }
  if (first == lines.size()) return tail_lines(text, 20);
  std::vector<std::string> out;
  for (std::size_t i = first; i < lines.size() && out.size() < 30; ++i) {
    const std::string& l = lines[i];
    // Build-tool chatter and the (very long) compiler command lines are noise here.
    if (starts_with(l, "FAILED:") || starts_with(l, "ninja:") || starts_with(l, "[") ||
        l.find("/nvcc ") != std::string::npos || l.find("bin/c++ ") != std::string::npos ||
        l.find("bin/g++ ") != std::string::npos || starts_with(l, "gmake") || starts_with(l, "make"))
      continue;
    out.push_back(l.size() > 400 ? l.substr(0, 400) + " [...]" : l);
  }
  return join(out, "\n");
}

BuildOutcome build_targets(const fs::path& build_dir, const std::vector<std::string>& targets, double timeout_s,
                           const std::vector<std::string>& env, int jobs,
                           const std::vector<fs::path>& strip_prefixes) {
  BuildOutcome b;
  b.attempted = true;
  ProcessSpec spec;
  spec.argv = {cmake_path().string(), "--build", build_dir.string(), "--target"};
  spec.argv.insert(spec.argv.end(), targets.begin(), targets.end());
  if (jobs > 0) spec.argv.insert(spec.argv.end(), {"--parallel", std::to_string(jobs)});
  spec.env = env;
  spec.cwd = build_dir;
  spec.limits = build_limits(timeout_s);
  const ProcessResult r = run_process(spec);
  b.seconds = r.seconds;
  b.log = printable(r.output);
  b.timed_out = r.timed_out;
  b.ok = r.ok();
  if (!b.ok) {
    b.excerpt = r.timed_out ? "the build did not finish within " + format_points(timeout_s) + " s and was stopped\n" +
                                  tail_lines(b.log, 10)
                            : compile_error_excerpt(b.log, strip_prefixes);
    if (!r.started) b.excerpt = "the build could not be started: " + r.start_error;
  }
  return b;
}

BuildOutcome build_chapter(const BuildSettings& s, const Chapter& chapter) {
  std::vector<std::string> targets;
  for (const auto& kind : chapter.kinds()) targets.push_back(chapter.binary(kind));
  BuildOutcome b = build_targets(s.build_dir, targets, s.timeout_s, build_env(s), s.jobs,
                                 {s.student_root, s.tree, s.build_dir});
  if (b.ok) {
    // Belt and braces: every binary must now exist (and be this build's).
    for (const auto& t : targets)
      if (!fs::exists(s.build_dir / "bin" / t)) {
        b.ok = false;
        b.excerpt = "the build finished but " + t + " is missing";
      }
  }
  return b;
}

std::vector<NmSymbol> parse_nm(const std::string& output) {
  // "libch04_student.a[softmax.cu.o]: _Z7softmaxPKfPfii T 0 40" (a member of an archive),
  // "dir/test.cu.o: main T 0 40" (an object), "/lib/libc.so.6: clock_gettime@@GLIBC_2.17 T ..."
  static const std::regex member_re(R"(^[^\[]*\[([^\]]+)\]:\s+(\S+)\s+([A-Za-z?-]))");
  static const std::regex file_re(R"(^([^\[\]:]+):\s+(\S+)\s+([A-Za-z?-]))");
  std::vector<NmSymbol> out;
  for (const auto& line : split_lines(output)) {
    std::smatch m;
    if (!std::regex_search(line, m, member_re) && !std::regex_search(line, m, file_re)) continue;
    std::string name = m[2];
    name = name.substr(0, name.find('@'));  // a shared library's symbol version
    out.push_back({fs::path(m[1].str()).filename().string(), name, m[3].str()[0]});
  }
  return out;
}

std::vector<std::string> cross_references(const std::vector<NmSymbol>& symbols,
                                          const std::vector<std::string>& student_members) {
  auto is_student = [&](const std::string& m) {
    return std::find(student_members.begin(), student_members.end(), m) != student_members.end();
  };
  std::set<std::string> defined_elsewhere;
  for (const auto& s : symbols)
    if (!is_student(s.member) && s.type != 'U' && s.type != 'w' && s.type != 'v' && std::isupper(static_cast<unsigned char>(s.type)))
      defined_elsewhere.insert(s.name);
  std::set<std::string> hits;
  for (const auto& s : symbols)
    if (is_student(s.member) && s.type == 'U' && defined_elsewhere.count(s.name)) hits.insert(s.name);
  return {hits.begin(), hits.end()};
}

namespace {
bool is_definition(char type) { return (std::isupper(static_cast<unsigned char>(type)) && type != 'U') || type == 'u' || type == 'i'; }
bool is_weak_definition(char type) { return type == 'W' || type == 'V' || type == 'u'; }
}  // namespace

std::vector<std::string> redefinitions(const std::vector<NmSymbol>& student, const std::vector<NmSymbol>& harness) {
  std::map<std::string, bool> harness_only_strong;  // name -> every harness definition is strong
  for (const auto& h : harness)
    if (is_definition(h.type)) {
      auto [it, fresh] = harness_only_strong.emplace(h.name, true);
      it->second = it->second && !is_weak_definition(h.type);
    }
  std::set<std::string> hits;
  for (const auto& s : student) {
    if (!is_definition(s.type)) continue;
    const auto it = harness_only_strong.find(s.name);
    if (it == harness_only_strong.end()) continue;
    // Both weak: an inline function or a template instantiation that a shared header gives
    // both sides, the same code. A weak definition against strong ones still replaces them.
    if (is_weak_definition(s.type) && !it->second) continue;
    hits.insert(s.name);
  }
  return {hits.begin(), hits.end()};
}

namespace {

// Demangled names, one per symbol (the mangled name when c++filt is not there).
std::vector<std::string> demangle(const std::vector<std::string>& names) {
  const fs::path cxxfilt = find_program("c++filt");
  if (cxxfilt.empty() || names.empty()) return names;
  ProcessSpec spec;
  spec.argv = {cxxfilt.string()};
  spec.argv.insert(spec.argv.end(), names.begin(), names.end());
  spec.env = make_environment({}, {"PATH"});
  spec.limits.timeout_s = 30;
  const ProcessResult r = run_process(spec);
  auto lines = split_lines(trim(r.output));
  if (!r.ok() || lines.size() != names.size()) return names;
  return lines;
}

// nm's symbols of `files` (archives, objects; `dynamic`: the exported symbols of shared
// libraries), in parse_nm's form. Empty when nm is not there.
std::vector<NmSymbol> nm_symbols(const std::vector<fs::path>& files, bool dynamic = false) {
  const fs::path nm = find_program("nm");
  if (nm.empty() || files.empty()) return {};
  ProcessSpec spec;
  spec.argv = {nm.string(), "-A", "-P"};
  if (dynamic) spec.argv.insert(spec.argv.end(), {"-D", "--defined-only"});
  for (const auto& f : files) spec.argv.push_back(f.string());
  spec.env = make_environment({}, {"PATH"});
  spec.limits.timeout_s = 120;
  spec.limits.output_bytes = 256u << 20;
  return parse_nm(run_process(spec).output);
}

// What the object checks read in the build tree, found in one walk: the chapter's student
// library, and the tests' own code beside its support members: the chapter's test objects, the
// workbook's libraries (harness, main, model engine) and the reference libraries of the
// chapters it uses (not its own: a later chapter's build makes that one, and it defines the
// chapter's API, as the student's code must).
struct BuildArtifacts {
  fs::path student_library;
  std::vector<fs::path> harness;
};

BuildArtifacts find_artifacts(const fs::path& build_dir, const Chapter& chapter) {
  BuildArtifacts found;
  const std::string student_library = "libch" + chapter.id + "_student.a";
  const std::string test_objects = "/CMakeFiles/ch" + chapter.id + "_obj_";
  std::set<std::string> used_references;
  for (const auto& id : chapter.uses) used_references.insert("libch" + id + "_reference.a");
  std::error_code ec;
  for (auto it = fs::recursive_directory_iterator(build_dir, ec); it != fs::recursive_directory_iterator(); it.increment(ec)) {
    if (ec) break;
    const std::string name = it->path().filename().string();
    if (it->is_directory() && (name == "bin" || name == "_deps")) {
      it.disable_recursion_pending();
      continue;
    }
    if (!it->is_regular_file()) continue;
    if (name == student_library && found.student_library.empty()) found.student_library = it->path();
    const bool workbook_library = starts_with(name, "libwb_") && ends_with(name, ".a");
    const bool reference_library = used_references.count(name) > 0;
    const bool test_object = ends_with(name, ".o") && it->path().generic_string().find(test_objects) != std::string::npos;
    if (workbook_library || reference_library || test_object) found.harness.push_back(it->path());
  }
  return found;
}

// The shared libraries a built binary needs (readelf's NEEDED entries, found through its
// RUNPATH and ldconfig's cache), read from its headers: neither the binary nor its loader runs.
std::vector<fs::path> needed_shared_libraries(const fs::path& binary) {
  const fs::path readelf = find_program("readelf");
  if (readelf.empty() || !fs::exists(binary)) return {};
  ProcessSpec spec;
  spec.argv = {readelf.string(), "-d", binary.string()};
  spec.env = make_environment({}, {"PATH"});
  spec.limits.timeout_s = 30;
  static const std::regex entry_re(R"(\((NEEDED|RUNPATH|RPATH)\)[^\[]*\[([^\]]*)\])");
  std::vector<std::string> needed;
  std::vector<fs::path> dirs;
  for (const auto& line : split_lines(run_process(spec).output)) {
    std::smatch m;
    if (!std::regex_search(line, m, entry_re)) continue;
    if (m[1] == "NEEDED") {
      needed.push_back(m[2]);
      continue;
    }
    std::string list = m[2].str() + ":";
    for (std::size_t start = 0, colon; (colon = list.find(':', start)) != std::string::npos; start = colon + 1) {
      std::string dir = list.substr(start, colon - start);
      if (starts_with(dir, "$ORIGIN")) dir = binary.parent_path().string() + dir.substr(7);
      if (!dir.empty()) dirs.emplace_back(dir);
    }
  }
  std::map<std::string, std::vector<fs::path>> cache;  // "libc.so.6" -> its paths in ldconfig's cache
  if (const fs::path ldconfig = find_program("ldconfig", {"/sbin", "/usr/sbin"}); !ldconfig.empty()) {
    ProcessSpec ls;
    ls.argv = {ldconfig.string(), "-p"};
    ls.env = make_environment({}, {"PATH"});
    ls.limits.timeout_s = 30;
    static const std::regex cache_re(R"(^\s*(\S+) \(.*\) => (\S+)$)");
    for (const auto& line : split_lines(run_process(ls).output)) {
      std::smatch m;
      if (std::regex_search(line, m, cache_re)) cache[m[1]].emplace_back(m[2].str());
    }
  }
  std::vector<fs::path> libraries;
  for (const auto& name : needed) {
    for (const auto& dir : dirs)
      if (fs::exists(dir / name)) libraries.push_back(dir / name);
    for (const auto& path : cache[name]) libraries.push_back(path);
  }
  return libraries;
}

// "ch00::flush_l2(CUstream_st*)" -> "flush_l2"
std::string unqualified(const std::string& demangled) {
  std::string name = demangled.substr(0, demangled.find('('));
  if (auto p = name.rfind("::"); p != std::string::npos) name = name.substr(p + 2);
  return name;
}

// Functions the chapter's API headers declare are the workbook's to offer (chapter 00's
// flush_l2, defined by the tests' support code): calling them is the point, not a cheat.
bool declared_by_api(const std::string& name, const fs::path& api_dir) {
  static const std::regex identifier("[A-Za-z_][A-Za-z0-9_]*");
  if (!std::regex_match(name, identifier)) return false;
  const std::regex word("\\b" + name + "\\b");
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(api_dir, ec)) {
    const std::string ext = e.path().extension().string();
    if (ext != ".h" && ext != ".hpp" && ext != ".cuh" && ext != ".hh") continue;
    try {
      if (std::regex_search(read_text_file(e.path(), 4u << 20), word)) return true;
    } catch (const std::exception&) {
    }
  }
  return false;
}

}  // namespace

std::vector<Flag> check_student_objects(const BuildSettings& s, const Chapter& chapter,
                                        const std::vector<fs::path>& forbidden_dirs) {
  std::vector<Flag> flags;
  std::vector<std::string> members;
  for (const auto& f : chapter.editable) members.push_back(fs::path(f).filename().string() + ".o");

  // 1. What each student object was compiled from (the compiler's own dependency list).
  const fs::path ninja = find_program("ninja");
  if (!ninja.empty() && fs::exists(s.build_dir / "build.ninja")) {
    ProcessSpec spec;
    spec.argv = {ninja.string(), "-C", s.build_dir.string(), "-t", "deps"};
    spec.env = make_environment({}, {"PATH"});
    spec.limits.timeout_s = 120;
    spec.limits.output_bytes = 64u << 20;
    const ProcessResult r = run_process(spec);
    const std::string dir_marker = "ch" + chapter.id + "_student.dir/";
    std::string object;
    bool student_object = false;
    for (const auto& line : split_lines(r.output)) {
      if (line.empty()) continue;
      if (line[0] != ' ' && line[0] != '\t') {
        object = line.substr(0, line.find(": #deps"));
        const std::string base = fs::path(object).filename().string();
        student_object = object.find(dir_marker) != std::string::npos &&
                         std::find(members.begin(), members.end(), base) != members.end();
        continue;
      }
      if (!student_object) continue;
      fs::path dep = trim(line);
      if (dep.is_relative()) dep = s.build_dir / dep;
      for (const auto& dir : forbidden_dirs) {
        if (!dir.empty() && path_inside(dep, dir)) {
          const std::string file = fs::path(object).stem().string();  // softmax.cu
          std::string shown = dep.lexically_normal().lexically_relative(s.tree).generic_string();
          if (starts_with(shown, "..")) shown = dep.lexically_normal().string();
          flags.push_back({chapter.id, file, 0, "calls_reference", Severity::reject,
                           "is compiled with " + shown +
                               ", which belongs to the tests (the CPU reference or the harness): "
                               "chapter code must compute the answer itself"});
          break;
        }
      }
      if (!flags.empty()) break;
    }
  }

  // 2. What the student objects call that the tests' support code defines.
  const BuildArtifacts artifacts = find_artifacts(s.build_dir, chapter);
  if (artifacts.student_library.empty()) return flags;
  const auto symbols = nm_symbols({artifacts.student_library});  // empty when nm is not there
  if (!chapter.support.empty()) {
    for (std::size_t i = 0; i < members.size(); ++i) {
      // Each member on its own, so the message names the file that makes the call.
      std::vector<std::string> others = members;
      others.erase(others.begin() + static_cast<std::ptrdiff_t>(i));
      std::vector<NmSymbol> visible;
      for (const auto& sym : symbols)
        if (std::find(others.begin(), others.end(), sym.member) == others.end()) visible.push_back(sym);
      const auto hits = cross_references(visible, {members[i]});
      std::vector<std::string> forbidden;
      for (const auto& d : demangle(hits))
        if (!declared_by_api(unqualified(d), s.tree / "chapters" / chapter.slug)) forbidden.push_back(d);
      if (forbidden.empty()) continue;
      flags.push_back({chapter.id, chapter.editable[i], 0, "calls_reference", Severity::reject,
                       "calls code the tests provide (" + clip_text(join(forbidden, ", "), 3, 300) +
                           "): chapter code must compute the answer itself"});
      break;
    }
  }

  // 3. What the student objects define that the tests' code, or a shared library the tests
  //    link, defines too. Linked ahead of them, the student's definition is the one every
  //    call reaches: a CPU reference or checker that agrees with any answer, a clock or a
  //    CUDA event timer that runs slow, a main that prints a passing summary.
  std::vector<NmSymbol> harness = nm_symbols(artifacts.harness);
  for (const auto& sym : symbols)
    if (std::find(members.begin(), members.end(), sym.member) == members.end()) harness.push_back(sym);
  const fs::path test_binary = s.build_dir / "bin" / chapter.binary(chapter.kinds().front());
  const auto shared = nm_symbols(needed_shared_libraries(test_binary), /*dynamic=*/true);
  harness.insert(harness.end(), shared.begin(), shared.end());
  for (std::size_t i = 0; i < members.size(); ++i) {
    std::vector<NmSymbol> own;
    for (const auto& sym : symbols)
      if (sym.member == members[i]) own.push_back(sym);
    const auto hits = redefinitions(own, harness);
    if (hits.empty()) continue;
    std::vector<std::string> names;
    for (const auto& d : demangle(hits)) names.push_back(d.substr(0, d.find('(')));  // without the parameters
    flags.push_back({chapter.id, chapter.editable[i], 0, "replaces_harness", Severity::reject,
                     "defines " + clip_text(join(names, ", "), 3, 300) +
                         ", which the tests' own code or a library they link defines too: the tests would "
                         "call this definition instead of theirs. Chapter code defines only its own functions "
                         "(the chapter's API and its helpers); give a helper another name, or make it static"});
    break;
  }
  return flags;
}

}  // namespace wb::grader
