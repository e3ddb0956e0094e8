// The safetensors reader.
#include "format/safetensors.hpp"

#include <algorithm>
#include <array>
#include <set>

#include "format/json.hpp"

namespace loom::format {

namespace {

struct DTypeName {
  std::string_view name;
  DType dtype;
};

constexpr std::array<DTypeName, 12> kDTypes{{
    {"F64", DType::f64},
    {"F32", DType::f32},
    {"F16", DType::f16},
    {"BF16", DType::bf16},
    {"I64", DType::i64},
    {"I32", DType::i32},
    {"I16", DType::i16},
    {"I8", DType::i8},
    {"U8", DType::u8},
    {"BOOL", DType::boolean},
    {"F8_E4M3", DType::f8_e4m3},
    {"F8_E5M2", DType::f8_e5m2},
}};

// dtypes newer versions of the spec define that loom has no type for: refused as
// unsupported (not as malformed) so the message says what the file holds.
constexpr std::array<std::string_view, 10> kKnownUnsupported{
    "U16", "U32", "U64", "F8_E8M0", "F4", "F6_E2M3", "F6_E3M2", "C64", "E8M0", "F8_E4M3FNUZ"};

constexpr std::string_view kMetadataKey = "__metadata__";

using simdjson::dom::element;
using simdjson::dom::element_type;

struct Entry {
  std::string name;
  DType dtype;
  Shape shape;
  uint64_t begin;
  uint64_t end;
};

class HeaderParser {
 public:
  HeaderParser(const std::string& file, uint64_t header_offset)
      : file_(file), header_offset_(header_offset) {}

  [[noreturn]] void fail(const std::string& message, const std::string& tensor = {}) const {
    throw Error(ErrorCode::format, message,
                {.file = file_, .tensor = tensor, .offset = header_offset_});
  }

  void read_metadata(element value, Metadata& out) const {
    if (value.type() == element_type::NULL_VALUE) return;
    simdjson::dom::object obj;
    if (value.get_object().get(obj) != simdjson::SUCCESS) {
      fail("__metadata__ must be an object of strings, found " +
           std::string(json_type_name(value.type())));
    }
    std::set<std::string_view> seen;
    for (auto field : obj) {
      if (!seen.insert(field.key).second) {
        fail("duplicate __metadata__ key '" + std::string(field.key) + "'");
      }
      std::string_view text;
      if (field.value.get_string().get(text) != simdjson::SUCCESS) {
        fail("__metadata__ value of '" + std::string(field.key) + "' is " +
             std::string(json_type_name(field.value.type())) +
             "; safetensors metadata maps strings to strings");
      }
      out.set(std::string(field.key), MetaValue::of_string(std::string(text)));
    }
  }

