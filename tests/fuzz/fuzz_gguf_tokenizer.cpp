// libFuzzer harness: a GGUF file's tokenizer.ggml.* metadata into a Tokenizer (llama,
// gpt2 and other vocab types, scores, token types, merges, special ids). A tokenizer
// that builds is also used on a fixed text.
#include <string>

#include "format/gguf.hpp"
#include "fuzz/fuzz_common.hpp"
#include "loom/error.hpp"
#include "loom/tokenizer.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const auto input = loom::fuzz::as_span(data, size);
  try {
    loom::format::SpanSource src(input, "fuzz.gguf");
    const auto parsed = loom::format::parse_gguf(src);
    const auto tok = loom::Tokenizer::from_gguf_metadata(parsed.metadata, "fuzz.gguf");
    static const std::string sample = "Hello, world! \xC3\xA9t\xC3\xA9 \xF0\x9F\x98\x80 <s> 12345\n\t  x\xFF";
    const auto ids = tok->encode(sample, true, true);
    volatile size_t sink = tok->decode(ids, false).size();
    (void)sink;
  } catch (const loom::Error&) {
  }
  return 0;
}
