// Internal: what GGUF tokenizer metadata says outside the tokenizer itself, for the
// config parser and the tokenizer builder alike (tokenizer_impl.hpp builds the rest).
#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

#include "loom/format.hpp"

namespace loom::tok {

// The end-of-turn ids (tokenizer.ggml.eot_token_id, eom_token_id) that end generation:
// those inside the vocabulary that name a control or user-defined token (any, when the
// file has no token types). llama.cpp's converter writes CodeGemma's eot id 107 into
// every Gemma GGUF, where 107 may be an ordinary byte token: stopping there would cut
// text at its first 'h'. Throws Error(format) naming `display_name` for mistyped keys.
std::vector<int32_t> gguf_end_of_turn_ids(const Metadata& md, std::string_view display_name);

}  // namespace loom::tok
