// The real tiny checkpoint's location and expected output (see wb/model/data.hpp).
#include "wb/model/data.hpp"

#include <cstdlib>
#include <optional>
#include <string>

#include "wb/test_environment.hpp"

namespace wb::model {

const char* const kTinyStoriesGreedyText =
    "Once upon a time, there was a little girl named Lily. She loved to play outside in the "
    "park. One day, she saw a big, red ball. She wanted to play with it, but it was too high.\n"
    "Lily's mom said, \"Lily, let's go to the park.\" Lily was sad and didn't know what to do. "
    "She said, \"I want to play with your ball, but I can't find it.\"\n"
    "Lily was sad and didn't know what to do. She said, \"I'm sorry, Lily. I didn't know what "
    "to do.\"\n"
    "Lily didn't want to help her mom, so she";

std::optional<TinyStoriesFiles> tiny_stories_from_env(std::string* why) {
  const std::optional<std::string> dir = wb::test_environment("WB_DATA_DIR");  // as the tests began
  if (!dir || dir->empty()) {
    if (why)
      *why = "skipped: WB_DATA_DIR is not set; set it to a directory with llama2.c's "
             "stories260K.bin and tok512.bin to run this test";
    return std::nullopt;
  }
  TinyStoriesFiles files{std::filesystem::path(*dir) / "stories260K.bin",
                         std::filesystem::path(*dir) / "tok512.bin"};
  std::error_code ec;
  for (const auto& f : {files.model, files.tokenizer}) {
    if (!std::filesystem::exists(f, ec)) {
      if (why)
        *why = "skipped: WB_DATA_DIR is '" + *dir + "' but " + f.string() +
               " does not exist (it needs stories260K.bin and tok512.bin from llama2.c)";
      return std::nullopt;
    }
  }
  return files;
}

}  // namespace wb::model
