// C API: samplers (built-in chain, custom C stages) and generation.
#include <cmath>

#include "capi_internal.hpp"
#include "loom/generate.hpp"

using loom::capi::guard;
using loom::capi::require;

namespace {

// Adapts a C callback to a SamplerStage: the callback sees a contiguous array of
// loom_candidate it may rewrite and shrink.
class CStage final : public loom::SamplerStage {
 public:
  CStage(std::string name, loom_sampler_stage_fn fn, void* user) : name_(std::move(name)), fn_(fn), user_(user) {}
  std::string name() const override { return name_; }
  void apply(loom::CandidateList& list, loom::SamplerContext& ctx) override {
    if (!list.normalized) list.normalize();
    buffer_.resize(list.items.size());
    for (size_t i = 0; i < list.items.size(); ++i) {
      buffer_[i] = loom_candidate{list.items[i].id, list.items[i].logit, list.items[i].p};
    }
    size_t n = buffer_.size();
    const int32_t rc = fn_(user_, buffer_.data(), &n, ctx.history.data(), ctx.history.size());
    if (rc != 0) {
      throw loom::Error(loom::ErrorCode::cancelled, "sampler stage '" + name_ + "' stopped sampling (returned " +
                                                        std::to_string(rc) + ")");
    }
    if (n == 0 || n > buffer_.size()) {
      throw loom::Error(loom::ErrorCode::invalid_argument,
                        "sampler stage '" + name_ + "' left " + std::to_string(n) + " candidates (allowed 1.." +
                            std::to_string(buffer_.size()) + ")");
    }
    list.items.resize(n);
    for (size_t i = 0; i < n; ++i) {
      if (buffer_[i].id < 0 || !std::isfinite(buffer_[i].logit)) {
        throw loom::Error(loom::ErrorCode::invalid_argument,
                          "sampler stage '" + name_ + "' wrote an invalid candidate at index " + std::to_string(i));
      }
      list.items[i] = loom::Candidate{buffer_[i].id, buffer_[i].logit, buffer_[i].p};
    }
    list.sorted = false;
    list.normalized = false;
  }

 private:
  std::string name_;
  loom_sampler_stage_fn fn_;
  void* user_;
  std::vector<loom_candidate> buffer_;
};

}  // namespace

namespace loom::capi {

int32_t stop_to_c(loom::StopReason r) {
  switch (r) {
    case loom::StopReason::end_of_sequence: return LOOM_STOP_EOS;
    case loom::StopReason::stop_string: return LOOM_STOP_STRING;
    case loom::StopReason::max_tokens: return LOOM_STOP_MAX_TOKENS;
    case loom::StopReason::cancelled: return LOOM_STOP_CANCELLED;
    case loom::StopReason::context_full: return LOOM_STOP_CONTEXT_FULL;
  }
  return LOOM_STOP_MAX_TOKENS;
}

GenerateOptions generate_options(const loom_generate_params& p) {
  if (p.max_tokens < 0) throw loom::Error(loom::ErrorCode::invalid_argument, "max_tokens is negative");
  loom::GenerateOptions o;
  o.max_tokens = p.max_tokens;
  if (p.n_stop_strings > 0) require(p.stop_strings, "stop_strings");
  for (size_t i = 0; i < p.n_stop_strings; ++i) {
    require(p.stop_strings[i], "a stop string");
    o.stop_strings.emplace_back(p.stop_strings[i]);
  }
  o.add_special = (p.tokenize_flags & LOOM_TOKENIZE_ADD_SPECIAL) != 0;
  o.parse_special = (p.tokenize_flags & LOOM_TOKENIZE_PARSE_SPECIAL) != 0;
  o.continue_session = p.continue_session != 0;
  if (p.on_text != nullptr) {
    o.on_text = [fn = p.on_text, user = p.user](std::string_view text, int32_t token) {
      return fn(user, text.data(), text.size(), token) != 0;
    };
  }
  return o;
}

}  // namespace loom::capi

using loom::capi::stop_to_c;

