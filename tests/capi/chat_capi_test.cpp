// The C API's chat sessions: a host renders, tokenizes and generates a multi-turn
// conversation through loom_chat_*, and the second turn prefills only its new tokens.
#include <catch2/catch.hpp>

#include <cstring>
#include <fstream>
#include <string>

#include "loom.h"
#include "loom/demo.hpp"
#include "common/json_writer.hpp"
#include "support/test_support.hpp"

namespace {

std::string json_string(std::string_view text) { return loom::JsonWriter::escape(text); }

constexpr const char* kTemplate =
    "{{ bos_token }}{% for m in messages %}<|{{ m.role }}|>{{ m.content }}{{ eos_token }}\n{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>{% endif %}";

loom_model* load_chat_model(const loom::test::TempDir& dir) {
  loom::write_demo_model(dir.path());
  std::ofstream(dir / "tokenizer_config.json", std::ios::trunc)
      << R"({"bos_token": "<|begin_of_text|>", "eos_token": "<|end_of_text|>", "chat_template": )" << json_string(kTemplate)
      << "}\n";
  loom_load_params lp;
  loom_load_params_init(&lp);
  lp.log_level = LOOM_LOG_OFF;
  loom_model* m = nullptr;
  loom_error* err = nullptr;
  REQUIRE(loom_model_load(dir.path().c_str(), &lp, &m, &err) == LOOM_OK);
  return m;
}

std::string message_content(const loom_chat* chat, size_t i) {
  size_t role_len = 0, len = 0;
  REQUIRE(loom_chat_get_message(chat, i, nullptr, 0, &role_len, nullptr, 0, &len, nullptr) == LOOM_OK);
  std::string role(role_len, '\0'), text(len, '\0');
  REQUIRE(loom_chat_get_message(chat, i, role.data(), role.size() + 1, &role_len, text.data(), text.size() + 1, &len,
                            nullptr) == LOOM_OK);
  return role + ":" + text;
}

int32_t collect(void* user, const char* text, size_t len, int32_t) {
  static_cast<std::string*>(user)->append(text, len);
  return 1;
}

}  // namespace

