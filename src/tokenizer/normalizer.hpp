// Internal: the normalizer stage (HF `normalizer`): a flat list of steps applied in order
// to each text segment between added tokens.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "tokenizer/regex.hpp"
#include "tokenizer/unicode.hpp"

namespace loom::tok {

struct NormalizerStep {
  enum class Kind : uint8_t {
    prepend,        // text = prefix + text, when text is not empty
    replace,        // literal pattern, or `regex` when set
    nfc, nfd, nfkc, nfkd,
    lowercase,
    strip,          // Unicode whitespace on the left and/or right
    strip_accents,  // drop combining marks
  };
  Kind kind = Kind::prepend;
  std::string text;     // prepend: prefix; replace: literal pattern
  std::string content;  // replace: replacement
  std::shared_ptr<const Regex> regex;
  bool left = true, right = true;  // strip
};

class Normalizer {
 public:
  void add(NormalizerStep step) { steps_.push_back(std::move(step)); }
  bool empty() const noexcept { return steps_.empty(); }
  void apply(std::string& text) const;
  // An upper bound on how many times longer than its input the output can be (each step's
  // worst case, multiplied). A document can chain Replace steps that each multiply the
  // length (a normalizer bomb: five steps of " " -> 90 spaces turn one space into 6e9
  // bytes); loaders refuse normalizers whose bound is absurd.
  double growth_bound() const noexcept;

 private:
  std::vector<NormalizerStep> steps_;
};

// Literal replace-all (Rust str::replace semantics: left to right, non-overlapping).
std::string replace_literal(std::string_view text, std::string_view pattern, std::string_view with);

}  // namespace loom::tok
