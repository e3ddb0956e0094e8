#include "format/lenient_json.hpp"

#include <fmt/format.h>

#include <cstring>

#include "common/read_file.hpp"
#include "loom/error.hpp"

namespace loom::format {

static_assert(kReadFilePadding >= simdjson::SIMDJSON_PADDING, "read_file's strings are parsed in place");

namespace {

constexpr std::string_view kBom = "\xEF\xBB\xBF";

bool is_space(char c) noexcept { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }
bool is_digit(char c) noexcept { return c >= '0' && c <= '9'; }
bool is_hex(char c) noexcept { return is_digit(c) || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F'); }

std::string plural(int64_t n, std::string_view one, std::string_view many) {
  return fmt::format("{} {}", n, n == 1 ? one : many);
}

// "a", "a and b", "a, b and c".
std::string join_and(const std::vector<std::string>& parts) {
  std::string out;
  for (size_t i = 0; i < parts.size(); ++i) {
    if (i > 0) out += i + 1 == parts.size() ? " and " : ", ";
    out += parts[i];
  }
  return out;
}

// Blanks [begin, end) of `out` (a copy of the text made on first use) to spaces,
// keeping line breaks so that lines stay where they were.
class Blanker {
 public:
  explicit Blanker(std::string_view text) : text_(text) {}
  void blank(size_t begin, size_t end) {
    if (out_.empty()) out_.assign(text_);
    for (size_t i = begin; i < end; ++i) {
      if (out_[i] != '\n' && out_[i] != '\r') out_[i] = ' ';
    }
  }
  std::string take() { return std::move(out_); }

 private:
  std::string_view text_;
  std::string out_;
};

// Length of the valid UTF-8 sequence starting at s[i] (a byte >= 0x80), or 0.
size_t utf8_sequence(std::string_view s, size_t i) noexcept {
  const auto b0 = static_cast<unsigned char>(s[i]);
  size_t len = 0;
  unsigned char lo = 0x80, hi = 0xBF;  // bounds of the second byte
  if (b0 >= 0xC2 && b0 <= 0xDF) {
    len = 2;
  } else if (b0 >= 0xE0 && b0 <= 0xEF) {
    len = 3;
    if (b0 == 0xE0) lo = 0xA0;  // overlong
    if (b0 == 0xED) hi = 0x9F;  // surrogates
  } else if (b0 >= 0xF0 && b0 <= 0xF4) {
    len = 4;
    if (b0 == 0xF0) lo = 0x90;  // overlong
    if (b0 == 0xF4) hi = 0x8F;  // beyond U+10FFFF
  } else {
    return 0;
  }
  if (len > s.size() - i) return 0;
  for (size_t k = 1; k < len; ++k) {
    const auto b = static_cast<unsigned char>(s[i + k]);
    if (b < (k == 1 ? lo : 0x80) || b > (k == 1 ? hi : 0xBF)) return 0;
  }
  return len;
}

// The index of the quote that closes the string whose body starts at `i` (just past its
// opening quote), or text.size() when it never closes. A quote closes the string unless
// an odd run of backslashes escapes it; memchr finds the candidates, so the passes below
// cross string bodies (most of a tokenizer.json) at memchr's speed, not a byte at a time.
size_t closing_quote(std::string_view text, size_t i) noexcept {
  while (i < text.size()) {
    const void* q = std::memchr(text.data() + i, '"', text.size() - i);
    if (q == nullptr) return text.size();
    const auto at = static_cast<size_t>(static_cast<const char*>(q) - text.data());
    size_t slashes = 0;
    while (at - slashes > i && text[at - slashes - 1] == '\\') ++slashes;
    if (slashes % 2 == 0) return at;
    i = at + 1;
  }
  return text.size();
}

std::string shown(char c) {
  const auto u = static_cast<unsigned char>(c);
  if (u >= 0x20 && u < 0x7F) return fmt::format("'{}'", c);
  return fmt::format("byte 0x{:02X}", u);
}

// A strict JSON validator that says where the first problem is. Iterative (an explicit
// stack of open containers), so nesting depth costs memory, not call stack.
class Scanner {
 public:
  explicit Scanner(std::string_view s) : s_(s) {}

  std::optional<JsonSyntaxError> run() {
    if (s_.starts_with(kBom)) i_ = kBom.size();
    enum class Expect { value, value_or_close, key, key_or_close, colon, after_value };
    Expect expect = Expect::value;
    std::vector<char> open;  // '{' or '['
    for (;;) {
      skip_space();
      if (expect == Expect::after_value && open.empty()) {
        if (i_ < s_.size()) return fail(i_, "unexpected " + shown(s_[i_]) + " after the end of the document");
        return std::nullopt;
      }
      if (i_ >= s_.size()) {
        if (open.empty() && expect == Expect::value) return fail(i_, "the document is empty");
        return fail(i_, "the document ends inside " + std::string(open.back() == '{' ? "an object" : "an array"));
      }
      const char c = s_[i_];
      switch (expect) {
        case Expect::value:
        case Expect::value_or_close:
          if (expect == Expect::value_or_close && c == ']') {
            open.pop_back();
            ++i_;
            expect = Expect::after_value;
          } else if (c == '{' || c == '[') {
            open.push_back(c);
            ++i_;
            expect = c == '{' ? Expect::key_or_close : Expect::value_or_close;
          } else {
            if (auto e = scan_scalar()) return e;
            expect = Expect::after_value;
          }
          break;
        case Expect::key:
        case Expect::key_or_close:
          if (expect == Expect::key_or_close && c == '}') {
            open.pop_back();
            ++i_;
            expect = Expect::after_value;
          } else if (c == '"') {
            if (auto e = scan_string()) return e;
            expect = Expect::colon;
          } else {
            return fail(i_, "expected a quoted key, found " + shown(c));
          }
          break;
        case Expect::colon:
          if (c != ':') return fail(i_, "expected ':' after the key, found " + shown(c));
          ++i_;
          expect = Expect::value;
          break;
        case Expect::after_value: {
          const char close = open.back() == '{' ? '}' : ']';
          if (c == ',') {
            ++i_;
            expect = open.back() == '{' ? Expect::key : Expect::value;
          } else if (c == close) {
            open.pop_back();
            ++i_;
          } else {
            return fail(i_, fmt::format("expected ',' or '{}', found {}", close, shown(c)));
          }
          break;
        }
      }
    }
  }

 private:
  static std::optional<JsonSyntaxError> fail(size_t at, std::string what) {
    return JsonSyntaxError{at, std::move(what)};
  }

  void skip_space() {
    while (i_ < s_.size() && is_space(s_[i_])) ++i_;
  }

  std::optional<JsonSyntaxError> scan_scalar() {
    const char c = s_[i_];
    if (c == '"') return scan_string();
    if (c == '-' || is_digit(c)) return scan_number();
    for (std::string_view word : {"true", "false", "null"}) {
      if (c == word[0]) {
        if (s_.substr(i_, word.size()) != word) return fail(i_, fmt::format("expected '{}'", word));
        i_ += word.size();
        return std::nullopt;
      }
    }
    return fail(i_, "expected a value, found " + shown(c));
  }

  std::optional<JsonSyntaxError> scan_string() {
    const size_t start = i_++;
    while (i_ < s_.size()) {
      const char c = s_[i_];
      const auto u = static_cast<unsigned char>(c);
      if (c == '"') {
        ++i_;
        return std::nullopt;
      }
      if (u < 0x20) return fail(i_, "a control character in a string (write it as an escape)");
      if (c == '\\') {
        if (i_ + 1 >= s_.size()) break;
        const char e = s_[i_ + 1];
        if (e == 'u') {
          for (size_t k = 2; k < 6; ++k) {
            if (i_ + k >= s_.size() || !is_hex(s_[i_ + k])) return fail(i_, "\\u needs four hex digits");
          }
          i_ += 6;
        } else if (std::string_view("\"\\/bfnrt").find(e) != std::string_view::npos) {
          i_ += 2;
        } else {
          return fail(i_, "unknown escape \\" + std::string(1, e));
        }
        continue;
      }
      if (u >= 0x80) {
        const size_t n = utf8_sequence(s_, i_);
        if (n == 0) return fail(i_, "invalid UTF-8 in a string");
        i_ += n;
        continue;
      }
      ++i_;
    }
    return fail(start, "unterminated string");
  }

  std::optional<JsonSyntaxError> scan_number() {
    const size_t start = i_;
    if (s_[i_] == '-') ++i_;
    auto digits = [&] {
      const size_t from = i_;
      while (i_ < s_.size() && is_digit(s_[i_])) ++i_;
      return i_ - from;
    };
    if (i_ < s_.size() && s_[i_] == '0') {
      ++i_;
    } else if (digits() == 0) {
      return fail(start, "a number needs digits");
    }
    if (i_ < s_.size() && s_[i_] == '.') {
      ++i_;
      if (digits() == 0) return fail(start, "a number needs digits after '.'");
    }
    if (i_ < s_.size() && (s_[i_] == 'e' || s_[i_] == 'E')) {
      ++i_;
      if (i_ < s_.size() && (s_[i_] == '+' || s_[i_] == '-')) ++i_;
      if (digits() == 0) return fail(start, "a number needs digits in its exponent");
    }
    return std::nullopt;
  }

  std::string_view s_;
  size_t i_ = 0;
};

}  // namespace

std::string JsonForgiven::describe() const {
  std::vector<std::string> parts;
  int64_t things = 0;
  if (bom) {
    parts.emplace_back("a UTF-8 byte-order mark");
    ++things;
  }
  if (comments > 0) {
    parts.push_back(plural(comments, "comment", "comments"));
    things += comments;
  }
  if (trailing_commas > 0) {
    parts.push_back(plural(trailing_commas, "trailing comma", "trailing commas"));
    things += trailing_commas;
  }
  if (parts.empty()) return "";
  return join_and(parts) + (things == 1 ? " was ignored" : " were ignored");
}

BlankedJson blank_json_extras(std::string_view text, const std::string& file) {
  BlankedJson out;
  Blanker b(text);
  size_t i = 0;
  if (text.starts_with(kBom)) {
    out.forgiven.bom = true;
    b.blank(0, kBom.size());
    i = kBom.size();
  }
  // The last significant character outside strings and comments, and a comma that is
  // trailing if the next significant character closes its container.
  char last = 0;
  size_t comma = std::string_view::npos;
  for (; i < text.size(); ++i) {
    const char c = text[i];
    if (is_space(c)) continue;
    if (c == '/' && i + 1 < text.size() && (text[i + 1] == '/' || text[i + 1] == '*')) {
      size_t end = 0;
      if (text[i + 1] == '/') {
        end = text.find_first_of("\r\n", i + 2);
        if (end == std::string_view::npos) end = text.size();
      } else {
        const size_t close = text.find("*/", i + 2);
        if (close == std::string_view::npos) {
          const LineColumn at = line_column(text, i);
          throw Error(ErrorCode::format,
                      fmt::format("malformed JSON at line {}, column {}: a /* comment is never closed with */",
                                  at.line, at.column),
                      {.file = file, .offset = i});
        }
        end = close + 2;
      }
      b.blank(i, end);
      ++out.forgiven.comments;
      i = end - 1;
      continue;
    }
    if ((c == ']' || c == '}') && comma != std::string_view::npos) {
      b.blank(comma, comma + 1);
      ++out.forgiven.trailing_commas;
    }
    comma = std::string_view::npos;
    // A comma after a value ("1," "\"a\"," "]," "}," "true,") may be a trailing one; after
    // an opening bracket, a colon or another comma it is an error simdjson reports.
    if (c == ',' && last != 0 && last != '[' && last != '{' && last != ',' && last != ':') comma = i;
    last = c;
    if (c == '"') i = closing_quote(text, i + 1);  // the loop's ++i steps past it
  }
  out.text = b.take();
  return out;
}

LineColumn line_column(std::string_view text, size_t offset) noexcept {
  LineColumn out;
  size_t i = text.starts_with(kBom) ? kBom.size() : 0;
  offset = std::min(offset, text.size());
  for (; i < offset; ++i) {
    const auto u = static_cast<unsigned char>(text[i]);
    if (u == '\n') {
      ++out.line;
      out.column = 1;
    } else if ((u & 0xC0) != 0x80) {
      ++out.column;  // continuation bytes belong to the character before them
    }
  }
  return out;
}

std::optional<JsonSyntaxError> find_json_syntax_error(std::string_view text) { return Scanner(text).run(); }

std::string widen_huge_integers(std::string_view text) {
  std::string out;
  size_t copied = 0;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (c == '"') {
      i = closing_quote(text, i + 1);
      continue;
    }
    if (!is_digit(c)) continue;
    size_t j = i;
    while (j < text.size() && is_digit(text[j])) ++j;
    const bool fraction = j < text.size() && (text[j] == '.' || text[j] == 'e' || text[j] == 'E');
    if (j - i > 19 && !fraction) {
      out.append(text.substr(copied, j - copied));
      out += ".0";
      copied = j;
    }
    i = j - 1;
  }
  if (copied == 0) return {};
  out.append(text.substr(copied));
  return out;
}

simdjson::dom::element parse_lenient_json(simdjson::dom::parser& parser, simdjson::padded_string& storage,
                                          std::string_view text, const std::string& file,
                                          std::vector<std::string>* warnings, const LenientJsonOptions& options) {
  BlankedJson blanked = blank_json_extras(text, file);
  const std::string_view clean = blanked.changed() ? std::string_view(blanked.text) : text;
  const std::string widened = options.widen_huge_integers ? widen_huge_integers(clean) : std::string();
  simdjson::dom::element root;
  simdjson::error_code err;
  if (options.padded_input && !blanked.changed() && widened.empty()) {
    // A tokenizer.json is megabytes: no copy of it where the caller's buffer will do.
    err = parser.parse(text.data(), text.size(), /*realloc_if_needed=*/false).get(root);
  } else {
    storage = simdjson::padded_string(widened.empty() ? clean : std::string_view(widened));
    err = parser.parse(storage).get(root);
  }
  if (err != simdjson::SUCCESS) {
    // Positions are found in the blanked text (same offsets as the file), before any
    // widening shifted them.
    if (const auto at = find_json_syntax_error(clean)) {
      const LineColumn lc = line_column(text, at->offset);
      throw Error(ErrorCode::format,
                  fmt::format("malformed JSON at line {}, column {}: {}", lc.line, lc.column, at->what),
                  {.file = file, .offset = at->offset});
    }
    throw Error(ErrorCode::format, std::string("malformed JSON: ") + simdjson::error_message(err), {.file = file});
  }
  if (blanked.changed() && warnings != nullptr) warnings->push_back(file + ": " + blanked.forgiven.describe());
  return root;
}

}  // namespace loom::format
