#include "chat_loop.hpp"

#include <optional>
#include <string_view>

#include "loom/chat.hpp"
#include "loom/error.hpp"

namespace loom::cli {

namespace {

void print_stats(std::FILE* err, const ChatReply& r) {
  const auto& g = r.generation;
  const double gen = g.generate_seconds > 0 ? static_cast<double>(g.tokens.size()) / g.generate_seconds : 0.0;
  std::fprintf(err, "\n[prompt %lld tokens (%lld reused, %lld new), reply %zu tokens, %.1f tok/s, stop: %s]\n",
               static_cast<long long>(r.prompt_tokens), static_cast<long long>(r.reused_tokens),
               static_cast<long long>(r.prefilled_tokens), g.tokens.size(), gen,
               std::string(stop_reason_name(g.stop)).c_str());
}

// A base model: each line continues one plain-text conversation.
int completion_loop(Session& session, const Tokenizer& tokenizer, Sampler& sampler, GenerateOptions generate,
                    const ChatLoopOptions& options, std::istream& in, std::FILE* err) {
  bool first = true;
  for (std::string line; (options.show_prompt ? std::fprintf(err, "> ") : 0), std::getline(in, line);) {
    if (line == "/reset") {
      first = true;
      continue;
    }
    if (line.empty() || line.front() == '/') continue;
    generate.continue_session = !first;
    generate.add_special = first;
    try {
      const auto r = loom::generate(session, sampler, tokenizer, line, generate);
      first = false;
      if (options.stats) {
        std::fprintf(err, "\n[reply %zu tokens, stop: %s]\n", r.tokens.size(),
                     std::string(stop_reason_name(r.stop)).c_str());
      }
    } catch (const Error& e) {
      if (e.code() != ErrorCode::context_full) throw;
      std::fprintf(err, "\nloom: the context is full; starting a new conversation\n");
      first = true;
    }
  }
  return 0;
}

}  // namespace

int chat_loop(Session& session, const Tokenizer& tokenizer, Sampler& sampler, GenerateOptions generate,
              const ChatLoopOptions& options, std::istream& in, std::FILE* out, std::FILE* err) {
  const auto stream = generate.on_text;
  generate.on_text = [out, stream](std::string_view text, int32_t token) {
    std::fwrite(text.data(), 1, text.size(), out);
    std::fflush(out);
    return !stream || stream(text, token);
  };
  if (options.template_source.empty() && tokenizer.chat_template().empty()) {
    std::fprintf(err, "loom: this model has no chat template (a base model?): each line is a plain completion\n");
    return completion_loop(session, tokenizer, sampler, generate, options, in, err);
  }
  ChatOptions co;
  co.template_source = options.template_source;
  if (!options.template_name.empty()) co.template_name = options.template_name;
  Chat chat(session, tokenizer, co);
  if (!options.system_prompt.empty()) chat.set_system(options.system_prompt);
  std::fprintf(err, "loom: chat: type a message and press Enter; /reset, /system TEXT, /help; Ctrl-D quits.\n");
  for (std::string line; (options.show_prompt ? std::fprintf(err, "> ") : 0), std::getline(in, line);) {
    if (line.empty()) continue;
    if (line == "/help") {
      std::fprintf(err, "/reset forgets the conversation, /system TEXT sets the system prompt, Ctrl-D quits\n");
      continue;
    }
    if (line == "/reset") {
      chat.clear();
      if (!options.system_prompt.empty()) chat.set_system(options.system_prompt);
      std::fprintf(err, "loom: conversation cleared\n");
      continue;
    }
    if (line == "/system" || line.starts_with("/system ")) {
      chat.set_system(line.size() > 8 ? line.substr(8) : "");
      continue;
    }
    if (line.front() == '/') {
      std::fprintf(err, "loom: unknown command '%s' (/help lists them)\n", line.c_str());
      continue;
    }
    try {
      const auto r = chat.send(line, sampler, generate);
      std::fputc('\n', out);
      std::fflush(out);
      if (options.stats) print_stats(err, r);
    } catch (const Error& e) {
      if (e.code() != ErrorCode::context_full) throw;
      std::fprintf(err, "loom: %s\nloom: the conversation no longer fits the context; /reset starts anew\n", e.what());
    }
  }
  return 0;
}

}  // namespace loom::cli
