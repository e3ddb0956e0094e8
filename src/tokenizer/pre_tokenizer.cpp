#include "tokenizer/pre_tokenizer.hpp"

#include <algorithm>
#include <tuple>

#include "tokenizer/normalizer.hpp"
#include "tokenizer/unicode.hpp"

namespace loom::tok {

std::shared_ptr<const Regex> gpt2_regex() {
  static const auto re = std::make_shared<const Regex>(
      R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)");
  return re;
}

namespace {

struct Span {
  size_t begin;
  size_t end;
  bool flag;  // is_match before the behavior is applied, "remove" after
};

}  // namespace

void split_piece(Piece&& piece, const std::vector<std::pair<size_t, size_t>>& matches,
                 SplitBehavior behavior, bool invert, std::vector<Piece>& out) {
  const size_t len = piece.text.size();
  if (len == 0) return;  // empty pieces are dropped anyway
  // Cover the whole piece with (range, is_match) parts, gaps included.
  std::vector<Span> parts;
  parts.reserve(matches.size() * 2 + 1);
  size_t prev = 0;
  for (const auto& [b, e] : matches) {
    if (prev != b) parts.push_back({prev, b, false});
    parts.push_back({b, e, true});
    prev = e;
  }
  if (prev != len) parts.push_back({prev, len, false});
  if (invert) {
    for (auto& p : parts) p.flag = !p.flag;
  }

  std::vector<Span> splits;
  splits.reserve(parts.size());
  switch (behavior) {
    case SplitBehavior::removed:
      splits = parts;
      break;
    case SplitBehavior::isolated:
      for (const auto& p : parts) splits.push_back({p.begin, p.end, false});
      break;
    case SplitBehavior::contiguous: {
      bool previous_match = false;
      for (const auto& p : parts) {
        if (p.flag == previous_match && !splits.empty()) {
          splits.back().end = p.end;
        } else {
          splits.push_back({p.begin, p.end, false});
        }
        previous_match = p.flag;
      }
      break;
    }
    case SplitBehavior::merged_with_previous: {
      bool previous_match = false;
      for (const auto& p : parts) {
        if (p.flag && !previous_match && !splits.empty()) {
          splits.back().end = p.end;
        } else {
          splits.push_back({p.begin, p.end, false});
        }
        previous_match = p.flag;
      }
      break;
    }
    case SplitBehavior::merged_with_next: {
      bool previous_match = false;
      for (auto it = parts.rbegin(); it != parts.rend(); ++it) {
        if (it->flag && !previous_match && !splits.empty()) {
          splits.back().begin = it->begin;
        } else {
          splits.push_back({it->begin, it->end, false});
        }
        previous_match = it->flag;
      }
      std::reverse(splits.begin(), splits.end());
      break;
    }
  }

  if (splits.size() == 1 && !splits[0].flag && splits[0].begin == 0 && splits[0].end == len) {
    out.push_back(std::move(piece));  // unchanged: no copy
    return;
  }
  for (const auto& s : splits) {
    if (s.flag || s.end <= s.begin) continue;
    out.push_back({piece.text.substr(s.begin, s.end - s.begin), piece.at_start && s.begin == 0});
  }
}

namespace {

using Matches = std::vector<std::pair<size_t, size_t>>;

// Every character satisfying `pred` is its own match (HF's char-predicate pattern).
template <typename Pred>
void char_matches(std::string_view text, Pred&& pred, Matches& out) {
  for (size_t i = 0; i < text.size();) {
    const Utf8Char c = utf8_next(text, i);
    if (c.valid && pred(c.cp)) out.emplace_back(i, i + c.len);
    i += c.len;
  }
}

void literal_matches(std::string_view text, std::string_view pattern, Matches& out) {
  if (pattern.empty()) return;
  for (size_t pos = text.find(pattern); pos != std::string_view::npos;
       pos = text.find(pattern, pos + pattern.size())) {
    out.emplace_back(pos, pos + pattern.size());
  }
}

const Regex& whitespace_regex() {
  static const Regex re(R"(\w+|[^\w\s]+)");
  return re;
}

template <typename FindFn>
void split_all(std::vector<Piece>& pieces, SplitBehavior behavior, bool invert, FindFn&& find) {
  std::vector<Piece> next;
  next.reserve(pieces.size() * 2);
  Matches matches;
  for (auto& p : pieces) {
    matches.clear();
    find(std::string_view(p.text), matches);
    split_piece(std::move(p), matches, behavior, invert, next);
  }
  pieces.swap(next);
}

void apply_step(const PreTokenizerStep& step, std::vector<Piece>& pieces) {
  using K = PreTokenizerStep::Kind;
  switch (step.kind) {
    case K::split_regex:
      split_all(pieces, step.behavior, step.invert,
                [&](std::string_view t, Matches& m) { step.regex->find_all(t, m); });
      break;
    case K::split_literal:
      split_all(pieces, step.behavior, step.invert,
                [&](std::string_view t, Matches& m) { literal_matches(t, step.text, m); });
      break;
    case K::byte_level: {
      if (step.add_prefix_space) {
        for (auto& p : pieces) {
          if (!p.text.empty() && p.text[0] != ' ') p.text.insert(0, 1, ' ');
        }
      }
      if (step.use_regex) {
        const auto re = gpt2_regex();
        split_all(pieces, SplitBehavior::isolated, false,
                  [&](std::string_view t, Matches& m) { re->find_all(t, m); });
      }
      for (auto& p : pieces) {
        std::string mapped;
        byte_level_encode(p.text, mapped);
        p.text.swap(mapped);
      }
      break;
    }
    case K::metaspace: {
      for (auto& p : pieces) {
        if (p.text.find(' ') != std::string::npos) p.text = replace_literal(p.text, " ", step.text);
        const bool starts = p.text.compare(0, step.text.size(), step.text) == 0;
        const bool prepend = step.prepend == PreTokenizerStep::Prepend::always ||
                             (step.prepend == PreTokenizerStep::Prepend::first && p.at_start);
        if (prepend && !starts && !p.text.empty()) p.text.insert(0, step.text);
      }
      if (step.split) {
        split_all(pieces, SplitBehavior::merged_with_next, false,
                  [&](std::string_view t, Matches& m) { literal_matches(t, step.text, m); });
      }
      break;
    }
    case K::digits:
      split_all(pieces, step.individual ? SplitBehavior::isolated : SplitBehavior::contiguous, false,
                [](std::string_view t, Matches& m) { char_matches(t, is_numeric, m); });
      break;
    case K::punctuation:
      split_all(pieces, step.behavior, false, [](std::string_view t, Matches& m) {
        char_matches(t, [](uint32_t cp) { return is_ascii_punctuation(cp) || is_punctuation(cp); }, m);
      });
      break;
    case K::whitespace:
      split_all(pieces, SplitBehavior::removed, true,
                [](std::string_view t, Matches& m) { whitespace_regex().find_all(t, m); });
      break;
    case K::whitespace_split:
      split_all(pieces, SplitBehavior::removed, false,
                [](std::string_view t, Matches& m) { char_matches(t, is_whitespace, m); });
      break;
    case K::char_delimiter:
      split_all(pieces, SplitBehavior::removed, false,
                [&](std::string_view t, Matches& m) { literal_matches(t, step.text, m); });
      break;
  }
}

}  // namespace

void PreTokenizer::apply(std::vector<Piece>& pieces) const {
  for (const auto& step : steps_) apply_step(step, pieces);
  std::erase_if(pieces, [](const Piece& p) { return p.text.empty(); });
}

}  // namespace loom::tok
