#include "runtime/kv_pool.hpp"

#include <algorithm>
#include <cstring>

#include "loom/convert.hpp"
#include "loom/error.hpp"

namespace loom::runtime {

int64_t kv_block_bytes(const ModelConfig& config, int64_t block_tokens, DType dtype) {
  int64_t bytes = 2;
  for (const int64_t factor : {config.n_layers, config.n_kv_heads, block_tokens, config.head_dim,
                               static_cast<int64_t>(dtype_size(dtype))}) {
    if (factor < 0 || __builtin_mul_overflow(bytes, factor, &bytes)) {
      throw Error(ErrorCode::out_of_memory, "a KV block of " + std::to_string(block_tokens) +
                                                " positions for this model exceeds 2^63 bytes");
    }
  }
  return bytes;
}

KvPool::KvPool(const ModelConfig& config, int64_t block_tokens, int64_t n_blocks, DType dtype)
    : n_layers_(config.n_layers), n_kv_heads_(config.n_kv_heads), head_dim_(config.head_dim),
      block_tokens_(block_tokens), n_blocks_(n_blocks), dtype_(dtype) {
  if (dtype != DType::f32 && dtype != DType::f16) {
    throw Error(ErrorCode::invalid_argument,
                "KV cache dtype must be f32 or f16, got " + std::string(dtype_name(dtype)));
  }
  if (block_tokens <= 0) throw Error(ErrorCode::invalid_argument, "KV block size must be positive");
  if (n_blocks <= 0 || n_blocks > (int64_t{1} << 30)) {
    throw Error(ErrorCode::invalid_argument,
                "the KV pool must hold between 1 and 2^30 blocks, asked for " + std::to_string(n_blocks));
  }
  const int64_t block_bytes = kv_block_bytes(config, block_tokens, dtype);
  int64_t total = 0;
  if (__builtin_mul_overflow(block_bytes, n_blocks, &total)) {
    throw Error(ErrorCode::out_of_memory, "a KV pool of " + std::to_string(n_blocks) + " blocks exceeds 2^63 bytes");
  }
  block_elements_ = block_bytes / static_cast<int64_t>(dtype_size(dtype));
  int64_t elements = 0;
  if (__builtin_mul_overflow(block_elements_, n_blocks, &elements)) {
    throw Error(ErrorCode::out_of_memory, "the KV pool's element count overflows");
  }
  storage_ = Tensor::zeros(Shape{elements}, dtype);
  base_ = storage_.mutable_raw_data();
  refs_.assign(static_cast<size_t>(n_blocks), 0);
  free_.resize(static_cast<size_t>(n_blocks));
  // Lowest ids on top of the stack, so a fresh pool hands out 0, 1, 2, ...
  for (int64_t i = 0; i < n_blocks; ++i) free_[static_cast<size_t>(i)] = static_cast<int32_t>(n_blocks - 1 - i);
}

int32_t KvPool::allocate() noexcept {
  if (free_.empty()) return -1;
  const int32_t b = free_.back();
  free_.pop_back();
  refs_[static_cast<size_t>(b)] = 1;
  return b;
}

void KvPool::release(int32_t block) noexcept {
  int32_t& r = refs_[static_cast<size_t>(block)];
  if (--r == 0) free_.push_back(block);
}

void KvPool::copy_block(int32_t from, int32_t to) noexcept { copy_run_from(*this, from, 0, to, 0, block_tokens_); }

bool KvPool::same_elements(const KvPool& other) const noexcept {
  return n_layers_ == other.n_layers_ && n_kv_heads_ == other.n_kv_heads_ && head_dim_ == other.head_dim_ &&
         dtype_ == other.dtype_;
}

// memmove throughout: within one pool the source and destination may be one block (a
// trim moving later positions down, Batch::trim).
void KvPool::copy_run_from(const KvPool& src, int32_t from, int64_t from_slot, int32_t to, int64_t to_slot,
                           int64_t count) noexcept {
  const size_t elem = dtype_size(dtype_);
  if (block_tokens_ == src.block_tokens_ && from_slot == 0 && to_slot == 0 && count == block_tokens_) {
    // Whole blocks: each (layer, kind, head) panel is one contiguous run.
    const auto panel_bytes = static_cast<size_t>(block_tokens_ * head_dim_) * elem;
    for (int64_t l = 0; l < n_layers_; ++l) {
      for (int kind = 0; kind < 2; ++kind) {
        for (int64_t g = 0; g < n_kv_heads_; ++g) {
          std::memmove(element(panel(to, l, kind, g)), src.element(src.panel(from, l, kind, g)), panel_bytes);
        }
      }
    }
    return;
  }
  const auto run = static_cast<size_t>(count) * elem;
  for (int64_t l = 0; l < n_layers_; ++l) {
    for (int64_t g = 0; g < n_kv_heads_; ++g) {
      // Keys: one run of slots per dimension (each pool's own stride, block_tokens);
      // values: the slots' rows, contiguous.
      for (int64_t d = 0; d < head_dim_; ++d) {
        std::memmove(element(panel(to, l, 0, g) + d * block_tokens_ + to_slot),
                     src.element(src.panel(from, l, 0, g) + d * src.block_tokens_ + from_slot), run);
      }
      std::memmove(element(panel(to, l, 1, g) + to_slot * head_dim_),
                   src.element(src.panel(from, l, 1, g) + from_slot * head_dim_), run * static_cast<size_t>(head_dim_));
    }
  }
}

void KvPool::store_row(int32_t block, int64_t slot, int64_t layer, int kind, int64_t head,
                       const float* row) noexcept {
  const bool f16 = dtype_ == DType::f16;
  const size_t n = static_cast<size_t>(head_dim_);
  if (kind == 1) {
    std::byte* at = element(panel(block, layer, 1, head) + slot * head_dim_);
    if (f16) {
      f32_to_f16(row, reinterpret_cast<uint16_t*>(at), n);
    } else {
      std::memcpy(at, row, n * sizeof(float));
    }
    return;
  }
  // The key: one element per dimension, block_tokens apart (converted as the values are,
  // a chunk at a time, then scattered).
  std::byte* at = element(panel(block, layer, 0, head) + slot);
  const size_t stride = static_cast<size_t>(block_tokens_) * dtype_size(dtype_);
  constexpr int64_t kChunk = 64;
  uint16_t half[kChunk];
  for (int64_t d0 = 0; d0 < head_dim_; d0 += kChunk) {
    const int64_t nd = std::min(kChunk, head_dim_ - d0);
    if (f16) f32_to_f16(row + d0, half, static_cast<size_t>(nd));
    for (int64_t d = 0; d < nd; ++d) {
      std::byte* e = at + static_cast<size_t>(d0 + d) * stride;
      if (f16) {
        std::memcpy(e, half + d, sizeof(uint16_t));
      } else {
        std::memcpy(e, row + d0 + d, sizeof(float));
      }
    }
  }
}

void KvPool::load_row(int32_t block, int64_t slot, int64_t layer, int kind, int64_t head,
                      float* row) const noexcept {
  const bool f16 = dtype_ == DType::f16;
  const size_t n = static_cast<size_t>(head_dim_);
  if (kind == 1) {
    const std::byte* at = element(panel(block, layer, 1, head) + slot * head_dim_);
    if (f16) {
      f16_to_f32(reinterpret_cast<const uint16_t*>(at), row, n);
    } else {
      std::memcpy(row, at, n * sizeof(float));
    }
    return;
  }
  const std::byte* at = element(panel(block, layer, 0, head) + slot);
  for (int64_t d = 0; d < head_dim_; ++d) {
    const std::byte* e = at + static_cast<size_t>(d * block_tokens_) * dtype_size(dtype_);
    if (f16) {
      uint16_t h;
      std::memcpy(&h, e, sizeof h);
      row[d] = f16_to_f32_scalar(h);
    } else {
      std::memcpy(row + d, e, sizeof(float));
    }
  }
}

KvPoolStats KvPool::stats() const noexcept {
  KvPoolStats s;
  s.block_tokens = block_tokens_;
  s.blocks_total = n_blocks();
  s.blocks_free = free_blocks();
  for (int32_t r : refs_) {
    if (r > 0) ++s.blocks_used;
    if (r > 1) ++s.blocks_shared;
  }
  s.block_bytes = block_elements_ * static_cast<int64_t>(dtype_size(dtype_));
  s.bytes_total = bytes();
  return s;
}

SeqKv::SeqKv(SeqKv&& other) noexcept
    : pool_(other.pool_), blocks_(std::move(other.blocks_)), length_(other.length_) {
  other.blocks_.clear();
  other.length_ = 0;
}

SeqKv& SeqKv::operator=(SeqKv&& other) noexcept {
  if (this != &other) {
    clear();
    pool_ = other.pool_;
    blocks_ = std::move(other.blocks_);
    length_ = other.length_;
    other.blocks_.clear();
    other.length_ = 0;
  }
  return *this;
}

int64_t SeqKv::blocks_needed(int64_t n) const noexcept {
  if (n <= 0) return 0;
  const int64_t bt = pool_->block_tokens();
  const int64_t have = static_cast<int64_t>(blocks_.size());
  const int64_t want = (length_ + n + bt - 1) / bt;
  int64_t needed = std::max<int64_t>(0, want - have);
  // The block holding position `length` is written too: a shared one is copied first.
  const int64_t first = length_ / bt;
  if (first < have && pool_->refs(blocks_[static_cast<size_t>(first)]) > 1) ++needed;
  return needed;
}

bool SeqKv::prepare_append(int64_t n) {
  if (n <= 0) return true;
  if (blocks_needed(n) > pool_->free_blocks()) return false;
  const int64_t bt = pool_->block_tokens();
  const int64_t first = length_ / bt;
  if (first < static_cast<int64_t>(blocks_.size())) {
    int32_t& b = blocks_[static_cast<size_t>(first)];
    if (pool_->refs(b) > 1) {
      const int32_t copy = pool_->allocate();
      pool_->copy_block(b, copy);
      pool_->release(b);
      b = copy;
    }
  }
  const int64_t want = (length_ + n + bt - 1) / bt;
  while (static_cast<int64_t>(blocks_.size()) < want) blocks_.push_back(pool_->allocate());
  return true;
}

void SeqKv::truncate(int64_t length) noexcept {
  length = std::clamp<int64_t>(length, 0, length_);
  const int64_t bt = pool_->block_tokens();
  const auto keep = static_cast<size_t>((length + bt - 1) / bt);
  while (blocks_.size() > keep) {
    pool_->release(blocks_.back());
    blocks_.pop_back();
  }
  length_ = length;
}

void SeqKv::share_prefix(const SeqKv& parent, int64_t length) {
  clear();
  const int64_t bt = pool_->block_tokens();
  const auto n = static_cast<size_t>((length + bt - 1) / bt);
  blocks_.assign(parent.blocks_.begin(), parent.blocks_.begin() + static_cast<std::ptrdiff_t>(n));
  for (int32_t b : blocks_) pool_->retain(b);
  length_ = length;
}

int64_t SeqKv::shared_blocks(int64_t begin, int64_t end) const noexcept {
  if (begin >= end) return 0;
  const int64_t bt = pool_->block_tokens();
  int64_t n = 0;
  for (int64_t b = begin / bt; b <= (end - 1) / bt && b < static_cast<int64_t>(blocks_.size()); ++b) {
    if (pool_->refs(blocks_[static_cast<size_t>(b)]) > 1) ++n;
  }
  return n;
}

bool SeqKv::make_exclusive(int64_t begin, int64_t end) {
  if (shared_blocks(begin, end) > pool_->free_blocks()) return false;
  if (begin >= end) return true;
  const int64_t bt = pool_->block_tokens();
  for (int64_t b = begin / bt; b <= (end - 1) / bt && b < static_cast<int64_t>(blocks_.size()); ++b) {
    int32_t& block = blocks_[static_cast<size_t>(b)];
    if (pool_->refs(block) > 1) {
      const int32_t copy = pool_->allocate();
      pool_->copy_block(block, copy);
      pool_->release(block);
      block = copy;
    }
  }
  return true;
}

}  // namespace loom::runtime
