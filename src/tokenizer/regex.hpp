// Internal: a compiled PCRE2 pattern (UTF + Unicode properties, JIT when available) for
// the Split pre-tokenizer, Replace normalizer/decoder and the GGUF pre-tokenizer tables.
// Invalid UTF-8 in a subject never fails a match: invalid bytes simply match nothing
// (PCRE2_MATCH_INVALID_UTF). Immutable after construction; safe to share across threads.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace loom::tok {

class Regex {
 public:
  // Throws loom::Error(format) with PCRE2's message and the pattern offset.
  explicit Regex(std::string_view pattern);
  ~Regex();
  Regex(const Regex&) = delete;
  Regex& operator=(const Regex&) = delete;

  const std::string& pattern() const noexcept { return pattern_; }

  // Appends the [begin, end) byte ranges of the successive leftmost matches in `text`.
  // After an empty match the search resumes one character further on (empty matches are
  // reported: a split on them still cuts the text).
  void find_all(std::string_view text, std::vector<std::pair<size_t, size_t>>& out) const;
  // Every match replaced by `with` (literal text).
  std::string replace_all(std::string_view text, std::string_view with) const;

 private:
  std::string pattern_;
  void* code_ = nullptr;  // pcre2_code_8*
};

}  // namespace loom::tok
