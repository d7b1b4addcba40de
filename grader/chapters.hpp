#pragma once
// The chapters, as their manifests (tests/NN_slug/chapter.json, docs/CONTRACTS.md) describe
// them. Discovered at run time: the grader never hard-codes the list.
#include <filesystem>
#include <string>
#include <vector>

namespace wb::grader {

struct ChapterTest {
  std::string file;
  std::string kind;      // "correctness", "timing", ...
  bool gpu = true;
  double timeout_s = 600;
};

struct Chapter {
  std::string id;        // "04"
  std::string slug;      // "04_fused_softmax"
  std::string title;     // "Fused softmax"
  std::vector<std::string> editable;  // relative to chapters/<slug>/
  std::vector<std::string> support;   // relative to tests/<slug>/
  // Chapters whose reference solution this chapter builds on ("uses": chapter 08 runs on
  // 01, 03, 06 and 07's references); the build links them (cmake/Workbook.cmake).
  std::vector<std::string> uses;
  std::vector<ChapterTest> tests;
  std::string bench;     // the bench program's source in tests/<slug>/, "" when none
  // A PyTorch peer script of this chapter's own in notebooks/peers/ ("pytorch_add_norm.py"),
  // run by `bench --peers` beside pytorch_peers.py; "" when none.
  std::string peer_script;

  // test_04_correctness_student
  std::string binary(const std::string& kind, const std::string& build = "student") const;
  // The kinds in run order: correctness first (it gates the others), then the rest as listed.
  std::vector<std::string> kinds() const;
  const ChapterTest* test_of_kind(const std::string& kind) const;
  std::string label() const { return id + " " + title; }
};

// Every tests/*/chapter.json under `source_dir`, sorted by id. Throws InputError naming the
// manifest and the field when one is malformed.
std::vector<Chapter> discover_chapters(const std::filesystem::path& source_dir);
Chapter parse_chapter_manifest(const std::filesystem::path& manifest);

// "04", "4", "04_fused_softmax" or "fused_softmax" -> the chapter; InputError listing the
// chapters otherwise.
const Chapter& find_chapter(const std::vector<Chapter>& chapters, const std::string& wanted);
// A comma- or space-separated selection; empty selection = all.
std::vector<Chapter> select_chapters(const std::vector<Chapter>& chapters,
                                     const std::vector<std::string>& wanted);

}  // namespace wb::grader
