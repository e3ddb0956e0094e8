// Internal: the reader of llama2.c checkpoints (karpathy/llama2.c run.c / export.py).
//
// Legacy files (export.py version 0, what run.c reads and what the published
// stories*.bin are) have no magic: 7 x int32 (dim, hidden_dim, n_layers, n_heads,
// n_kv_heads, vocab_size, seq_len; a negative vocab_size means a separate classifier
// follows) and then f32 arrays to the end of the file. They are recognised by the size
// the header implies matching the file's size exactly. Versioned files (export.py
// version >= 1) begin with the magic 0x616b3432 ("ak42" as a little-endian u32) and a
// version in a 256-byte header. The tensor order of both is the table in llama2c.cpp.
//
// Every layer's matrix is a contiguous slice of the file, so each becomes one record
// (Meta's names: "layers.{N}.attention.wq.weight") that loads as a zero-copy view.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>

#include "format/byte_source.hpp"
#include "format/parsed.hpp"

namespace loom::format {

inline constexpr uint32_t kLlama2cMagic = 0x616b3432;  // bytes "24ka" on disk
inline constexpr uint64_t kLlama2cLegacyHeaderBytes = 28;
inline constexpr uint64_t kLlama2cHeaderBytes = 256;  // export.py version >= 1

struct Llama2cHeader {
  int32_t version = 0;  // 0: legacy (no magic)
  int32_t dim = 0;
  int32_t hidden_dim = 0;
  int32_t n_layers = 0;
  int32_t n_heads = 0;
  int32_t n_kv_heads = 0;
  int32_t vocab_size = 0;  // always positive here (the legacy sign is in shared_classifier)
  int32_t seq_len = 0;
  bool shared_classifier = true;
  int32_t group_size = 0;  // version 2 only
  uint64_t header_bytes = kLlama2cLegacyHeaderBytes;
};

// The legacy header in the first 28 bytes, when its fields are sane; nullopt otherwise.
std::optional<Llama2cHeader> read_llama2c_legacy_header(std::span<const std::byte> head) noexcept;
// Why the header's fields cannot describe a model ("" when they can).
std::string llama2c_header_problem(const Llama2cHeader& h);
// The file size the header implies (nullopt on overflow or a bad header).
std::optional<uint64_t> llama2c_file_size(const Llama2cHeader& h) noexcept;

// True for a versioned file (magic) or a legacy one whose implied size is `file_size`.
bool looks_like_llama2c(std::span<const std::byte> head, std::optional<uint64_t> file_size) noexcept;

// Parses a whole checkpoint: one record per tensor and layer, and the header as
// `llama2c.*` metadata (i32 values, `llama2c.shared_classifier` a bool). Throws
// Error(format) naming the file and byte offset for a bad header or a size mismatch,
// Error(unsupported) for export.py versions loom does not read (2: Q8_0).
ParsedWeights parse_llama2c(const ByteSource& source);

}  // namespace loom::format
