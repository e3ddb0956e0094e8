// libFuzzer harness: SentencePiece tokenizer.model files (a protobuf ModelProto: pieces
// with scores and types, the trainer and normalizer settings) into a Tokenizer. One that
// builds is also used on a fixed text.
#include <string>
#include <string_view>

#include "loom/error.hpp"
#include "loom/tokenizer.hpp"
#include "tokenizer/sentencepiece_model.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view proto(reinterpret_cast<const char*>(data), size);
  try {
    const auto md = loom::tok::sentencepiece_model_metadata(proto, "tokenizer.model");
    const auto tok = loom::Tokenizer::from_gguf_metadata(md, "tokenizer.model");
    static const std::string sample = "Hello, world! \xC3\xA9t\xC3\xA9 \xF0\x9F\x98\x80 <s> 12345\n\t  x\xFF";
    const auto ids = tok->encode(sample, true, true);
    volatile size_t sink = tok->decode(ids, false).size() + tok->decode(ids, true).size();
    (void)sink;
  } catch (const loom::Error&) {
  }
  return 0;
}
