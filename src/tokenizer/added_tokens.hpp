// Internal: finding added/special tokens in text before the normalizer and the model see it.
//
// Two matching orders, because the two reference implementations differ:
//   leftmost_longest - HF tokenizers (an Aho-Corasick LeftmostLongest automaton): scan left
//                      to right; at the first position where a token starts take the longest.
//   longest_first    - llama.cpp (tokenizer_st_partition): for each token, longest first,
//                      split every remaining text fragment at each of its occurrences.
// When `parse_special` is false, special tokens are not matched (HF: encode_special_tokens,
// a special match is found and then left as text; llama.cpp: control tokens skipped);
// non-special added tokens (user-defined) always are.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace loom::tok {

struct AddedToken {
  int32_t id = 0;
  std::string content;
  bool special = false;
  bool lstrip = false;
  bool rstrip = false;
  bool normalized = false;
  bool single_word = false;
};

class AddedTokenMatcher {
 public:
  enum class Order : uint8_t { leftmost_longest, longest_first };

  AddedTokenMatcher() = default;
  // `match_texts[i]` is what tokens[i] is matched as (its content, or its normalized
  // content for normalized tokens). Empty texts are ignored.
  AddedTokenMatcher(std::vector<AddedToken> tokens, std::vector<std::string> match_texts, Order order);

  bool empty() const noexcept { return entries_.empty(); }

  struct Segment {
    size_t begin = 0;
    size_t end = 0;
    int32_t id = -1;  // -1: text
  };
  // Covers `text` with text segments (non-empty) and token segments, in order. Stripped
  // whitespace (lstrip/rstrip) belongs to no segment.
  void split(std::string_view text, bool parse_special, std::vector<Segment>& out) const;

 private:
  struct Entry {
    AddedToken token;
    std::string text;
  };
  struct Node {
    std::vector<std::pair<uint8_t, int32_t>> children;  // sorted by byte
    int32_t entry = -1;
  };
  int32_t child(int32_t node, uint8_t byte) const noexcept;
  void split_leftmost_longest(std::string_view text, bool parse_special, std::vector<Segment>& out) const;
  void split_longest_first(std::string_view text, bool parse_special, std::vector<Segment>& out) const;

  std::vector<Entry> entries_;
  std::vector<Node> nodes_;  // nodes_[0] is the root
  std::array<bool, 256> first_byte_{};
  std::vector<int32_t> priority_;  // entries, longest text first (longest_first order)
  Order order_ = Order::leftmost_longest;
};

}  // namespace loom::tok
