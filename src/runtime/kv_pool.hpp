// Internal: the paged KV cache. One allocation holds every block; a block holds the keys
// and values of `block_tokens` consecutive positions of one sequence for every layer, as
// one panel per (layer, k or v, KV head), and the panels of one (layer, kind, head) lie
// side by side in block order:
//
//   pool: [n_layers][2 (k, v)][n_kv_heads][n_blocks][panel]  (f32 or f16)
//   keys panel:   [head_dim][block_tokens]  (dimension-major: key i's element d at
//                 d * block_tokens + i)
//   values panel: [block_tokens][head_dim]  (one row per position)
//
// Block-major panels ([block][layer][kind][head]) put a head's consecutive blocks a whole
// block apart (256 KiB on the small bench model), and decode attention over them, which
// the hardware prefetchers cannot follow across, ran 1.3-1.6x as long as over one
// contiguous run after 2048 positions. In this order a sequence whose blocks came in
// order (a fresh pool hands out 0, 1, 2, ...: every Session) reads each head's values as
// one contiguous run of rows and its keys as consecutive panels.
//
// Keys are stored dimension-major so that the attention scores put consecutive positions
// in a vector's lanes and sum each score as one FMA chain over the dimensions, with no
// horizontal sums (kernels/attention.hpp); values stay rows, which the weighted sum reads
// whole. store_row / load_row know both layouts and the dtype, keys() / values() give
// the kernels their pointers; nothing else computes an address inside a block.
//
// Sequences own lists of block ids (their block tables); a block may be shared by several
// sequences (a fork shares its parent's blocks) and is reference counted: it returns to
// the free list when the last sequence lets go. A shared block is never written: the
// writer copies it first (copy on write, SeqKv::prepare_append).
//
// Not thread-safe: the owning Session or Batch serializes access.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "loom/config.hpp"
#include "loom/dtype.hpp"
#include "loom/tensor.hpp"

namespace loom::runtime {

struct KvPoolStats {
  int64_t block_tokens = 0;
  int64_t blocks_total = 0;
  int64_t blocks_used = 0;    // referenced by at least one sequence
  int64_t blocks_shared = 0;  // referenced by two or more
  int64_t blocks_free = 0;
  int64_t block_bytes = 0;
  int64_t bytes_total = 0;
};

class KvPool {
 public:
  KvPool(const ModelConfig& config, int64_t block_tokens, int64_t n_blocks, DType dtype);

  // A free block with one reference, or -1 when none is left.
  int32_t allocate() noexcept;
  void retain(int32_t block) noexcept { ++refs_[static_cast<size_t>(block)]; }
  void release(int32_t block) noexcept;
  int32_t refs(int32_t block) const noexcept { return refs_[static_cast<size_t>(block)]; }
  // Copies every layer's keys and values of `from` into `to` (the whole block).
  void copy_block(int32_t from, int32_t to) noexcept;
  // True when `other` stores elements as this pool does (layers, KV heads, head_dim,
  // dtype; block_tokens may differ): its positions can be copied byte for byte.
  bool same_elements(const KvPool& other) const noexcept;
  // Copies `count` positions, every layer and head, from slots [from_slot, +count) of
  // block `from` of `src` (this pool, or one with same_elements) into slots [to_slot,
  // +count) of block `to` of this pool. Both ranges lie within their blocks; within one
  // block they may overlap.
  void copy_run_from(const KvPool& src, int32_t from, int64_t from_slot, int32_t to, int64_t to_slot,
                     int64_t count) noexcept;

  int64_t block_tokens() const noexcept { return block_tokens_; }
  int64_t n_blocks() const noexcept { return static_cast<int64_t>(refs_.size()); }
  int64_t free_blocks() const noexcept { return static_cast<int64_t>(free_.size()); }
  DType dtype() const noexcept { return dtype_; }
  KvPoolStats stats() const noexcept;
  int64_t bytes() const noexcept { return storage_.nbytes(); }

