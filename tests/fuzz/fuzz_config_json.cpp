// libFuzzer harness: a Hugging Face config.json into a ModelConfig (every family's keys,
// rope_scaling variants, numbers out of range, wrong types), through the lenient JSON
// reader (BOM, comments, trailing commas, line:column errors).
#include <string>
#include <string_view>
#include <vector>

#include "loom/error.hpp"
#include "loom/session.hpp"
#include "model/config_parse.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  try {
    std::vector<std::string> warnings;
    const loom::ModelConfig c = loom::config_parse::from_hf_json(text, "config.json", &warnings);
    // What a loader computes from a config straight away must not overflow either.
    volatile int64_t sink = loom::kv_cache_bytes_for(c, 16, loom::DType::f32);
    (void)sink;
  } catch (const loom::Error&) {
  }
  return 0;
}
