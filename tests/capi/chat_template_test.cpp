// The C API's chat templates: a caller's template or the model's own, plain messages or a
// JSON conversation, the size-query convention, and errors as LOOM_ERR_TEMPLATE.
#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>
#include <string>

#include "loom.h"
#include "loom.hpp"
#include "loom/demo.hpp"
#include "support/test_support.hpp"

namespace fs = std::filesystem;

namespace {

const char* kChatml =
    "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}";

std::string apply(const loom_model* model, const char* source, const loom_chat_message* msgs, size_t n,
                  const loom_chat_template_params* params, loom_status* status) {
  size_t len = 0;
  loom_error* err = nullptr;
  *status = loom_chat_apply_template(model, source, msgs, n, params, nullptr, 0, &len, &err);
  if (*status != LOOM_OK) {
    const std::string message = loom_error_message(err);
    loom_error_free(err);
    return message;
  }
  std::string out(len + 1, '\0');
  *status = loom_chat_apply_template(model, source, msgs, n, params, out.data(), out.size(), &len, &err);
  REQUIRE(*status == LOOM_OK);
  out.resize(len);
  return out;
}

// A demo model whose tokenizer_config.json carries `chat_template` (or not).
loom_model* demo_model(const loom::test::TempDir& dir, bool with_template) {
  const fs::path p = dir / (with_template ? "with" : "without");
  loom::DemoOptions o;
  o.hidden_size = 64;
  o.n_layers = 1;
  loom::write_demo_model(p, o);
  if (with_template) {
    std::string cfg = loom::test::read_file_text(p / "tokenizer_config.json");
    const size_t close = cfg.rfind('}');
    REQUIRE(close != std::string::npos);
    cfg.insert(close, ", \"chat_template\": \"{{ bos_token }}{% for m in messages %}{{ m.content }}|{% endfor %}{{ eos_token }}\"");
    std::ofstream(p / "tokenizer_config.json", std::ios::binary | std::ios::trunc) << cfg;
  }
  loom_load_params lp;
  loom_load_params_init(&lp);
  lp.log_level = LOOM_LOG_WARN;
  loom_model* m = nullptr;
  loom_error* err = nullptr;
  const loom_status s = loom_model_load(p.c_str(), &lp, &m, &err);
  INFO((err ? loom_error_message(err) : ""));
  REQUIRE(s == LOOM_OK);
  return m;
}

}  // namespace

TEST_CASE("C API: a caller's chat template renders without a model") {
  const loom_chat_message msgs[] = {{"system", "Be brief."}, {"user", "Hi \xC3\xA9"}};
  loom_status status = LOOM_OK;
  CHECK(apply(nullptr, kChatml, msgs, 2, nullptr, &status) ==
        "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi \xC3\xA9<|im_end|>\n<|im_start|>assistant\n");
  CHECK(status == LOOM_OK);

  loom_chat_template_params p;
  loom_chat_template_params_init(&p);
  CHECK(p.struct_size == sizeof p);
  CHECK(p.add_generation_prompt == 1);
  p.add_generation_prompt = 0;
  CHECK(apply(nullptr, kChatml, msgs, 1, &p, &status) == "<|im_start|>system\nBe brief.<|im_end|>\n");

  p.bos_token = "<s>";
  p.tools_json = R"([{"name": "f"}])";
  p.extra_context_json = R"({"flag": true})";
  CHECK(apply(nullptr, "{{ bos_token }}{{ tools[0].name }}{{ flag }}{{ eos_token }}", nullptr, 0, &p, &status) == "<s>fTrue");

  // a struct from an older caller: only struct_size and add_generation_prompt
  loom_chat_template_params old;
  loom_chat_template_params_init(&old);
  old.struct_size = sizeof(uint32_t) + sizeof(int32_t);
  old.add_generation_prompt = 0;
  old.bos_token = "ignored";
  CHECK(apply(nullptr, "{{ add_generation_prompt }}{{ bos_token }}", nullptr, 0, &old, &status) == "False");
}

