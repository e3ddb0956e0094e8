// The C API's chat sessions: loom_chat wraps a loom::Chat over the caller's session.
#include <cstring>

#include "capi_internal.hpp"
#include "loom/chat.hpp"

struct loom_chat {
  std::unique_ptr<loom::Chat> chat;
};

using loom::capi::guard;
using loom::capi::require;

extern "C" {

static void fill_chat_params(loom_chat_params* p) {
  if (p == nullptr) return;
  std::memset(p, 0, sizeof *p);
  p->struct_size = sizeof *p;
}
LOOM_CAPI_DEFINE_INIT(loom_chat_params, loom_chat_params_init, fill_chat_params)

static void fill_chat_result(loom_chat_result* r) {
  if (r == nullptr) return;
  std::memset(r, 0, sizeof *r);
  r->struct_size = sizeof *r;
}
LOOM_CAPI_DEFINE_INIT(loom_chat_result, loom_chat_result_init, fill_chat_result)

LOOM_API loom_status loom_chat_create(loom_session* session, const loom_chat_params* params, loom_chat** out,
                                      loom_error** err) {
  return guard(err, [&] {
    require(out, "out");
    *out = nullptr;
    require(session, "session");
    const auto p = loom::capi::read_params(params, loom_chat_params_init_sized);
    const auto& tokenizer = session->session->model().tokenizer();
    if (!tokenizer) throw loom::Error(loom::ErrorCode::unsupported, "the model has no tokenizer to chat with");
    loom::ChatOptions o;
    if (p.template_source != nullptr) o.template_source = p.template_source;
    if (p.bos_token != nullptr) o.bos_token = p.bos_token;
    if (p.eos_token != nullptr) o.eos_token = p.eos_token;
    if (p.extra_context_json != nullptr) o.extra_context_json = p.extra_context_json;
    auto chat = std::make_unique<loom_chat>();
    // The tokenizer is owned by the model, which the session keeps alive.
    chat->chat = std::make_unique<loom::Chat>(*session->session, *tokenizer, std::move(o));
    *out = chat.release();
  });
}

LOOM_API void loom_chat_free(loom_chat* chat) { delete chat; }

LOOM_API loom_status loom_chat_add_message(loom_chat* chat, const char* role, const char* content,
                                           loom_error** err) {
  return guard(err, [&] {
    require(chat, "chat");
    require(role, "role");
    require(content, "content");
    chat->chat->add(role, content);
  });
}

LOOM_API loom_status loom_chat_set_system(loom_chat* chat, const char* content, loom_error** err) {
  return guard(err, [&] {
    require(chat, "chat");
    chat->chat->set_system(content != nullptr ? content : "");
  });
}

LOOM_API loom_status loom_chat_clear(loom_chat* chat) {
  if (chat == nullptr) return LOOM_ERR_INVALID_ARGUMENT;
  chat->chat->clear();
  return LOOM_OK;
}

LOOM_API size_t loom_chat_message_count(const loom_chat* chat) {
  return chat != nullptr ? chat->chat->messages().size() : 0;
}

LOOM_API loom_status loom_chat_get_message(const loom_chat* chat, size_t index, char* role, size_t role_cap,
                                           size_t* role_len, char* content, size_t content_cap,
                                           size_t* content_len, loom_error** err) {
  return guard(err, [&] {
    require(chat, "chat");
    const auto& messages = chat->chat->messages();
    if (index >= messages.size()) {
      throw loom::Error(loom::ErrorCode::invalid_argument, "message index " + std::to_string(index) +
                                                               " is past the " + std::to_string(messages.size()) +
                                                               " messages of the chat");
    }
    // Both sizes are reported before either copy can fail for a small buffer.
    if (role_len != nullptr) *role_len = messages[index].role.size();
    if (content_len != nullptr) *content_len = messages[index].content.size();
    if (role_len != nullptr) loom::capi::copy_out_string(messages[index].role, role, role_cap, role_len);
    if (content_len != nullptr) loom::capi::copy_out_string(messages[index].content, content, content_cap, content_len);
  });
}

LOOM_API loom_status loom_chat_render(const loom_chat* chat, int32_t add_generation_prompt, char* buf, size_t cap,
                                      size_t* len, loom_error** err) {
  return guard(err, [&] {
    require(chat, "chat");
    loom::capi::copy_out_string(chat->chat->render(add_generation_prompt != 0), buf, cap, len);
  });
}

LOOM_API loom_status loom_chat_reply(loom_chat* chat, loom_sampler* sampler, const loom_generate_params* params,
                                     loom_chat_result* result, loom_error** err) {
  return guard(err, [&] {
    require(chat, "chat");
    require(sampler, "sampler");
    const auto p = loom::capi::read_params(params, loom_generate_params_init_sized);
    const auto r = chat->chat->reply(*sampler->sampler, loom::capi::generate_options(p));
    if (result != nullptr) {
      loom_chat_result full;
      loom_chat_result_init(&full);
      full.prompt_tokens = static_cast<int32_t>(r.prompt_tokens);
      full.reused_tokens = static_cast<int32_t>(r.reused_tokens);
      full.prefilled_tokens = static_cast<int32_t>(r.prefilled_tokens);
      full.generated_tokens = static_cast<int32_t>(r.generation.tokens.size());
      full.stop_reason = loom::capi::stop_to_c(r.generation.stop);
      full.prompt_seconds = r.generation.prompt_seconds;
      full.generate_seconds = r.generation.generate_seconds;
      loom::capi::write_result(result, full);
    }
  });
}

}  // extern "C"
