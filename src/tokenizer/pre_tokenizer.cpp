#include "tokenizer/pre_tokenizer.hpp"

#include <algorithm>
#include <functional>

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
                 SplitBehavior behavior, bool invert, const PieceSink& sink) {
  const size_t len = piece.text.size();
  if (len == 0) return;  // empty pieces are dropped anyway
  if (matches.empty() && behavior != SplitBehavior::removed) {
    sink(std::move(piece));  // nothing to cut
    return;
  }
  auto emit = [&](size_t b, size_t e) {
    if (e > b) sink(Piece{piece.text.substr(b, e - b), piece.at_start && b == 0});
  };
  if (behavior == SplitBehavior::isolated) {  // the common case, without building lists
    size_t prev = 0;
    for (const auto& [b, e] : matches) {
      emit(prev, b);
      emit(b, e);
      prev = e;
    }
    emit(prev, len);
    return;
  }
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
  for (const auto& sp : splits) {
    if (!sp.flag) emit(sp.begin, sp.end);
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

void byte_level_map(Piece&& p, const PieceSink& sink) {
  std::string mapped;
  byte_level_encode(p.text, mapped);
  sink(Piece{std::move(mapped), p.at_start});
}

// Applies one step to one piece, handing each resulting piece to `sink`. `m` is this
// step's scratch list of matches (one per depth: the sink may recurse into later steps).
void apply_step(const PreTokenizerStep& step, Piece&& piece, Matches& m, const PieceSink& sink) {
  using K = PreTokenizerStep::Kind;
  m.clear();
  const std::string_view t = piece.text;
  switch (step.kind) {
    case K::split_regex:
      step.regex->find_all(t, m);
      split_piece(std::move(piece), m, step.behavior, step.invert, sink);
      break;
    case K::split_literal:
      literal_matches(t, step.text, m);
      split_piece(std::move(piece), m, step.behavior, step.invert, sink);
      break;
    case K::byte_level: {
      if (step.add_prefix_space && !piece.text.empty() && piece.text[0] != ' ') piece.text.insert(0, 1, ' ');
      if (!step.use_regex) {
        byte_level_map(std::move(piece), sink);
        break;
      }
      gpt2_regex()->find_all(piece.text, m);
      split_piece(std::move(piece), m, SplitBehavior::isolated, false,
                  [&](Piece&& sub) { byte_level_map(std::move(sub), sink); });
      break;
    }
    case K::metaspace: {
      if (piece.text.find(' ') != std::string::npos) piece.text = replace_literal(piece.text, " ", step.text);
      const bool starts = piece.text.compare(0, step.text.size(), step.text) == 0;
      const bool prepend = step.prepend == PreTokenizerStep::Prepend::always ||
                           (step.prepend == PreTokenizerStep::Prepend::first && piece.at_start);
      if (prepend && !starts && !piece.text.empty()) piece.text.insert(0, step.text);
      if (!step.split) {
        if (!piece.text.empty()) sink(std::move(piece));
        break;
      }
      literal_matches(piece.text, step.text, m);
      split_piece(std::move(piece), m, SplitBehavior::merged_with_next, false, sink);
      break;
    }
    case K::digits:
      char_matches(t, is_numeric, m);
      split_piece(std::move(piece), m, step.individual ? SplitBehavior::isolated : SplitBehavior::contiguous,
                  false, sink);
      break;
    case K::punctuation:
      char_matches(t, is_hf_punctuation, m);
      split_piece(std::move(piece), m, step.behavior, false, sink);
      break;
    case K::whitespace:
      whitespace_regex().find_all(t, m);
      split_piece(std::move(piece), m, SplitBehavior::removed, true, sink);
      break;
    case K::whitespace_split:
      char_matches(t, is_whitespace, m);
      split_piece(std::move(piece), m, SplitBehavior::removed, false, sink);
      break;
    case K::char_delimiter:
      literal_matches(t, step.text, m);
      split_piece(std::move(piece), m, SplitBehavior::removed, false, sink);
      break;
  }
}

}  // namespace

void PreTokenizer::for_each(Piece&& piece, const PieceSink& sink) const {
  std::vector<Matches> scratch(steps_.size());
  // Depth-first: each piece runs through the remaining steps before the next one is cut,
  // so a long text never becomes one huge list of pieces.
  std::function<void(Piece&&, size_t)> run = [&](Piece&& p, size_t k) {
    if (p.text.empty()) return;
    if (k == steps_.size()) {
      sink(std::move(p));
      return;
    }
    apply_step(steps_[k], std::move(p), scratch[k], [&](Piece&& q) { run(std::move(q), k + 1); });
  };
  run(std::move(piece), 0);
}

void PreTokenizer::apply(std::vector<Piece>& pieces) const {
  std::vector<Piece> out;
  for (auto& p : pieces) for_each(std::move(p), [&](Piece&& q) { out.push_back(std::move(q)); });
  pieces.swap(out);
}

}  // namespace loom::tok
