// loom::DType — the element types a Tensor can hold, as one table of traits.
//
// Plain types have one element per "block"; ggml's block-quantized types pack
// `block_elems` elements into `block_bytes` bytes, and a tensor row of a quantized type
// must hold a whole number of blocks. Names are stable strings (they appear in load
// reports, pack indexes and the C API); enumerator values are stable too (pack files
// store names, not numbers, but keep them anyway). Add new types at the end.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string_view>

namespace loom {

enum class DType : uint8_t {
  f32,
  f16,
  bf16,
  f64,
  i8,
  u8,
  i16,
  i32,
  i64,
  boolean,
  f8_e4m3,
  f8_e5m2,
  q8_0,
  q4_0,
  q4_1,
  q5_0,
  q5_1,
  q2_k,
  q3_k,
  q4_k,
  q5_k,
  q6_k,
  q8_k,
  q8_1,
  // loom's group-quantized types (pack files only; docs/quantization.md has the layout):
  // one type per group size, so a tensor's dtype alone says how to read it.
  gq8_32,
  gq8_64,
  gq8_128,
  gq4_32,
  gq4_64,
  gq4_128,
};

enum class DTypeKind : uint8_t { floating, integer, boolean, quantized };

struct DTypeTraits {
  DType dtype;
  std::string_view name;  // "f32", "bf16", "q4_k", ...
  DTypeKind kind;
  int32_t block_elems;  // elements per block (1 for plain types)
  int32_t block_bytes;  // bytes per block (the element size for plain types)
};

// The whole table, in enumerator order.
std::span<const DTypeTraits> all_dtypes() noexcept;
const DTypeTraits& dtype_traits(DType dtype) noexcept;
std::string_view dtype_name(DType dtype) noexcept;
std::optional<DType> dtype_from_name(std::string_view name) noexcept;

inline bool is_quantized(DType dtype) noexcept {
  return dtype_traits(dtype).kind == DTypeKind::quantized;
}
// Element size in bytes for plain types; throws for quantized types.
int64_t dtype_size(DType dtype);

// Bytes needed for `elements` elements laid out as rows of `row_elems` (the innermost
// dimension). Throws loom::Error(invalid_argument) on overflow or when a quantized row
// is not a whole number of blocks.
int64_t dtype_bytes(DType dtype, int64_t elements, int64_t row_elems);

}  // namespace loom
