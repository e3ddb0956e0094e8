// Helpers for the tokenizer tests: llama.cpp's test-tokenizer-0 vectors and id files.
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "loom/tokenizer.hpp"
#include "support/test_support.hpp"

namespace loom::test {

// `.inp`: every test string followed by "\n__ggml_vocab_test__\n".
inline std::vector<std::string> read_vocab_inputs(const std::filesystem::path& path) {
  const std::string all = read_file_text(path);
  const std::string sep = "\n__ggml_vocab_test__\n";
  std::vector<std::string> out;
  size_t pos = 0;
  for (size_t next = all.find(sep); next != std::string::npos; next = all.find(sep, pos)) {
    out.push_back(all.substr(pos, next - pos));
    pos = next + sep.size();
  }
  return out;
}

inline std::vector<int32_t> parse_ids(const std::string& line) {
  std::vector<int32_t> ids;
  std::istringstream in(line);
  int64_t v = 0;
  while (in >> v) ids.push_back(static_cast<int32_t>(v));
  return ids;
}

// `.out`: one line per test, " id id ...".
inline std::vector<std::vector<int32_t>> read_vocab_outputs(const std::filesystem::path& path) {
  std::istringstream in(read_file_text(path));
  std::vector<std::vector<int32_t>> out;
  std::string line;
  while (std::getline(in, line)) out.push_back(parse_ids(line));
  return out;
}

inline std::string ids_to_string(const std::vector<int32_t>& ids) {
  std::string s;
  for (int32_t id : ids) {
    s += ' ';
    s += std::to_string(id);
  }
  return s;
}

inline std::shared_ptr<const Tokenizer> load_json_tokenizer(const std::filesystem::path& json,
                                                            const std::filesystem::path& config = {}) {
  const std::string text = read_file_text(json);
  const std::string cfg = config.empty() ? std::string() : read_file_text(config);
  return Tokenizer::from_tokenizer_json(text, cfg, json.string());
}

}  // namespace loom::test
