// loom::Batch — many sequences over one Model, advanced together: each decode() runs one
// forward pass over every sequence's pending tokens, so each weight is read once for all
// of them (continuous batching). Prompt chunks and single decode tokens mix in one pass;
// a per-pass token budget keeps a long prompt from stalling the others (chunked prefill).
//
// The KV cache is paged: fixed-size blocks from one pool whose size is set at creation
// (one allocation for all KV memory). Each sequence has a block table; fork() makes a
// sequence that shares its parent's blocks (copy on write), so a common prefix — a system
// prompt, a retrieved document in front of several questions — is stored and computed once.
//
// Batch invariance: a sequence's logits are bit-identical whether it runs alone or with
// others, in one pass or token by token, at any thread count (the linear kernels give each
// token's row the same bits whatever else is in the product; attention is per sequence).
//
// Errors: every call that fails changes nothing (the pool, other sequences and the
// failing sequence stay as they were); the batch stays usable. feed() is where KV blocks
// are reserved: a full pool fails it with Error(kv_pool_full) naming the sequence and the
// blocks needed and free; the host removes, rolls back or trims a sequence and retries.
//
// Ownership: the Batch holds a shared_ptr to its Model and owns its KV pool and scratch.
// Thread-safety: one thread at a time per Batch (it may move between threads); many
// Batches and Sessions may share one Model.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <vector>

#include "loom/dtype.hpp"
#include "loom/model.hpp"
#include "loom/sampler.hpp"
#include "loom/session.hpp"
#include "loom/thread_pool.hpp"

namespace loom {

using SeqId = int64_t;

struct BatchOptions {
  int64_t max_sequences = 16;    // live sequences at once
  int64_t context_length = 0;    // per sequence; 0: the model's max_positions, capped at 4096
  int64_t block_tokens = kKvBlockTokens;  // positions per KV block
  // The pool's size: in tokens (rounded up to whole blocks), or else in bytes (rounded
  // down), or else, when both are 0, max_sequences full contexts.
  int64_t pool_tokens = 0;
  int64_t pool_bytes = 0;
  DType kv_dtype = DType::f32;   // f32 or f16
  int64_t token_budget = 512;    // tokens per pass (decode tokens first, then prompt chunks)
  int n_threads = 0;             // 0: hardware threads (ignored when `pool` is given)
  std::shared_ptr<ThreadPool> pool;
};

struct BatchStats {
  int64_t sequences = 0;
  int64_t block_tokens = 0;
  int64_t blocks_total = 0;
  int64_t blocks_used = 0;    // referenced by at least one sequence
  int64_t blocks_shared = 0;  // referenced by two or more (forks)
  int64_t blocks_free = 0;
  int64_t bytes_total = 0;    // the pool's allocation
  int64_t bytes_used = 0;     // blocks_used * block bytes
  int64_t passes = 0;         // decode() calls that ran a pass
  int64_t tokens_processed = 0;
};

// One token sample_ready() drew.
struct SampledToken {
  SeqId seq = 0;
  int32_t token = 0;
};

// What one decode() did.
struct BatchPass {
  int64_t tokens = 0;            // tokens in the pass (M of its products)
  std::vector<SeqId> ready;      // sequences whose pending tokens are all done: logits readable
  std::vector<SeqId> partial;    // sequences that got a prompt chunk and still have tokens pending
};

class Batch {
 public:
  explicit Batch(std::shared_ptr<const Model> model, BatchOptions options = {});
  ~Batch();
  Batch(const Batch&) = delete;
  Batch& operator=(const Batch&) = delete;

  // A new empty sequence. Throws Error(invalid_argument) when max_sequences are live.
  SeqId add();
  // Queues tokens after the sequence's current position (a prompt, or one sampled token)
  // and reserves their KV blocks. all_logits: keep logits for every one of these tokens
  // (scoring), else only after the last. Throws Error(invalid_argument) for an unknown id,
  // no tokens or an id outside the vocabulary, Error(context_full) past the context
  // length, Error(kv_pool_full) when the pool cannot hold them.
  void feed(SeqId seq, std::span<const int32_t> tokens, bool all_logits = false);
  // A new sequence holding the parent's tokens, sharing its KV blocks. The parent must
  // have no pending tokens (Error(invalid_argument) otherwise); its logits are copied.
  SeqId fork(SeqId parent);
  // Forgets positions from `position` on (and any pending tokens).
  void rollback(SeqId seq, int64_t position);
  // Removes positions [begin, end) and shifts the later ones down by end - begin; their
  // cached keys are re-rotated to the new positions (RoPE models), so the sequence goes on
  // as if it had been fed the kept tokens — within f32 rounding, not bit for bit. Pending
  // tokens must be empty. Throws Error(kv_pool_full) when shared blocks must be copied
  // and the pool is full.
  void trim(SeqId seq, int64_t begin, int64_t end);
  // Frees the sequence and its blocks (shared blocks stay with the other holders).
  void remove(SeqId seq);

  // One forward pass over the pending tokens of every sequence (within the token budget:
  // every sequence's single decode token first, then prompt chunks in order of id).
  // Returns what ran; a batch with nothing pending returns an empty pass. `cancel` is
  // asked before the pass; returning true stops with Error(cancelled), nothing changed.
  BatchPass decode(const std::function<bool()>& cancel = {});

  // Logits after the sequence's last processed token ([vocab]); valid until the next
  // decode/feed/fork/rollback/trim/remove of this batch. Throws when none are readable.
  std::span<const float> logits(SeqId seq) const;
  // all_logits feeds: logits after token i of that feed (i < logit_rows(seq)).
  std::span<const float> logits_at(SeqId seq, int64_t i) const;
  int64_t logit_rows(SeqId seq) const;

  // The step after a pass, for every sequence it made ready at once: draws the next
  // token of each of `ready` (usually the last BatchPass::ready) from its logits with
  // the sampler `sampler_of(seq)` returns — each sequence its own sampler, for its own
  // history and RNG; nullptr skips the sequence — and records it in that sampler's
  // history. With feed_back each token is also fed to its sequence, so the next decode()
  // continues them all (an end-of-sequence token too: the host removes or rolls back a
  // sequence it ends). Checked before anything is drawn: every id is live, listed once
  // and has readable logits, and with feed_back every sequence has room for one more
  // position, in its context and in the pool together (Error(context_full) /
  // Error(kv_pool_full) naming the sequence). A sampler that throws (non-finite logits,
  // a host stage) or, with feed_back, picks an id outside the vocabulary (a host stage)
  // stops the call before anything is fed; the samplers that drew before it keep their
  // token in their history.
  std::vector<SampledToken> sample_ready(std::span<const SeqId> ready,
                                         const std::function<Sampler*(SeqId)>& sampler_of,
                                         bool feed_back = false);

  bool contains(SeqId seq) const noexcept;
  int64_t position(SeqId seq) const;  // tokens in the sequence's KV cache
  int64_t pending(SeqId seq) const;   // tokens fed but not yet processed
  std::vector<SeqId> sequences() const;
  int64_t context_length() const noexcept;
  BatchStats stats() const;
  const Model& model() const noexcept;
  ThreadPool& pool() noexcept;

  struct State;

 private:
  std::unique_ptr<State> state_;
};

// Policy built on trim(): when `needed` more positions would not fit the sequence's
// context, drop the oldest positions after the first `keep_first` (system prompt,
// attention sinks), at least half of what follows them, so generation can go on.
// Returns the number of positions dropped (0 when it already fits).
int64_t context_shift(Batch& batch, SeqId seq, int64_t needed, int64_t keep_first);

}  // namespace loom
