// loom::Chat — a multi-turn conversation on one Session: it keeps the message history,
// renders it with a chat template (the model's own by default), and feeds the session
// only the tokens its KV cache does not already hold.
//
// Prefix reuse: each turn renders the whole conversation, tokenizes it, and compares the
// ids with those the session already holds; the session is rolled back to the longest
// common prefix and only the rest is prefilled. For the common templates the rendering
// of turn n is a prefix of turn n+1's, so a turn prefills just its new message (and the
// closing tokens of the previous reply). The comparison is on token ids, so a template
// that rewrites earlier turns (or a reply that re-tokenizes differently) costs more
// prefill, never a wrong answer.
//
// Tokenization of the rendered text: special-token text is parsed as those tokens (the
// template writes "<|im_start|>" and means the token). A BOS is added only when the
// tokenizer adds one and the rendering does not already begin with the BOS text, so
// templates that write bos_token themselves do not get two.
//
// Ownership: a Chat borrows the Session, the Tokenizer and (in reply()) the Sampler; they
// must outlive it. It owns its history and template. The Chat assumes nobody else feeds
// its session between turns (reset_cache() after doing so). Thread-safety: one thread at a
// time, like its Session.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "loom/chat_template.hpp"
#include "loom/generate.hpp"
#include "loom/sampler.hpp"
#include "loom/session.hpp"
#include "loom/tokenizer.hpp"

namespace loom {

struct ChatOptions {
  // The template to render with; empty: the tokenizer's chat template (the model's).
  std::string template_source;
  std::string template_name = "chat template";  // in error messages (a file name, say)
  // `bos_token` / `eos_token` for the template; empty: the tokenizer's.
  std::string bos_token;
  std::string eos_token;
  std::string extra_context_json;  // more template variables, as a JSON object
};

struct ChatReply {
  GenerateResult generation;     // text, tokens, stop reason, timings of this turn
  int64_t prompt_tokens = 0;     // the rendered conversation, in tokens
  int64_t reused_tokens = 0;     // of those, already in the KV cache
  int64_t prefilled_tokens = 0;  // of those, fed this turn (prompt_tokens - reused_tokens)
};

class Chat {
 public:
  // Throws Error(unsupported) when no template is given and the tokenizer has none, and
  // Error(template_error) when the template does not compile.
  Chat(Session& session, const Tokenizer& tokenizer, ChatOptions options = {});

  // Appends a message without generating (a system prompt, few-shot turns, a tool result).
  void add(std::string role, std::string content);
  // Replaces the system message (inserting it first when there is none); empty removes it.
  void set_system(std::string content);
  // Forgets the history (the KV cache is reused where the next rendering allows).
  void clear();
  const std::vector<ChatMessage>& messages() const noexcept { return messages_; }

  // Renders the history with add_generation_prompt, feeds what the session lacks, and
  // generates the assistant's reply, which is appended to the history (unless the turn
  // was cancelled or failed). `options.continue_session` is ignored: the Chat decides
  // what the session keeps. On an error the history is as before the call.
  ChatReply reply(Sampler& sampler, const GenerateOptions& options = {});
  // add("user", text) then reply(); on an error the user message is taken back too.
  ChatReply send(std::string_view user_text, Sampler& sampler, const GenerateOptions& options = {});

  // The text the template renders for the history (with or without the generation prompt).
  std::string render(bool add_generation_prompt) const;
  // Forget which tokens the session holds (after the host fed or reset it itself).
  void reset_cache() noexcept { cached_.clear(); }

 private:
  std::vector<int32_t> tokenize(const std::string& text) const;

  Session& session_;
  const Tokenizer& tokenizer_;
  ChatOptions options_;
  ChatTemplate template_;
  std::vector<ChatMessage> messages_;
  std::vector<int32_t> cached_;  // the ids the session holds, in order (position == size)
};

}  // namespace loom
