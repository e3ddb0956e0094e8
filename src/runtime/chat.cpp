#include "loom/chat.hpp"

#include <algorithm>
#include <utility>

#include "loom/error.hpp"

namespace loom {

namespace {

ChatTemplate compile_template(const Tokenizer& tokenizer, const ChatOptions& options) {
  if (!options.template_source.empty()) return ChatTemplate::compile(options.template_source, options.template_name);
  if (tokenizer.chat_template().empty()) {
    throw Error(ErrorCode::unsupported,
                "the model has no chat template (a base model?): give one, or use plain completion");
  }
  return ChatTemplate::compile(tokenizer.chat_template(), "the model's chat template");
}

}  // namespace

Chat::Chat(Session& session, const Tokenizer& tokenizer, ChatOptions options)
    : session_(session), tokenizer_(tokenizer), options_(std::move(options)),
      template_(compile_template(tokenizer, options_)) {
  if (options_.bos_token.empty()) options_.bos_token = tokenizer_.bos_token();
  if (options_.eos_token.empty()) options_.eos_token = tokenizer_.eos_token();
}

void Chat::add(std::string role, std::string content) {
  messages_.push_back({std::move(role), std::move(content)});
}

void Chat::set_system(std::string content) {
  const bool has = !messages_.empty() && messages_.front().role == "system";
  if (content.empty()) {
    if (has) messages_.erase(messages_.begin());
  } else if (has) {
    messages_.front().content = std::move(content);
  } else {
    messages_.insert(messages_.begin(), ChatMessage{"system", std::move(content)});
  }
}

void Chat::clear() { messages_.clear(); }

std::string Chat::render(bool add_generation_prompt) const {
  ChatTemplateInputs in;
  in.messages = messages_;
  in.add_generation_prompt = add_generation_prompt;
  in.bos_token = options_.bos_token;
  in.eos_token = options_.eos_token;
  in.extra_context_json = options_.extra_context_json;
  return template_.render(in);
}

std::vector<int32_t> Chat::tokenize(const std::string& text) const {
  const bool starts_with_bos = !options_.bos_token.empty() && text.starts_with(options_.bos_token);
  return tokenizer_.encode(text, /*add_special=*/tokenizer_.add_bos() && !starts_with_bos,
                           /*parse_special=*/true);
}

ChatReply Chat::reply(Sampler& sampler, const GenerateOptions& options) {
  const std::vector<int32_t> prompt = tokenize(render(/*add_generation_prompt=*/true));
  if (prompt.empty()) throw Error(ErrorCode::invalid_argument, "the chat template rendered no tokens");
  if (static_cast<int64_t>(prompt.size()) >= session_.context_length()) {
    throw Error(ErrorCode::context_full,
                "the conversation is " + std::to_string(prompt.size()) + " tokens; the context holds " +
                    std::to_string(session_.context_length()) + " (clear() or drop old messages)");
  }

  // The longest prefix the KV cache already holds; at least one token is fed so that the
  // pass produces the logits to sample from.
  if (static_cast<int64_t>(cached_.size()) != session_.position()) cached_.clear();
  const auto mismatch = std::mismatch(prompt.begin(), prompt.end(), cached_.begin(), cached_.end());
  int64_t keep = mismatch.first - prompt.begin();
  keep = std::min<int64_t>(keep, static_cast<int64_t>(prompt.size()) - 1);
  session_.rollback(keep);
  cached_.resize(static_cast<size_t>(keep));

  GenerateOptions go = options;
  go.continue_session = true;
  ChatReply out;
  out.prompt_tokens = static_cast<int64_t>(prompt.size());
  out.reused_tokens = keep;
  out.prefilled_tokens = out.prompt_tokens - keep;
  const std::span<const int32_t> fresh(prompt.data() + keep, prompt.size() - static_cast<size_t>(keep));
  try {
    out.generation = generate_from_tokens(session_, sampler, tokenizer_, fresh, go);
  } catch (...) {
    // The session is as it was before the failing call, but which tokens it still holds
    // is no longer known here: the next turn recomputes from scratch.
    cached_.clear();
    session_.reset();
    throw;
  }

  // The session now holds the prompt and the generated tokens it was stepped with (the
  // last sampled token is not fed back).
  cached_ = prompt;
  const auto fed = static_cast<size_t>(std::max<int64_t>(0, session_.position() - out.prompt_tokens));
  cached_.insert(cached_.end(), out.generation.tokens.begin(),
                 out.generation.tokens.begin() + static_cast<std::ptrdiff_t>(std::min(fed, out.generation.tokens.size())));
  if (out.generation.stop != StopReason::cancelled) add("assistant", out.generation.text);
  return out;
}

ChatReply Chat::send(std::string_view user_text, Sampler& sampler, const GenerateOptions& options) {
  add("user", std::string(user_text));
  try {
    return reply(sampler, options);
  } catch (...) {
    messages_.pop_back();
    throw;
  }
}

}  // namespace loom
