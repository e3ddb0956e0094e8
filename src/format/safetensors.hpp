// Internal: the safetensors reader (header parsing and validation).
//
// Layout: u64 little-endian header length N, N bytes of JSON (an object mapping tensor
// names to {"dtype", "shape", "data_offsets": [begin, end]} plus an optional
// "__metadata__" object of strings), then the data section. Offsets are relative to the
// data section. Validation follows the format's reference implementation (see
// docs/formats.md).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "format/byte_source.hpp"
#include "format/parsed.hpp"

namespace loom::format {

// The reference implementation's limit on the header length.
inline constexpr uint64_t kSafetensorsMaxHeader = 100'000'000;

// Validates the 8-byte length prefix read from a file of `file_size` bytes; returns N.
uint64_t safetensors_header_length(uint64_t length_field, uint64_t file_size,
                                   const std::string& file);
// Parses and validates the JSON header text of a file of `file_size` bytes. Records get
// absolute offsets (8 + N + begin).
ParsedWeights parse_safetensors_header(std::string_view json, uint64_t file_size,
                                       const std::string& file);
// Reads the length prefix and header from `source` (a whole file) and parses them.
ParsedWeights parse_safetensors(const ByteSource& source);

// The spec's dtype names ("F32", "BF16", ...).
std::optional<DType> safetensors_dtype(std::string_view name) noexcept;
std::optional<std::string_view> safetensors_dtype_name(DType dtype) noexcept;

}  // namespace loom::format
