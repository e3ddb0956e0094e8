// libFuzzer harness: encode() on arbitrary bytes with fixed tokenizers built by loom
// itself — the demo's byte-level BPE (trained by loom) and a Llama-style SentencePiece
// BPE with byte fallback. The first input byte picks the tokenizer and the flags. Both
// vocabularies have a token for every byte, so decode(encode(x)) == x must hold
// (documented in tokenizer.hpp); a difference traps.
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <string>
#include <string_view>
#include <unistd.h>

#include "fuzz/fuzz_tokenizers.hpp"
#include "loom/error.hpp"
#include "loom/tokenizer.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  static const auto tokenizers = loom::fuzz::fixed_tokenizers();
  const uint8_t mode = data[0];
  const loom::Tokenizer& tok = *tokenizers[mode % tokenizers.size()];
  const bool add_special = (mode & 2) != 0;
  const bool parse_special = (mode & 4) != 0;
  const std::string_view text(reinterpret_cast<const char*>(data + 1), size - 1);
  const auto ids = tok.encode(text, add_special, parse_special);
  for (int32_t id : ids) {
    if (id < 0 || id >= tok.vocab_size()) __builtin_trap();
  }
  if (!add_special && !parse_special) {
    if (tok.decode(ids) != text) __builtin_trap();
  } else {
    volatile size_t sink = tok.decode(ids, true).size();
    (void)sink;
  }
  return 0;
}
