#include "format/crc32.hpp"

#include <array>

namespace loom::format {

namespace {
constexpr std::array<uint32_t, 256> make_table() {
  std::array<uint32_t, 256> table{};
  for (uint32_t i = 0; i < 256; ++i) {
    uint32_t c = i;
    for (int k = 0; k < 8; ++k) c = (c & 1) ? 0xEDB88320u ^ (c >> 1) : c >> 1;
    table[i] = c;
  }
  return table;
}
constexpr auto kTable = make_table();
}  // namespace

uint32_t crc32(std::span<const std::byte> bytes, uint32_t crc) noexcept {
  crc = ~crc;
  for (std::byte b : bytes) crc = kTable[(crc ^ static_cast<uint8_t>(b)) & 0xFFu] ^ (crc >> 8);
  return ~crc;
}

}  // namespace loom::format
