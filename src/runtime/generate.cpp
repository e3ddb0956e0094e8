#include "loom/generate.hpp"

#include <algorithm>
#include <chrono>

#include "loom/error.hpp"
#include "runtime/token_stream.hpp"

namespace loom {

// Declared with GenerationDefaults (loom/generation_defaults.hpp, the model layer), defined
// here where GenerateOptions is: the model layer does not include the runtime's headers.
void GenerationDefaults::apply_to(GenerateOptions& options) const {
  if (max_new_tokens.from_file()) options.max_tokens = max_new_tokens.value;
}

std::string_view stop_reason_name(StopReason reason) noexcept {
  switch (reason) {
    case StopReason::end_of_sequence: return "end_of_sequence";
    case StopReason::stop_string: return "stop_string";
    case StopReason::max_tokens: return "max_tokens";
    case StopReason::cancelled: return "cancelled";
    case StopReason::context_full: return "context_full";
  }
  return "unknown";
}

namespace {

using Clock = std::chrono::steady_clock;

}  // namespace

StopMatcher::StopMatcher(std::vector<std::string> stops) : stops_(std::move(stops)) {
  std::erase_if(stops_, [](const std::string& s) { return s.empty(); });
}

std::string StopMatcher::push(std::string_view text, bool& stopped) {
  pending_.append(text);
  size_t first = std::string::npos;
  for (const auto& s : stops_) first = std::min(first, pending_.find(s));
  if (first != std::string::npos) {
    stopped = true;
    std::string out = pending_.substr(0, first);
    pending_.clear();
    return out;
  }
  // Keep the longest suffix that is a proper prefix of some stop string.
  size_t keep = 0;
  for (const auto& s : stops_) {
    for (size_t n = std::min(s.size() - 1, pending_.size()); n > keep; --n) {
      if (pending_.compare(pending_.size() - n, n, s, 0, n) == 0) {
        keep = n;
        break;
      }
    }
  }
  std::string out = pending_.substr(0, pending_.size() - keep);
  pending_.erase(0, pending_.size() - keep);
  return out;
}

std::string StopMatcher::flush() {
  std::string out;
  out.swap(pending_);
  return out;
}

GenerateResult generate(Session& session, Sampler& sampler, const Tokenizer& tokenizer,
                        std::string_view prompt, const GenerateOptions& options) {
  const auto ids = tokenizer.encode(prompt, options.add_special, options.parse_special);
  return generate_from_tokens(session, sampler, tokenizer, ids, options);
}

GenerateResult generate_from_tokens(Session& session, Sampler& sampler, const Tokenizer& tokenizer,
                                    std::span<const int32_t> prompt, const GenerateOptions& options) {
  GenerateResult result;
  if (prompt.empty()) {
    throw Error(ErrorCode::invalid_argument,
                "the prompt encodes to no tokens (give text, or enable add_special for a BOS)");
  }
  if (!options.continue_session) session.reset();
  result.prompt_tokens = static_cast<int64_t>(prompt.size());
  for (int32_t t : prompt) sampler.accept(t);

  runtime::TokenStream stream(&tokenizer, {}, options, result);
  auto t0 = Clock::now();
  session.prefill(prompt);
  result.prompt_seconds = std::chrono::duration<double>(Clock::now() - t0).count();
  t0 = Clock::now();
  result.stop = StopReason::max_tokens;
  for (int32_t i = 0; i < options.max_tokens; ++i) {
    const int32_t token = sampler.sample(session.logits());
    if (!stream.push(token)) break;
    if (i + 1 == options.max_tokens) break;
    if (session.position() >= session.context_length()) {
      result.stop = StopReason::context_full;
      break;
    }
    session.step(token);
  }
  stream.finish();
  result.generate_seconds = std::chrono::duration<double>(Clock::now() - t0).count();
  return result;
}

}  // namespace loom
