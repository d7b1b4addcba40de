// The llama2.c tokenizer: file reading, byte-pair merges, decoding.
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "model_test_support.hpp"
#include "wb/model/checkpoint.hpp"
#include "wb/model/data.hpp"
#include "wb/model/tokenizer.hpp"
#include "wb/testing.hpp"

using wb::model::ModelError;
using wb::model::Tokenizer;

namespace {

// <unk>, <s>, </s>, the 256 byte pieces, then `extra` pieces with their scores.
Tokenizer make_vocab(const std::vector<std::pair<std::string, float>>& extra) {
  std::vector<std::string> pieces = {"<unk>", "<s>", "</s>"};
  std::vector<float> scores = {0, 0, 0};
  char name[8];
  for (int b = 0; b < 256; ++b) {
    std::snprintf(name, sizeof name, "<0x%02X>", b);
    pieces.emplace_back(name);
    scores.push_back(0);
  }
  for (const auto& [p, s] : extra) pieces.push_back(p), scores.push_back(s);
  return Tokenizer(pieces, scores);
}

// The tokenizer file format: max_token_length, then (score, length, bytes) per entry.
std::string tokenizer_file(const std::vector<std::pair<std::string, float>>& entries, std::int32_t max_len) {
  std::string s(reinterpret_cast<const char*>(&max_len), 4);
  for (const auto& [piece, score] : entries) {
    const std::int32_t len = std::int32_t(piece.size());
    s.append(reinterpret_cast<const char*>(&score), 4);
    s.append(reinterpret_cast<const char*>(&len), 4);
    s += piece;
  }
  return s;
}

std::vector<std::string> pieces_of(const Tokenizer& t, const std::vector<int>& ids) {
  std::vector<std::string> out;
  for (int id : ids) out.push_back(t.piece(id));
  return out;
}

template <typename F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const ModelError& e) {
    return e.what();
  }
  return "";
}
bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

}  // namespace

TEST_CASE("encode merges the highest-scoring pair first, not the leftmost") {
  // " a" scores lower than "ab": "ab" must be merged first, and " ab" does not exist.
  const Tokenizer t = make_vocab({{" ", 1}, {"a", 1}, {"b", 1}, {" a", 5}, {"ab", 10}});
  const auto ids = t.encode("ab", /*bos=*/true, /*eos=*/false);
  CHECK(pieces_of(t, ids) == std::vector<std::string>{"<s>", " ", "ab"});
}

TEST_CASE("encode keeps merging until no pair is in the vocabulary") {
  const Tokenizer t = make_vocab({{" ", 1}, {"a", 1}, {"b", 1}, {"c", 1}, {"ab", 3}, {" ab", 4}, {" abc", 5}});
  CHECK(pieces_of(t, t.encode("abc", true, true)) == std::vector<std::string>{"<s>", " abc", "</s>"});
  CHECK(pieces_of(t, t.encode("abc", false, false)) == std::vector<std::string>{" abc"});
}

TEST_CASE("encode of the empty text is BOS alone (no dummy space)") {
  const Tokenizer t = make_vocab({{" ", 1}});
  CHECK(t.encode("", true, false) == std::vector<int>{Tokenizer::kBos});
  CHECK(t.encode("", false, false).empty());
}

TEST_CASE("characters without a piece fall back to their UTF-8 bytes") {
  const Tokenizer t = make_vocab({{" ", 1}, {"a", 1}});
  const auto ids = t.encode("a\xC3\xA9", false, false);  // "aé"
  REQUIRE(ids.size() == 4);
  CHECK(t.piece(ids[0]) == " ");
  CHECK(t.piece(ids[1]) == "a");
  CHECK(ids[2] == Tokenizer::kFirstByteToken + 0xC3);
  CHECK(ids[3] == Tokenizer::kFirstByteToken + 0xA9);
  // decode turns byte pieces back into bytes: the text round-trips piece by piece.
  std::string text;
  for (std::size_t i = 1; i < ids.size(); ++i) text += t.decode(ids[i - 1], ids[i]);
  CHECK(text == "a\xC3\xA9");
}

