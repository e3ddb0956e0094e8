// The GGUF reader.
#include "format/gguf.hpp"

#include <algorithm>
#include <array>
#include <set>

#include "format/ggml_types.hpp"

namespace loom::format {

namespace {

using MT = MetaValue::Type;

// GGUF value type tags, in tag order.
struct GgufValueType {
  MT type;
  uint64_t min_bytes;  // smallest encoding of one value (for count sanity checks)
};
constexpr std::array<GgufValueType, 13> kValueTypes{{
    {MT::u8, 1},
    {MT::i8, 1},
    {MT::u16, 2},
    {MT::i16, 2},
    {MT::u32, 4},
    {MT::i32, 4},
    {MT::f32, 4},
    {MT::boolean, 1},
    {MT::string, 8},
    {MT::array, 12},
    {MT::u64, 8},
    {MT::i64, 8},
    {MT::f64, 8},
}};

class GgufParser {
 public:
  GgufParser(const ByteSource& source, const GgufLimits& limits)
      : cur_(source), limits_(limits), file_(source.name()) {}

  ParsedWeights run() {
    ParsedWeights out;
    read_header();
    std::set<std::string> keys;
    for (uint64_t i = 0; i < kv_count_; ++i) {
      const uint64_t at = cur_.position();
      std::string key = read_string(limits_.max_key_bytes, "metadata key");
      if (!keys.insert(key).second) cur_.fail_at(at, "duplicate metadata key '" + key + "'");
      const uint64_t type_at = cur_.position();
      const uint32_t tag = cur_.read<uint32_t>();
      key_ = key;
      out.metadata.set(std::move(key), read_value(tag, type_at, 0));
    }
    key_.clear();
    const uint32_t alignment = read_alignment(out.metadata);

    std::set<std::string> names;
    out.tensors.reserve(static_cast<size_t>(tensor_count_));
    std::vector<uint64_t> info_offsets;
    for (uint64_t i = 0; i < tensor_count_; ++i) {
      info_offsets.push_back(cur_.position());
      out.tensors.push_back(read_tensor_info(names));
    }
    place_tensors(out.tensors, info_offsets, alignment);
    return out;
  }

 private:
  void read_header() {
    std::array<std::byte, 4> magic{};
    if (cur_.remaining() < 4) cur_.fail("file is too short for a GGUF header");
    cur_.read_bytes(magic);
    if (as_chars(magic) != "GGUF") cur_.fail_at(0, "bad magic: not a GGUF file");
    const uint64_t version_at = cur_.position();
    const uint32_t version = cur_.read<uint32_t>();
    if (version == 2 || version == 3) {
      // v3 only added big-endian files, which a little-endian reader sees as a
      // byte-swapped version (below).
    } else if (version == 1) {
      throw Error(ErrorCode::unsupported,
                  "GGUF v1 is not supported (32-bit counts); convert it to v3 with llama.cpp",
                  {.file = file_, .offset = version_at});
    } else if (version != 0 && (version & 0xFFFFu) == 0) {
      throw Error(ErrorCode::unsupported,
                  "big-endian GGUF files are not supported (version reads as " +
                      std::to_string(version) + ")",
                  {.file = file_, .offset = version_at});
    } else {
      throw Error(ErrorCode::unsupported,
                  "unknown GGUF version " + std::to_string(version) + " (supported: 2, 3)",
                  {.file = file_, .offset = version_at});
    }
    const uint64_t counts_at = cur_.position();
    tensor_count_ = cur_.read<uint64_t>();
    kv_count_ = cur_.read<uint64_t>();
    // Each tensor info takes at least 24 bytes and each key/value at least 13, so a
    // count the rest of the file cannot hold is refused before anything is reserved.
    if (tensor_count_ > limits_.max_tensors || tensor_count_ > cur_.remaining() / 24) {
      cur_.fail_at(counts_at, "absurd tensor count " + std::to_string(tensor_count_) +
                                  " for a file of " + std::to_string(cur_.source().size()) +
                                  " bytes");
    }
    if (kv_count_ > limits_.max_kv || kv_count_ > cur_.remaining() / 13) {
      cur_.fail_at(counts_at + 8, "absurd metadata key/value count " + std::to_string(kv_count_) +
                                      " for a file of " + std::to_string(cur_.source().size()) +
                                      " bytes");
    }
  }

  std::string read_string(uint64_t limit, const char* what) {
    const uint64_t at = cur_.position();
    const uint64_t length = cur_.read<uint64_t>();
    return cur_.read_string(length, limit, what, at);
  }

  [[noreturn]] void fail_value(uint64_t at, const std::string& message) const {
    cur_.fail_at(at, "metadata '" + key_ + "': " + message);
  }

