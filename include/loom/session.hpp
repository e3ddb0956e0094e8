// loom::Session — one conversation with a Model: the KV cache, the position, scratch
// buffers and the logits of the last forward pass.
//
// prefill() runs the prompt in one batched pass (matrix-matrix products); step() feeds
// one token using the KV cache. The KV cache is allocated once, for the context length
// chosen at creation rounded up to a multiple of 16 positions (its blocks), and accounted
// apart from the weights (kv_cache_bytes()).
//
// Ownership: a Session holds a shared_ptr to its Model. Thread-safety: one thread at a
// time per Session (it may move between threads); many Sessions may share one Model.
// Errors leave the Session as it was before the call (position and cache unchanged).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string_view>
#include <vector>

#include "loom/dtype.hpp"
#include "loom/model.hpp"
#include "loom/thread_pool.hpp"

namespace loom {

// What the debug hook sees after each stage of the forward pass: the stage name
// ("embd", "blk.3.attn_out", "blk.3.ffn_out", "output_norm", "logits"), the activations
// [n_tokens, dim], and a checksum (sum of values, in double) to compare runs quickly.
struct TraceEvent {
  std::string_view name;
  int64_t n_tokens = 0;
  int64_t dim = 0;
  const float* values = nullptr;
  double checksum = 0.0;
};

struct SessionOptions {
  int64_t context_length = 0;   // 0: the model's max_positions, capped at 4096
  DType kv_dtype = DType::f32;  // f32 or f16 KV cache entries
  bool all_logits = false;      // keep logits of every prefilled position, not only the last
  int n_threads = 0;            // 0: hardware threads (ignored when `pool` is given)
  std::shared_ptr<ThreadPool> pool;
  // Debug hook, called on the calling thread after each stage (slows the pass down;
  // loom/trace.hpp has helpers). It may throw to abandon the pass: the exception leaves
  // prefill/step and the session is as it was before the call.
  std::function<void(const TraceEvent&)> trace;
  // Opt-in: prefill with bf16 weights rounds activations to bf16 for the products, to use
  // the CPU's bf16 dot-product instructions (AVX512-BF16) where present: about twice the
  // f32 rate for bf16 prefill. It breaks batch invariance (decode does not round, so a
  // prompt's logits then differ from the same tokens fed one at a time). Off (the
  // default): activations stay f32, exact to the weights as stored, and every token's
  // logits are the same bits however the tokens were batched.
  bool bf16_activations = false;
};

enum class Pooling : uint8_t { mean, last };

class Session {
 public:
  explicit Session(std::shared_ptr<const Model> model, SessionOptions options = {});
  ~Session();
  Session(const Session&) = delete;
  Session& operator=(const Session&) = delete;

  // Appends `tokens` at the current position. Throws Error(context_full) when they do
  // not fit, Error(invalid_argument) for an id outside the vocabulary.
  void prefill(std::span<const int32_t> tokens);
  // The same, keeping logits after every one of these tokens (all_logits) or only after
  // the last, whatever the session's option says: speculative verification scores a
  // drafted run in one pass.
  void prefill(std::span<const int32_t> tokens, bool all_logits);
  // Appends one token (decode).
  void step(int32_t token);

  // Logits after the last token fed (vocab_size floats). Borrowed: valid until the
  // next prefill/step/reset/rollback.
  std::span<const float> logits() const;
  // all_logits sessions: logits after token i of the last prefill (0-based), i <
  // logit_rows(). Otherwise only the last row is kept and logit_rows() is 1.
  std::span<const float> logits_at(int64_t i) const;
  int64_t logit_rows() const noexcept;

  int64_t position() const noexcept;
  int64_t context_length() const noexcept;
  // Forgets everything (position 0).
  void reset() noexcept;
  // Forgets tokens from `position` on; later tokens are recomputed when fed again.
  void rollback(int64_t position);
  // Replaces this session's cache with the first `n` positions of `other`'s cache. The
  // other session's model must have the same attention shape and positions (layers, KV
  // heads, head_dim, RoPE and q/k row order); throws Error(invalid_argument) naming what
  // differs, or Error(context_full) when n exceeds this context. Speculative decoding
  // starts a quantized copy of the target from the target's prompt cache this way
  // instead of recomputing it. The logits are cleared: feed a token to get new ones.
  // `keep` (at most n and this session's position) keeps this session's own first `keep`
  // positions and copies only [keep, n): the caller vouches that they hold the same
  // tokens (a draft that re-syncs with its target copies only what it has not seen).
  // `other` may be this session: it keeps its first n positions, as rollback(n) would.
  void copy_cache_from(const Session& other, int64_t n, int64_t keep = 0);

  // Final hidden states (after the last norm) of `tokens`, pooled, optionally
  // L2-normalized: an embedding for retrieval. Runs on a fresh context (resets).
  std::vector<float> embed(std::span<const int32_t> tokens, Pooling pooling, bool normalize);

  // log P(tokens[i] | tokens[<i]) for i = 1..n-1, from a fresh context (resets).
  std::vector<double> score(std::span<const int32_t> tokens);

  int64_t kv_cache_bytes() const noexcept;
  const Model& model() const noexcept;
  ThreadPool& pool() noexcept;
  // The same pool as a shared handle, for another session that should share its threads
  // (a speculative draft model runs between the target's passes, never beside them).
  std::shared_ptr<ThreadPool> shared_pool() const noexcept;

  struct State;

 private:
  std::unique_ptr<State> state_;
};

// kv_cache_bytes_for(config, context, dtype), the bytes a session's KV cache takes, is
// declared in loom/model.hpp (the loader reports it too, and must not reach up here).

}  // namespace loom
