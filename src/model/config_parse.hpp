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

}  // namespace loom::config_parse
