// `loom chat`: an interactive conversation on a terminal (or any line stream), built on
// loom::Chat. Lines are user messages; commands start with '/':
//   /reset          forget the conversation (keeps the system prompt)
//   /system TEXT    set the system prompt (empty TEXT removes it)
//   /help           list the commands
// End of input (Ctrl-D) quits. Replies stream to `out`; prompts and notes go to `err`.
#pragma once

#include <cstdio>
#include <istream>
#include <string>

#include "loom/generate.hpp"
#include "loom/sampler.hpp"
#include "loom/session.hpp"
#include "loom/tokenizer.hpp"

namespace loom::cli {

struct ChatLoopOptions {
  std::string template_source;  // empty: the model's template
  std::string template_name;    // for errors: the file it came from
  std::string system_prompt;
  bool show_prompt = true;      // print "> " before each line (a terminal)
  bool stats = true;            // per-turn token counts on `err`
};

// Runs until the input ends. Without a chat template (a base model) it says so on `err`
// and answers each line as a plain completion continuing the conversation so far.
// Returns the process exit code (0).
int chat_loop(Session& session, const Tokenizer& tokenizer, Sampler& sampler, GenerateOptions generate,
              const ChatLoopOptions& options, std::istream& in, std::FILE* out, std::FILE* err);

}  // namespace loom::cli
