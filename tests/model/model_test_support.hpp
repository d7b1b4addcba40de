#pragma once
// Helpers for the model's host tests: temporary files and small synthetic models.
#include <filesystem>
#include <fstream>
#include <random>
#include <string>

#include "wb/model/synthetic.hpp"

namespace model_test {

// A fresh temporary directory, removed at the end of the test.
class TempDir {
 public:
  TempDir() {
    std::random_device rd;
    path_ = std::filesystem::temp_directory_path() / ("wb-model-test-" + std::to_string(rd()) + std::to_string(rd()));
    std::filesystem::create_directories(path_);
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  const std::filesystem::path& path() const { return path_; }
  std::filesystem::path operator/(const std::string& name) const { return path_ / name; }

 private:
  std::filesystem::path path_;
};

// A tiny model with every feature: grouped-query attention, odd hidden size.
inline wb::model::SyntheticSpec tiny_spec() {
  wb::model::SyntheticSpec s;
  s.dim = 48;
  s.hidden_dim = 100;
  s.n_layers = 2;
  s.n_heads = 4;
  s.n_kv_heads = 2;
  s.vocab_size = 300;
  s.seq_len = 16;
  s.seed = 7;
  return s;
}

inline void write_bytes(const std::filesystem::path& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), std::streamsize(bytes.size()));
}

inline std::string read_bytes(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

}  // namespace model_test
