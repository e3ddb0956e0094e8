// Internal: CRC-32 (IEEE 802.3, reflected, as zip uses it).
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

namespace loom::format {

// Continues a running CRC: crc32(b, crc32(a)) == crc32(a + b). Start with 0.
uint32_t crc32(std::span<const std::byte> bytes, uint32_t crc = 0) noexcept;

}  // namespace loom::format
