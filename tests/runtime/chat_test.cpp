// loom::Chat: history, rendering through the chat template, and prefix reuse of the KV
// cache between turns.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <string>
#include <vector>

#include "loom/chat.hpp"
#include "loom/demo.hpp"
#include "loom/error.hpp"
#include "loom/loader.hpp"
#include "common/json_writer.hpp"
#include "support/test_support.hpp"

namespace fs = std::filesystem;

namespace {

std::string json_string(std::string_view text) { return loom::JsonWriter::escape(text); }

// A role-prefixed template in the shape of the common ones: earlier turns render the same
// text in every later rendering, so each turn's prompt extends the previous one.
constexpr const char* kTemplate =
    "{{ bos_token }}{% for m in messages %}<|{{ m.role }}|>{{ m.content }}{{ eos_token }}\n{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>{% endif %}";

// The demo model (random weights, a real byte-level BPE tokenizer), with the template in
// its tokenizer_config.json as Hugging Face ships it.
std::shared_ptr<const loom::Model> chat_model(const loom::test::TempDir& dir, bool with_template) {
  loom::write_demo_model(dir.path());
  if (with_template) {
    std::ofstream(dir / "tokenizer_config.json", std::ios::trunc)
        << R"({"tokenizer_class": "PreTrainedTokenizerFast", "bos_token": "<|begin_of_text|>",)"
        << R"( "eos_token": "<|end_of_text|>", "chat_template": )" << json_string(kTemplate) << "}\n";
  }
  return loom::load_model(dir.path(), loom::test::quiet_load_options());
}

std::vector<float> copy(std::span<const float> s) { return {s.begin(), s.end()}; }

}  // namespace

TEST_CASE("chat: the model's template renders the history with the tokenizer's special tokens") {
  loom::test::TempDir dir;
  auto model = chat_model(dir, true);
  loom::Session session(model);
  loom::Chat chat(session, *model->tokenizer());
  chat.add("system", "Be brief.");
  chat.add("user", "Hi");
  CHECK(chat.render(true) ==
        "<|begin_of_text|><|system|>Be brief.<|end_of_text|>\n<|user|>Hi<|end_of_text|>\n<|assistant|>");
  CHECK(chat.render(false) == "<|begin_of_text|><|system|>Be brief.<|end_of_text|>\n<|user|>Hi<|end_of_text|>\n");
  chat.set_system("Be kind.");
  REQUIRE(chat.messages().size() == 2);
  CHECK(chat.messages()[0].content == "Be kind.");
  chat.set_system("");
  REQUIRE(chat.messages().size() == 1);
  CHECK(chat.messages()[0].role == "user");
}

TEST_CASE("chat: the second turn prefills exactly its new tokens") {
  loom::test::TempDir dir;
  auto model = chat_model(dir, true);
  const auto& tok = *model->tokenizer();
  loom::Session session(model);
  loom::Chat chat(session, tok);
  loom::Sampler sampler(loom::SamplerParams{});
  loom::GenerateOptions go;
  go.max_tokens = 0;  // the assistant's reply is empty: the boundary is a special token

  const auto first = chat.send("Tell me a story.", sampler, go);
  CHECK(first.reused_tokens == 0);
  CHECK(first.prefilled_tokens == first.prompt_tokens);
  CHECK(session.position() == first.prompt_tokens);
  // The rendering begins with the BOS text, so no second BOS is added.
  const auto ids1 = tok.encode(chat.render(false), false, true);
  CHECK(std::count(ids1.begin(), ids1.end(), *tok.bos_id()) == 1);

  const auto second = chat.send("And then?", sampler, go);
  const auto new_part = tok.encode("<|end_of_text|>\n<|user|>And then?<|end_of_text|>\n<|assistant|>", false, true);
  CHECK(second.reused_tokens == first.prompt_tokens);
  CHECK(second.prefilled_tokens == static_cast<int64_t>(new_part.size()));
  CHECK(second.prompt_tokens == first.prompt_tokens + static_cast<int64_t>(new_part.size()));
  CHECK(session.position() == second.prompt_tokens);
}

