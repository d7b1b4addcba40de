#include "wb/model/backend_check.hpp"

#include <algorithm>
#include <vector>

#include "wb/kernel_coverage.hpp"  // quick(): under compute-sanitizer
#include "wb/model/generate.hpp"
#include "wb/model/tokenizer.hpp"
#include "wb/model/transformer.hpp"
#include "wb/random.hpp"

namespace wb::model {

namespace {
// "...the park. One day, she" around `at`, on one line.
std::string excerpt(const std::string& s, std::size_t at) {
  const std::size_t from = at > 30 ? at - 30 : 0;
  std::string e = s.substr(from, 60);
  for (char& c : e)
    if (c == '\n') c = '|';
  return "\"" + e + "\"";
}
}  // namespace

TextCheck check_tiny_stories_text(Matmul& backend, const TinyStoriesFiles& files,
                                  const std::string& chapter) {
  const Model model = load_checkpoint(files.model);
  const Tokenizer tokenizer = Tokenizer::load(files.tokenizer, model.config().vocab_size);
  Transformer transformer(model, backend);
  GenerateOptions options;
  // Under compute-sanitizer (quick) a decoding step costs seconds (every access of every
  // launch is checked): the first kTinyStoriesQuickSteps steps, whose text must be the start
  // of llama2.c's. What the tools judge needs a few steps of every kernel, not 200.
  const bool quick = wb::coverage::quick();
  options.steps = quick ? kTinyStoriesQuickSteps : kTinyStoriesSteps;
  options.temperature = 0.0f;
  TextCheck r;
  r.text = generate(transformer, tokenizer, options).text;
  const std::string full = kTinyStoriesGreedyText;
  const std::string expected = quick ? full.substr(0, std::min(r.text.size(), full.size())) : full;
  if (r.text == expected && !r.text.empty()) {
    r.ok = true;
    return r;
  }
  const auto diff = std::mismatch(r.text.begin(), r.text.end(), expected.begin(), expected.end());
  const std::size_t at = std::size_t(diff.first - r.text.begin());
  r.message = "chapter " + chapter + ": greedy generation of stories260K (" +
              std::to_string(options.steps) + " steps) through " + backend.name() +
              " departs from llama2.c's text at character " + std::to_string(at) + " of " +
              std::to_string(expected.size()) + "\n  got:      " + excerpt(r.text, at) +
              "\n  expected: " + excerpt(expected, at) +
              "\nhint: a matvec that is wrong for some shapes (dim 64, kv_dim 32, hidden 172 of this "
              "model) changes a logit and so a greedy choice; make the matvec tests pass first.";
  return r;
}

CompareResult compare_logits_with_cpu(Matmul& backend, const Model& model, int steps,
                                      const std::string& chapter) {
  const Config& c = model.config();
  steps = std::min(steps, c.seq_len);
  CpuMatmul cpu;
  Transformer reference(model, cpu);
  Transformer tested(model, backend);
  auto rng = rng_for("ch" + chapter + "/end-to-end/tokens");
  std::uniform_int_distribution<int> token_dist(0, c.vocab_size - 1);
  CompareResult result;
  for (int pos = 0; pos < steps; ++pos) {
    const int token = pos == 0 ? Tokenizer::kBos : token_dist(rng);
    const std::span<const float> want = reference.forward(token, pos);
    const std::vector<double> expected(want.begin(), want.end());
    const std::span<const float> got = tested.forward(token, pos);
    CompareSpec spec;
    spec.chapter = chapter;
    spec.what = "logits of the " + model.origin() + " at position " + std::to_string(pos) +
                " (token " + std::to_string(token) + ") through " + backend.name() +
                ", against the CPU";
    spec.shape = {std::size_t(c.vocab_size)};
    // Both sides are float; they differ only by summation order inside the matmuls,
    // carried through the layers: ~1e-5 relative. A wrong matmul is off by far more.
    spec.tol = {1e-3, 1e-3};
    spec.hint = "the matvec tests pass but the model does not: check that every W the model "
                "passes is used as given (the shapes are d x n = rows x columns) and that "
                "nothing from an earlier call (a buffer too small, a stale copy) is reused.";
    result = compare(got, expected, spec);
    if (!result.ok) return result;
  }
  return result;
}

}  // namespace wb::model
