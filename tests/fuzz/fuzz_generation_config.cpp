// libFuzzer harness: a Hugging Face generation_config.json into GenerationDefaults (lenient
// JSON, numbers out of range, wrong types, eos ids as numbers or lists), then applied.
#include <string>
#include <string_view>
#include <vector>

#include "loom/error.hpp"
#include "loom/generate.hpp"
#include "model/generation_config.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  try {
    std::vector<std::string> warnings;
    const loom::GenerationDefaults g = loom::generation_config::parse(text, "generation_config.json", &warnings);
    loom::SamplerParams sp;
    g.apply_to(sp);
    loom::GenerateOptions go;
    g.apply_to(go);
    volatile size_t sink = g.describe().size() + warnings.size() + static_cast<size_t>(go.max_tokens);
    (void)sink;
  } catch (const loom::Error&) {
  }
  return 0;
}