TEST_CASE("chat: after a generated reply the cache keeps the common prefix, and the logits equal a fresh prefill") {
  loom::test::TempDir dir;
  auto model = chat_model(dir, true);
  const auto& tok = *model->tokenizer();
  loom::Session session(model);
  loom::Chat chat(session, tok);
  loom::SamplerParams greedy;
  greedy.temperature = 0.0f;
  loom::Sampler sampler(greedy);
  loom::GenerateOptions go;
  go.max_tokens = 12;
  go.stop_at_eos = false;

  const auto first = chat.send("Tell me a story.", sampler, go);
  REQUIRE(chat.messages().size() == 2);
  CHECK(chat.messages()[1].role == "assistant");
  CHECK(chat.messages()[1].content == first.generation.text);
  REQUIRE(first.generation.tokens.size() == 12);
  // The session holds the prompt and the 11 generated tokens it was stepped with.
  CHECK(session.position() == first.prompt_tokens + 11);

  go.max_tokens = 0;  // stop right after the prefill, to compare its logits
  chat.add("user", "And then?");
  const auto prompt2 = tok.encode(chat.render(true), false, true);
  const auto second = chat.reply(sampler, go);
  CHECK(second.prompt_tokens == static_cast<int64_t>(prompt2.size()));
  CHECK(second.prefilled_tokens == second.prompt_tokens - second.reused_tokens);
  // At least turn one's prompt is reused (its last token may merge with the reply's text
  // when the reply re-tokenizes differently), and never more than the cache held.
  CHECK(second.reused_tokens >= first.prompt_tokens - 1);
  CHECK(second.reused_tokens <= first.prompt_tokens + 11);
  const auto reused = copy(session.logits());

  loom::Session fresh(model);
  fresh.prefill(prompt2);
  const auto full = copy(fresh.logits());
  REQUIRE(reused.size() == full.size());
  double worst = 0.0, scale = 0.0;
  for (size_t i = 0; i < full.size(); ++i) {
    worst = std::max(worst, static_cast<double>(std::abs(reused[i] - full[i])));
    scale = std::max(scale, static_cast<double>(std::abs(full[i])));
  }
  INFO("max |reused - fresh| = " << worst << " of max |logit| " << scale);
  CHECK(worst <= 1e-4 * std::max(1.0, scale));
  CHECK(std::max_element(reused.begin(), reused.end()) - reused.begin() ==
        std::max_element(full.begin(), full.end()) - full.begin());
}

TEST_CASE("chat: a rewritten history reuses only the common prefix and stays correct") {
  loom::test::TempDir dir;
  auto model = chat_model(dir, true);
  const auto& tok = *model->tokenizer();
  loom::Session session(model);
  loom::Chat chat(session, tok);
  loom::SamplerParams greedy;
  greedy.temperature = 0.0f;
  loom::Sampler sampler(greedy);
  loom::GenerateOptions go;
  go.max_tokens = 4;
  chat.set_system("One.");
  chat.send("Hello there", sampler, go);
  // A new system prompt changes the first message: only the BOS and the system marker are
  // shared, so nearly everything is prefilled again.
  chat.set_system("Two.");
  go.max_tokens = 0;
  const auto prompt = tok.encode(chat.render(true), false, true);
  const auto r = chat.reply(sampler, go);
  CHECK(r.prompt_tokens == static_cast<int64_t>(prompt.size()));
  // Shared: the BOS and "<|system|>" (the text differs from the first letter of the message).
  const auto shared = tok.encode("<|begin_of_text|><|system|>", false, true);
  CHECK(r.reused_tokens >= static_cast<int64_t>(shared.size()));
  CHECK(r.reused_tokens <= static_cast<int64_t>(shared.size()) + 1);
  loom::Session fresh(model);
  fresh.prefill(prompt);
  const auto a = copy(session.logits());
  const auto b = copy(fresh.logits());
  CHECK(std::max_element(a.begin(), a.end()) - a.begin() == std::max_element(b.begin(), b.end()) - b.begin());
}

TEST_CASE("chat: errors leave the history as it was") {
  loom::test::TempDir dir;
  auto model = chat_model(dir, false);
  loom::Session session(model);
  // A base model has no template.
  try {
    loom::Chat chat(session, *model->tokenizer());
    FAIL("a model without a template was accepted");
  } catch (const loom::Error& e) {
    CHECK(e.code() == loom::ErrorCode::unsupported);
    CHECK(std::string(e.what()).find("no chat template") != std::string::npos);
  }
  // A template that raises.
  loom::ChatOptions o;
  o.template_source = "{% if messages|length > 1 %}{{ raise_exception('one message only') }}{% endif %}x";
  loom::Chat chat(session, *model->tokenizer(), o);
  loom::Sampler sampler(loom::SamplerParams{});
  chat.add("user", "a");
  loom::GenerateOptions go;
  go.max_tokens = 1;
  CHECK_NOTHROW(chat.reply(sampler, go));
  REQUIRE(chat.messages().size() == 2);
  try {
    chat.send("b", sampler, go);
    FAIL("raise_exception did not fail the turn");
  } catch (const loom::Error& e) {
    CHECK(e.code() == loom::ErrorCode::template_error);
    CHECK(std::string(e.what()).find("one message only") != std::string::npos);
  }
  CHECK(chat.messages().size() == 2);
  // A conversation longer than the context is refused before anything is fed.
  loom::SessionOptions small;
  small.context_length = 8;
  loom::Session tiny(model, small);
  loom::ChatOptions plain;
  plain.template_source = "{% for m in messages %}{{ m.content }}{% endfor %}";
  loom::Chat over(tiny, *model->tokenizer(), plain);
  try {
    over.send("a long message that is more than eight tokens for sure, surely", sampler, go);
    FAIL("an oversized conversation was accepted");
  } catch (const loom::Error& e) {
    CHECK(e.code() == loom::ErrorCode::context_full);
  }
  CHECK(over.messages().empty());
  CHECK(tiny.position() == 0);
}
