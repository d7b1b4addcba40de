// The llama2.c tokenizer (format and conventions: see wb/model/tokenizer.hpp).
#include "wb/model/tokenizer.hpp"

#include <cctype>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <limits>

#include "wb/model/checkpoint.hpp"  // ModelError

namespace wb::model {

namespace {
std::string quoted(const std::filesystem::path& p) { return "'" + p.string() + "'"; }

// "<0x0A>" -> 10; -1 when the piece is not a byte piece.
int byte_of_piece(std::string_view piece) {
  if (piece.size() != 6 || piece.substr(0, 3) != "<0x" || piece[5] != '>') return -1;
  int value = 0;
  for (char c : piece.substr(3, 2)) {
    value *= 16;
    if (c >= '0' && c <= '9') value += c - '0';
    else if (c >= 'A' && c <= 'F') value += c - 'A' + 10;
    else if (c >= 'a' && c <= 'f') value += c - 'a' + 10;
    else return -1;
  }
  return value;
}

// Length of the UTF-8 character starting with byte `lead` (1 for a stray continuation byte).
std::size_t utf8_length(unsigned char lead) {
  if (lead >= 0xF0) return 4;
  if (lead >= 0xE0) return 3;
  if (lead >= 0xC0) return 2;
  return 1;
}
}  // namespace

bool is_unprintable_piece(std::string_view piece) {
  if (piece.size() != 1) return false;
  const unsigned char c = static_cast<unsigned char>(piece[0]);
  return !(std::isprint(c) || std::isspace(c));
}

Tokenizer::Tokenizer(std::vector<std::string> pieces, std::vector<float> scores)
    : pieces_(std::move(pieces)), scores_(std::move(scores)) {
  if (pieces_.size() != scores_.size())
    throw ModelError("tokenizer: " + std::to_string(pieces_.size()) + " pieces but " +
                     std::to_string(scores_.size()) + " scores");
  ids_.reserve(pieces_.size());
  // The first occurrence wins, so lookups are deterministic if a vocabulary repeats a piece.
  for (std::size_t i = 0; i < pieces_.size(); ++i) ids_.emplace(pieces_[i], int(i));
}

Tokenizer Tokenizer::load(const std::filesystem::path& path, int vocab_size) {
  std::error_code ec;
  if (!std::filesystem::exists(path, ec))
    throw ModelError("tokenizer file " + quoted(path) +
                     " does not exist\nhint: pass the llama2.c tokenizer that belongs to the "
                     "model (tok512.bin for stories260K, tokenizer.bin for the 32000-token models)");
  if (vocab_size <= 0)
    throw ModelError("tokenizer file " + quoted(path) + ": vocabulary size " +
                     std::to_string(vocab_size) + " is not positive");
  std::ifstream in(path, std::ios::binary);
  if (!in) throw ModelError("tokenizer file " + quoted(path) + " cannot be opened for reading");

  std::int32_t max_token_length = 0;
  if (!in.read(reinterpret_cast<char*>(&max_token_length), sizeof max_token_length))
    throw ModelError("tokenizer file " + quoted(path) + " is empty or shorter than its 4-byte header");
  if (max_token_length <= 0 || max_token_length > (1 << 16))
    throw ModelError("tokenizer file " + quoted(path) + ": max_token_length " +
                     std::to_string(max_token_length) +
                     " is implausible (is this really a llama2.c tokenizer?)");

  std::vector<std::string> pieces(static_cast<std::size_t>(vocab_size));
  std::vector<float> scores(static_cast<std::size_t>(vocab_size));
  for (int i = 0; i < vocab_size; ++i) {
    std::int32_t length = 0;
    const bool head_ok = bool(in.read(reinterpret_cast<char*>(&scores[std::size_t(i)]), sizeof(float))) &&
                         bool(in.read(reinterpret_cast<char*>(&length), sizeof length));
    if (!head_ok)
      throw ModelError("tokenizer file " + quoted(path) + " is truncated: it ends after " +
                       std::to_string(i) + " of " + std::to_string(vocab_size) +
                       " entries\nhint: does the tokenizer belong to this model? Its vocabulary "
                       "size comes from the model's header.");
    if (length < 0 || length > max_token_length)
      throw ModelError("tokenizer file " + quoted(path) + ": entry " + std::to_string(i) +
                       " has length " + std::to_string(length) + " (max_token_length is " +
                       std::to_string(max_token_length) + "): the file is corrupt");
    std::string& piece = pieces[std::size_t(i)];
    piece.resize(std::size_t(length));
    if (length > 0 && !in.read(piece.data(), length))
      throw ModelError("tokenizer file " + quoted(path) + " is truncated inside entry " +
                       std::to_string(i) + " of " + std::to_string(vocab_size));
  }
  return Tokenizer(std::move(pieces), std::move(scores));
}

Tokenizer Tokenizer::synthetic(int vocab_size, std::uint64_t seed) {
  if (vocab_size < 259)
    throw ModelError("synthetic tokenizer: a vocabulary needs at least 259 entries (3 specials + "
                     "256 bytes), got " + std::to_string(vocab_size));
  std::vector<std::string> pieces;
  std::vector<float> scores;
  pieces.reserve(std::size_t(vocab_size));
  pieces = {"<unk>", "\n<s>\n", "\n</s>\n"};
  scores = {0.0f, 0.0f, 0.0f};
  char name[8];
  for (int b = 0; b < 256; ++b) {
    std::snprintf(name, sizeof name, "<0x%02X>", b);
    pieces.emplace_back(name);
    scores.push_back(0.0f);
  }
  // Invented syllables from a small generator: half of them start with a space, as word
  // starts do in a sentencepiece vocabulary. Their number is their score order.
  static const char* const kOnsets[] = {"b", "d", "f", "g", "k", "l", "m", "n", "p", "r",
                                        "s", "t", "v", "z", "ch", "sh", "th", "st", "tr", "pl"};
  static const char* const kVowels[] = {"a", "e", "i", "o", "u", "ai", "ou", "ee", "oo", "ia"};
  std::uint64_t state = seed * 0x9E3779B97F4A7C15ull + 1;
  auto next = [&state]() {
    state ^= state << 13;
    state ^= state >> 7;
    state ^= state << 17;
    return state;
  };
  std::unordered_map<std::string, int> seen;
  for (const auto& p : pieces) seen.emplace(p, 0);
  while (int(pieces.size()) < vocab_size) {
    std::string p = (next() % 2) ? " " : "";
    const int syllables = 1 + int(next() % 3);
    for (int s = 0; s < syllables; ++s) {
      p += kOnsets[next() % std::size(kOnsets)];
      p += kVowels[next() % std::size(kVowels)];
    }
    // Pieces are unique: a repeat gets more syllables until it is new.
    while (!seen.emplace(p, 0).second) {
      p += kOnsets[next() % std::size(kOnsets)];
      p += kVowels[next() % std::size(kVowels)];
    }
    scores.push_back(-float(pieces.size()));
    pieces.push_back(std::move(p));
  }
  return Tokenizer(std::move(pieces), std::move(scores));
}

int Tokenizer::find(std::string_view piece) const {
  const auto it = ids_.find(std::string(piece));
  return it == ids_.end() ? -1 : it->second;
}

std::vector<int> Tokenizer::encode(std::string_view text, bool bos, bool eos) const {
  std::vector<int> tokens;
  if (bos) tokens.push_back(kBos);
  // The sentencepiece "dummy prefix": a space before the text, so the first word is
  // tokenized like every other word.
  if (!text.empty()) {
    const int space = find(" ");
    if (space >= 0) tokens.push_back(space);
  }
  // One token per UTF-8 character; a character without a piece becomes its bytes.
  for (std::size_t i = 0; i < text.size();) {
    const std::size_t len = std::min(utf8_length(static_cast<unsigned char>(text[i])), text.size() - i);
    const int id = find(text.substr(i, len));
    if (id >= 0) {
      tokens.push_back(id);
    } else {
      for (std::size_t b = 0; b < len; ++b)
        tokens.push_back(kFirstByteToken + static_cast<unsigned char>(text[i + b]));
    }
    i += len;
  }
  // Merge the best-scoring adjacent pair until no pair forms a known piece.
  const std::size_t first = bos ? 1 : 0;  // never merge BOS with the text
  for (;;) {
    float best_score = -std::numeric_limits<float>::infinity();
    int best_id = -1;
    std::size_t best_at = 0;
    for (std::size_t i = first; i + 1 < tokens.size(); ++i) {
      const int id = find(piece(tokens[i]) + piece(tokens[i + 1]));
      if (id >= 0 && score(id) > best_score) {
        best_score = score(id);
        best_id = id;
        best_at = i;
      }
    }
    if (best_id < 0) break;
    tokens[best_at] = best_id;
    tokens.erase(tokens.begin() + std::ptrdiff_t(best_at) + 1);
  }
  if (eos) tokens.push_back(kEos);
  return tokens;
}

std::string Tokenizer::decode(int prev, int token) const {
  if (token < 0 || token >= vocab_size())
    throw ModelError("tokenizer: token id " + std::to_string(token) + " is outside the vocabulary (0.." +
                     std::to_string(vocab_size() - 1) + ")");
  std::string_view p = piece(token);
  // After BOS, sentencepiece drops the leading space of the first word.
  if (prev == kBos && !p.empty() && p.front() == ' ') p.remove_prefix(1);
  const int byte = byte_of_piece(p);
  if (byte >= 0) return std::string(1, static_cast<char>(byte));
  return std::string(p);
}

std::string Tokenizer::decode_all(const std::vector<int>& tokens) const {
  std::string text;
  for (std::size_t i = 1; i < tokens.size(); ++i) {
    const std::string piece_text = decode(tokens[i - 1], tokens[i]);
    if (!is_unprintable_piece(piece_text)) text += piece_text;
  }
  return text;
}

}  // namespace wb::model
