// Internal: SentencePiece `tokenizer.model` files (a protobuf ModelProto) read into the
// tokenizer.ggml.* metadata llama.cpp's converter writes for them, so that the GGUF
// "llama" vocabulary code tokenizes both.
#pragma once

#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

#include "loom/format.hpp"

namespace loom::tok {

// The model proto alone (no side files): pieces, scores, types, special ids and
// add_space_prefix. Throws Error(format) naming `name` and the byte offset for a
// malformed proto, Error(unsupported) naming the setting loom does not implement
// (Unigram, a normalization charsmap, remove_extra_whitespaces, ...).
Metadata sentencepiece_model_metadata(std::string_view proto, const std::string& name);

// A model directory's tokenizer.model plus its side files: added tokens from
// added_tokens.json / tokenizer_config.json, add_bos/add_eos, bos/eos/unk/pad names,
// the chat template, and [PADn] ids up to config.json's vocab_size. `warnings` gets what
// lenient JSON parsing forgave in the side files.
Metadata sentencepiece_metadata(const std::filesystem::path& dir, std::vector<std::string>& warnings);

}  // namespace loom::tok
