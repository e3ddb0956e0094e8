// Internal: the vocabulary and the two merge models.
//   BpeModel - HF `models/bpe`: ranked merges (byte-level GPT-2/Llama 3/Qwen2 vocabularies,
//              and SentencePiece vocabularies exported as BPE like Llama 2's tokenizer.json);
//              byte_fallback, unk + fuse_unk, ignore_merges, subword prefix/suffix.
//   SpmModel - llama.cpp's llm_tokenizer_spm for GGUF `tokenizer.ggml.model = llama`:
//              merges any adjacent pair whose concatenation is a token, highest score
//              first; leftover pieces fall back to <0xNN> byte tokens.
// Both are immutable after construction and keep their per-call state in a Scratch.
#pragma once

#include <algorithm>
#include <array>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <tuple>
#include <unordered_map>
#include <utility>
#include <vector>

namespace loom::tok {

struct StringHash {
  using is_transparent = void;
  size_t operator()(std::string_view s) const noexcept { return std::hash<std::string_view>{}(s); }
};
using StringIdMap = std::unordered_map<std::string, int32_t, StringHash, std::equal_to<>>;

// A vocabulary string <-> id table (model tokens only; added tokens live elsewhere).
// Open addressing over one buffer of texts: a 128K-token vocabulary is three allocations
// instead of one node (and often one string) per token, which is what loading a GGUF's
// vocabulary and its merges spent most of its time on.
class Vocab {
 public:
  void reserve(size_t n);
  // Adds or replaces an entry; `id` may leave gaps. True when `text` was new.
  bool set(std::string_view text, int32_t id) { return set(text, hash(text), id); }
  // set(texts[i], ids[i]) for each i in order, kFindBatch at a time with each batch's
  // slots requested before any is probed (as find_batch: a 128K-token vocabulary's slots
  // are 2 MiB, each insert's first probe a cache miss). Returns the index of the first
  // text that was already there (its id replaced, as set() does), or texts.size().
  size_t set_batch(std::span<const std::string_view> texts, std::span<const int32_t> ids);
  // set_batch over entries 0..n-1, entry(i) -> std::pair<std::string_view, int32_t> called
  // once for each i in order (so it may walk a list); its text must stay valid until the
  // entries of i's batch (kFindBatch of them) are inserted. Returns the index of the first
  // text that was already there, or n.
  template <class Entry>
  size_t set_each(size_t n, Entry&& entry) {
    std::array<std::string_view, kFindBatch> texts;
    std::array<int32_t, kFindBatch> ids;
    size_t first_present = n;
    for (size_t first = 0; first < n; first += kFindBatch) {
      const size_t count = std::min(kFindBatch, n - first);
      for (size_t k = 0; k < count; ++k) std::tie(texts[k], ids[k]) = entry(first + k);
      const size_t present = set_batch(std::span(texts).first(count), std::span(ids).first(count));
      if (present < count && first_present == n) first_present = first + present;
    }
    return first_present;
  }
  std::optional<int32_t> find(std::string_view text) const noexcept { return find(text, hash(text)); }
  // ids[i] = texts[i]'s id, or -1 where it is not in the vocabulary (ids holds at least
  // texts.size()). kFindBatch texts at a time, each stage's reads (slots, then entries,
  // then texts) requested for all of them before the next stage reads any: a lookup in a
  // large vocabulary is three dependent cache misses, which find() takes one after another.
  static constexpr size_t kFindBatch = 96;
  void find_batch(std::span<const std::string_view> texts, std::span<int32_t> ids) const noexcept;
  size_t size() const noexcept { return entries_.size(); }
  int32_t max_id() const noexcept { return max_id_; }
  // Calls fn(std::string_view text, int32_t id) for every entry, in the order first added.
  template <typename Fn>
  void for_each(Fn&& fn) const {
    for (const Entry& e : entries_) fn(text_of(e), e.id);
  }

