// loom::ChatTemplate — a chat template (the Jinja2 dialect models ship in
// tokenizer_config.json, chat_template.jinja or GGUF's tokenizer.chat_template), compiled
// once and rendered many times: a conversation in, the exact prompt text out, byte for byte
// what Hugging Face transformers' apply_chat_template renders.
//
// Ownership: a ChatTemplate owns its parsed form; it copies the source. Thread-safety: it is
// immutable after compile(), so render() may be called from any number of threads at once.
// Errors: compile() throws Error(ErrorCode::template_error) for a syntax error, naming the
// template and line:column; render() throws the same code with the template's own message
// for raise_exception(...) and for run-time errors (unknown filter, bad operand, limits).
#pragma once

#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace loom {

struct ChatMessage {
  std::string role;     // "system", "user", "assistant", "tool", ...
  std::string content;
};

struct ChatTemplateInputs {
  // The conversation. When messages_json is not empty it is used instead of `messages`:
  // a JSON array of message objects, for what plain role/content cannot say (tool_calls,
  // name, tool_call_id, content as a list of parts).
  std::vector<ChatMessage> messages;
  std::string messages_json;
  std::string tools_json;          // optional JSON array, the `tools` variable
  bool add_generation_prompt = true;
  std::string bos_token;           // `bos_token` / `eos_token` variables
  std::string eos_token;
  std::string extra_context_json;  // optional JSON object: more variables (e.g. enable_thinking)
  // strftime_now() uses this instead of the clock when set (reproducible renders).
  std::optional<std::chrono::system_clock::time_point> now;
};

class ChatTemplate {
 public:
  // `name` is used in error messages ("tokenizer_config.json chat_template", a file path).
  static ChatTemplate compile(std::string_view source, std::string name = "chat template");

  std::string render(const ChatTemplateInputs& inputs) const;
  const std::string& source() const noexcept;
  const std::string& name() const noexcept;

  ChatTemplate(ChatTemplate&&) noexcept;
  ChatTemplate& operator=(ChatTemplate&&) noexcept;
  ~ChatTemplate();

  struct Impl;

 private:
  explicit ChatTemplate(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace loom
