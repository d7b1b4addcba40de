#pragma once
// Building a student's chapters against the pristine workbook: a copy of the instructor's
// tree (without solutions/, but for the references later chapters build on), configured with
// WB_BUILDS=student and WB_STUDENT_ROOT pointing at the taken files, each chapter built on
// its own so a compile error costs that chapter only. After a build, the chapter's objects
// are checked: they may not depend on the tests' files (CPU references, harness), call
// functions the tests' support code defines, nor define what the tests' code defines.
#include <filesystem>
#include <string>
#include <vector>

#include "grader/chapters.hpp"
#include "grader/process.hpp"
#include "grader/submission.hpp"
#include "grader/verdict.hpp"

namespace wb::grader {

// Mirrors the instructor's tree into `dst`, leaving out solutions/ (all but the reference
// files that later chapters build on, their manifests' "uses": chapter 08 links chapter 07's
// reference sampler), version control, build directories and `exclude` (the grader's --out).
// Unchanged files keep their time stamps, so a reused build directory rebuilds nothing that
// did not change.
void sync_source_tree(const std::filesystem::path& src, const std::filesystem::path& dst,
                      const std::vector<std::filesystem::path>& exclude);

struct BuildSettings {
  std::filesystem::path tree;        // the pristine copy
  std::filesystem::path build_dir;
  std::filesystem::path student_root;
  std::filesystem::path scratch;     // HOME and TMPDIR of the compilers
  std::string cuda_architectures;    // "" = let the project decide
  // Where the instructor's build found its dependencies (-DNAME=VALUE), so the pristine copy
  // configures on the same machine without searching again (a .deps/ it cannot see).
  std::vector<std::string> dependency_args;
  int jobs = 0;                      // 0 = the build tool's default
  double timeout_s = 900;
  bool scrub_environment = true;
};

// The CUDA architectures of an existing build (its CMakeCache.txt), or "".
std::string cached_cuda_architectures(const std::filesystem::path& build_dir);
// -DNAME=VALUE for the dependency locations an existing build found (libarchive...).
std::vector<std::string> cached_dependency_args(const std::filesystem::path& build_dir);
// A cache variable of an existing build, or "" (e.g. WB_BUILDS, WB_CHAPTERS).
std::string cached_variable(const std::filesystem::path& build_dir, const std::string& name);

// Configures for `chapter_ids`. Failing to configure is the grader's problem, not the
// student's: the result says why.
ProcessResult configure_student_build(const BuildSettings& settings, const std::vector<std::string>& chapter_ids);
// Removes test and bench binaries of earlier students from a reused build directory.
void remove_student_binaries(const std::filesystem::path& build_dir);
// Builds the chapter's student test binaries.
BuildOutcome build_chapter(const BuildSettings& settings, const Chapter& chapter);
// For `check`: builds in the student's own build directory with their environment.
BuildOutcome build_targets(const std::filesystem::path& build_dir, const std::vector<std::string>& targets,
                           double timeout_s, const std::vector<std::string>& env, int jobs,
                           const std::vector<std::filesystem::path>& strip_prefixes);

// A line a build prints when it has nothing to do ("ninja: no work to do.", CMake's
// "Re-checking globbed directories..."): echoed output leaves these out.
bool is_idle_build_line(const std::string& line);

// The first compiler errors of a build log, with work-directory paths made short.
std::string compile_error_excerpt(const std::string& log, const std::vector<std::filesystem::path>& strip_prefixes);

// Where the tests' own code lives in a workbook tree (tests/, grader/, solutions/): chapter
// code may not be compiled with anything in them (check_student_objects' forbidden_dirs).
std::vector<std::filesystem::path> test_code_dirs(const std::filesystem::path& tree);

// Checks the built objects of a chapter's editable files; flags with severity "reject"
// when they include the tests' files, call what the tests' support code defines, or define
// what the tests' code or the shared libraries they link define (replaces_harness).
std::vector<Flag> check_student_objects(const BuildSettings& settings, const Chapter& chapter,
                                        const std::vector<std::filesystem::path>& forbidden_dirs);

// Parses `nm -A -P` output: (member, symbol, type) triples.
struct NmSymbol {
  std::string member, name;
  char type;
};
std::vector<NmSymbol> parse_nm(const std::string& output);
// Undefined symbols of the student's members that the other members define.
std::vector<std::string> cross_references(const std::vector<NmSymbol>& symbols,
                                          const std::vector<std::string>& student_members);
// Names that `student` (the symbols of a student's member) defines and `harness` (the tests'
// code and the libraries they link) defines too. A strong definition counts; a weak one (an
// inline function or a template instantiation) only where every harness definition is strong.
std::vector<std::string> redefinitions(const std::vector<NmSymbol>& student, const std::vector<NmSymbol>& harness);

}  // namespace wb::grader
