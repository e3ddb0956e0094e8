// Internal: the vocabulary and the two merge models.
//   BpeModel - HF `models/bpe`: ranked merges (byte-level GPT-2/Llama 3/Qwen2 vocabularies,
//              and SentencePiece vocabularies exported as BPE like Llama 2's tokenizer.json);
//              byte_fallback, unk + fuse_unk, ignore_merges, subword prefix/suffix.
//   SpmModel - llama.cpp's llm_tokenizer_spm for GGUF `tokenizer.ggml.model = llama`:
//              merges any adjacent pair whose concatenation is a token, highest score
//              first; leftover pieces fall back to <0xNN> byte tokens.
// Both are immutable after construction and keep their per-call state in a Scratch.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
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
  bool set(std::string_view text, int32_t id);
  std::optional<int32_t> find(std::string_view text) const noexcept {
    if (slots_.empty()) return std::nullopt;
    const size_t h = hash(text);
    const auto tag = static_cast<uint32_t>(h >> 32);
    for (size_t i = h & (slots_.size() - 1);; i = (i + 1) & (slots_.size() - 1)) {
      const Slot& s = slots_[i];
      if (s.entry == 0) return std::nullopt;
      if (s.tag == tag && text_of(entries_[s.entry - 1]) == text) return entries_[s.entry - 1].id;
    }
  }
  size_t size() const noexcept { return entries_.size(); }
  int32_t max_id() const noexcept { return max_id_; }
  // Calls fn(std::string_view text, int32_t id) for every entry, in the order first added.
  template <typename Fn>
  void for_each(Fn&& fn) const {
    for (const Entry& e : entries_) fn(text_of(e), e.id);
  }

 private:
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