 private:
  bool set(std::string_view text, size_t h, int32_t id);
  std::optional<int32_t> find(std::string_view text, size_t h) const noexcept {
    if (slots_.empty()) return std::nullopt;
    const auto tag = static_cast<uint32_t>(h >> 32);
    for (size_t i = h & (slots_.size() - 1);; i = (i + 1) & (slots_.size() - 1)) {
      const Slot& s = slots_[i];
      if (s.entry == 0) return std::nullopt;
      if (s.tag == tag && text_of(entries_[s.entry - 1]) == text) return entries_[s.entry - 1].id;
    }
  }
  struct Entry {
    uint32_t offset;  // into chars_
    uint32_t length;
    int32_t id;
  };
  struct Slot {
    uint32_t tag;    // the hash's high half, to skip most unequal texts without reading them
    uint32_t entry;  // index into entries_ + 1; 0 marks an empty slot
  };
  static size_t hash(std::string_view s) noexcept { return std::hash<std::string_view>{}(s); }
  std::string_view text_of(const Entry& e) const noexcept { return {chars_.data() + e.offset, e.length}; }
  void rehash(size_t slot_count);

  std::string chars_;  // every entry's text, back to back
  std::vector<Entry> entries_;
  std::vector<Slot> slots_;  // a power of two, at most half full
  int32_t max_id_ = -1;
};

// Open-addressing map from a token-id pair to (rank, merged id), at most three quarters
// full (a vocabulary's merges are its largest table: Llama 3 has 280K).
class MergeTable {
 public:
  struct Merge {
    int32_t rank;
    int32_t id;
  };
  void reserve(size_t n);
  // Keeps the first (lowest-rank) entry for a pair, as HF does for duplicate merges.
  void insert(int32_t left, int32_t right, int32_t rank, int32_t id);
  // Asks the cache for the slot where insert(left, right, ...) starts looking.
  void prefetch(int32_t left, int32_t right) const noexcept;
  const Merge* find(int32_t left, int32_t right) const noexcept;
  size_t size() const noexcept { return count_; }

