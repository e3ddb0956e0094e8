// C API: sessions (KV cache, prefill, step, logits) and embeddings.
#include "capi_internal.hpp"
#include "loom/trace.hpp"

using loom::capi::guard;
using loom::capi::require;

namespace {

// The C trace callback behind SessionOptions::trace: stage name without the "blk.N."
// prefix (NUL-terminated in a buffer of its own), the layer apart; a nonzero return
// abandons the pass with Error(cancelled), which the session survives unchanged.
std::function<void(const loom::TraceEvent&)> c_trace(loom_trace_fn fn, void* user) {
  return [fn, user, stage = std::string()](const loom::TraceEvent& e) mutable {
    const loom::TraceStage split = loom::split_trace_name(e.name);
    stage.assign(split.stage);
    const int32_t rc = fn(user, stage.c_str(), split.layer, e.n_tokens, e.dim, e.values);
    if (rc != 0) {
      throw loom::Error(loom::ErrorCode::cancelled, "the trace callback stopped the forward pass at '" +
                                                        std::string(e.name) + "' (returned " +
                                                        std::to_string(rc) + ")");
    }
  };
}

}  // namespace

extern "C" {

static void fill_session_params(loom_session_params* p) {
  if (p == nullptr) return;
  std::memset(p, 0, sizeof *p);
  p->struct_size = sizeof *p;
  p->kv_dtype = LOOM_DTYPE_F32;
}
LOOM_CAPI_DEFINE_INIT(loom_session_params, loom_session_params_init, fill_session_params)

LOOM_API loom_status loom_session_create(const loom_model* model, const loom_session_params* params,
                                         loom_session** out, loom_error** err) {
  if (out != nullptr) *out = nullptr;
  return guard(err, [&] {
    require(model, "model");
    require(out, "output session pointer");
    const auto p = loom::capi::read_params(params, loom_session_params_init_sized);
    loom::SessionOptions o;
    if (p.context_length < 0) throw loom::Error(loom::ErrorCode::invalid_argument, "context_length is negative");
    o.context_length = p.context_length;
    if (p.n_threads < 0) throw loom::Error(loom::ErrorCode::invalid_argument, "n_threads is negative");
    o.n_threads = p.n_threads;
    o.kv_dtype = loom::capi::kv_dtype_from_c(p.kv_dtype);
    o.all_logits = p.all_logits != 0;
    if (p.trace != nullptr) o.trace = c_trace(p.trace, p.trace_user);
    auto handle = std::make_unique<loom_session>();
    handle->session = std::make_unique<loom::Session>(model->model, std::move(o));
    *out = handle.release();
  });
}

LOOM_API void loom_session_free(loom_session* session) { delete session; }

LOOM_API loom_status loom_session_reset(loom_session* session) {
  if (session == nullptr) return LOOM_ERR_INVALID_ARGUMENT;
  session->session->reset();
  return LOOM_OK;
}

LOOM_API loom_status loom_session_rollback(loom_session* session, int32_t position, loom_error** err) {
  return guard(err, [&] {
    require(session, "session");
    session->session->rollback(position);
  });
}

LOOM_API int32_t loom_session_position(const loom_session* session) {
  return session ? static_cast<int32_t>(session->session->position()) : -1;
}

LOOM_API int32_t loom_session_context_length(const loom_session* session) {
  return session ? static_cast<int32_t>(session->session->context_length()) : -1;
}

LOOM_API int64_t loom_session_kv_cache_bytes(const loom_session* session) {
  return session ? session->session->kv_cache_bytes() : 0;
}

LOOM_API loom_status loom_prefill(loom_session* session, const int32_t* tokens, size_t n, loom_error** err) {
  return guard(err, [&] {
    require(session, "session");
    if (n > 0) require(tokens, "tokens");
    session->session->prefill(std::span<const int32_t>(tokens, n));
  });
}

LOOM_API loom_status loom_step(loom_session* session, int32_t token, loom_error** err) {
  return guard(err, [&] {
    require(session, "session");
    session->session->step(token);
  });
}

LOOM_API const float* loom_logits(const loom_session* session, size_t* n_vocab) {
  if (n_vocab != nullptr) *n_vocab = 0;
  if (session == nullptr || session->session->logit_rows() == 0) return nullptr;
  const auto row = session->session->logits();
  if (n_vocab != nullptr) *n_vocab = row.size();
  return row.data();
}

LOOM_API const float* loom_logits_at(const loom_session* session, size_t index, size_t* n_vocab) {
  if (n_vocab != nullptr) *n_vocab = 0;
  if (session == nullptr || index >= static_cast<size_t>(session->session->logit_rows())) return nullptr;
  const auto row = session->session->logits_at(static_cast<int64_t>(index));
  if (n_vocab != nullptr) *n_vocab = row.size();
  return row.data();
}

LOOM_API size_t loom_logit_rows(const loom_session* session) {
  return session ? static_cast<size_t>(session->session->logit_rows()) : 0;
}

LOOM_API loom_status loom_embed(loom_session* session, const int32_t* tokens, size_t n, int32_t pooling,
                                int32_t normalize, float* out, size_t cap, size_t* dim, loom_error** err) {
  return guard(err, [&] {
    require(session, "session");
    require(dim, "dimension output");
    if (n > 0) require(tokens, "tokens");
    if (pooling != LOOM_POOL_MEAN && pooling != LOOM_POOL_LAST) {
      throw loom::Error(loom::ErrorCode::invalid_argument, "pooling must be LOOM_POOL_MEAN or LOOM_POOL_LAST");
    }
    const auto hidden = static_cast<size_t>(session->session->model().config().hidden_size);
    *dim = hidden;
    if (out == nullptr) return;
    if (cap < hidden) {
      throw loom::Error(loom::ErrorCode::buffer_too_small,
                        "embedding needs " + std::to_string(hidden) + " floats, buffer holds " + std::to_string(cap));
    }
    const auto e = session->session->embed(std::span<const int32_t>(tokens, n),
                                           pooling == LOOM_POOL_LAST ? loom::Pooling::last : loom::Pooling::mean,
                                           normalize != 0);
    std::copy(e.begin(), e.end(), out);
  });
}

}  // extern "C"
