// libFuzzer harness: tokenizer.json documents (models, normalizers, pre-tokenizers,
// decoders, post-processors, added tokens). A document that loads is also used: a
// fixed text is encoded and decoded, and every id's piece is read. Each document is
// also built as a model directory's load builds it: parsed in place from a buffer with
// simdjson's padding past its end (read_file's strings), where the public call copies.
#include <string>
#include <string_view>

#include "loom/error.hpp"
#include "loom/tokenizer.hpp"
#include "tokenizer/tokenizer_impl.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  try {
    std::string padded(text);
    padded.reserve(padded.size() + 64);
    (void)loom::tok::build_from_tokenizer_json(padded, {}, "tokenizer.json", /*json_padded=*/true);
  } catch (const loom::Error&) {
  }
  try {
    const auto tok = loom::Tokenizer::from_tokenizer_json(text, "tokenizer.json");
    static const std::string sample = "Hello, world! \xC3\xA9t\xC3\xA9 \xF0\x9F\x98\x80 <s> 12345\n\t  x\xFF";
    const auto ids = tok->encode(sample, true, true);
    volatile size_t sink = tok->decode(ids, false).size() + tok->decode(ids, true).size();
    const int32_t n = tok->vocab_size();
    for (int32_t id = 0; id < n && id < 4096; ++id) sink = sink + tok->token_to_piece(id).size();
    (void)sink;
  } catch (const loom::Error&) {
  }
  return 0;
}
