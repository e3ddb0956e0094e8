// C API: speculative decoding — drafters (a draft model, prompt lookup, a host callback),
// the quantized draft copy of a model, and loom_generate_speculative.
#include <algorithm>
#include <cstring>
#include <limits>

#include "capi_internal.hpp"
#include "loom/speculative.hpp"
#include "loom/thread_pool.hpp"

struct loom_drafter {
  std::unique_ptr<loom::Drafter> drafter;
};

using loom::capi::guard;
using loom::capi::require;

namespace {

int32_t clamp32(int64_t v) {
  return static_cast<int32_t>(std::min<int64_t>(v, std::numeric_limits<int32_t>::max()));
}

// The C callback behind a callback drafter: a nonzero return cancels the generation; the
// count is checked by the C++ drafter (0..max), the ids by the generation loop.
loom::DraftFunction c_draft(loom_draft_fn fn, void* user, std::string name) {
  return [fn, user, name = std::move(name)](std::span<const int32_t> context, std::span<int32_t> out) -> int64_t {
    size_t n = 0;
    const int32_t rc = fn(user, context.data(), context.size(), out.data(), out.size(), &n);
    if (rc != 0) {
      throw loom::Error(loom::ErrorCode::cancelled,
                        "drafter '" + name + "' stopped the generation (returned " + std::to_string(rc) + ")");
    }
    return static_cast<int64_t>(std::min<size_t>(n, static_cast<size_t>(std::numeric_limits<int64_t>::max())));
  };
}

}  // namespace

