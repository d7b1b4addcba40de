#include "wb/model/generate_cli.hpp"

#include <filesystem>
#include <iomanip>
#include <optional>
#include <ostream>
#include <stdexcept>

#include "wb/model/checkpoint.hpp"
#include "wb/model/data.hpp"
#include "wb/model/generate.hpp"
#include "wb/model/synthetic.hpp"
#include "wb/model/tokenizer.hpp"
#include "wb/model/transformer.hpp"

namespace wb::model {

namespace fs = std::filesystem;

std::string no_model_note() {
  return "no --model given (and WB_DATA_DIR does not hold stories260K.bin): using the synthetic "
         "110M-class model the workbook generates itself. Its weights are random, so its text is "
         "gibberish; its speed is real.\n"
         "For real text, get a llama2.c checkpoint and its tokenizer, e.g. stories260K.bin and "
         "tok512.bin from https://huggingface.co/karpathy/tinyllamas/tree/main/stories260K (or "
         "stories15M.bin with llama2.c's tokenizer.bin), then run\n"
         "  ./workbook generate --model path/to/stories260K.bin --tokenizer path/to/tok512.bin\n"
         "or set WB_DATA_DIR to the directory that holds stories260K.bin and tok512.bin.\n";
}

namespace {

// The tokenizer beside a model file: tok<vocab>.bin, then tokenizer.bin.
std::optional<fs::path> tokenizer_next_to(const fs::path& model, int vocab_size) {
  for (const std::string name : {"tok" + std::to_string(vocab_size) + ".bin", std::string("tokenizer.bin")}) {
    const fs::path candidate = model.parent_path() / name;
    std::error_code ec;
    if (fs::exists(candidate, ec)) return candidate;
  }
  return std::nullopt;
}

}  // namespace

int run_generate(const GenerateRequest& request, Matmul& backend, std::ostream& out, std::ostream& log) {
  try {
    std::optional<Model> model;
    std::optional<Tokenizer> tokenizer;
    fs::path model_path = request.model_path;
    fs::path tokenizer_path = request.tokenizer_path;
    if (model_path.empty()) {
      if (const auto tiny = tiny_stories_from_env()) {
        model_path = tiny->model;
        if (tokenizer_path.empty()) tokenizer_path = tiny->tokenizer;
        log << "no --model given: using " << model_path.string() << " from WB_DATA_DIR\n";
      }
    }
    if (model_path.empty()) {
      log << no_model_note();
      model.emplace(make_synthetic(synthetic_110m()));
      if (!tokenizer_path.empty()) tokenizer.emplace(Tokenizer::load(tokenizer_path, model->config().vocab_size));
      else tokenizer.emplace(Tokenizer::synthetic(model->config().vocab_size, synthetic_110m().seed));
    } else {
      model.emplace(load_checkpoint(model_path));
      if (tokenizer_path.empty()) {
        const auto found = tokenizer_next_to(model_path, model->config().vocab_size);
        if (!found) {
          log << "workbook generate: no --tokenizer given and none found next to " << model_path.string()
              << " (looked for tok" << model->config().vocab_size
              << ".bin and tokenizer.bin)\nhint: pass --tokenizer with the llama2.c tokenizer the model was "
                 "trained with (tok512.bin for stories260K, tokenizer.bin for the 32000-token models).\n";
          return 2;
        }
        tokenizer_path = *found;
      }
      tokenizer.emplace(Tokenizer::load(tokenizer_path, model->config().vocab_size));
    }
    log << "model: " << model->origin() << "\n  " << model->config().summary() << ", " << std::fixed
        << std::setprecision(2) << model->config().parameter_count() / 1e6 << "M parameters\nmatmul backend: "
        << backend.name() << "\n";

    Transformer transformer(*model, backend, request.threads);
    GenerateOptions options;
    options.prompt = request.prompt;
    options.steps = request.steps;
    options.temperature = request.temperature;
    options.seed = request.seed;
    options.pick = request.pick;
    if (!request.sampler_name.empty()) log << "sampler: " << request.sampler_name << "\n";
    const Generation g = generate(transformer, *tokenizer, options, [&out](std::string_view piece) {
      out << piece << std::flush;
    });
    out << "\n";
    const ForwardProfile& p = transformer.profile();
    log << std::fixed << std::setprecision(1) << "achieved tok/s: " << g.tokens_per_s << " ("
        << g.forward_passes << " forward passes; per token " << std::setprecision(3)
        << p.matmul_us / double(p.tokens) / 1e3 << " ms in matmuls, " << p.other_us() / double(p.tokens) / 1e3
        << " ms elsewhere)\n";
    return 0;
  } catch (const ModelError& e) {
    log << "workbook generate: " << e.what() << "\n";
    return 2;
  } catch (const std::invalid_argument& e) {  // e.g. a negative temperature
    log << "workbook generate: " << e.what() << "\n";
    return 2;
  }
}

}  // namespace wb::model
