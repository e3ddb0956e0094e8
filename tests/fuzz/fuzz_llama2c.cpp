// libFuzzer harness: llama2.c files. Every input is tried as a checkpoint (legacy header
// or export.py's versioned one; records touched, and a checkpoint that parses must also
// be what sniff_format detects) and as a tokenizer.bin (a vocabulary that builds is
// also used on a fixed text).
#include <string>
#include <string_view>

#include "format/llama2c.hpp"
#include "fuzz/fuzz_common.hpp"
#include "loom/error.hpp"
#include "loom/format.hpp"
#include "loom/tokenizer.hpp"
#include "tokenizer/llama2c_vocab.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const auto input = loom::fuzz::as_span(data, size);
  try {
    loom::format::SpanSource src(input, "fuzz.bin");
    const auto parsed = loom::format::parse_llama2c(src);
    volatile uint64_t sink = loom::fuzz::touch_records(parsed, input);
    (void)sink;
    const auto head = input.first(size < 32 ? size : 32);
    if (loom::sniff_format(head, size) != loom::FormatKind::llama2c) __builtin_trap();
  } catch (const loom::Error&) {
  }
  try {
    const std::string_view bytes(reinterpret_cast<const char*>(data), size);
    const auto md = loom::tok::llama2c_vocab_metadata(bytes, "fuzz.tok.bin");
    const auto tok = loom::Tokenizer::from_gguf_metadata(md, "fuzz.tok.bin");
    static const std::string sample = "Once upon a time, \xC3\xA9t\xC3\xA9 <s> 123\n\t x\xFF";
    const auto ids = tok->encode(sample, true, true);
    volatile size_t sink = tok->decode(ids, false).size();
    (void)sink;
  } catch (const loom::Error&) {
  }
  return 0;
}