 private:
  static uint64_t key(int32_t l, int32_t r) noexcept {
    return (static_cast<uint64_t>(static_cast<uint32_t>(l)) << 32) | static_cast<uint32_t>(r);
  }
  void grow();
  struct Slot {
    uint64_t key = ~0ull;  // empty
    Merge merge{};
  };
  std::vector<Slot> slots_;
  size_t count_ = 0;
};

// A merge written as one string, "left right" (GGUF's tokenizer.ggml.merges, older
// tokenizer.json files): split at the first space after the first byte (a left part may
// itself be a space), or nullopt when there is none.
inline std::optional<std::pair<std::string_view, std::string_view>> split_merge(std::string_view merge) {
  const size_t space = merge.find(' ', 1);
  if (space == std::string_view::npos) return std::nullopt;
  return std::pair{merge.substr(0, space), merge.substr(space + 1)};
}

// Merges 0..n-1 (rank = index) as a table of ids, merge i's two texts given by
// texts(i) -> std::pair<std::string_view, std::string_view>, called once for each i in
// order (so it may walk a list); the views must stay valid until the merges of i's batch
// (Vocab::kFindBatch / 3 of them) are inserted. A merge whose left, right or joined text
// is not in `vocab` goes to missing(i, left, right): throw there to refuse the
// vocabulary, return to leave the merge out (it could never fire on token symbols). The
// lookups and inserts go a batch of merges at a time (Vocab::find_batch,
// MergeTable::prefetch): a vocabulary's merges are most of its load (Llama 3: 280K
// merges, 840K lookups).
template <class Texts, class Missing>
MergeTable build_merge_table(const Vocab& vocab, size_t n, Texts&& texts, Missing&& missing) {
  constexpr size_t kBatch = Vocab::kFindBatch / 3;
  MergeTable table;
  table.reserve(n);
  std::string joined;  // the batch's joined texts, back to back
  std::array<std::string_view, 3 * kBatch> views;
  std::array<int32_t, 3 * kBatch> ids;
  std::array<size_t, kBatch> joined_end;
  for (size_t first = 0; first < n; first += kBatch) {
    const size_t count = std::min(kBatch, n - first);
    joined.clear();
    for (size_t k = 0; k < count; ++k) {
      const auto [left, right] = texts(first + k);
      views[3 * k] = left;
      views[3 * k + 1] = right;
      joined.append(left).append(right);
      joined_end[k] = joined.size();
    }
    for (size_t k = 0, begin = 0; k < count; begin = joined_end[k++]) {  // after the appends: no reallocation
      views[3 * k + 2] = std::string_view(joined).substr(begin, joined_end[k] - begin);
    }
    vocab.find_batch(std::span(views).first(3 * count), std::span(ids).first(3 * count));
    for (size_t k = 0; k < count; ++k) {
      if (ids[3 * k] >= 0 && ids[3 * k + 1] >= 0 && ids[3 * k + 2] >= 0) {
        table.prefetch(ids[3 * k], ids[3 * k + 1]);
      }
    }
    for (size_t k = 0; k < count; ++k) {
      if (ids[3 * k] < 0 || ids[3 * k + 1] < 0 || ids[3 * k + 2] < 0) {
        missing(first + k, views[3 * k], views[3 * k + 1]);
        continue;
      }
      table.insert(ids[3 * k], ids[3 * k + 1], static_cast<int32_t>(first + k), ids[3 * k + 2]);
    }
  }
  return table;
}

struct ModelScratch {
  struct Symbol {
    int32_t id;
    int32_t prev;
    int32_t next;
    uint32_t begin;  // byte range in the word
    uint32_t len;    // 0 once merged into its left neighbour
  };
  struct Candidate {
    float score;  // SpmModel: higher first; BpeModel: -rank
    int32_t pos;
    int32_t id;   // BpeModel: merged id; SpmModel: token id of the pair
    uint32_t size;
  };
  std::vector<Symbol> symbols;
  std::vector<Candidate> heap;
};

class BpeModel {
 public:
  struct Options {
    std::optional<int32_t> unk_id;
    bool fuse_unk = false;
    bool byte_fallback = false;
    bool ignore_merges = false;
    std::string continuing_subword_prefix;
    std::string end_of_word_suffix;
  };
  BpeModel(const Vocab& vocab, MergeTable merges, Options options);

  void encode(std::string_view word, std::vector<int32_t>& out, ModelScratch& scratch) const;
  const MergeTable& merges() const noexcept { return merges_; }
  // Subword prefix/suffix depend on where a word starts and ends.
  bool has_affixes() const noexcept {
    return !options_.continuing_subword_prefix.empty() || !options_.end_of_word_suffix.empty();
  }

 private:
  int32_t char_id(std::string_view word, size_t begin, size_t len, bool first, bool last) const;

  const Vocab& vocab_;
  MergeTable merges_;
  Options options_;
  std::vector<int32_t> bmp_ids_;  // single-character tokens below U+10000 (-1: none)
  std::array<int32_t, 256> byte_ids_{};  // <0xNN> tokens (-1: none)
  bool all_bytes_ = false;
};

class SpmModel {
 public:
  SpmModel(const Vocab& vocab, std::vector<float> scores, std::optional<int32_t> unk_id);
  void encode(std::string_view text, std::vector<int32_t>& out, ModelScratch& scratch) const;

 private:
  void emit(std::string_view text, const ModelScratch::Symbol& sym, std::vector<int32_t>& out) const;

  const Vocab& vocab_;
  std::vector<float> scores_;
  std::optional<int32_t> unk_id_;
  std::array<int32_t, 256> byte_ids_{};
};

}  // namespace loom::tok
