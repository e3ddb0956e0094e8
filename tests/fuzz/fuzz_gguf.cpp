// libFuzzer harness: GGUF header, metadata and tensor infos.
#include "format/gguf.hpp"
#include "fuzz/fuzz_common.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const auto input = loom::fuzz::as_span(data, size);
  try {
    loom::format::SpanSource src(input, "fuzz.gguf");
    const auto parsed = loom::format::parse_gguf(src);
    volatile uint64_t sink = loom::fuzz::touch_records(parsed, input);
    for (const auto& [key, value] : parsed.metadata.entries()) sink = sink + value.to_display_string().size();
    (void)sink;
  } catch (const loom::Error&) {
  }
  return 0;
}
