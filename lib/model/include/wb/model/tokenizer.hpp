#pragma once
// The llama2.c tokenizer: a vocabulary of byte strings ("pieces") with merge scores.
//
// File format (llama2.c's tokenizer.bin, tok512.bin...):
//   int32 max_token_length
//   vocab_size times:  float32 score, int32 length, `length` bytes of the piece
// The vocabulary size is not in the file: it comes from the model's config.
//
// Conventions of the Llama 2 sentencepiece vocabulary: id 0 <unk>, 1 <s> (BOS), 2 </s>
// (EOS), ids 3..258 the raw bytes written as pieces "<0x00>".."<0xFF>", then merged pieces.
#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace wb::model {

class Tokenizer {
 public:
  static constexpr int kBos = 1;
  static constexpr int kEos = 2;
  static constexpr int kFirstByteToken = 3;  // the piece "<0x00>"

  // Reads a llama2.c tokenizer file with `vocab_size` entries. Throws ModelError naming the
  // file for a missing, truncated or malformed file.
  static Tokenizer load(const std::filesystem::path& path, int vocab_size);
  // A deterministic made-up vocabulary for the synthetic model: the specials, the 256 byte
  // pieces, then invented syllables. It decodes any token id; its text means nothing.
  static Tokenizer synthetic(int vocab_size, std::uint64_t seed);
  // From pieces and scores directly (tests).
  Tokenizer(std::vector<std::string> pieces, std::vector<float> scores);

  int vocab_size() const { return int(pieces_.size()); }
  const std::string& piece(int id) const { return pieces_.at(std::size_t(id)); }
  float score(int id) const { return scores_.at(std::size_t(id)); }
  // The id of an exact piece, or -1.
  int find(std::string_view piece) const;

  // Text to token ids, the way llama2.c does it: optional BOS; a leading space (the
  // sentencepiece "dummy prefix") when the text is not empty; one token per UTF-8 character
  // (unknown characters fall back to their bytes); then repeatedly merge the adjacent pair
  // whose merged piece has the highest score; optional EOS.
  std::vector<int> encode(std::string_view text, bool bos, bool eos) const;
  // The text of `token` when it follows `prev`: a byte piece "<0x0A>" becomes its byte, and
  // the leading space of the first piece after BOS is dropped.
  std::string decode(int prev, int token) const;
  // The text of a whole sequence (what generation prints). Unprintable single bytes are
  // skipped, as llama2.c's safe_printf does.
  std::string decode_all(const std::vector<int>& tokens) const;

 private:
  std::vector<std::string> pieces_;
  std::vector<float> scores_;
  std::unordered_map<std::string, int> ids_;
};

// True when `piece` is a single byte that should not be printed (a control character other
// than whitespace): llama2.c skips those when printing.
bool is_unprintable_piece(std::string_view piece);

}  // namespace wb::model
