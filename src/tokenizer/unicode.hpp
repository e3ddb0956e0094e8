// Internal: UTF-8 decoding that tolerates invalid bytes, the GPT-2 byte-level alphabet,
// and the Unicode properties/normal forms the tokenizer stages need (via utf8proc).
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace loom::tok {

// One decoded position. `len` is 1..4; an invalid, overlong, surrogate or truncated
// sequence decodes as a single raw byte with valid == false and cp == that byte.
struct Utf8Char {
  uint32_t cp = 0;
  uint32_t len = 1;
  bool valid = true;
};

Utf8Char utf8_next(std::string_view s, size_t i) noexcept;
void utf8_append(std::string& out, uint32_t cp);
bool utf8_is_valid(std::string_view s) noexcept;
// Number of bytes at the end of `s` that are the start of a valid multi-byte character
// still missing continuation bytes (0..3). Streaming output holds exactly these back.
size_t utf8_incomplete_tail(std::string_view s) noexcept;
// Length in bytes of the character starting at s[i] (1 for an invalid byte).
inline size_t utf8_len_at(std::string_view s, size_t i) noexcept { return utf8_next(s, i).len; }

// GPT-2's reversible byte <-> printable character table (byte-level BPE).
struct ByteLevelTable {
  std::array<std::string, 256> byte_to_utf8;  // the character each byte becomes, as UTF-8
  std::array<uint32_t, 256> byte_to_cp{};
  // Reverse map for the 256 characters, all below U+0144; -1 where a cp is not one.
  std::array<int16_t, 0x144> cp_to_byte{};
};
const ByteLevelTable& byte_level_table() noexcept;
inline int byte_from_level_cp(uint32_t cp) noexcept {
  return cp < 0x144 ? byte_level_table().cp_to_byte[cp] : -1;
}
// Maps every byte of `in` (valid UTF-8 or not) to its byte-level character.
void byte_level_encode(std::string_view in, std::string& out);

// Unicode properties. Invalid bytes (Utf8Char::valid == false) have none of them.
bool is_whitespace(uint32_t cp) noexcept;     // Rust char::is_whitespace (White_Space)
// HF tokenizers' is_punctuation: ASCII punctuation or P* in the Unicode 8.0 tables of the
// unicode_categories crate HF uses (hf_punctuation.cpp), not today's categories.
bool is_hf_punctuation(uint32_t cp) noexcept;
bool is_numeric(uint32_t cp) noexcept;        // general category N*
bool is_alphanumeric(uint32_t cp) noexcept;   // L* or N*
bool is_combining_mark(uint32_t cp) noexcept; // general category M*

enum class NormalForm : uint8_t { nfc, nfd, nfkc, nfkd };
// Normalizes every maximal run of valid UTF-8; invalid bytes pass through unchanged.
std::string normalize_unicode(std::string_view s, NormalForm form);
// Simple (one-to-one) Unicode lowercase mapping per character; invalid bytes unchanged.
std::string to_lower(std::string_view s);
// Drops combining marks (M*), as HF StripAccents does after NFD.
std::string strip_accents(std::string_view s);

}  // namespace loom::tok
