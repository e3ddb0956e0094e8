// Internal: llama2.c's tokenizer.bin (karpathy/llama2.c tokenizer.py export) and where a
// llama2.c checkpoint's tokenizer lives.
//
// Layout: i32 max_token_length, then one record per token to the end of the file:
// f32 score, i32 length, `length` bytes of text. The file does not store the vocabulary
// size. SentencePiece's '▁' is stored as ' ', BOS and EOS as "\n<s>\n" and "\n</s>\n",
// byte-fallback tokens as "<0xXX>". It is read into the tokenizer.ggml.* metadata
// llama.cpp writes for the same vocabulary, so the GGUF "llama" (SentencePiece-style
// BPE by scores) path tokenizes it.
#pragma once

#include <filesystem>
#include <string>
#include <string_view>

#include "loom/format.hpp"

namespace loom::tok {

// Throws Error(format) naming `path` and the byte offset for malformed input.
Metadata llama2c_vocab_metadata(std::string_view bytes, const std::string& path);

// The tokenizer of a llama2.c checkpoint: `tokenizer.bin` in its directory, else the
// single `tok*.bin` there (not the checkpoint itself). Empty when there is none or the
// choice is ambiguous; `note` then says which.
std::filesystem::path find_llama2c_tokenizer(const std::filesystem::path& checkpoint, std::string& note);

}  // namespace loom::tok
