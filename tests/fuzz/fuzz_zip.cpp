// libFuzzer harness: the zip directory reader, then the whole torch .bin path (zip,
// restricted unpickler, storage-to-entry resolution) on the same bytes.
#include "format/torch.hpp"
#include "format/zip.hpp"
#include "fuzz/fuzz_common.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const auto input = loom::fuzz::as_span(data, size);
  loom::format::SpanSource src(input, "fuzz.bin");
  try {
    const auto zip = loom::format::read_zip_directory(src);
    for (const auto& e : zip.entries) {
      if (e.data_offset > size || e.compressed_size > size - e.data_offset) __builtin_trap();
    }
  } catch (const loom::Error&) {
  }
  try {
    const auto parsed = loom::format::parse_torch(src);
    volatile uint64_t sink = loom::fuzz::touch_records(parsed, input);
    (void)sink;
  } catch (const loom::Error&) {
  }
  return 0;
}
