// libFuzzer harness: safetensors header parsing and validation.
#include "format/safetensors.hpp"
#include "fuzz/fuzz_common.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const auto input = loom::fuzz::as_span(data, size);
  try {
    loom::format::SpanSource src(input, "fuzz.safetensors");
    const auto parsed = loom::format::parse_safetensors(src);
    volatile uint64_t sink = loom::fuzz::touch_records(parsed, input);
    (void)sink;
  } catch (const loom::Error&) {
  }
  return 0;
}
