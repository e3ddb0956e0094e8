// Internal: the GGUF reader (v2 and v3, little-endian).
//
// Layout: "GGUF", u32 version, u64 tensor count, u64 key/value count, the key/values
// (u64-length strings, u32 type tags, arrays as u32 element type + u64 count), the
// tensor infos (name, u32 rank, u64 dims in ggml order, u32 ggml type, u64 offset
// relative to the data section), padding to `general.alignment` (default 32), data.
#pragma once

#include <cstdint>

#include "format/byte_source.hpp"
#include "format/parsed.hpp"

namespace loom::format {

// Sanity limits: a header that claims more than these is refused before anything is
// allocated for it. Counts are also bounded by the bytes left in the file.
struct GgufLimits {
  uint64_t max_tensors = 1u << 24;
  uint64_t max_kv = 1u << 24;
  uint64_t max_key_bytes = 65535;
  uint64_t max_tensor_name_bytes = 4096;
  uint64_t max_string_bytes = 64u << 20;      // one metadata string
  uint64_t max_array_elements = 16u << 20;    // all arrays of the file together
  int max_array_depth = 8;                    // arrays of arrays of ...
};

inline constexpr uint32_t kGgufDefaultAlignment = 32;
inline constexpr int kGgmlMaxDims = 4;

// The GGUF type tag of a metadata value type.
uint32_t gguf_value_tag(MetaValue::Type type) noexcept;

// Records get absolute offsets. Metadata keeps every key/value with its GGUF type.
ParsedWeights parse_gguf(const ByteSource& source, const GgufLimits& limits = {});

}  // namespace loom::format
