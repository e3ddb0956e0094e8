#include "format/shard_index.hpp"

#include <filesystem>
#include <map>
#include <set>

#include "format/json.hpp"
#include "format/lenient_json.hpp"
#include "loom/error.hpp"

namespace loom::format {

namespace {

using simdjson::dom::element;
using simdjson::dom::element_type;

[[noreturn]] void fail(const std::string& file, const std::string& message,
                       const std::string& tensor = {}) {
  throw Error(ErrorCode::format, message, {.file = file, .tensor = tensor});
}

bool is_safe_relative(std::string_view name) {
  if (name.empty() || name.find('\0') != std::string_view::npos) return false;
  const std::filesystem::path p{std::string(name)};
  if (p.is_absolute() || name.front() == '/' || name.find('\\') != std::string_view::npos) {
    return false;
  }
  for (const auto& part : p) {
    if (part == "..") return false;
  }
  return true;
}

void read_metadata(element value, Metadata& out, const std::string& file) {
  if (value.type() == element_type::NULL_VALUE) return;
  simdjson::dom::object obj;
  if (value.get_object().get(obj) != simdjson::SUCCESS) {
    fail(file, "\"metadata\" must be an object, found " + std::string(json_type_name(value.type())));
  }
  for (auto field : obj) {
    const std::string key(field.key);
    if (out.contains(key)) fail(file, "duplicate metadata key '" + key + "'");
    switch (field.value.type()) {
      case element_type::UINT64:
      case element_type::INT64: {
        int64_t i = 0;
        uint64_t u = 0;
        if (field.value.get_int64().get(i) == simdjson::SUCCESS) {
          out.set(key, i >= 0 ? MetaValue::of_uint(static_cast<uint64_t>(i)) : MetaValue::of_int(i));
        } else if (field.value.get_uint64().get(u) == simdjson::SUCCESS) {
          out.set(key, MetaValue::of_uint(u));
        }
        break;
      }
      case element_type::DOUBLE: out.set(key, MetaValue::of_float(field.value.get_double().value_unsafe())); break;
      case element_type::STRING:
        out.set(key, MetaValue::of_string(std::string(field.value.get_string().value_unsafe())));
        break;
      case element_type::BOOL: out.set(key, MetaValue::of_bool(field.value.get_bool().value_unsafe())); break;
      // Nested values carry nothing a loader needs; they are left out rather than
      // flattened into something they were not.
      default: break;
    }
  }
}

}  // namespace

ShardIndex parse_shard_index(std::string_view json, const std::string& file) {
  simdjson::dom::parser parser;
  simdjson::padded_string storage;
  ShardIndex out;
  element root = parse_lenient_json(parser, storage, json, file, &out.warnings);
  simdjson::dom::object top;
  if (root.get_object().get(top) != simdjson::SUCCESS) {
    fail(file, "shard index must be a JSON object, found " + std::string(json_type_name(root.type())));
  }
  std::optional<element> map_el;
  bool have_metadata = false;
  for (auto field : top) {
    if (field.key == "weight_map") {
      if (map_el) fail(file, "duplicate \"weight_map\"");
      map_el = field.value;
    } else if (field.key == "metadata") {
      if (have_metadata) fail(file, "duplicate \"metadata\"");
      have_metadata = true;
      read_metadata(field.value, out.metadata, file);
    }
  }
  if (!map_el) fail(file, "shard index has no \"weight_map\"");
  simdjson::dom::object map;
  if (map_el->get_object().get(map) != simdjson::SUCCESS) {
    fail(file, "\"weight_map\" must be an object, found " + std::string(json_type_name(map_el->type())));
  }
  std::map<std::string, size_t, std::less<>> shard_ids;
  std::set<std::string_view> tensors;
  for (auto field : map) {
    const std::string tensor(field.key);
    if (!tensors.insert(field.key).second) fail(file, "tensor listed twice in \"weight_map\"", tensor);
    std::string_view shard;
    if (field.value.get_string().get(shard) != simdjson::SUCCESS) {
      fail(file, "shard name must be a string, found " + std::string(json_type_name(field.value.type())),
           tensor);
    }
    if (!is_safe_relative(shard)) {
      fail(file, "shard name '" + std::string(shard) +
                     "' must be a relative path inside the index's directory",
           tensor);
    }
    auto it = shard_ids.find(shard);
    if (it == shard_ids.end()) {
      it = shard_ids.emplace(std::string(shard), out.shards.size()).first;
      out.shards.emplace_back(shard);
    }
    out.weight_map.emplace_back(tensor, it->second);
  }
  if (out.weight_map.empty()) fail(file, "\"weight_map\" lists no tensors");
  return out;
}

}  // namespace loom::format