TEST_CASE("decode drops the leading space after BOS and prints byte pieces as bytes") {
  const Tokenizer t = make_vocab({{" Once", 1}, {" upon", 1}});
  const int once = t.find(" Once"), upon = t.find(" upon");
  CHECK(t.decode(Tokenizer::kBos, once) == "Once");
  CHECK(t.decode(once, upon) == " upon");
  CHECK(t.decode(once, Tokenizer::kFirstByteToken + '\n') == "\n");
  CHECK(t.decode_all({Tokenizer::kBos, once, upon, Tokenizer::kFirstByteToken + '\n'}) == "Once upon\n");
  // An unprintable byte is skipped when printing, like llama2.c's safe_printf.
  CHECK(t.decode_all({Tokenizer::kBos, once, Tokenizer::kFirstByteToken + 0x07}) == "Once");
  CHECK(contains(error_of([&] { t.decode(0, 100000); }), "outside the vocabulary"));
}

TEST_CASE("a tokenizer file is read entry by entry") {
  model_test::TempDir dir;
  model_test::write_bytes(dir / "tok.bin", tokenizer_file({{"<unk>", 0}, {"<s>", 0}, {"</s>", 0}, {"hi", -1.5f}}, 5));
  const Tokenizer t = Tokenizer::load(dir / "tok.bin", 4);
  CHECK(t.vocab_size() == 4);
  CHECK(t.piece(3) == "hi");
  CHECK(t.score(3) == -1.5f);
  CHECK(t.find("hi") == 3);
  CHECK(t.find("nope") == -1);
}

TEST_CASE("tokenizer files: missing, truncated and corrupt files name the file and the problem") {
  model_test::TempDir dir;
  const auto missing = error_of([&] { Tokenizer::load(dir / "none.bin", 512); });
  CHECK(contains(missing, "none.bin"));
  CHECK(contains(missing, "does not exist"));

  model_test::write_bytes(dir / "short.bin", tokenizer_file({{"<unk>", 0}, {"<s>", 0}}, 5));
  const auto truncated = error_of([&] { Tokenizer::load(dir / "short.bin", 512); });
  CHECK(contains(truncated, "short.bin"));
  CHECK(contains(truncated, "truncated"));
  CHECK(contains(truncated, "after 2 of 512 entries"));

  model_test::write_bytes(dir / "empty.bin", "");
  CHECK(contains(error_of([&] { Tokenizer::load(dir / "empty.bin", 3); }), "empty"));

  model_test::write_bytes(dir / "badlen.bin", tokenizer_file({{"<unk>", 0}, {"a-very-long-piece", 0}}, 5));
  const auto bad = error_of([&] { Tokenizer::load(dir / "badlen.bin", 2); });
  CHECK(contains(bad, "entry 1 has length 17"));
  CHECK(contains(bad, "corrupt"));

  model_test::write_bytes(dir / "badmax.bin", tokenizer_file({}, -3));
  CHECK(contains(error_of([&] { Tokenizer::load(dir / "badmax.bin", 2); }), "max_token_length -3"));
}

TEST_CASE("the synthetic tokenizer covers its vocabulary with unique pieces") {
  const Tokenizer t = Tokenizer::synthetic(32000, 1234);
  CHECK(t.vocab_size() == 32000);
  CHECK(t.piece(Tokenizer::kFirstByteToken + 'A') == "<0x41>");
  for (int i = 0; i < 32000; ++i) CHECK(t.find(t.piece(i)) == i);
  CHECK(Tokenizer::synthetic(32000, 1234).piece(20000) == t.piece(20000));
}

TEST_CASE("tok512: the real tokenizer round-trips text") {
  std::string why;
  const auto files = wb::model::tiny_stories_from_env(&why);
  if (!files) {
    wb::testing::mark_skipped(why);
    return;
  }
  const Tokenizer t = Tokenizer::load(files->tokenizer, 512);
  const std::string text = "Once upon a time, there was a little girl named Lily.\nShe loved to play!";
  const auto ids = t.encode(text, true, false);
  CHECK(ids.front() == Tokenizer::kBos);
  CHECK(ids.size() < text.size());  // merges happened
  CHECK(t.decode_all(ids) == text);
}
