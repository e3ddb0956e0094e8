// C API: chat templates, rendered by loom::ChatTemplate over the caller's conversation.
#include <cstring>

#include "capi_internal.hpp"
#include "loom/chat_template.hpp"
#include "loom/tokenizer.hpp"

using loom::capi::guard;
using loom::capi::require;

namespace {

// The template to render and the inputs every conversation shape shares: the caller's
// source or the model's own, and the model's BOS/EOS text unless the params override them.
loom::ChatTemplate prepare(const loom_model* model, const char* template_source,
                           const loom_chat_template_params* params, loom::ChatTemplateInputs& in) {
  const auto p = loom::capi::read_params(params, loom_chat_template_params_init_sized);
  std::shared_ptr<const loom::Tokenizer> tok;
  if (model != nullptr) tok = model->model->tokenizer();
  if (template_source == nullptr) {
    require(model, "model (or template_source)");
    if (!tok || tok->chat_template().empty()) {
      throw loom::Error(loom::ErrorCode::unsupported, "the model has no chat template");
    }
  }
  in.add_generation_prompt = p.add_generation_prompt != 0;
  if (p.bos_token != nullptr) in.bos_token = p.bos_token;
  else if (tok) in.bos_token = tok->bos_token();
  if (p.eos_token != nullptr) in.eos_token = p.eos_token;
  else if (tok) in.eos_token = tok->eos_token();
  if (p.tools_json != nullptr) in.tools_json = p.tools_json;
  if (p.extra_context_json != nullptr) in.extra_context_json = p.extra_context_json;
  if (template_source != nullptr) return loom::ChatTemplate::compile(template_source, "chat template");
  return loom::ChatTemplate::compile(tok->chat_template(), "the model's chat template");
}

}  // namespace

extern "C" {

static void fill_chat_template_params(loom_chat_template_params* p) {
  if (p == nullptr) return;
  std::memset(p, 0, sizeof *p);
  p->struct_size = sizeof *p;
  p->add_generation_prompt = 1;
}
LOOM_CAPI_DEFINE_INIT(loom_chat_template_params, loom_chat_template_params_init, fill_chat_template_params)

LOOM_API loom_status loom_chat_apply_template(const loom_model* model, const char* template_source,
                                             const loom_chat_message* messages, size_t n_messages,
                                             const loom_chat_template_params* params, char* buf,
                                             size_t cap, size_t* len, loom_error** err) {
  return guard(err, [&] {
    require(len, "length output");
    if (n_messages > 0) require(messages, "messages");
    loom::ChatTemplateInputs in;
    const loom::ChatTemplate tpl = prepare(model, template_source, params, in);
    in.messages.reserve(n_messages);
    for (size_t k = 0; k < n_messages; ++k) {
      require(messages[k].role, "message role");
      require(messages[k].content, "message content");
      in.messages.push_back({messages[k].role, messages[k].content});
    }
    loom::capi::copy_out_string(tpl.render(in), buf, cap, len);
  });
}

LOOM_API loom_status loom_chat_apply_template_json(const loom_model* model, const char* template_source,
                                                  const char* messages_json,
                                                  const loom_chat_template_params* params, char* buf,
                                                  size_t cap, size_t* len, loom_error** err) {
  return guard(err, [&] {
    require(len, "length output");
    require(messages_json, "messages_json");
    loom::ChatTemplateInputs in;
    const loom::ChatTemplate tpl = prepare(model, template_source, params, in);
    in.messages_json = messages_json;
    if (in.messages_json.empty()) in.messages_json = "[]";
    loom::capi::copy_out_string(tpl.render(in), buf, cap, len);
  });
}

}  // extern "C"
