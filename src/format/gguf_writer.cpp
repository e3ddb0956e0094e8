// The GGUF (v3) writer.
#include <set>

#include "format/atomic_file.hpp"
#include "format/byte_source.hpp"
#include "format/ggml_types.hpp"
#include "format/gguf.hpp"
#include "loom/format.hpp"

namespace loom {

namespace {

using format::append_le;
using MT = MetaValue::Type;

// llama.cpp keeps tensor names in a fixed 64-byte buffer with a terminating NUL.
constexpr size_t kGgmlMaxName = 63;

void append_string(std::vector<std::byte>& out, std::string_view s) {
  append_le<uint64_t>(out, s.size());
  format::append_bytes(out, s);
}

void append_value(std::vector<std::byte>& out, const MetaValue& v) {
  switch (v.type()) {
    case MT::u8: append_le<uint8_t>(out, static_cast<uint8_t>(v.as_uint())); break;
    case MT::i8: append_le<int8_t>(out, static_cast<int8_t>(v.as_int())); break;
    case MT::u16: append_le<uint16_t>(out, static_cast<uint16_t>(v.as_uint())); break;
    case MT::i16: append_le<int16_t>(out, static_cast<int16_t>(v.as_int())); break;
    case MT::u32: append_le<uint32_t>(out, static_cast<uint32_t>(v.as_uint())); break;
    case MT::i32: append_le<int32_t>(out, static_cast<int32_t>(v.as_int())); break;
    case MT::u64: append_le<uint64_t>(out, v.as_uint()); break;
    case MT::i64: append_le<int64_t>(out, v.as_int()); break;
    case MT::f32: append_le<float>(out, static_cast<float>(v.as_double())); break;
    case MT::f64: append_le<double>(out, v.as_double()); break;
    case MT::boolean: append_le<uint8_t>(out, v.as_bool() ? 1 : 0); break;
    case MT::string: append_string(out, v.as_string()); break;
    case MT::array: {
      append_le<uint32_t>(out, format::gguf_value_tag(v.element_type()));
      const size_t n = v.array_size();
      append_le<uint64_t>(out, n);
      for (size_t i = 0; i < n; ++i) {
        if (v.element_type() == MT::string) {
          append_string(out, v.string_item(i));
        } else {
          append_value(out, v.array_item(i));
        }
      }
      break;
    }
  }
}

}  // namespace

void write_gguf(const std::filesystem::path& path, const Metadata& metadata,
                std::span<const NamedTensor> tensors, uint32_t alignment) {
  const std::string file = path.string();
  if (alignment == 0 || (alignment & (alignment - 1)) != 0) {
    throw Error(ErrorCode::invalid_argument,
                "alignment " + std::to_string(alignment) + " is not a power of two", {.file = file});
  }
  Metadata kv = metadata;
  if (const MetaValue* a = kv.find("general.alignment")) {
    if (a->type() != MT::u32 || a->as_uint() != alignment) {
      throw Error(ErrorCode::invalid_argument,
                  "metadata general.alignment (" + a->to_display_string() +
                      ") disagrees with the alignment argument " + std::to_string(alignment),
                  {.file = file});
    }
  } else if (alignment != format::kGgufDefaultAlignment) {
    kv.set("general.alignment", MetaValue::of_uint(alignment, MT::u32));
  }

  std::vector<std::byte> header;
  format::append_bytes(header, "GGUF");
  append_le<uint32_t>(header, 3);
  append_le<uint64_t>(header, tensors.size());
  append_le<uint64_t>(header, kv.size());
  for (const auto& [key, value] : kv.entries()) {
    append_string(header, key);
    append_le<uint32_t>(header, format::gguf_value_tag(value.type()));
    append_value(header, value);
  }

  std::set<std::string_view> names;
  uint64_t offset = 0;
  for (const auto& t : tensors) {
    const ErrorContext ctx{.file = file, .tensor = t.name};
    if (!names.insert(t.name).second) throw Error(ErrorCode::invalid_argument, "duplicate tensor name", ctx);
    if (t.name.size() > kGgmlMaxName) {
      throw Error(ErrorCode::invalid_argument,
                  "tensor name is longer than ggml's limit of " + std::to_string(kGgmlMaxName) + " bytes",
                  ctx);
    }
    if (!t.tensor.defined()) throw Error(ErrorCode::invalid_argument, "tensor is undefined", ctx);
    const auto id = format::ggml_id_for(t.tensor.dtype());
    if (!id) {
      throw Error(ErrorCode::unsupported,
                  "GGUF cannot hold dtype " + std::string(dtype_name(t.tensor.dtype())), ctx);
    }
    const Shape& shape = t.tensor.shape();
    if (shape.rank() > format::kGgmlMaxDims) {
      throw Error(ErrorCode::invalid_argument,
                  "GGUF tensors have at most " + std::to_string(format::kGgmlMaxDims) + " dimensions",
                  ctx);
    }
    append_string(header, t.name);
    append_le<uint32_t>(header, static_cast<uint32_t>(shape.rank()));
    for (int i = shape.rank() - 1; i >= 0; --i) append_le<uint64_t>(header, static_cast<uint64_t>(shape[i]));
    append_le<uint32_t>(header, *id);
    append_le<uint64_t>(header, offset);
    offset = format::align_up(offset + static_cast<uint64_t>(t.tensor.nbytes()), alignment);
  }

  format::AtomicFile out(path);
  out.write(header);
  out.pad_to(alignment);
  // Every tensor, the last one included, is padded: ggml reads the data section as
  // one blob of the padded size.
  for (const auto& t : tensors) {
    out.write_tensor(t.tensor, t.name);
    out.pad_to(alignment);
  }
  out.commit();
}

}  // namespace loom