extern "C" {

static void fill_sampler_params(loom_sampler_params* p) {
  if (p == nullptr) return;
  std::memset(p, 0, sizeof *p);
  const loom::SamplerParams d;
  p->struct_size = sizeof *p;
  p->temperature = d.temperature;
  p->top_k = d.top_k;
  p->top_p = d.top_p;
  p->min_p = d.min_p;
  p->repeat_penalty = d.repeat_penalty;
  p->frequency_penalty = d.frequency_penalty;
  p->presence_penalty = d.presence_penalty;
  p->penalty_last_n = d.penalty_last_n;
  p->seed = d.seed;
}
LOOM_CAPI_DEFINE_INIT(loom_sampler_params, loom_sampler_params_init, fill_sampler_params)

LOOM_API loom_status loom_sampler_create(const loom_sampler_params* params, loom_sampler** out,
                                         loom_error** err) {
  if (out != nullptr) *out = nullptr;
  return guard(err, [&] {
    require(out, "output sampler pointer");
    const auto p = loom::capi::read_params(params, loom_sampler_params_init_sized);
    loom::SamplerParams s;
    s.temperature = p.temperature;
    s.top_k = p.top_k;
    s.top_p = p.top_p;
    s.min_p = p.min_p;
    s.repeat_penalty = p.repeat_penalty;
    s.frequency_penalty = p.frequency_penalty;
    s.presence_penalty = p.presence_penalty;
    s.penalty_last_n = p.penalty_last_n;
    s.seed = p.seed;
    if (p.n_logit_bias > 0) {
      require(p.logit_bias_ids, "logit_bias_ids");
      require(p.logit_bias_values, "logit_bias_values");
      for (size_t i = 0; i < p.n_logit_bias; ++i) s.logit_bias.emplace_back(p.logit_bias_ids[i], p.logit_bias_values[i]);
    }
    auto handle = std::make_unique<loom_sampler>();
    handle->sampler = std::make_unique<loom::Sampler>(s);
    *out = handle.release();
  });
}

LOOM_API void loom_sampler_free(loom_sampler* sampler) { delete sampler; }

LOOM_API loom_status loom_sampler_add_stage(loom_sampler* sampler, const char* name, loom_sampler_stage_fn fn,
                                            void* user) {
  return guard(nullptr, [&] {
    require(sampler, "sampler");
    if (fn == nullptr) throw loom::Error(loom::ErrorCode::invalid_argument, "stage function is NULL");
    sampler->sampler->add_stage(std::make_unique<CStage>(name ? name : "custom", fn, user));
  });
}

LOOM_API loom_status loom_sample(loom_session* session, loom_sampler* sampler, int32_t* token, loom_error** err) {
  return guard(err, [&] {
    require(session, "session");
    require(sampler, "sampler");
    require(token, "token output");
    if (session->session->logit_rows() == 0) {
      throw loom::Error(loom::ErrorCode::invalid_argument, "no logits to sample: prefill or step first");
    }
    *token = sampler->sampler->sample(session->session->logits());
  });
}

LOOM_API loom_status loom_sampler_accept(loom_sampler* sampler, int32_t token) {
  if (sampler == nullptr) return LOOM_ERR_INVALID_ARGUMENT;
  return guard(nullptr, [&] { sampler->sampler->accept(token); });
}

LOOM_API loom_status loom_sampler_reset(loom_sampler* sampler) {
  if (sampler == nullptr) return LOOM_ERR_INVALID_ARGUMENT;
  sampler->sampler->reset();
  return LOOM_OK;
}

static void fill_generate_params(loom_generate_params* p) {
  if (p == nullptr) return;
  std::memset(p, 0, sizeof *p);
  p->struct_size = sizeof *p;
  p->max_tokens = 128;
  p->tokenize_flags = LOOM_TOKENIZE_ADD_SPECIAL;
}
LOOM_CAPI_DEFINE_INIT(loom_generate_params, loom_generate_params_init, fill_generate_params)

static void fill_generate_result(loom_generate_result* r) {
  if (r == nullptr) return;
  std::memset(r, 0, sizeof *r);
  r->struct_size = sizeof *r;
}
LOOM_CAPI_DEFINE_INIT(loom_generate_result, loom_generate_result_init, fill_generate_result)

LOOM_API loom_status loom_generate(loom_session* session, loom_sampler* sampler, const char* prompt,
                                   size_t prompt_len, const loom_generate_params* params,
                                   loom_generate_result* result, loom_error** err) {
  return guard(err, [&] {
    require(session, "session");
    require(sampler, "sampler");
    if (prompt_len > 0) require(prompt, "prompt");
    const auto p = loom::capi::read_params(params, loom_generate_params_init_sized);
    const auto& tokenizer = session->session->model().tokenizer();
    if (!tokenizer) throw loom::Error(loom::ErrorCode::unsupported, "the model has no tokenizer to generate text with");
    const loom::GenerateOptions o = loom::capi::generate_options(p);
    const auto r = loom::generate(*session->session, *sampler->sampler, *tokenizer,
                                  std::string_view(prompt ? prompt : "", prompt_len), o);
    if (result != nullptr) {
      loom_generate_result full;
      loom_generate_result_init(&full);
      full.prompt_tokens = static_cast<int32_t>(r.prompt_tokens);
      full.generated_tokens = static_cast<int32_t>(r.tokens.size());
      full.stop_reason = stop_to_c(r.stop);
      full.prompt_seconds = r.prompt_seconds;
      full.generate_seconds = r.generate_seconds;
      loom::capi::write_result(result, full);
    }
  });
}

}  // extern "C"
