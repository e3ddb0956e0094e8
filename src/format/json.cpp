#include "format/json.hpp"

#include <fmt/format.h>

#include "loom/error.hpp"

namespace loom::format {

simdjson::dom::element parse_json(simdjson::dom::parser& parser, std::string_view text,
                                  const std::string& file, uint64_t offset) {
  constexpr std::string_view kBom = "\xEF\xBB\xBF";
  if (text.starts_with(kBom)) {
    text.remove_prefix(kBom.size());
    offset += kBom.size();
  }
  simdjson::dom::element root;
  const auto err = parser.parse(text.data(), text.size(), true).get(root);
  if (err != simdjson::SUCCESS) {
    throw Error(ErrorCode::format, std::string("malformed JSON: ") + simdjson::error_message(err),
                {.file = file, .offset = offset});
  }
  return root;
}

std::string_view json_type_name(simdjson::dom::element_type type) noexcept {
  using ET = simdjson::dom::element_type;
  switch (type) {
    case ET::OBJECT: return "object";
    case ET::ARRAY: return "array";
    case ET::STRING: return "string";
    case ET::INT64:
    case ET::UINT64: return "integer";
    case ET::DOUBLE: return "number";
    case ET::BOOL: return "bool";
    case ET::NULL_VALUE: return "null";
  }
  return "unknown";
}

}  // namespace loom::format
