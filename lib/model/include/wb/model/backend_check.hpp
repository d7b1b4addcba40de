#pragma once
// End-to-end checks of a matmul backend (chapters 01-03): the whole model, run through the
// backend, must do what the CPU does.
#include <string>

#include "wb/compare.hpp"
#include "wb/model/checkpoint.hpp"
#include "wb/model/data.hpp"
#include "wb/model/matmul.hpp"

namespace wb::model {

struct TextCheck {
  bool ok = false;
  std::string text;     // what the backend generated
  std::string message;  // empty when ok: where the text departs from the expected one
};

// Greedy decoding of stories260K (200 steps, no prompt) through `backend`, compared with
// llama2.c's regression text character by character. Under compute-sanitizer (quick): the
// first kTinyStoriesQuickSteps steps, against the start of that text.
TextCheck check_tiny_stories_text(Matmul& backend, const TinyStoriesFiles& files,
                                  const std::string& chapter);

// Runs `steps` positions of `model` through `backend` and through the CPU, feeding both the
// same random tokens (drawn from the seed: teacher forcing, so a single different argmax
// cannot make the runs diverge), and compares the logits at every position. Returns the
// first position that does not match (or the last comparison when all match).
CompareResult compare_logits_with_cpu(Matmul& backend, const Model& model, int steps,
                                      const std::string& chapter);

}  // namespace wb::model
