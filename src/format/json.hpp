// Internal: parsing untrusted JSON that a specification defines (the safetensors header)
// with simdjson. simdjson validates UTF-8 and the whole document; a leading UTF-8
// byte-order mark is tolerated (some Windows tools write one), anything else that is not
// JSON is refused. Hand-edited Hugging Face side files (config.json, shard
// indexes, tokenizer files) go through format/lenient_json.hpp instead.
#pragma once

#include <string>
#include <string_view>

#include <simdjson.h>

namespace loom::format {

// Throws Error(format) naming `file` (and `offset`, where the text starts in the file).
simdjson::dom::element parse_json(simdjson::dom::parser& parser, std::string_view text,
                                  const std::string& file, uint64_t offset);

// "object", "array", "string", "integer", "number", "bool", "null".
std::string_view json_type_name(simdjson::dom::element_type type) noexcept;

}  // namespace loom::format
