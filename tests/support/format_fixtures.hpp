// Test fixtures for the format layer, shared by the suites: tensors filled with
// deterministic bytes, a tiny model of mixed dtypes and shapes, byte-level comparison,
// a little-endian byte builder for hand-made (often malformed) files, a checksum, and
// a Catch2 helper that asserts a loom::Error and its context.
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "loom/error.hpp"
#include "loom/format.hpp"
#include "loom/tensor.hpp"

namespace loom::test {

// A contiguous owned tensor whose bytes are a deterministic function of `seed` (any
// bit pattern, NaNs included: compare with same_bytes, not ==).
Tensor patterned_tensor(const Shape& shape, DType dtype, uint32_t seed);

// Six tensors every format can hold: f32 [4, 8], f16 [16], f64 [2, 3, 4], i32 [5],
// i8 [3, 2], f32 scalar [].
std::vector<NamedTensor> tiny_format_model();

bool same_bytes(const Tensor& a, const Tensor& b);

// FNV-1a 64 of a tensor's bytes (row-major, contiguous).
uint64_t fnv1a64(const void* data, size_t n);
uint64_t fnv1a64(const Tensor& t);

// Little-endian byte builder.
struct Bytes {
  std::vector<uint8_t> data;
  Bytes& u8(uint8_t v);
  Bytes& u16(uint16_t v);
  Bytes& u32(uint32_t v);
  Bytes& u64(uint64_t v);
  Bytes& i32(int32_t v) { return u32(static_cast<uint32_t>(v)); }
  Bytes& f32(float v);
  Bytes& str(std::string_view s);  // raw bytes
  Bytes& gguf_str(std::string_view s) { return u64(s.size()).str(s); }
  Bytes& zeros(size_t n);
  Bytes& pad_to(size_t alignment);
  size_t size() const { return data.size(); }
};

// safetensors bytes: u64 length, `json`, then `data_bytes` bytes of data.
std::vector<uint8_t> safetensors_file(std::string_view json, size_t data_bytes);

// A minimal zip archive of the given entries (no data descriptors, no alignment),
// each entry stored — or marked with `method` (e.g. 8, deflate) without compressing.
struct ZipItem {
  std::string name;
  std::vector<uint8_t> data;
  uint16_t method = 0;
};
std::vector<uint8_t> zip_archive(const std::vector<ZipItem>& items);

// Runs `fn`, which must throw loom::Error; checks its code and that its context names
// `file` (exactly, when non-empty), `tensor` and `offset` where given, and that the
// message contains `needle`. Returns the error for further checks.
loom::Error expect_error(const std::function<void()>& fn, ErrorCode code, std::string_view needle,
                         const std::string& file = {}, const std::string& tensor = {},
                         std::optional<uint64_t> offset = std::nullopt);

}  // namespace loom::test
