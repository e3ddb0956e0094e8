// Internal: the pre-tokenizer stage (HF `pre_tokenizer`, llama.cpp's regex split lists).
// Each step turns the list of pieces into a finer list; the model then encodes every
// piece on its own.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "tokenizer/regex.hpp"

namespace loom::tok {

struct Piece {
  std::string text;
  // The piece begins at byte 0 of the encoded input (HF: offsets_original().0 == 0);
  // Metaspace's prepend_scheme "first" prepends only there.
  bool at_start = false;
};

enum class SplitBehavior : uint8_t { removed, isolated, merged_with_previous, merged_with_next, contiguous };

using PieceSink = std::function<void(Piece&&)>;

// Splits one piece given the [begin, end) ranges of the pattern's matches, following
// HF's SplitDelimiterBehavior (with `invert`, the gaps are the delimiters); each
// non-empty result goes to `sink`, in order.
void split_piece(Piece&& piece, const std::vector<std::pair<size_t, size_t>>& matches,
                 SplitBehavior behavior, bool invert, const PieceSink& sink);

struct PreTokenizerStep {
  enum class Kind : uint8_t {
    split_regex,       // regex, behavior, invert
    split_literal,     // text, behavior, invert
    byte_level,        // add_prefix_space, use_regex (GPT-2 pattern), then bytes -> chars
    metaspace,         // text = replacement; prepend (always/first/never); split
    digits,            // individual
    punctuation,       // behavior
    whitespace,        // \w+|[^\w\s]+ kept, the rest removed
    whitespace_split,  // split on whitespace, removed
    char_delimiter,    // text = delimiter char, removed
  };
  enum class Prepend : uint8_t { always, first, never };
  Kind kind = Kind::split_regex;
  std::shared_ptr<const Regex> regex;
  std::string text;
  SplitBehavior behavior = SplitBehavior::isolated;
  bool invert = false;
  bool add_prefix_space = false;
  bool use_regex = true;
  Prepend prepend = Prepend::always;
  bool split = true;
  bool individual = false;
};

class PreTokenizer {
 public:
  void add(PreTokenizerStep step) { steps_.push_back(std::move(step)); }
  bool empty() const noexcept { return steps_.empty(); }
  // Hands every non-empty pre-tokenized piece of `piece` to `sink`, in order.
  void for_each(Piece&& piece, const PieceSink& sink) const;
  // Replaces `pieces` by the pre-tokenized pieces (tests; encode streams with for_each).
  void apply(std::vector<Piece>& pieces) const;

 private:
  std::vector<PreTokenizerStep> steps_;
};

// GPT-2's pre-tokenizer pattern (HF ByteLevel with use_regex).
std::shared_ptr<const Regex> gpt2_regex();

}  // namespace loom::tok
