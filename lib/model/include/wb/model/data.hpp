#pragma once
// Where the real tiny checkpoint lives, and what it must generate.
//
// The workbook does not ship third-party checkpoints. Tests and demos read the directory
// from the environment variable WB_DATA_DIR, which must contain llama2.c's
// stories260K.bin and tok512.bin (published with llama2.c: https://github.com/karpathy/llama2.c,
// files from https://huggingface.co/karpathy/tinyllamas/tree/main/stories260K).
#include <filesystem>
#include <optional>
#include <string>

namespace wb::model {

struct TinyStoriesFiles {
  std::filesystem::path model;      // .../stories260K.bin
  std::filesystem::path tokenizer;  // .../tok512.bin
};

// The files when WB_DATA_DIR is set and both exist; otherwise nullopt, with `why` (when
// given) set to a message that names WB_DATA_DIR and what is missing.
std::optional<TinyStoriesFiles> tiny_stories_from_env(std::string* why = nullptr);

// llama2.c's own regression text: greedy decoding (temperature 0) of stories260K with
// tok512, no prompt, 200 steps.
inline constexpr int kTinyStoriesSteps = 200;
// Under compute-sanitizer (wb::coverage::quick()) the end-to-end checks decode this many
// steps and compare the start of that text.
inline constexpr int kTinyStoriesQuickSteps = 12;
extern const char* const kTinyStoriesGreedyText;

}  // namespace wb::model
