#include "tokenizer/added_tokens.hpp"

#include <algorithm>
#include <numeric>

#include "tokenizer/unicode.hpp"

namespace loom::tok {

AddedTokenMatcher::AddedTokenMatcher(std::vector<AddedToken> tokens,
                                     std::vector<std::string> match_texts, Order order)
    : order_(order) {
  nodes_.emplace_back();
  for (size_t i = 0; i < tokens.size(); ++i) {
    if (match_texts[i].empty()) continue;
    const auto index = static_cast<int32_t>(entries_.size());
    entries_.push_back({std::move(tokens[i]), std::move(match_texts[i])});
    const std::string& text = entries_.back().text;
    int32_t node = 0;
    for (char ch : text) {
      const auto byte = static_cast<uint8_t>(ch);
      int32_t next = child(node, byte);
      if (next < 0) {
        next = static_cast<int32_t>(nodes_.size());
        nodes_.emplace_back();
        auto& kids = nodes_[static_cast<size_t>(node)].children;
        kids.insert(std::lower_bound(kids.begin(), kids.end(), std::make_pair(byte, int32_t{-1})),
                    {byte, next});
      }
      node = next;
    }
    // Two tokens with the same text: the first one wins (both orders would pick it).
    if (nodes_[static_cast<size_t>(node)].entry < 0) nodes_[static_cast<size_t>(node)].entry = index;
    first_byte_[static_cast<uint8_t>(text[0])] = true;
  }
  priority_.resize(entries_.size());
  std::iota(priority_.begin(), priority_.end(), 0);
  std::stable_sort(priority_.begin(), priority_.end(), [&](int32_t a, int32_t b) {
    const auto& ea = entries_[static_cast<size_t>(a)];
    const auto& eb = entries_[static_cast<size_t>(b)];
    if (ea.text.size() != eb.text.size()) return ea.text.size() > eb.text.size();
    return ea.token.id < eb.token.id;
  });
}

int32_t AddedTokenMatcher::child(int32_t node, uint8_t byte) const noexcept {
  const auto& kids = nodes_[static_cast<size_t>(node)].children;
  const auto it = std::lower_bound(kids.begin(), kids.end(), std::make_pair(byte, int32_t{-1}));
  return (it != kids.end() && it->first == byte) ? it->second : -1;
}

void AddedTokenMatcher::split(std::string_view text, bool parse_special, std::vector<Segment>& out) const {
  if (text.empty()) return;
  if (entries_.empty()) {
    out.push_back({0, text.size(), -1});
    return;
  }
  if (order_ == Order::leftmost_longest) {
    split_leftmost_longest(text, parse_special, out);
  } else {
    split_longest_first(text, parse_special, out);
  }
}

namespace {

// Start of the run of Unicode whitespace that ends `s`.
size_t whitespace_run_start(std::string_view s) {
  size_t run = s.size();
  for (size_t i = 0; i < s.size();) {
    const Utf8Char c = utf8_next(s, i);
    if (c.valid && is_whitespace(c.cp)) {
      if (run == s.size()) run = i;
    } else {
      run = s.size();
    }
    i += c.len;
  }
  return run;
}

size_t whitespace_run_length(std::string_view s) {
  size_t i = 0;
  while (i < s.size()) {
    const Utf8Char c = utf8_next(s, i);
    if (!c.valid || !is_whitespace(c.cp)) break;
    i += c.len;
  }
  return i;
}

bool is_word_char(uint32_t cp) { return cp == '_' || is_alphanumeric(cp) || is_combining_mark(cp); }

bool ends_with_word(std::string_view s) {
  if (s.empty()) return false;
  size_t start = s.size() - 1;
  while (start > 0 && s.size() - start < 4 && (static_cast<uint8_t>(s[start]) & 0xC0) == 0x80) --start;
  const Utf8Char c = utf8_next(s, start);
  return c.valid && start + c.len == s.size() && is_word_char(c.cp);
}

bool starts_with_word(std::string_view s) {
  if (s.empty()) return false;
  const Utf8Char c = utf8_next(s, 0);
  return c.valid && is_word_char(c.cp);
}

bool is_c_space(char c) { return c == ' ' || (c >= '\t' && c <= '\r'); }

}  // namespace

void AddedTokenMatcher::split_leftmost_longest(std::string_view text, bool parse_special,
                                               std::vector<Segment>& out) const {
  size_t emitted = 0;  // end of the last segment (or stripped run)
  size_t i = 0;
  while (i < text.size()) {
    if (!first_byte_[static_cast<uint8_t>(text[i])]) {
      ++i;
      continue;
    }
    int32_t best = -1;
    size_t best_end = 0;
    int32_t node = 0;
    for (size_t j = i; j < text.size(); ++j) {
      node = child(node, static_cast<uint8_t>(text[j]));
      if (node < 0) break;
      if (nodes_[static_cast<size_t>(node)].entry >= 0) {
        best = nodes_[static_cast<size_t>(node)].entry;
        best_end = j + 1;
      }
    }
    if (best < 0) {
      ++i;
      continue;
    }
    const AddedToken& tok = entries_[static_cast<size_t>(best)].token;
    size_t start = i;
    size_t stop = best_end;
    // A discarded match still consumes its text: nothing else may match inside it.
    const bool skip_special = tok.special && !parse_special;
    const bool not_single_word =
        tok.single_word && ((start > 0 && ends_with_word(text.substr(0, start))) ||
                            (stop < text.size() && starts_with_word(text.substr(stop))));
    if (skip_special || not_single_word) {
      i = stop;
      continue;
    }
    if (tok.lstrip) start = std::max(whitespace_run_start(text.substr(0, start)), emitted);
    if (tok.rstrip) stop += whitespace_run_length(text.substr(stop));
    if (emitted < start) out.push_back({emitted, start, -1});
    out.push_back({start, stop, tok.id});
    emitted = stop;
    i = stop;
  }
  if (emitted < text.size()) out.push_back({emitted, text.size(), -1});
}

void AddedTokenMatcher::split_longest_first(std::string_view text, bool parse_special,
                                            std::vector<Segment>& out) const {
  // Which tokens occur at all: one trie walk per position, instead of one search per token.
  std::vector<bool> present(entries_.size(), false);
  for (size_t i = 0; i < text.size(); ++i) {
    if (!first_byte_[static_cast<uint8_t>(text[i])]) continue;
    int32_t node = 0;
    for (size_t j = i; j < text.size(); ++j) {
      node = child(node, static_cast<uint8_t>(text[j]));
      if (node < 0) break;
      if (nodes_[static_cast<size_t>(node)].entry >= 0) present[static_cast<size_t>(nodes_[static_cast<size_t>(node)].entry)] = true;
    }
  }
  std::vector<Segment> frags{{0, text.size(), -1}};
  std::vector<Segment> next;
  for (const int32_t e : priority_) {
    if (!present[static_cast<size_t>(e)]) continue;
    const Entry& entry = entries_[static_cast<size_t>(e)];
    if (entry.token.special && !parse_special) continue;
    next.clear();
    for (const Segment& f : frags) {
      if (f.id >= 0) {
        next.push_back(f);
        continue;
      }
      size_t begin = f.begin;
      size_t end = f.end;
      while (begin < end) {
        const size_t match = text.substr(0, end).find(entry.text, begin);
        if (match == std::string_view::npos) break;
        size_t left_end = match;
        if (entry.token.lstrip) {
          while (left_end > begin && is_c_space(text[left_end - 1])) --left_end;
        }
        if (left_end > begin) next.push_back({begin, left_end, -1});
        next.push_back({match, match + entry.text.size(), entry.token.id});
        begin = match + entry.text.size();
        if (entry.token.rstrip) {
          while (begin < end && is_c_space(text[begin])) ++begin;
        }
      }
      if (begin < end) next.push_back({begin, end, -1});
    }
    frags.swap(next);
  }
  out.insert(out.end(), frags.begin(), frags.end());
}

}  // namespace loom::tok
