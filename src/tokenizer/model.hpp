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
class Vocab {
 public:
  // Adds or replaces an entry; `id` may leave gaps.
  void set(std::string text, int32_t id);
  std::optional<int32_t> find(std::string_view text) const noexcept {
    const auto it = ids_.find(text);
    if (it == ids_.end()) return std::nullopt;
    return it->second;
  }
  size_t size() const noexcept { return ids_.size(); }
  int32_t max_id() const noexcept { return max_id_; }
  const StringIdMap& entries() const noexcept { return ids_; }

 private:
  StringIdMap ids_;
  int32_t max_id_ = -1;
};

// Open-addressing map from a token-id pair to (rank, merged id).
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