  // One position's key (kind 0) or value (kind 1) row of head_dim floats, written in the
  // pool's dtype and layout / read back widened to f32.
  void store_row(int32_t block, int64_t slot, int64_t layer, int kind, int64_t head, const float* row) noexcept;
  void load_row(int32_t block, int64_t slot, int64_t layer, int kind, int64_t head, float* row) const noexcept;
  // For the attention kernels: the keys from position `slot` of a block on (element d of
  // the key at slot + i is at keys(...)[d * block_tokens() + i], f32 or f16 as dtype()),
  // and the value rows from `slot` on (row i at values(...)[i * head_dim]).
  const void* keys(int32_t block, int64_t layer, int64_t head, int64_t slot) const noexcept {
    return element(panel(block, layer, 0, head) + slot);
  }
  const void* values(int32_t block, int64_t layer, int64_t head, int64_t slot) const noexcept {
    return element(panel(block, layer, 1, head) + slot * head_dim_);
  }

 private:
  // Element offset of the (block, layer, kind 0 = k / 1 = v, kv head) panel.
  int64_t panel(int32_t block, int64_t layer, int kind, int64_t head) const noexcept {
    return (((layer * 2 + kind) * n_kv_heads_ + head) * n_blocks_ + block) * block_tokens_ * head_dim_;
  }
  std::byte* element(int64_t at) noexcept {
    return static_cast<std::byte*>(base_) + static_cast<size_t>(at) * dtype_size(dtype_);
  }
  const std::byte* element(int64_t at) const noexcept {
    return static_cast<const std::byte*>(base_) + static_cast<size_t>(at) * dtype_size(dtype_);
  }

  int64_t n_layers_ = 0, n_kv_heads_ = 0, head_dim_ = 0, block_tokens_ = 0, n_blocks_ = 0;
  int64_t block_elements_ = 0;
  DType dtype_ = DType::f32;
  Tensor storage_;
  void* base_ = nullptr;  // storage_'s bytes (owned, writable)
  std::vector<int32_t> refs_;
  std::vector<int32_t> free_;  // a stack: the most recently freed block is reused first
};

// Bytes of one block for this model (keys and values, every layer).
int64_t kv_block_bytes(const ModelConfig& config, int64_t block_tokens, DType dtype);

// One sequence's view of the pool: its block table and its length in positions.
class SeqKv {
 public:
  explicit SeqKv(KvPool& pool) : pool_(&pool) {}
  ~SeqKv() { clear(); }
  SeqKv(const SeqKv&) = delete;
  SeqKv& operator=(const SeqKv&) = delete;
  SeqKv(SeqKv&& other) noexcept;
  SeqKv& operator=(SeqKv&& other) noexcept;

  int64_t length() const noexcept { return length_; }
  const std::vector<int32_t>& blocks() const noexcept { return blocks_; }

  // Blocks (new ones, and copies of shared ones that would be written) needed to append
  // `n` positions.
  int64_t blocks_needed(int64_t n) const noexcept;
  // Makes room for positions [length, length + n): allocates blocks and copies a shared
  // last block (copy on write). Returns false, changing nothing, when the pool has fewer
  // free blocks than blocks_needed(n).
  bool prepare_append(int64_t n);
  // Marks positions up to length + n as written (after prepare_append and the pass).
  void commit(int64_t n) noexcept { length_ += n; }
  // Forgets positions from `length` on and releases blocks no longer needed.
  void truncate(int64_t length) noexcept;
  void clear() noexcept { truncate(0); }
  // This sequence's first `length` positions, sharing every block with `parent`.
  void share_prefix(const SeqKv& parent, int64_t length);
  // Shared blocks among those holding positions [begin, end): what make_exclusive copies.
  int64_t shared_blocks(int64_t begin, int64_t end) const noexcept;
  // Gives this sequence its own copy of every shared block holding [begin, end). Returns
  // false, changing nothing, when the pool has fewer free blocks than that.
  bool make_exclusive(int64_t begin, int64_t end);

  // The block and slot of a position.
  int32_t block_of(int64_t position) const noexcept {
    return blocks_[static_cast<size_t>(position / pool_->block_tokens())];
  }
  int64_t slot_of(int64_t position) const noexcept { return position % pool_->block_tokens(); }

 private:
  KvPool* pool_;
  std::vector<int32_t> blocks_;
  int64_t length_ = 0;
};

}  // namespace loom::runtime
