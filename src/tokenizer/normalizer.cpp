#include "tokenizer/normalizer.hpp"

#include <algorithm>

namespace loom::tok {

std::string replace_literal(std::string_view text, std::string_view pattern, std::string_view with) {
  if (pattern.empty()) return std::string(text);
  std::string out;
  out.reserve(text.size());
  size_t last = 0;
  for (size_t pos = text.find(pattern); pos != std::string_view::npos;
       pos = text.find(pattern, last)) {
    out.append(text.substr(last, pos - last));
    out.append(with);
    last = pos + pattern.size();
  }
  out.append(text.substr(last));
  return out;
}

namespace {

void strip_whitespace(std::string& s, bool left, bool right) {
  size_t begin = s.size();  // start of the first non-whitespace character
  size_t end = 0;           // end of the last non-whitespace character
  for (size_t i = 0; i < s.size();) {
    const Utf8Char c = utf8_next(s, i);
    if (!c.valid || !is_whitespace(c.cp)) {
      if (begin == s.size()) begin = i;
      end = i + c.len;
    }
    i += c.len;
  }
  if (begin == s.size()) {  // all whitespace (or empty)
    if (left || right) s.clear();
    return;
  }
  if (!left) begin = 0;
  if (!right) end = s.size();
  s = s.substr(begin, end - begin);
}

}  // namespace

double Normalizer::growth_bound() const noexcept {
  using K = NormalizerStep::Kind;
  // Compatibility and canonical decompositions expand a character to at most 18 code
  // points (U+FDFA); lowercasing at most triples a character's bytes.
  constexpr double kUnicodeForm = 18.0;
  constexpr double kLowercase = 3.0;
  double bound = 1.0;
  for (const auto& step : steps_) {
    switch (step.kind) {
      case K::prepend:  // adds p bytes to a non-empty text: at most (1 + p) times a 1-byte one
        bound *= 1.0 + static_cast<double>(step.text.size());
        break;
      case K::replace: {
        // A regex may match one byte, or nothing between two bytes; a literal pattern
        // takes its own length of input for each replacement.
        const double taken = step.regex ? 1.0 : static_cast<double>(std::max<size_t>(1, step.text.size()));
        const double added = static_cast<double>(step.content.size()) + (step.regex ? 1.0 : 0.0);
        bound *= std::max(1.0, added / taken);
        break;
      }
      case K::nfc:
      case K::nfd:
      case K::nfkc:
      case K::nfkd: bound *= kUnicodeForm; break;
      case K::lowercase: bound *= kLowercase; break;
      case K::strip:
      case K::strip_accents: break;
    }
  }
  return bound;
}

void Normalizer::apply(std::string& text) const {
  using K = NormalizerStep::Kind;
  for (const auto& step : steps_) {
    switch (step.kind) {
      case K::prepend:
        if (!text.empty()) text.insert(0, step.text);
        break;
      case K::replace:
        text = step.regex ? step.regex->replace_all(text, step.content)
                          : replace_literal(text, step.text, step.content);
        break;
      case K::nfc: text = normalize_unicode(text, NormalForm::nfc); break;
      case K::nfd: text = normalize_unicode(text, NormalForm::nfd); break;
      case K::nfkc: text = normalize_unicode(text, NormalForm::nfkc); break;
      case K::nfkd: text = normalize_unicode(text, NormalForm::nfkd); break;
      case K::lowercase: text = to_lower(text); break;
      case K::strip: strip_whitespace(text, step.left, step.right); break;
      case K::strip_accents: text = strip_accents(text); break;
    }
  }
}

}  // namespace loom::tok
