// Internal: ModelConfig from a Hugging Face config.json or from GGUF metadata. Every
// missing or contradictory field is an error naming the field and the file.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "loom/config.hpp"
#include "loom/format.hpp"

namespace loom::config_parse {

// `json` is the text of config.json; `path` names it in errors. It is read leniently
// (format/lenient_json.hpp): what was forgiven is appended to `warnings` when given.
ModelConfig from_hf_json(std::string_view json, const std::string& path,
                         std::vector<std::string>* warnings = nullptr);

// GGUF metadata (`general.architecture`, `<arch>.*`, `tokenizer.ggml.*`) of `source`,
// with the vocabulary size taken from the metadata or the token embedding.
ModelConfig from_gguf(const WeightSource& source);

// A llama2.c checkpoint's header (the `llama2c.*` metadata its reader sets): a plain
// Llama with llama2.c's fixed constants (RMSNorm eps 1e-5, RoPE theta 10000, BOS 1,
// EOS 2), head_dim = dim / n_heads, tied unless the file carries its own classifier.
ModelConfig from_llama2c(const WeightSource& source);

}  // namespace loom::config_parse
