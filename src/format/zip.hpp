// Internal: a read-only zip directory reader (what torch.save archives need).
//
// Reads the end-of-central-directory record (and the ZIP64 records torch writes for big
// files), every central directory entry, and each entry's local header to find where
// its data starts. It decompresses nothing: entries are located, not extracted, so
// stored entries can be mapped zero-copy. Sizes come from the central directory (torch
// writes data descriptors, leaving the local header's sizes zero).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "format/byte_source.hpp"

namespace loom::format {

struct ZipEntry {
  std::string name;
  uint16_t method = 0;  // 0 stored, 8 deflate, ...
  uint16_t flags = 0;
  uint32_t crc32 = 0;
  uint64_t compressed_size = 0;
  uint64_t uncompressed_size = 0;
  uint64_t local_header_offset = 0;
  uint64_t data_offset = 0;  // absolute offset of the entry's (stored) bytes
  bool is_stored() const noexcept { return method == 0; }
};

struct ZipDirectory {
  ZipDirectory() = default;
  ZipDirectory(ZipDirectory&&) = default;  // moves keep the entries' buffer: views stay valid
  ZipDirectory& operator=(ZipDirectory&&) = default;
  ZipDirectory(const ZipDirectory&) = delete;
  ZipDirectory& operator=(const ZipDirectory&) = delete;

  std::vector<ZipEntry> entries;
  std::unordered_map<std::string_view, size_t> by_name;  // views into entries' names
  const ZipEntry* find(std::string_view name) const noexcept;
};

inline constexpr uint64_t kZipMaxEntries = 1u << 22;

ZipDirectory read_zip_directory(const ByteSource& source);

}  // namespace loom::format
