#include "loom/generation_defaults.hpp"

#include <fmt/format.h>

namespace loom {

std::string_view default_source_name(DefaultSource source) noexcept {
  switch (source) {
    case DefaultSource::loom: return "loom default";
    case DefaultSource::generation_config: return "generation_config.json";
  }
  return "unknown";
}

void GenerationDefaults::apply_to(SamplerParams& params) const {
  if (temperature.from_file()) params.temperature = temperature.value;
  if (top_k.from_file()) params.top_k = top_k.value;
  if (top_p.from_file()) params.top_p = top_p.value;
  if (repetition_penalty.from_file()) params.repeat_penalty = repetition_penalty.value;
}

namespace {

template <typename T>
std::string line(std::string_view name, const DefaultValue<T>& v) {
  std::string source(default_source_name(v.source));
  // Say which key when it is not the value's own name (do_sample, max_length).
  if (v.from_file() && v.key != name) source += ": " + v.key;
  return fmt::format("{} {} ({})", name, v.value, source);
}

}  // namespace

std::vector<std::string> GenerationDefaults::describe() const {
  std::vector<std::string> out = {
      line("temperature", temperature),
      line("top_k", top_k),
      line("top_p", top_p),
      line("repetition_penalty", repetition_penalty),
      line("max_new_tokens", max_new_tokens),
  };
  if (!eos_token_ids.empty()) {
    std::string ids;
    for (int32_t id : eos_token_ids) ids += (ids.empty() ? "" : ", ") + std::to_string(id);
    out.push_back("eos_token_id " + ids + " (generation_config.json)");
  }
  return out;
}

}  // namespace loom