TEST_CASE("C API: chat template from JSON, buffers and errors") {
  const char* conv = R"([{"role": "assistant", "tool_calls": [{"function": {"name": "get", "arguments": {"x": 1}}}]}])";
  const char* tpl = "{% for m in messages %}{{ m.tool_calls[0].function.arguments | tojson }}{% endfor %}";
  size_t len = 0;
  loom_error* err = nullptr;
  REQUIRE(loom_chat_apply_template_json(nullptr, tpl, conv, nullptr, nullptr, 0, &len, &err) == LOOM_OK);
  CHECK(len == 8);
  char small[4];
  CHECK(loom_chat_apply_template_json(nullptr, tpl, conv, nullptr, small, sizeof small, &len, &err) ==
        LOOM_ERR_BUFFER_TOO_SMALL);
  CHECK(len == 8);
  loom_error_free(err);
  err = nullptr;
  char buf[16];
  REQUIRE(loom_chat_apply_template_json(nullptr, tpl, conv, nullptr, buf, sizeof buf, &len, &err) == LOOM_OK);
  CHECK(std::string(buf) == "{\"x\": 1}");

  // the template's own error, a syntax error, bad JSON, NULLs
  loom_status status = LOOM_OK;
  const loom_chat_message msgs[] = {{"system", "S"}};
  CHECK_THAT(apply(nullptr, "{% if messages[0].role == 'system' %}{{ raise_exception('System role not supported') }}{% endif %}",
                   msgs, 1, nullptr, &status),
             Catch::Contains("System role not supported"));
  CHECK(status == LOOM_ERR_TEMPLATE);
  CHECK_THAT(apply(nullptr, "{% if %}", msgs, 1, nullptr, &status), Catch::Contains("chat template:1:"));
  CHECK(status == LOOM_ERR_TEMPLATE);
  CHECK(loom_chat_apply_template_json(nullptr, tpl, "[oops", nullptr, nullptr, 0, &len, nullptr) == LOOM_ERR_INVALID_ARGUMENT);
  CHECK(loom_chat_apply_template_json(nullptr, tpl, nullptr, nullptr, nullptr, 0, &len, nullptr) == LOOM_ERR_INVALID_ARGUMENT);
  CHECK(loom_chat_apply_template(nullptr, tpl, nullptr, 1, nullptr, nullptr, 0, &len, nullptr) == LOOM_ERR_INVALID_ARGUMENT);
  CHECK(loom_chat_apply_template(nullptr, tpl, nullptr, 0, nullptr, nullptr, 0, nullptr, nullptr) == LOOM_ERR_INVALID_ARGUMENT);
  CHECK(loom_chat_apply_template(nullptr, nullptr, nullptr, 0, nullptr, nullptr, 0, &len, nullptr) == LOOM_ERR_INVALID_ARGUMENT);
  const loom_chat_message null_role[] = {{nullptr, "x"}};
  CHECK(loom_chat_apply_template(nullptr, tpl, null_role, 1, nullptr, nullptr, 0, &len, nullptr) == LOOM_ERR_INVALID_ARGUMENT);

  // the C++ wrapper
  CHECK(loom::c::apply_chat_template(nullptr, tpl, conv) == "{\"x\": 1}");
  try {
    (void)loom::c::apply_chat_template(nullptr, "{{ raise_exception('no') }}", "[]");
    FAIL("no exception");
  } catch (const loom::c::error& e) {
    CHECK(e.status() == LOOM_ERR_TEMPLATE);
  }
}

TEST_CASE("C API: the model's own chat template and special tokens") {
  loom::test::TempDir dir;
  loom_model* with = demo_model(dir, true);
  loom_model* without = demo_model(dir, false);
  const loom_chat_message msgs[] = {{"user", "a"}, {"assistant", "b"}};
  loom_status status = LOOM_OK;
  const std::string out = apply(with, nullptr, msgs, 2, nullptr, &status);
  REQUIRE(status == LOOM_OK);
  // the demo's tokenizer_config.json names its BOS and EOS tokens
  CHECK(out == "<|begin_of_text|>a|b|<|end_of_text|>");
  loom_chat_template_params p;
  loom_chat_template_params_init(&p);
  p.bos_token = "[B]";
  p.eos_token = "[E]";
  CHECK(apply(with, nullptr, msgs, 2, &p, &status) == "[B]a|b|[E]");
  // a caller's template wins over the model's
  CHECK(apply(with, "{{ messages | length }}", msgs, 2, &p, &status) == "2");
  CHECK(apply(without, nullptr, msgs, 2, nullptr, &status).find("no chat template") != std::string::npos);
  CHECK(status == LOOM_ERR_UNSUPPORTED);
  loom_model_free(with);
  loom_model_free(without);
}