extern "C" {

static void fill_draft_model_params(loom_draft_model_params* p) {
  if (p == nullptr) return;
  std::memset(p, 0, sizeof *p);
  p->struct_size = sizeof *p;
  const loom::DraftModelOptions d;
  p->context_length = static_cast<int32_t>(d.context_length);
  p->kv_dtype = LOOM_DTYPE_F32;
  p->min_confidence = d.min_confidence;
}
LOOM_CAPI_DEFINE_INIT(loom_draft_model_params, loom_draft_model_params_init, fill_draft_model_params)

LOOM_API loom_status loom_drafter_create_model(const loom_model* draft, const loom_model* target,
                                               const loom_draft_model_params* params, loom_drafter** out,
                                               loom_error** err) {
  if (out != nullptr) *out = nullptr;
  return guard(err, [&] {
    require(draft, "draft model");
    require(target, "target model");
    require(out, "output drafter pointer");
    const auto p = loom::capi::read_params(params, loom_draft_model_params_init_sized);
    if (p.context_length < 0) throw loom::Error(loom::ErrorCode::invalid_argument, "context_length is negative");
    loom::DraftModelOptions o;
    o.context_length = p.context_length;
    o.kv_dtype = loom::capi::kv_dtype_from_c(p.kv_dtype);
    o.min_confidence = p.min_confidence;
    auto handle = std::make_unique<loom_drafter>();
    handle->drafter = loom::make_model_drafter(draft->model, *target->model, o);
    *out = handle.release();
  });
}

LOOM_API loom_status loom_model_draft_copy(const loom_model* target, const char* dtype, loom_model** out,
                                           loom_error** err) {
  if (out != nullptr) *out = nullptr;
  return guard(err, [&] {
    require(target, "target model");
    require(dtype, "dtype");
    require(out, "output model pointer");
    const auto d = loom::dtype_from_name(dtype);
    if (!d) throw loom::Error(loom::ErrorCode::invalid_argument, "unknown dtype '" + std::string(dtype) + "'");
    auto handle = std::make_unique<loom_model>();
    loom::ThreadPool pool(std::max(0, target->conversion_threads) + 1);  // the workers and this thread
    handle->model = loom::make_draft_copy(*target->model, *d, &pool);
    handle->conversion_threads = target->conversion_threads;
    *out = handle.release();
  });
}

LOOM_API loom_status loom_drafter_create_lookup(int32_t max_ngram, int32_t min_ngram, loom_drafter** out,
                                                loom_error** err) {
  if (out != nullptr) *out = nullptr;
  return guard(err, [&] {
    require(out, "output drafter pointer");
    loom::LookupOptions o;
    if (max_ngram != 0 || min_ngram != 0) {
      o.max_ngram = max_ngram;
      o.min_ngram = min_ngram;
    }
    auto handle = std::make_unique<loom_drafter>();
    handle->drafter = loom::make_lookup_drafter(o);
    *out = handle.release();
  });
}

LOOM_API loom_status loom_drafter_create_callback(const char* name, loom_draft_fn draft,
                                                  loom_draft_accepted_fn accepted, void* user, loom_drafter** out,
                                                  loom_error** err) {
  if (out != nullptr) *out = nullptr;
  return guard(err, [&] {
    require(out, "output drafter pointer");
    if (draft == nullptr) throw loom::Error(loom::ErrorCode::invalid_argument, "draft function is NULL");
    const std::string n = name != nullptr ? name : "callback";
    std::function<void(int32_t, int32_t)> on_accepted;
    if (accepted != nullptr) {
      on_accepted = [accepted, user](int32_t a, int32_t d) {
        accepted(user, static_cast<size_t>(a), static_cast<size_t>(d));
      };
    }
    auto handle = std::make_unique<loom_drafter>();
    handle->drafter = loom::make_callback_drafter(n, c_draft(draft, user, n), std::move(on_accepted));
    *out = handle.release();
  });
}

LOOM_API void loom_drafter_free(loom_drafter* drafter) { delete drafter; }

LOOM_API loom_status loom_drafter_warnings(const loom_drafter* drafter, char* buf, size_t cap, size_t* len) {
  return guard(nullptr, [&] {
    require(drafter, "drafter");
    std::string text;
    for (const auto& w : drafter->drafter->warnings()) text += w + "\n";
    loom::capi::copy_out_string(text, buf, cap, len);
  });
}

static void fill_speculative_params(loom_speculative_params* p) {
  if (p == nullptr) return;
  std::memset(p, 0, sizeof *p);
  p->struct_size = sizeof *p;
  const loom::SpeculativeParams d;
  p->max_draft = d.max_draft;
  p->adaptive = d.adaptive ? 1 : 0;
  p->probe_interval = d.probe_interval;
  p->smoothing = d.smoothing;
}
LOOM_CAPI_DEFINE_INIT(loom_speculative_params, loom_speculative_params_init, fill_speculative_params)

static void fill_speculative_stats(loom_speculative_stats* s) {
  if (s == nullptr) return;
  std::memset(s, 0, sizeof *s);
  s->struct_size = sizeof *s;
}
LOOM_CAPI_DEFINE_INIT(loom_speculative_stats, loom_speculative_stats_init, fill_speculative_stats)

LOOM_API loom_status loom_generate_speculative(loom_session* session, loom_sampler* sampler, const char* prompt,
                                               size_t prompt_len, const loom_generate_params* params,
                                               loom_drafter* drafter, const loom_speculative_params* spec,
                                               loom_generate_result* result, loom_speculative_stats* stats,
                                               loom_error** err) {
  return guard(err, [&] {
    require(session, "session");
    require(sampler, "sampler");
    if (prompt_len > 0) require(prompt, "prompt");
    const auto p = loom::capi::read_params(params, loom_generate_params_init_sized);
    const auto sp = loom::capi::read_params(spec, loom_speculative_params_init_sized);
    const auto& tokenizer = session->session->model().tokenizer();
    if (!tokenizer) throw loom::Error(loom::ErrorCode::unsupported, "the model has no tokenizer to generate text with");
    const loom::GenerateOptions o = loom::capi::generate_options(p);
    loom::SpeculativeParams knobs;
    knobs.max_draft = sp.max_draft;
    knobs.adaptive = sp.adaptive != 0;
    knobs.probe_interval = sp.probe_interval;
    knobs.smoothing = sp.smoothing;
    const auto r = loom::speculative_generate(*session->session, *sampler->sampler, *tokenizer,
                                              std::string_view(prompt ? prompt : "", prompt_len),
                                              drafter != nullptr ? drafter->drafter.get() : nullptr, knobs, o);
    if (result != nullptr) {
      loom_generate_result full;
      loom_generate_result_init(&full);
      full.prompt_tokens = clamp32(r.generation.prompt_tokens);
      full.generated_tokens = clamp32(static_cast<int64_t>(r.generation.tokens.size()));
      full.stop_reason = loom::capi::stop_to_c(r.generation.stop);
      full.prompt_seconds = r.generation.prompt_seconds;
      full.generate_seconds = r.generation.generate_seconds;
      loom::capi::write_result(result, full);
    }
    if (stats != nullptr) {
      loom_speculative_stats full;
      loom_speculative_stats_init(&full);
      full.drafted = r.stats.drafted;
      full.accepted = r.stats.accepted;
      full.target_passes = r.stats.target_passes;
      full.rounds_drafting = r.stats.rounds_drafting;
      full.acceptance = r.stats.acceptance();
      full.tokens_per_target_pass = r.tokens_per_target_pass();
      full.draft_seconds = r.stats.draft_seconds;
      full.verify_seconds = r.stats.verify_seconds;
      full.last_draft_length = r.stats.last_draft_length;
      loom::capi::write_result(stats, full);
    }
  });
}

}  // extern "C"
