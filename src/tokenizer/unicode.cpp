#include "tokenizer/unicode.hpp"

#include <utf8proc.h>

#include <cstdlib>
#include <memory>

#include "loom/error.hpp"

namespace loom::tok {

Utf8Char utf8_next(std::string_view s, size_t i) noexcept {
  const auto b0 = static_cast<uint8_t>(s[i]);
  if (b0 < 0x80) return {b0, 1, true};
  const Utf8Char invalid{b0, 1, false};
  uint32_t len = 0;
  uint32_t cp = 0;
  uint32_t min_cp = 0;
  if (b0 >= 0xC2 && b0 <= 0xDF) {
    len = 2, cp = b0 & 0x1Fu, min_cp = 0x80;
  } else if (b0 >= 0xE0 && b0 <= 0xEF) {
    len = 3, cp = b0 & 0x0Fu, min_cp = 0x800;
  } else if (b0 >= 0xF0 && b0 <= 0xF4) {
    len = 4, cp = b0 & 0x07u, min_cp = 0x10000;
  } else {
    return invalid;
  }
  if (i + len > s.size()) return invalid;
  for (uint32_t k = 1; k < len; ++k) {
    const auto b = static_cast<uint8_t>(s[i + k]);
    if ((b & 0xC0) != 0x80) return invalid;
    cp = (cp << 6) | (b & 0x3Fu);
  }
  if (cp < min_cp || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return invalid;
  return {cp, len, true};
}

void utf8_append(std::string& out, uint32_t cp) {
  if (cp < 0x80) {
    out.push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out.push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out.push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out.push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

bool utf8_is_valid(std::string_view s) noexcept {
  for (size_t i = 0; i < s.size();) {
    const Utf8Char c = utf8_next(s, i);
    if (!c.valid) return false;
    i += c.len;
  }
  return true;
}

size_t utf8_incomplete_tail(std::string_view s) noexcept {
  // Look at most 3 bytes back for a lead byte whose sequence runs past the end while
  // every byte present so far is a plausible continuation.
  const size_t n = s.size();
  for (size_t back = 1; back <= 3 && back <= n; ++back) {
    const auto b = static_cast<uint8_t>(s[n - back]);
    if ((b & 0xC0) == 0x80) continue;  // continuation byte: keep looking for the lead
    size_t need = 0;
    if (b >= 0xC2 && b <= 0xDF) need = 2;
    else if (b >= 0xE0 && b <= 0xEF) need = 3;
    else if (b >= 0xF0 && b <= 0xF4) need = 4;
    if (need <= back) return 0;  // ASCII, invalid lead, or already complete
    // The second byte of E0/ED/F0/F4 has a narrower range; reject what can never complete.
    if (back >= 2) {
      const auto b1 = static_cast<uint8_t>(s[n - back + 1]);
      if ((b == 0xE0 && b1 < 0xA0) || (b == 0xED && b1 > 0x9F) || (b == 0xF0 && b1 < 0x90) ||
          (b == 0xF4 && b1 > 0x8F)) {
        return 0;
      }
    }
    return back;
  }
  return 0;
}

namespace {

ByteLevelTable make_byte_level_table() {
  ByteLevelTable t;
  t.cp_to_byte.fill(-1);
  uint32_t next_extra = 256;
  for (uint32_t b = 0; b < 256; ++b) {
    const bool printable = (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE);
    const uint32_t cp = printable ? b : next_extra++;
    t.byte_to_cp[b] = cp;
    utf8_append(t.byte_to_utf8[b], cp);
    t.cp_to_byte[cp] = static_cast<int16_t>(b);
  }
  return t;
}

}  // namespace

const ByteLevelTable& byte_level_table() noexcept {
  static const ByteLevelTable table = make_byte_level_table();
  return table;
}

void byte_level_encode(std::string_view in, std::string& out) {
  const auto& table = byte_level_table();
  const size_t base = out.size();
  out.resize(base + in.size() * 2);  // every byte-level character is 1 or 2 bytes
  char* dst = out.data() + base;
  for (char c : in) {
    const uint32_t cp = table.byte_to_cp[static_cast<uint8_t>(c)];
    if (cp < 0x80) {
      *dst++ = static_cast<char>(cp);
    } else {
      *dst++ = static_cast<char>(0xC0 | (cp >> 6));
      *dst++ = static_cast<char>(0x80 | (cp & 0x3F));
    }
  }
  out.resize(static_cast<size_t>(dst - out.data()));
}

namespace {

// The Unicode White_Space property (what Rust's char::is_whitespace tests).
constexpr uint32_t kWhiteSpace[][2] = {
    {0x0009, 0x000D}, {0x0020, 0x0020}, {0x0085, 0x0085}, {0x00A0, 0x00A0},
    {0x1680, 0x1680}, {0x2000, 0x200A}, {0x2028, 0x2029}, {0x202F, 0x202F},
    {0x205F, 0x205F}, {0x3000, 0x3000},
};

utf8proc_category_t category(uint32_t cp) noexcept {
  return utf8proc_category(static_cast<utf8proc_int32_t>(cp));
}

}  // namespace

bool is_whitespace(uint32_t cp) noexcept {
  for (const auto& r : kWhiteSpace) {
    if (cp >= r[0] && cp <= r[1]) return true;
  }
  return false;
}

bool is_numeric(uint32_t cp) noexcept {
  const auto c = category(cp);
  return c == UTF8PROC_CATEGORY_ND || c == UTF8PROC_CATEGORY_NL || c == UTF8PROC_CATEGORY_NO;
}

bool is_alphanumeric(uint32_t cp) noexcept {
  switch (category(cp)) {
    case UTF8PROC_CATEGORY_LU: case UTF8PROC_CATEGORY_LL: case UTF8PROC_CATEGORY_LT:
    case UTF8PROC_CATEGORY_LM: case UTF8PROC_CATEGORY_LO: case UTF8PROC_CATEGORY_ND:
    case UTF8PROC_CATEGORY_NL: case UTF8PROC_CATEGORY_NO:
      return true;
    default:
      return false;
  }
}

bool is_combining_mark(uint32_t cp) noexcept {
  const auto c = category(cp);
  return c == UTF8PROC_CATEGORY_MN || c == UTF8PROC_CATEGORY_MC || c == UTF8PROC_CATEGORY_ME;
}

namespace {

// Applies `fn` to each maximal valid UTF-8 run and copies invalid bytes through.
template <typename Fn>
std::string map_valid_runs(std::string_view s, Fn&& fn) {
  std::string out;
  out.reserve(s.size());
  size_t run_start = 0;
  size_t i = 0;
  auto flush = [&](size_t end) {
    if (end > run_start) fn(s.substr(run_start, end - run_start), out);
  };
  while (i < s.size()) {
    const Utf8Char c = utf8_next(s, i);
    if (!c.valid) {
      flush(i);
      out.push_back(s[i]);
      run_start = i + 1;
    }
    i += c.len;
  }
  flush(s.size());
  return out;
}

bool is_ascii(std::string_view s) noexcept {
  for (char c : s) {
    if (static_cast<uint8_t>(c) >= 0x80) return false;
  }
  return true;
}

}  // namespace

namespace {

// Characters that are NFC_Quick_Check=Yes with canonical combining class 0 in every
// Unicode version: NFC leaves them as they are and never composes them with what comes
// before, so NFC may cut the text in front of each of them (UAX #15, "stable" starters).
// Deliberately narrow: Latin/Greek/Cyrillic precomposed letters below U+0300, CJK, kana
// (without the combining voicing marks U+3099/U+309A), Hangul syllables, fullwidth ASCII,
// emoji.
constexpr uint32_t kNfcStableStarters[][2] = {
    {0x0000, 0x02FF}, {0x3000, 0x3029}, {0x3030, 0x303F}, {0x3040, 0x3098}, {0x30A0, 0x30FF},
    {0x4E00, 0x9FFF}, {0xAC00, 0xD7A3}, {0xFF01, 0xFF5E}, {0x1F300, 0x1FAFF},
};

bool is_nfc_stable_starter(uint32_t cp) noexcept {
  for (const auto& r : kNfcStableStarters) {
    if (cp >= r[0] && cp <= r[1]) return true;
  }
  return false;
}

void utf8proc_append(std::string_view run, int options, std::string& out) {
  utf8proc_uint8_t* result = nullptr;
  const utf8proc_ssize_t n = utf8proc_map(reinterpret_cast<const utf8proc_uint8_t*>(run.data()),
                                          static_cast<utf8proc_ssize_t>(run.size()), &result,
                                          static_cast<utf8proc_option_t>(options));
  std::unique_ptr<utf8proc_uint8_t, decltype(&std::free)> guard(result, &std::free);
  if (n < 0) {
    throw Error(ErrorCode::internal, std::string("Unicode normalization failed: ") + utf8proc_errmsg(n));
  }
  out.append(reinterpret_cast<const char*>(result), static_cast<size_t>(n));
}

// NFC of a valid run: text between stable starters is copied; only the chunks that
// contain other characters (a starter plus what follows it) go through utf8proc.
void nfc_append(std::string_view run, int options, std::string& out) {
  size_t chunk = 0;  // start of the chunk that may need utf8proc
  bool needs_work = false;
  for (size_t i = 0; i < run.size();) {
    const Utf8Char c = utf8_next(run, i);
    if (is_nfc_stable_starter(c.cp)) {
      if (needs_work) utf8proc_append(run.substr(chunk, i - chunk), options, out);
      else out.append(run.substr(chunk, i - chunk));
      chunk = i;
      needs_work = false;
    } else {
      needs_work = true;
    }
    i += c.len;
  }
  if (needs_work) utf8proc_append(run.substr(chunk), options, out);
  else out.append(run.substr(chunk));
}

}  // namespace

std::string normalize_unicode(std::string_view s, NormalForm form) {
  int options = UTF8PROC_STABLE;
  switch (form) {
    case NormalForm::nfc: options |= UTF8PROC_COMPOSE; break;
    case NormalForm::nfd: options |= UTF8PROC_DECOMPOSE; break;
    case NormalForm::nfkc: options |= UTF8PROC_COMPOSE | UTF8PROC_COMPAT; break;
    case NormalForm::nfkd: options |= UTF8PROC_DECOMPOSE | UTF8PROC_COMPAT; break;
  }
  if (is_ascii(s)) return std::string(s);  // ASCII is invariant under every normal form
  return map_valid_runs(s, [options, form](std::string_view run, std::string& out) {
    if (is_ascii(run)) {
      out.append(run);
    } else if (form == NormalForm::nfc) {
      nfc_append(run, options, out);
    } else {
      utf8proc_append(run, options, out);
    }
  });
}

std::string to_lower(std::string_view s) {
  return map_valid_runs(s, [](std::string_view run, std::string& out) {
    for (size_t i = 0; i < run.size();) {
      const Utf8Char c = utf8_next(run, i);
      utf8_append(out, static_cast<uint32_t>(utf8proc_tolower(static_cast<utf8proc_int32_t>(c.cp))));
      i += c.len;
    }
  });
}

std::string strip_accents(std::string_view s) {
  return map_valid_runs(s, [](std::string_view run, std::string& out) {
    for (size_t i = 0; i < run.size();) {
      const Utf8Char c = utf8_next(run, i);
      if (!is_combining_mark(c.cp)) out.append(run.substr(i, c.len));
      i += c.len;
    }
  });
}

}  // namespace loom::tok
