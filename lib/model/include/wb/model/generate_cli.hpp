#pragma once
// What `./workbook generate` does, shared by the CLI (CPU backend) and chapter 03's bench
// program (the GPU backends of chapters 01-03): pick the model and tokenizer, generate,
// print the text as it comes and the speed at the end.
#include <cstdint>
#include <functional>
#include <span>
#include <iosfwd>
#include <string>

#include "wb/model/matmul.hpp"

namespace wb::model {

struct GenerateRequest {
  std::string model_path;      // empty: WB_DATA_DIR's stories260K.bin, else the synthetic model
  std::string tokenizer_path;  // empty: next to the model (tok<vocab>.bin, tokenizer.bin)
  std::string prompt;
  int steps = 256;
  float temperature = 0.0f;
  std::uint64_t seed = 42;
  int threads = 0;             // CPU threads (<= 0: all)
  std::function<int(std::span<const float>, int)> pick;  // GenerateOptions::pick
  std::string sampler_name;    // what `pick` is, for the log ("" = the built-in sampler)
};

// Generates with `backend`: the text goes to `out` piece by piece, notes (which model, what
// to do without one) and the speed to `log`. Returns a process exit code; bad input (a
// missing file, a wrong tokenizer) is reported on `log` with what to do, and returns 2.
int run_generate(const GenerateRequest& request, Matmul& backend, std::ostream& out, std::ostream& log);

// The explanation printed when no model is given (what the synthetic model is, where real
// checkpoints come from, the command line to use them).
std::string no_model_note();

}  // namespace wb::model
