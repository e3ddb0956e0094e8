// Internal: GenerationDefaults from a Hugging Face generation_config.json. Wrong types
// and values out of range are errors naming the file and the field; keys loom does not
// use (bos/pad ids, num_beams, ...) are ignored.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "loom/generation_defaults.hpp"

namespace loom::generation_config {

// `json` is the file's text, `path` names it. Read leniently (format/lenient_json.hpp):
// what was forgiven is appended to `warnings` when given.
GenerationDefaults parse(std::string_view json, const std::string& path,
                         std::vector<std::string>* warnings = nullptr);

}  // namespace loom::generation_config