  MetaValue read_value(uint32_t tag, uint64_t tag_at, int depth) {
    if (tag >= kValueTypes.size()) {
      fail_value(tag_at, "unknown GGUF value type " + std::to_string(tag));
    }
    switch (kValueTypes[tag].type) {
      case MT::u8: return MetaValue::of_uint(cur_.read<uint8_t>(), MT::u8);
      case MT::i8: return MetaValue::of_int(cur_.read<int8_t>(), MT::i8);
      case MT::u16: return MetaValue::of_uint(cur_.read<uint16_t>(), MT::u16);
      case MT::i16: return MetaValue::of_int(cur_.read<int16_t>(), MT::i16);
      case MT::u32: return MetaValue::of_uint(cur_.read<uint32_t>(), MT::u32);
      case MT::i32: return MetaValue::of_int(cur_.read<int32_t>(), MT::i32);
      case MT::u64: return MetaValue::of_uint(cur_.read<uint64_t>(), MT::u64);
      case MT::i64: return MetaValue::of_int(cur_.read<int64_t>(), MT::i64);
      case MT::f32: return MetaValue::of_float(cur_.read<float>(), MT::f32);
      case MT::f64: return MetaValue::of_float(cur_.read<double>(), MT::f64);
      case MT::boolean: {
        const uint64_t at = cur_.position();
        const uint8_t b = cur_.read<uint8_t>();
        if (b > 1) fail_value(at, "bool value " + std::to_string(b) + " is neither 0 nor 1");
        return MetaValue::of_bool(b != 0);
      }
      case MT::string: return MetaValue::of_string(read_string(limits_.max_string_bytes, "string value"));
      case MT::array: return read_array(depth);
    }
    fail_value(tag_at, "unknown GGUF value type " + std::to_string(tag));
  }

  MetaValue read_array(int depth) {
    if (depth >= limits_.max_array_depth) {
      fail_value(cur_.position(), "arrays nested deeper than " + std::to_string(limits_.max_array_depth));
    }
    const uint64_t type_at = cur_.position();
    const uint32_t elem_tag = cur_.read<uint32_t>();
    if (elem_tag >= kValueTypes.size()) {
      fail_value(type_at, "unknown GGUF array element type " + std::to_string(elem_tag));
    }
    const uint64_t count_at = cur_.position();
    const uint64_t count = cur_.read<uint64_t>();
    if (count > cur_.remaining() / kValueTypes[elem_tag].min_bytes) {
      fail_value(count_at, "array of " + std::to_string(count) + " " +
                               std::string(meta_type_name(kValueTypes[elem_tag].type)) +
                               " values cannot fit in the " + std::to_string(cur_.remaining()) +
                               " bytes left");
    }
    if (count > limits_.max_array_elements - array_elements_) {
      fail_value(count_at, "arrays hold more than " + std::to_string(limits_.max_array_elements) +
                               " elements in total");
    }
    array_elements_ += count;
    const MT elem_type = kValueTypes[elem_tag].type;
    MetaValue::ArrayBuilder items(elem_type);
    items.reserve(static_cast<size_t>(count));
    for (uint64_t i = 0; i < count; ++i) {
      const uint64_t at = cur_.position();
      if (elem_type == MT::string) {
        // Straight into the array's buffer: a vocabulary is 10^5 strings.
        const uint64_t length = cur_.read<uint64_t>();
        cur_.check_string_length(length, limits_.max_string_bytes, "string value", at);
        char* dst = items.push_string(static_cast<size_t>(length));
        cur_.read_bytes(std::as_writable_bytes(std::span<char>(dst, static_cast<size_t>(length))));
      } else if (elem_type == MT::array) {
        items.push(read_array(depth + 1));  // an inner array carries its own type
      } else {
        items.push(read_value(elem_tag, at, depth + 1));
      }
    }
    return items.finish();
  }

  uint32_t read_alignment(const Metadata& metadata) const {
    const MetaValue* v = metadata.find("general.alignment");
    if (v == nullptr) return kGgufDefaultAlignment;
    if (v->type() != MT::u32) {
      throw Error(ErrorCode::format,
                  "general.alignment must be a u32, found " + std::string(meta_type_name(v->type())),
                  {.file = file_});
    }
    const uint64_t a = v->as_uint();
    if (a == 0 || (a & (a - 1)) != 0) {
      throw Error(ErrorCode::format,
                  "general.alignment " + std::to_string(a) + " is not a power of two",
                  {.file = file_});
    }
    return static_cast<uint32_t>(a);
  }

