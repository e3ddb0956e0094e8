#include "tokenizer/model.hpp"

#include <algorithm>
#include <cstdio>

#include "common/huge_pages.hpp"
#include "loom/error.hpp"

#include "tokenizer/unicode.hpp"

namespace loom::tok {

namespace {
// The slots of an open-addressing table: the smallest power of two, at least 16, that
// holds `n` entries at most `full_num / full_den` full.
size_t slots_for(size_t n, size_t full_num, size_t full_den) {
  size_t cap = 16;
  while (cap * full_num < n * full_den) cap *= 2;
  return cap;
}
}  // namespace

void Vocab::reserve(size_t n) {
  entries_.reserve(n);
  const size_t cap = slots_for(n, 1, 2);
  if (cap > slots_.size()) rehash(cap);
}

void Vocab::rehash(size_t slot_count) {
  std::vector<Slot>().swap(slots_);  // the old slots go first: rehash reads entries_ only
  slots_.reserve(slot_count);
  advise_huge_pages(slots_.data(), slot_count * sizeof(Slot));
  slots_.assign(slot_count, Slot{0, 0});
  for (size_t k = 0; k < entries_.size(); ++k) {
    const size_t h = hash(text_of(entries_[k]));
    size_t i = h & (slot_count - 1);
    while (slots_[i].entry != 0) i = (i + 1) & (slot_count - 1);
    slots_[i] = Slot{static_cast<uint32_t>(h >> 32), static_cast<uint32_t>(k + 1)};
  }
}

bool Vocab::set(std::string_view text, size_t h, int32_t id) {
  max_id_ = std::max(max_id_, id);
  if ((entries_.size() + 1) * 2 > slots_.size()) rehash(slots_for(entries_.size() + 1, 1, 2));
  const auto tag = static_cast<uint32_t>(h >> 32);
  size_t i = h & (slots_.size() - 1);
  for (; slots_[i].entry != 0; i = (i + 1) & (slots_.size() - 1)) {
    Entry& e = entries_[slots_[i].entry - 1];
    if (slots_[i].tag == tag && text_of(e) == text) {
      e.id = id;
      return false;
    }
  }
  if (chars_.size() + text.size() > UINT32_MAX || entries_.size() >= UINT32_MAX - 1) {
    throw Error(ErrorCode::unsupported, "a vocabulary of more than 4 GiB of text or 2^32 entries");
  }
  entries_.push_back(Entry{static_cast<uint32_t>(chars_.size()), static_cast<uint32_t>(text.size()), id});
  chars_.append(text);
  slots_[i] = Slot{tag, static_cast<uint32_t>(entries_.size())};
  return true;
}

size_t Vocab::set_batch(std::span<const std::string_view> texts, std::span<const int32_t> ids) {
  size_t first_present = texts.size();
  std::array<size_t, kFindBatch> h;
  for (size_t first = 0; first < texts.size(); first += kFindBatch) {
    const size_t n = std::min(kFindBatch, texts.size() - first);
    // The table grows (if it must) before the batch, so the slots requested are the ones
    // probed.
    if ((entries_.size() + n) * 2 > slots_.size()) rehash(slots_for(entries_.size() + n, 1, 2));
    const size_t mask = slots_.size() - 1;
    for (size_t i = 0; i < n; ++i) {
      h[i] = hash(texts[first + i]);
      __builtin_prefetch(&slots_[h[i] & mask]);
    }
    for (size_t i = 0; i < n; ++i) {
      if (!set(texts[first + i], h[i], ids[first + i]) && first_present == texts.size()) first_present = first + i;
    }
  }
  return first_present;
}

void Vocab::find_batch(std::span<const std::string_view> texts, std::span<int32_t> ids) const noexcept {
  if (texts.size() > kFindBatch) {
    for (size_t first = 0; first < texts.size(); first += kFindBatch) {
      const size_t count = std::min(kFindBatch, texts.size() - first);
      find_batch(texts.subspan(first, count), ids.subspan(first, count));
    }
    return;
  }
  const size_t n = texts.size();
  if (slots_.empty()) {
    std::fill_n(ids.begin(), n, -1);
    return;
  }
  const size_t mask = slots_.size() - 1;
  std::array<size_t, kFindBatch> h;
  for (size_t i = 0; i < n; ++i) {
    h[i] = hash(texts[i]);
    __builtin_prefetch(&slots_[h[i] & mask]);
  }
  // The first slot of each: most texts are found there (the table is at most half full).
  auto first_match = [&](size_t i) -> const Slot* {
    const Slot& s = slots_[h[i] & mask];
    return s.entry != 0 && s.tag == static_cast<uint32_t>(h[i] >> 32) ? &s : nullptr;
  };
  for (size_t i = 0; i < n; ++i) {
    if (const Slot* s = first_match(i)) __builtin_prefetch(&entries_[s->entry - 1]);
  }
  for (size_t i = 0; i < n; ++i) {
    if (const Slot* s = first_match(i)) __builtin_prefetch(chars_.data() + entries_[s->entry - 1].offset);
  }
  for (size_t i = 0; i < n; ++i) ids[i] = find(texts[i], h[i]).value_or(-1);
}

// ---- MergeTable ----

void MergeTable::reserve(size_t n) {
  const size_t cap = slots_for(n, 3, 4);
  if (cap <= slots_.size()) return;
  std::vector<Slot> old;
  old.swap(slots_);
  slots_.reserve(cap);
  advise_huge_pages(slots_.data(), cap * sizeof(Slot));  // Llama 3's merges: 8 MiB
  slots_.assign(cap, Slot{});
  count_ = 0;
  for (const auto& s : old) {
    if (s.key != ~0ull) {
      insert(static_cast<int32_t>(s.key >> 32), static_cast<int32_t>(s.key & 0xFFFFFFFFu),
             s.merge.rank, s.merge.id);
    }
  }
}

void MergeTable::grow() { reserve(std::max<size_t>(16, slots_.size())); }

namespace {
inline size_t mix(uint64_t k) noexcept {
  k ^= k >> 33;
  k *= 0xff51afd7ed558ccdull;
  k ^= k >> 33;
  return static_cast<size_t>(k);
}
}  // namespace

void MergeTable::prefetch(int32_t left, int32_t right) const noexcept {
  if (!slots_.empty()) __builtin_prefetch(&slots_[mix(key(left, right)) & (slots_.size() - 1)]);
}

void MergeTable::insert(int32_t left, int32_t right, int32_t rank, int32_t id) {
  if ((count_ + 1) * 4 > slots_.size() * 3) grow();
  const uint64_t k = key(left, right);
  const size_t mask = slots_.size() - 1;
  for (size_t i = mix(k) & mask;; i = (i + 1) & mask) {
    if (slots_[i].key == k) return;  // keep the first (lowest rank)
    if (slots_[i].key == ~0ull) {
      slots_[i].key = k;
      slots_[i].merge = {rank, id};
      ++count_;
      return;
    }
  }
}

const MergeTable::Merge* MergeTable::find(int32_t left, int32_t right) const noexcept {
  if (slots_.empty()) return nullptr;
  const uint64_t k = key(left, right);
  const size_t mask = slots_.size() - 1;
  for (size_t i = mix(k) & mask;; i = (i + 1) & mask) {
    if (slots_[i].key == k) return &slots_[i].merge;
    if (slots_[i].key == ~0ull) return nullptr;
  }
}

namespace {

std::array<int32_t, 256> find_byte_tokens(const Vocab& vocab) {
  std::array<int32_t, 256> ids{};
  for (int b = 0; b < 256; ++b) {
    char name[8];
    std::snprintf(name, sizeof(name), "<0x%02X>", b);
    ids[b] = vocab.find(name).value_or(-1);
  }
  return ids;
}

// Orders candidates so that the heap's front is the one to apply next.
struct CandidateLess {
  bool operator()(const ModelScratch::Candidate& a, const ModelScratch::Candidate& b) const noexcept {
    if (a.score != b.score) return a.score < b.score;
    return a.pos > b.pos;
  }
};

void heap_push(std::vector<ModelScratch::Candidate>& heap, ModelScratch::Candidate c) {
  heap.push_back(c);
  std::push_heap(heap.begin(), heap.end(), CandidateLess{});
}

ModelScratch::Candidate heap_pop(std::vector<ModelScratch::Candidate>& heap) {
  std::pop_heap(heap.begin(), heap.end(), CandidateLess{});
  const auto c = heap.back();
  heap.pop_back();
  return c;
}

}  // namespace

// ---- BpeModel ----

BpeModel::BpeModel(const Vocab& vocab, MergeTable merges, Options options)
    : vocab_(vocab), merges_(std::move(merges)), options_(std::move(options)) {
  byte_ids_ = find_byte_tokens(vocab_);
  all_bytes_ = std::all_of(byte_ids_.begin(), byte_ids_.end(), [](int32_t id) { return id >= 0; });
  bmp_ids_.assign(0x10000, -1);
  vocab_.for_each([&](std::string_view text, int32_t id) {
    if (text.empty()) return;
    const Utf8Char c = utf8_next(text, 0);
    if (c.valid && c.len == text.size() && c.cp < 0x10000) bmp_ids_[c.cp] = id;
  });
}

int32_t BpeModel::char_id(std::string_view word, size_t begin, size_t len, bool first,
                          bool last) const {
  const bool affixed = (!first && !options_.continuing_subword_prefix.empty()) ||
                       (last && !options_.end_of_word_suffix.empty());
  if (!affixed) {
    const Utf8Char c = utf8_next(word, begin);
    if (c.valid && c.cp < 0x10000) return bmp_ids_[c.cp];
    return vocab_.find(word.substr(begin, len)).value_or(-1);
  }
  std::string s;
  if (!first) s = options_.continuing_subword_prefix;
  s.append(word.substr(begin, len));
  if (last) s += options_.end_of_word_suffix;
  return vocab_.find(s).value_or(-1);
}

void BpeModel::encode(std::string_view word, std::vector<int32_t>& out, ModelScratch& scratch) const {
  if (word.empty()) return;
  if (options_.ignore_merges) {
    if (const auto id = vocab_.find(word)) {
      out.push_back(*id);
      return;
    }
  }
  auto& syms = scratch.symbols;
  syms.clear();
  auto add = [&](int32_t id, size_t begin, size_t len) {
    const auto index = static_cast<int32_t>(syms.size());
    syms.push_back({id, index - 1, index + 1, static_cast<uint32_t>(begin), static_cast<uint32_t>(len)});
  };
  // Initial symbols: one per character; characters missing from the vocabulary become
  // their <0xNN> bytes (byte_fallback) or the unknown token (fused when fuse_unk).
  int32_t pending_unk_len = 0;
  size_t pending_unk_begin = 0;
  auto flush_unk = [&]() {
    if (pending_unk_len > 0) add(*options_.unk_id, pending_unk_begin, static_cast<size_t>(pending_unk_len));
    pending_unk_len = 0;
  };
  for (size_t i = 0; i < word.size();) {
    const size_t len = utf8_len_at(word, i);
    const int32_t id = char_id(word, i, len, i == 0, i + len == word.size());
    if (id >= 0) {
      flush_unk();
      add(id, i, len);
    } else if (options_.byte_fallback &&
               std::all_of(word.begin() + static_cast<std::ptrdiff_t>(i),
                           word.begin() + static_cast<std::ptrdiff_t>(i + len),
                           [&](char b) { return byte_ids_[static_cast<uint8_t>(b)] >= 0; })) {
      flush_unk();
      for (size_t k = 0; k < len; ++k) add(byte_ids_[static_cast<uint8_t>(word[i + k])], i + k, 1);
    } else if (options_.unk_id) {
      if (pending_unk_len > 0 && !options_.fuse_unk) flush_unk();
      if (pending_unk_len == 0) pending_unk_begin = i;
      pending_unk_len += static_cast<int32_t>(len);
    }
    // else: no unknown token: the character is dropped, as HF does.
    i += len;
  }
  flush_unk();
  if (syms.empty()) return;
  syms.back().next = -1;

  auto& heap = scratch.heap;
  heap.clear();
  auto try_pair = [&](int32_t pos) {
    const int32_t next = syms[static_cast<size_t>(pos)].next;
    if (next < 0) return;
    if (const auto* m = merges_.find(syms[static_cast<size_t>(pos)].id, syms[static_cast<size_t>(next)].id)) {
      heap_push(heap, {-static_cast<float>(m->rank), pos, m->id, 0});
    }
  };
  for (int32_t i = 0; i + 1 < static_cast<int32_t>(syms.size()); ++i) try_pair(i);
  while (!heap.empty()) {
    const auto top = heap_pop(heap);
    auto& cur = syms[static_cast<size_t>(top.pos)];
    if (cur.len == 0 || cur.next < 0) continue;
    auto& right = syms[static_cast<size_t>(cur.next)];
    const auto* m = merges_.find(cur.id, right.id);
    if (m == nullptr || m->id != top.id) continue;  // stale: a neighbour changed
    cur.id = top.id;
    cur.len += right.len;
    right.len = 0;
    cur.next = right.next;
    if (cur.next >= 0) syms[static_cast<size_t>(cur.next)].prev = top.pos;
    if (cur.prev >= 0) try_pair(cur.prev);
    try_pair(top.pos);
  }
  for (int32_t i = 0; i >= 0; i = syms[static_cast<size_t>(i)].next) out.push_back(syms[static_cast<size_t>(i)].id);
}

// ---- SpmModel ----

SpmModel::SpmModel(const Vocab& vocab, std::vector<float> scores, std::optional<int32_t> unk_id)
    : vocab_(vocab), scores_(std::move(scores)), unk_id_(unk_id) {
  byte_ids_ = find_byte_tokens(vocab_);
  // llama.cpp falls back to the raw single-byte token when <0xNN> is missing.
  for (int b = 0; b < 256; ++b) {
    if (byte_ids_[b] < 0) byte_ids_[b] = vocab_.find(std::string(1, static_cast<char>(b))).value_or(-1);
  }
}

void SpmModel::emit(std::string_view text, const ModelScratch::Symbol& sym, std::vector<int32_t>& out) const {
  const std::string_view piece = text.substr(sym.begin, sym.len);
  if (const auto id = vocab_.find(piece)) {
    out.push_back(*id);
    return;
  }
  // Every merged symbol is a token, so only single characters reach here.
  for (char b : piece) {
    const int32_t id = byte_ids_[static_cast<uint8_t>(b)];
    if (id >= 0) {
      out.push_back(id);
    } else if (unk_id_) {
      out.push_back(*unk_id_);
    }
  }
}

void SpmModel::encode(std::string_view text, std::vector<int32_t>& out, ModelScratch& scratch) const {
  if (text.empty()) return;
  auto& syms = scratch.symbols;
  syms.clear();
  for (size_t i = 0; i < text.size();) {
    const size_t len = utf8_len_at(text, i);
    const auto index = static_cast<int32_t>(syms.size());
    syms.push_back({-1, index - 1, index + 1, static_cast<uint32_t>(i), static_cast<uint32_t>(len)});
    i += len;
  }
  syms.back().next = -1;
  auto& heap = scratch.heap;
  heap.clear();
  auto try_pair = [&](int32_t left) {
    if (left < 0) return;
    const auto& l = syms[static_cast<size_t>(left)];
    if (l.next < 0) return;
    const auto& r = syms[static_cast<size_t>(l.next)];
    const std::string_view joined = text.substr(l.begin, l.len + r.len);
    const auto id = vocab_.find(joined);
    if (!id || static_cast<size_t>(*id) >= scores_.size()) return;
    heap_push(heap, {scores_[static_cast<size_t>(*id)], left, *id, static_cast<uint32_t>(joined.size())});
  };
  for (int32_t i = 0; i + 1 < static_cast<int32_t>(syms.size()); ++i) try_pair(i);
  while (!heap.empty()) {
    const auto top = heap_pop(heap);
    auto& left = syms[static_cast<size_t>(top.pos)];
    if (left.len == 0 || left.next < 0) continue;
    auto& right = syms[static_cast<size_t>(left.next)];
    if (right.len == 0 || left.len + right.len != top.size) continue;  // stale
    left.len += right.len;
    right.len = 0;
    left.next = right.next;
    if (left.next >= 0) syms[static_cast<size_t>(left.next)].prev = top.pos;
    try_pair(left.prev);
    try_pair(top.pos);
  }
  for (int32_t i = 0; i >= 0; i = syms[static_cast<size_t>(i)].next) emit(text, syms[static_cast<size_t>(i)], out);
}

}  // namespace loom::tok
