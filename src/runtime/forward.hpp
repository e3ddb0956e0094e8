// Internal: one forward pass of the transformer over the pending tokens of one or more
// sequences, the single code path behind Session (a batch of one) and Batch.
//
// The pass stacks every sequence's new tokens into one activation matrix [M, hidden]
// (M = all tokens of the pass), so each linear layer reads its weights once for all of
// them (kernels::linear with n_tokens = M). Everything else is per token or per
// sequence: RoPE at each token's own position, keys and values written into its own
// sequence's KV blocks, attention over its own sequence's keys (causal, sliding window).
// Since kernels::linear gives each token's row the same bits whatever else is in the
// product, a sequence's results do not depend on what shares the pass.
//
// The caller prepares each sequence's blocks (SeqKv::prepare_append) before run() and
// commits the positions afterwards; run() writes KV entries only at positions past each
// sequence's length, so a pass that throws leaves every sequence's context as it was.
// Not thread-safe: one pass at a time per Forward.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string_view>
#include <vector>

#include "loom/model.hpp"
#include "loom/session.hpp"
#include "loom/thread_pool.hpp"
#include "runtime/kv_pool.hpp"

namespace loom::runtime {

struct PassSequence {
  SeqKv* kv = nullptr;
  std::span<const int32_t> tokens;  // appended at positions kv->length() ...
  bool all_logits = false;          // logits for every token, else only for the last
  bool want_logits = true;          // false: a prompt chunk whose logits nobody reads
  bool hidden = false;              // keep the final hidden states of every token
};

struct ForwardOptions {
  std::shared_ptr<ThreadPool> pool;
  std::function<void(const TraceEvent&)> trace;
  bool bf16_activations = false;
  int64_t context_length = 0;  // the longest a sequence may grow (LongRoPE picks its factors by it)
};

class Forward {
 public:
  Forward(std::shared_ptr<const Model> model, ForwardOptions options, KvPool& pool);

  // Checks the tokens (ids in the vocabulary, positions in the context) and runs the pass.
  // On success each sequence's logits rows are readable through logits(i) until the next
  // run(); on an exception the previous pass's rows stay readable.
  void run(std::span<const PassSequence> seqs);

  // Logit rows of sequence i of the last successful pass ([rows, vocab]; one row unless
  // all_logits; none when want_logits was false).
  std::span<const float> logits(size_t seq) const;
  int64_t logit_rows(size_t seq) const;
  // Final hidden states of sequence i ([n_tokens, hidden]) when `hidden` was asked for.
  std::span<const float> hidden(size_t seq) const;

  const Model& model() const noexcept { return *model_; }
  const std::shared_ptr<const Model>& model_ptr() const noexcept { return model_; }
  ThreadPool& pool() noexcept { return *options_.pool; }
  const ForwardOptions& options() const noexcept { return options_; }
  // Rotates the cached keys of positions [begin, end) of `kv` by `delta` positions
  // (negative: earlier), for trimming: the keys keep their meaning at their new places.
  void rerotate_keys(SeqKv& kv, int64_t begin, int64_t end, int64_t delta);

 private:
  struct Rows;  // per-pass bookkeeping
  void store_kv(int64_t layer, const Rows& rows);
  void attention(int64_t layer, const Rows& rows);
  void norm_rows(const Tensor& w, const Tensor& b, const float* in, float* out, int64_t n) const;
  void feed_forward(int64_t layer, int64_t m, float* out);
  int64_t ffn_stride() const {
    const ModelConfig& c = model_->config();
    return c.ffn == FfnKind::gated ? 2 * c.intermediate_size : c.intermediate_size;
  }
  void trace(std::string_view name, const float* values, int64_t n, int64_t dim) const;
  void rope_angles(int64_t position, float* cos_out, float* sin_out) const;

  std::shared_ptr<const Model> model_;
  ForwardOptions options_;
  KvPool& kv_;
  std::vector<double> inv_freq_;
  double rope_scale_ = 1.0;
  // Per layer, q, k and v, and gate and up, as one matrix each where the loader put
  // them back to back (model/joined_products.hpp); undefined where they are apart.
  std::vector<Tensor> qkv_, gate_up_;

  // Scratch, sized for the largest pass so far.
  std::vector<float> x_, h_, q_, k_, v_, qkv_out_, attn_, proj_, out_rows_;
  std::vector<float> ffn_;  // [m, ffn_stride()]: a token's [gate | up] (gated FFN) or up (plain)
  std::vector<float> ffn_out_;  // [m, hidden] the FFN's output beside proj_ (parallel residual)
  std::vector<float> cos_, sin_;  // [M, rope_dims/2]
  // Results: a committed set and the one being written (swapped when a pass succeeds).
  struct Results {
    std::vector<float> logits;
    std::vector<float> hidden;
    std::vector<int64_t> logit_first, logit_count;    // per sequence, in rows of `logits`
    std::vector<int64_t> hidden_first, hidden_count;  // per sequence, in rows of `hidden`
  };
  Results results_, next_;
};

}  // namespace loom::runtime
