// The C API's batches: loom_batch wraps a loom::Batch, the ready list of its last decode
// (so loom_batch_ready can answer with the size-query convention) and the host's cancel
// callback.
#include <cstring>
#include <functional>
#include <limits>

#include "capi_internal.hpp"
#include "loom/batch.hpp"

struct loom_batch {
  std::unique_ptr<loom::Batch> batch;
  std::vector<loom::SeqId> ready;  // the last successful decode's ready sequences
  int32_t (*cancel)(void*) = nullptr;
  void* cancel_user = nullptr;
};

using loom::capi::guard;
using loom::capi::require;

namespace {

int32_t clamp32(int64_t v) {
  return static_cast<int32_t>(std::min<int64_t>(v, std::numeric_limits<int32_t>::max()));
}

void require_nonnegative(int64_t v, const char* what) {
  if (v < 0) throw loom::Error(loom::ErrorCode::invalid_argument, std::string(what) + " is negative");
}

}  // namespace

extern "C" {

static void fill_batch_params(loom_batch_params* p) {
  if (p == nullptr) return;
  std::memset(p, 0, sizeof *p);
  p->struct_size = sizeof *p;
  const loom::BatchOptions d;  // the C++ defaults
  p->max_sequences = static_cast<int32_t>(d.max_sequences);
  p->context_length = static_cast<int32_t>(d.context_length);
  p->block_tokens = static_cast<int32_t>(d.block_tokens);
  p->pool_tokens = d.pool_tokens;
  p->pool_bytes = d.pool_bytes;
  p->kv_dtype = LOOM_DTYPE_F32;
  p->token_budget = static_cast<int32_t>(d.token_budget);
  p->n_threads = d.n_threads;
}
LOOM_CAPI_DEFINE_INIT(loom_batch_params, loom_batch_params_init, fill_batch_params)

static void fill_batch_pass(loom_batch_pass* r) {
  if (r == nullptr) return;
  std::memset(r, 0, sizeof *r);
  r->struct_size = sizeof *r;
}
LOOM_CAPI_DEFINE_INIT(loom_batch_pass, loom_batch_pass_init, fill_batch_pass)

static void fill_batch_stats(loom_batch_stats* s) {
  if (s == nullptr) return;
  std::memset(s, 0, sizeof *s);
  s->struct_size = sizeof *s;
}
LOOM_CAPI_DEFINE_INIT(loom_batch_stats, loom_batch_stats_init, fill_batch_stats)

LOOM_API loom_status loom_batch_create(const loom_model* model, const loom_batch_params* params, loom_batch** out,
                                       loom_error** err) {
  if (out != nullptr) *out = nullptr;
  return guard(err, [&] {
    require(model, "model");
    require(out, "output batch pointer");
    const auto p = loom::capi::read_params(params, loom_batch_params_init_sized);
    require_nonnegative(p.context_length, "context_length");
    require_nonnegative(p.pool_tokens, "pool_tokens");
    require_nonnegative(p.pool_bytes, "pool_bytes");
    require_nonnegative(p.n_threads, "n_threads");
    loom::BatchOptions o;
    o.max_sequences = p.max_sequences;
    o.context_length = p.context_length;
    o.block_tokens = p.block_tokens;
    o.pool_tokens = p.pool_tokens;
    o.pool_bytes = p.pool_bytes;
    o.kv_dtype = loom::capi::kv_dtype_from_c(p.kv_dtype);
    o.token_budget = p.token_budget;
    o.n_threads = p.n_threads;
    auto handle = std::make_unique<loom_batch>();
    handle->batch = std::make_unique<loom::Batch>(model->model, std::move(o));
    handle->cancel = p.cancel;
    handle->cancel_user = p.cancel_user;
    *out = handle.release();
  });
}

LOOM_API void loom_batch_free(loom_batch* batch) { delete batch; }

LOOM_API loom_status loom_batch_add(loom_batch* batch, loom_seq_id* out, loom_error** err) {
  return guard(err, [&] {
    require(batch, "batch");
    require(out, "output sequence id");
    *out = batch->batch->add();
  });
}

LOOM_API loom_status loom_batch_feed(loom_batch* batch, loom_seq_id seq, const int32_t* tokens, size_t n,
                                     int32_t all_logits, loom_error** err) {
  return guard(err, [&] {
    require(batch, "batch");
    if (n > 0) require(tokens, "tokens");
    batch->batch->feed(seq, std::span<const int32_t>(tokens, n), all_logits != 0);
  });
}

LOOM_API loom_status loom_batch_fork(loom_batch* batch, loom_seq_id parent, loom_seq_id* out, loom_error** err) {
  return guard(err, [&] {
    require(batch, "batch");
    require(out, "output sequence id");
    *out = batch->batch->fork(parent);
  });
}

LOOM_API loom_status loom_batch_rollback(loom_batch* batch, loom_seq_id seq, int32_t position, loom_error** err) {
  return guard(err, [&] {
    require(batch, "batch");
    batch->batch->rollback(seq, position);
  });
}

LOOM_API loom_status loom_batch_trim(loom_batch* batch, loom_seq_id seq, int32_t begin, int32_t end,
                                     loom_error** err) {
  return guard(err, [&] {
    require(batch, "batch");
    batch->batch->trim(seq, begin, end);
  });
}

LOOM_API loom_status loom_batch_remove(loom_batch* batch, loom_seq_id seq, loom_error** err) {
  return guard(err, [&] {
    require(batch, "batch");
    batch->batch->remove(seq);
    std::erase(batch->ready, seq);
  });
}

LOOM_API loom_status loom_batch_context_shift(loom_batch* batch, loom_seq_id seq, int32_t needed, int32_t keep_first,
                                              int32_t* dropped, loom_error** err) {
  if (dropped != nullptr) *dropped = 0;
  return guard(err, [&] {
    require(batch, "batch");
    const int64_t d = loom::context_shift(*batch->batch, seq, needed, keep_first);
    if (dropped != nullptr) *dropped = static_cast<int32_t>(d);
  });
}

LOOM_API loom_status loom_batch_decode(loom_batch* batch, loom_batch_pass* result, loom_error** err) {
  return guard(err, [&] {
    require(batch, "batch");
    std::function<bool()> cancel;
    if (batch->cancel != nullptr) {
      cancel = [fn = batch->cancel, user = batch->cancel_user] { return fn(user) != 0; };
    }
    loom::BatchPass pass = batch->batch->decode(cancel);
    batch->ready = std::move(pass.ready);
    if (result != nullptr) {
      loom_batch_pass full;
      loom_batch_pass_init(&full);
      full.tokens = clamp32(pass.tokens);
      full.n_ready = clamp32(static_cast<int64_t>(batch->ready.size()));
      full.n_partial = clamp32(static_cast<int64_t>(pass.partial.size()));
      loom::capi::write_result(result, full);
    }
  });
}

LOOM_API loom_status loom_batch_ready(const loom_batch* batch, loom_seq_id* ids, size_t cap, size_t* n) {
  return guard(nullptr, [&] {
    require(batch, "batch");
    loom::capi::copy_out_array(batch->ready, ids, cap, n);
  });
}

LOOM_API const float* loom_batch_logits(const loom_batch* batch, loom_seq_id seq, size_t* n_vocab) {
  if (n_vocab != nullptr) *n_vocab = 0;
  if (batch == nullptr || !batch->batch->contains(seq)) return nullptr;
  const loom::Batch& b = *batch->batch;
  if (b.logit_rows(seq) == 0 || b.pending(seq) > 0) return nullptr;
  const auto row = b.logits(seq);
  if (n_vocab != nullptr) *n_vocab = row.size();
  return row.data();
}

LOOM_API const float* loom_batch_logits_at(const loom_batch* batch, loom_seq_id seq, size_t index,
                                           size_t* n_vocab) {
  if (n_vocab != nullptr) *n_vocab = 0;
  if (batch == nullptr || !batch->batch->contains(seq)) return nullptr;
  const loom::Batch& b = *batch->batch;
  if (index >= static_cast<size_t>(b.logit_rows(seq))) return nullptr;
  const auto row = b.logits_at(seq, static_cast<int64_t>(index));
  if (n_vocab != nullptr) *n_vocab = row.size();
  return row.data();
}

LOOM_API size_t loom_batch_logit_rows(const loom_batch* batch, loom_seq_id seq) {
  if (batch == nullptr || !batch->batch->contains(seq)) return 0;
  return static_cast<size_t>(batch->batch->logit_rows(seq));
}

LOOM_API int32_t loom_batch_position(const loom_batch* batch, loom_seq_id seq) {
  if (batch == nullptr || !batch->batch->contains(seq)) return -1;
  return clamp32(batch->batch->position(seq));
}

LOOM_API int32_t loom_batch_pending(const loom_batch* batch, loom_seq_id seq) {
  if (batch == nullptr || !batch->batch->contains(seq)) return -1;
  return clamp32(batch->batch->pending(seq));
}

LOOM_API int32_t loom_batch_contains(const loom_batch* batch, loom_seq_id seq) {
  return batch != nullptr && batch->batch->contains(seq) ? 1 : 0;
}

LOOM_API int32_t loom_batch_context_length(const loom_batch* batch) {
  return batch != nullptr ? clamp32(batch->batch->context_length()) : -1;
}

LOOM_API loom_status loom_batch_sample(loom_batch* batch, loom_seq_id seq, loom_sampler* sampler, int32_t* token,
                                       loom_error** err) {
  return guard(err, [&] {
    require(batch, "batch");
    require(sampler, "sampler");
    require(token, "token output");
    // Batch::logits names the sequence and why nothing is readable (pending, none yet).
    *token = sampler->sampler->sample(batch->batch->logits(seq));
  });
}

LOOM_API loom_status loom_batch_sample_ready(loom_batch* batch, loom_batch_sampler_fn sampler_of, void* user,
                                             int32_t feed_back, loom_seq_id* ids, int32_t* tokens, size_t cap,
                                             size_t* n, loom_error** err) {
  return guard(err, [&] {
    require(batch, "batch");
    if (sampler_of == nullptr) throw loom::Error(loom::ErrorCode::invalid_argument, "sampler callback is NULL");
    require(n, "count output");
    *n = 0;
    // The host's samplers, asked once per sequence; the count is known before drawing.
    std::vector<std::pair<loom::SeqId, loom::Sampler*>> chosen;
    for (const loom::SeqId id : batch->ready) {
      loom_sampler* s = sampler_of(user, id);
      if (s != nullptr) chosen.emplace_back(id, s->sampler.get());
    }
    if (cap < chosen.size()) {
      *n = chosen.size();
      throw loom::Error(loom::ErrorCode::buffer_too_small,
                        "room for " + std::to_string(cap) + " sampled tokens, " + std::to_string(chosen.size()) +
                            " sequences to sample");
    }
    if (!chosen.empty()) {
      require(ids, "sequence id output");
      require(tokens, "token output");
    }
    auto of = [&](loom::SeqId id) -> loom::Sampler* {
      for (const auto& [seq, s] : chosen) {
        if (seq == id) return s;
      }
      return nullptr;
    };
    const auto drawn = batch->batch->sample_ready(batch->ready, of, feed_back != 0);
    for (size_t i = 0; i < drawn.size(); ++i) {
      ids[i] = drawn[i].seq;
      tokens[i] = drawn[i].token;
    }
    *n = drawn.size();
  });
}

LOOM_API loom_status loom_batch_get_stats(const loom_batch* batch, loom_batch_stats* stats) {
  if (batch == nullptr || stats == nullptr) return LOOM_ERR_INVALID_ARGUMENT;
  return guard(nullptr, [&] {
    const loom::BatchStats s = batch->batch->stats();
    loom_batch_stats full;
    loom_batch_stats_init(&full);
    full.sequences = clamp32(s.sequences);
    full.block_tokens = clamp32(s.block_tokens);
    full.blocks_total = s.blocks_total;
    full.blocks_used = s.blocks_used;
    full.blocks_shared = s.blocks_shared;
    full.blocks_free = s.blocks_free;
    full.bytes_total = s.bytes_total;
    full.bytes_used = s.bytes_used;
    full.passes = s.passes;
    full.tokens_processed = s.tokens_processed;
    loom::capi::write_result(stats, full);
  });
}

}  // extern "C"
