// loom::GenerationDefaults — the sampling and length defaults a model ships with in its
// Hugging Face `generation_config.json` (temperature, top_k, top_p, repetition_penalty,
// max_new_tokens, do_sample, eos_token_id), each value remembering where it came from:
// the file, or loom's own default where the file is absent or silent.
//
// A plain value, parsed by the loader and kept by the Model (Model::generation_defaults());
// hosts apply it to their SamplerParams / GenerateOptions and let explicit choices win.
// docs/side-files.md says how each key is read.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "loom/sampler.hpp"

namespace loom {

struct GenerateOptions;  // loom/generate.hpp (which includes this header through model.hpp)

enum class DefaultSource : uint8_t {
  loom,               // loom's own default (SamplerParams / GenerateOptions)
  generation_config,  // the model's generation_config.json
};

// "loom default", "generation_config.json".
std::string_view default_source_name(DefaultSource source) noexcept;

template <typename T>
struct DefaultValue {
  DefaultValue() = default;
  explicit DefaultValue(T v) : value(v) {}

  T value{};
  DefaultSource source = DefaultSource::loom;
  std::string key;  // the generation_config.json key it came from ("" for loom defaults)

  bool from_file() const noexcept { return source == DefaultSource::generation_config; }
};

struct GenerationDefaults {
  // do_sample: false makes temperature 0 (greedy), with key "do_sample".
  DefaultValue<float> temperature{SamplerParams{}.temperature};
  DefaultValue<int32_t> top_k{SamplerParams{}.top_k};
  DefaultValue<float> top_p{SamplerParams{}.top_p};
  // generation_config.json's repetition_penalty; loom's repeat_penalty (the same
  // divide-positive-logits rule).
  DefaultValue<float> repetition_penalty{SamplerParams{}.repeat_penalty};
  // max_new_tokens, else max_length (key "max_length": Transformers counts the prompt in
  // it; loom counts generated tokens only, so it is used as an upper bound).
  DefaultValue<int32_t> max_new_tokens{128};  // GenerateOptions::max_tokens' default
  // The file's eos_token_id (a number or a list); the loader merges these into
  // ModelConfig::eos_token_ids.
  std::vector<int32_t> eos_token_ids;
  bool has_file = false;  // a generation_config.json was read

  // Sets every value taken from generation_config.json; values that are loom defaults
  // leave the caller's alone.
  void apply_to(SamplerParams& params) const;
  // Defined beside GenerateOptions in the runtime (src/runtime/generate.cpp): this
  // model-layer type names the runtime's options only through the declaration above.
  void apply_to(GenerateOptions& options) const;

  // One line per value: "temperature 0.6 (generation_config.json)".
  std::vector<std::string> describe() const;
};

}  // namespace loom