  TensorRecord read_tensor_info(std::set<std::string>& names) {
    const uint64_t at = cur_.position();
    TensorRecord r;
    r.name = read_string(limits_.max_tensor_name_bytes, "tensor name");
    if (!names.insert(r.name).second) cur_.fail_at(at, "duplicate tensor name", r.name);
    const uint64_t rank_at = cur_.position();
    const uint32_t rank = cur_.read<uint32_t>();
    if (rank > static_cast<uint32_t>(Shape::kMaxRank)) {
      cur_.fail_at(rank_at, "tensor has " + std::to_string(rank) + " dimensions (at most " +
                                std::to_string(Shape::kMaxRank) + ")",
                   r.name);
    }
    std::array<int64_t, Shape::kMaxRank> dims{};
    for (uint32_t i = 0; i < rank; ++i) {
      const uint64_t d = cur_.read<uint64_t>();
      if (d > static_cast<uint64_t>(INT64_MAX)) {
        cur_.fail_at(rank_at, "dimension " + std::to_string(i) + " is " + std::to_string(d), r.name);
      }
      dims[rank - 1 - i] = static_cast<int64_t>(d);  // ggml order: ne[0] varies fastest
    }
    r.shape = Shape(std::span<const int64_t>(dims.data(), rank));
    const uint64_t type_at = cur_.position();
    const uint32_t type_id = cur_.read<uint32_t>();
    const GgmlType* type = ggml_type_by_id(type_id);
    if (type == nullptr || !type->dtype) {
      const std::string what =
          type == nullptr ? "unknown ggml type id " + std::to_string(type_id)
                          : "ggml type " + std::string(type->name) + " (id " + std::to_string(type_id) + ")";
      throw Error(ErrorCode::unsupported, "unsupported tensor type: " + what,
                  {.file = file_, .tensor = r.name, .offset = type_at});
    }
    r.dtype = *type->dtype;
    r.offset = cur_.read<uint64_t>();  // relative to the data section until placed
    r.nbytes = tensor_bytes_or_fail(r.dtype, r.shape, file_, r.name);
    r.span_bytes = r.nbytes;
    return r;
  }

  void place_tensors(std::vector<TensorRecord>& tensors, const std::vector<uint64_t>& info_at,
                     uint32_t alignment) {
    const uint64_t size = cur_.source().size();
    const uint64_t data_start = align_up(cur_.position(), alignment);
    if (!tensors.empty() && data_start > size) {
      cur_.fail("the data section would start at " + std::to_string(data_start) +
                ", past the end of the file (" + std::to_string(size) + " bytes)");
    }
    std::vector<size_t> order(tensors.size());
    for (size_t i = 0; i < tensors.size(); ++i) {
      TensorRecord& r = tensors[i];
      order[i] = i;
      if (r.offset % alignment != 0) {
        throw Error(ErrorCode::format,
                    "data offset " + std::to_string(r.offset) + " is not a multiple of the alignment " +
                        std::to_string(alignment),
                    {.file = file_, .tensor = r.name, .offset = info_at[i]});
      }
      if (r.offset > size - data_start || r.nbytes > size - data_start - r.offset) {
        throw Error(ErrorCode::format,
                    "tensor data [" + std::to_string(r.offset) + ", +" + std::to_string(r.nbytes) +
                        ") of the data section at " + std::to_string(data_start) +
                        " runs past the end of the file (" + std::to_string(size) + " bytes)",
                    {.file = file_, .tensor = r.name, .offset = info_at[i]});
      }
      r.offset += data_start;
    }
    std::sort(order.begin(), order.end(), [&](size_t a, size_t b) {
      return tensors[a].offset < tensors[b].offset;
    });
    for (size_t k = 1; k < order.size(); ++k) {
      const TensorRecord& prev = tensors[order[k - 1]];
      const TensorRecord& r = tensors[order[k]];
      if (r.offset < prev.offset + prev.nbytes) {
        throw Error(ErrorCode::format, "tensor data overlaps tensor '" + prev.name + "'",
                    {.file = file_, .tensor = r.name, .offset = r.offset});
      }
    }
  }

  Cursor cur_;
  const GgufLimits& limits_;
  const std::string& file_;
  uint64_t tensor_count_ = 0;
  uint64_t kv_count_ = 0;
  uint64_t array_elements_ = 0;
  std::string key_;  // the key whose value is being read, for messages
};

}  // namespace

uint32_t gguf_value_tag(MetaValue::Type type) noexcept {
  for (uint32_t tag = 0; tag < kValueTypes.size(); ++tag) {
    if (kValueTypes[tag].type == type) return tag;
  }
  return UINT32_MAX;  // unreachable: every MetaValue type has a tag
}

ParsedWeights parse_gguf(const ByteSource& source, const GgufLimits& limits) {
  return GgufParser(source, limits).run();
}

}  // namespace loom::format