TEST_CASE("C API: a chat renders, generates, keeps history and reuses the KV cache") {
  loom::test::TempDir dir;
  loom_model* m = load_chat_model(dir);
  loom_session* s = nullptr;
  REQUIRE(loom_session_create(m, nullptr, &s, nullptr) == LOOM_OK);
  loom_chat* chat = nullptr;
  REQUIRE(loom_chat_create(s, nullptr, &chat, nullptr) == LOOM_OK);
  loom_sampler_params sp;
  loom_sampler_params_init(&sp);
  sp.temperature = 0.0f;
  loom_sampler* sampler = nullptr;
  REQUIRE(loom_sampler_create(&sp, &sampler, nullptr) == LOOM_OK);

  REQUIRE(loom_chat_set_system(chat, "Be brief.", nullptr) == LOOM_OK);
  REQUIRE(loom_chat_add_message(chat, "user", "Hello", nullptr) == LOOM_OK);
  size_t len = 0;
  REQUIRE(loom_chat_render(chat, 1, nullptr, 0, &len, nullptr) == LOOM_OK);
  std::string rendered(len, '\0');
  REQUIRE(loom_chat_render(chat, 1, rendered.data(), len + 1, &len, nullptr) == LOOM_OK);
  CHECK(rendered == "<|begin_of_text|><|system|>Be brief.<|end_of_text|>\n<|user|>Hello<|end_of_text|>\n<|assistant|>");

  loom_generate_params gp;
  loom_generate_params_init(&gp);
  gp.max_tokens = 0;
  loom_chat_result r1;
  loom_chat_result_init(&r1);
  REQUIRE(loom_chat_reply(chat, sampler, &gp, &r1, nullptr) == LOOM_OK);
  CHECK(r1.reused_tokens == 0);
  CHECK(r1.prefilled_tokens == r1.prompt_tokens);
  CHECK(loom_chat_message_count(chat) == 3);
  CHECK(message_content(chat, 2) == "assistant:");

  // Turn two prefills only the new message (the empty reply ends on a special token).
  REQUIRE(loom_chat_add_message(chat, "user", "More", nullptr) == LOOM_OK);
  std::string streamed;
  gp.max_tokens = 6;
  gp.on_text = collect;
  gp.user = &streamed;
  loom_chat_result r2;
  loom_chat_result_init(&r2);
  REQUIRE(loom_chat_reply(chat, sampler, &gp, &r2, nullptr) == LOOM_OK);
  CHECK(r2.reused_tokens == r1.prompt_tokens);
  CHECK(r2.prefilled_tokens == r2.prompt_tokens - r1.prompt_tokens);
  CHECK(r2.prefilled_tokens > 0);
  CHECK(r2.prefilled_tokens < r2.prompt_tokens / 2);
  CHECK(r2.generated_tokens <= 6);
  REQUIRE(loom_chat_message_count(chat) == 5);
  CHECK(message_content(chat, 4) == "assistant:" + streamed);
  CHECK(loom_session_position(s) >= r2.prompt_tokens);

  // Errors: bad index, NULLs, a small buffer.
  loom_error* err = nullptr;
  CHECK(loom_chat_get_message(chat, 5, nullptr, 0, &len, nullptr, 0, &len, &err) == LOOM_ERR_INVALID_ARGUMENT);
  REQUIRE(err != nullptr);
  CHECK(std::string(loom_error_message(err)).find("past the 5 messages") != std::string::npos);
  loom_error_free(err);
  CHECK(loom_chat_add_message(chat, nullptr, "x", nullptr) == LOOM_ERR_INVALID_ARGUMENT);
  char tiny[4];
  CHECK(loom_chat_render(chat, 1, tiny, sizeof tiny, &len, nullptr) == LOOM_ERR_BUFFER_TOO_SMALL);
  CHECK(len > sizeof tiny);
  CHECK(loom_chat_clear(chat) == LOOM_OK);
  CHECK(loom_chat_message_count(chat) == 0);
  CHECK(loom_chat_clear(nullptr) == LOOM_ERR_INVALID_ARGUMENT);
  CHECK(loom_chat_message_count(nullptr) == 0);

  loom_chat_free(chat);
  loom_sampler_free(sampler);
  loom_session_free(s);
  loom_model_free(m);
}

TEST_CASE("C API: chat templates that fail reach the host as LOOM_ERR_TEMPLATE with the message") {
  loom::test::TempDir dir;
  loom_model* m = load_chat_model(dir);
  loom_session* s = nullptr;
  REQUIRE(loom_session_create(m, nullptr, &s, nullptr) == LOOM_OK);
  loom_chat_params cp;
  loom_chat_params_init(&cp);
  cp.template_source = "{% for m in messages %}";  // unterminated
  loom_chat* chat = nullptr;
  loom_error* err = nullptr;
  CHECK(loom_chat_create(s, &cp, &chat, &err) == LOOM_ERR_TEMPLATE);
  CHECK(chat == nullptr);
  loom_error_free(err);

  cp.template_source = "{{ raise_exception('no ' + messages[0].role + ' please') }}";
  REQUIRE(loom_chat_create(s, &cp, &chat, nullptr) == LOOM_OK);
  REQUIRE(loom_chat_add_message(chat, "user", "hi", nullptr) == LOOM_OK);
  loom_sampler* sampler = nullptr;
  REQUIRE(loom_sampler_create(nullptr, &sampler, nullptr) == LOOM_OK);
  CHECK(loom_chat_reply(chat, sampler, nullptr, nullptr, &err) == LOOM_ERR_TEMPLATE);
  REQUIRE(err != nullptr);
  CHECK(std::string(loom_error_message(err)).find("no user please") != std::string::npos);
  loom_error_free(err);
  CHECK(loom_chat_message_count(chat) == 1);
  CHECK(loom_session_position(s) == 0);
  loom_chat_free(chat);
  loom_sampler_free(sampler);
  loom_session_free(s);
  loom_model_free(m);
}
