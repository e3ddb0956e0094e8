// Internal: SHA-256 (FIPS 180-4), incremental. Used to verify weight files and to record
// provenance in packs.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>

namespace loom {

class Sha256 {
 public:
  Sha256();
  void update(const void* data, size_t size);
  std::array<uint8_t, 32> finish();
  std::string finish_hex();

 private:
  void block(const uint8_t* p);
  std::array<uint32_t, 8> h_;
  std::array<uint8_t, 64> buffer_{};
  size_t buffered_ = 0;
  uint64_t total_ = 0;
};

std::string sha256_hex(const void* data, size_t size);

// The hex SHA-256 of `length` bytes of `file` at `offset` (all of it from `offset` when
// `length` is nullopt), read in 1 MiB pieces; nullopt when the file cannot be read or is
// too short.
std::optional<std::string> sha256_file_range(const std::filesystem::path& file, uint64_t offset,
                                             std::optional<uint64_t> length);

}  // namespace loom