  Entry read_tensor(std::string name, element value) const {
    simdjson::dom::object obj;
    if (value.get_object().get(obj) != simdjson::SUCCESS) {
      fail("tensor entry must be an object, found " + std::string(json_type_name(value.type())),
           name);
    }
    std::optional<element> dtype_el, shape_el, offsets_el;
    for (auto field : obj) {
      std::optional<element>* slot = field.key == "dtype"          ? &dtype_el
                                     : field.key == "shape"        ? &shape_el
                                     : field.key == "data_offsets" ? &offsets_el
                                                                   : nullptr;
      if (slot == nullptr) continue;  // unknown keys are ignored, as the reference does
      if (slot->has_value()) fail("duplicate key '" + std::string(field.key) + "'", name);
      *slot = field.value;
    }
    if (!dtype_el) fail("missing \"dtype\"", name);
    if (!shape_el) fail("missing \"shape\"", name);
    if (!offsets_el) fail("missing \"data_offsets\"", name);

    Entry e{.name = name, .dtype = DType::f32, .shape = {}, .begin = 0, .end = 0};
    std::string_view dtype_text;
    if (dtype_el->get_string().get(dtype_text) != simdjson::SUCCESS) {
      fail("\"dtype\" must be a string, found " + std::string(json_type_name(dtype_el->type())),
           name);
    }
    if (auto d = safetensors_dtype(dtype_text)) {
      e.dtype = *d;
    } else if (std::find(kKnownUnsupported.begin(), kKnownUnsupported.end(), dtype_text) !=
               kKnownUnsupported.end()) {
      throw Error(ErrorCode::unsupported,
                  "dtype " + std::string(dtype_text) + " is not supported by loom",
                  {.file = file_, .tensor = name, .offset = header_offset_});
    } else {
      fail("unknown dtype \"" + std::string(dtype_text) + "\"", name);
    }

    simdjson::dom::array shape_arr;
    if (shape_el->get_array().get(shape_arr) != simdjson::SUCCESS) {
      fail("\"shape\" must be an array of integers, found " +
               std::string(json_type_name(shape_el->type())),
           name);
    }
    if (shape_arr.size() > static_cast<size_t>(Shape::kMaxRank)) {
      fail("shape has " + std::to_string(shape_arr.size()) + " dimensions; loom supports up to " +
               std::to_string(Shape::kMaxRank),
           name);
    }
    std::array<int64_t, Shape::kMaxRank> dims{};
    size_t rank = 0;
    for (element d : shape_arr) {
      uint64_t v = 0;
      if (d.get_uint64().get(v) != simdjson::SUCCESS || v > static_cast<uint64_t>(INT64_MAX)) {
        fail("shape entries must be non-negative integers", name);
      }
      dims[rank++] = static_cast<int64_t>(v);
    }
    e.shape = Shape(std::span<const int64_t>(dims.data(), rank));

    simdjson::dom::array off_arr;
    if (offsets_el->get_array().get(off_arr) != simdjson::SUCCESS || off_arr.size() != 2) {
      fail("\"data_offsets\" must be an array of two integers", name);
    }
    std::array<uint64_t, 2> off{};
    size_t i = 0;
    for (element o : off_arr) {
      if (o.get_uint64().get(off[i++]) != simdjson::SUCCESS) {
        fail("\"data_offsets\" entries must be non-negative integers", name);
      }
    }
    e.begin = off[0];
    e.end = off[1];
    return e;
  }

