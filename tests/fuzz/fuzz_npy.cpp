// libFuzzer harness: .npy header parsing.
#include "format/npy.hpp"
#include "fuzz/fuzz_common.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    loom::format::SpanSource src(loom::fuzz::as_span(data, size), "fuzz.npy");
    const auto h = loom::format::parse_npy(src);
    if (h.data_offset > size || h.nbytes != size - h.data_offset) __builtin_trap();
  } catch (const loom::Error&) {
  }
  return 0;
}