 private:
  const std::string& file_;
  uint64_t header_offset_;
};

}  // namespace

std::optional<DType> safetensors_dtype(std::string_view name) noexcept {
  for (const auto& d : kDTypes) {
    if (d.name == name) return d.dtype;
  }
  return std::nullopt;
}

std::optional<std::string_view> safetensors_dtype_name(DType dtype) noexcept {
  for (const auto& d : kDTypes) {
    if (d.dtype == dtype) return d.name;
  }
  return std::nullopt;
}

uint64_t safetensors_header_length(uint64_t length_field, uint64_t file_size,
                                   const std::string& file) {
  if (file_size < 8) {
    throw Error(ErrorCode::format,
                "file of " + std::to_string(file_size) + " bytes is too short for a safetensors header",
                {.file = file, .offset = 0});
  }
  if (length_field > kSafetensorsMaxHeader) {
    throw Error(ErrorCode::format,
                "header length " + std::to_string(length_field) + " exceeds the limit of " +
                    std::to_string(kSafetensorsMaxHeader) + " bytes",
                {.file = file, .offset = 0});
  }
  if (length_field > file_size - 8) {
    throw Error(ErrorCode::format,
                "header length " + std::to_string(length_field) + " runs past the end of the file (" +
                    std::to_string(file_size) + " bytes)",
                {.file = file, .offset = 0});
  }
  return length_field;
}

ParsedWeights parse_safetensors_header(std::string_view json, uint64_t file_size,
                                       const std::string& file) {
  const uint64_t data_start = 8 + json.size();
  HeaderParser hp(file, 8);
  simdjson::dom::parser parser;
  element root = parse_json(parser, json, file, 8);
  simdjson::dom::object top;
  if (root.get_object().get(top) != simdjson::SUCCESS) {
    hp.fail("header must be a JSON object, found " + std::string(json_type_name(root.type())));
  }

  ParsedWeights out;
  std::vector<Entry> entries;
  std::set<std::string_view> names;
  bool have_metadata = false;
  for (auto field : top) {
    if (field.key == kMetadataKey) {
      if (have_metadata) hp.fail("duplicate __metadata__");
      have_metadata = true;
      hp.read_metadata(field.value, out.metadata);
      continue;
    }
    if (!names.insert(field.key).second) {
      hp.fail("duplicate tensor name", std::string(field.key));
    }
    entries.push_back(hp.read_tensor(std::string(field.key), field.value));
  }

  // Every byte of the data section belongs to exactly one tensor: sorted by offsets,
  // each tensor starts where the previous one ended, and the last ends at end of file.
  std::vector<size_t> order(entries.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    return std::pair(entries[a].begin, entries[a].end) < std::pair(entries[b].begin, entries[b].end);
  });
  uint64_t expected = 0;
  for (size_t i : order) {
    const Entry& e = entries[i];
    const uint64_t abs_begin = add_or_fail(data_start, e.begin, file, e.name);
    if (e.end < e.begin) {
      throw Error(ErrorCode::format,
                  "data_offsets [" + std::to_string(e.begin) + ", " + std::to_string(e.end) +
                      "] end before they begin",
                  {.file = file, .tensor = e.name, .offset = abs_begin});
    }
    if (e.begin != expected) {
      throw Error(ErrorCode::format,
                  std::string(e.begin < expected ? "overlaps the previous tensor"
                                                 : "leaves a hole before it") +
                      ": data begins at " + std::to_string(e.begin) + ", expected " +
                      std::to_string(expected),
                  {.file = file, .tensor = e.name, .offset = abs_begin});
    }
    const uint64_t nbytes = tensor_bytes_or_fail(e.dtype, e.shape, file, e.name);
    if (e.end - e.begin != nbytes) {
      throw Error(ErrorCode::format,
                  "data_offsets cover " + std::to_string(e.end - e.begin) + " bytes but " +
                      std::string(dtype_name(e.dtype)) + e.shape.to_string() + " needs " +
                      std::to_string(nbytes),
                  {.file = file, .tensor = e.name, .offset = abs_begin});
    }
    expected = e.end;
  }
  const uint64_t data_end = add_or_fail(data_start, expected, file, {});
  if (data_end != file_size) {
    throw Error(ErrorCode::format,
                data_end > file_size
                    ? "tensor data runs past the end of the file: ends at " + std::to_string(data_end) +
                          ", the file has " + std::to_string(file_size) + " bytes"
                    : "the data section ends at " + std::to_string(data_end) + " but the file has " +
                          std::to_string(file_size) + " bytes (trailing bytes)",
                {.file = file, .offset = std::min(data_end, file_size)});
  }

  out.tensors.reserve(entries.size());
  for (auto& e : entries) {
    TensorRecord r;
    r.name = std::move(e.name);
    r.dtype = e.dtype;
    r.shape = e.shape;
    r.offset = data_start + e.begin;
    r.nbytes = e.end - e.begin;
    r.span_bytes = r.nbytes;
    out.tensors.push_back(std::move(r));
  }
  return out;
}

ParsedWeights parse_safetensors(const ByteSource& source) {
  Cursor cur(source);
  if (source.size() < 8) {
    source.fail("file of " + std::to_string(source.size()) +
                    " bytes is too short for a safetensors header",
                0);
  }
  const uint64_t n = safetensors_header_length(cur.read<uint64_t>(), source.size(), source.name());
  const std::string json = cur.read_string(n, kSafetensorsMaxHeader, "safetensors header");
  return parse_safetensors_header(json, source.size(), source.name());
}

}  // namespace loom::format
