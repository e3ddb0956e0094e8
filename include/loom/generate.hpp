// loom::generate — the text generation loop: tokenize the prompt, prefill, then sample
// and step until an end-of-generation token, a stop string or the token limit, streaming
// decoded text through a callback as it becomes final.
//
// Stop strings are matched across token boundaries and never emitted: text that could
// still be the start of a stop string is held back until it cannot. The callback may
// cancel by returning false. Runs on the calling thread with the session's pool; the
// session and sampler must not be used elsewhere meanwhile.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "loom/sampler.hpp"
#include "loom/session.hpp"
#include "loom/tokenizer.hpp"

namespace loom {

enum class StopReason : uint8_t { end_of_sequence, stop_string, max_tokens, cancelled, context_full };
std::string_view stop_reason_name(StopReason reason) noexcept;

// Holds back streamed text that might be the beginning of a stop string, so stop strings
// are matched across token boundaries and never emitted. One per stream; not thread-safe.
class StopMatcher {
 public:
  explicit StopMatcher(std::vector<std::string> stops);
  // Adds text; returns what is now safe to emit. Sets `stopped` when a stop string
  // appeared (the text before it is returned, the rest dropped).
  std::string push(std::string_view text, bool& stopped);
  // What is held back, at the end of the stream.
  std::string flush();

 private:
  std::vector<std::string> stops_;
  std::string pending_;
};

struct GenerateOptions {
  int32_t max_tokens = 128;
  std::vector<std::string> stop_strings;
  bool add_special = true;     // BOS etc. as the tokenizer's post-processor adds them
  bool parse_special = false;  // special-token text in the prompt becomes those tokens
  bool stop_at_eos = true;
  bool continue_session = false;  // true: append to what the session holds (no reset)
  // Text as it becomes final, with the token that completed it (-1 for text released at
  // the end). Return false to stop (StopReason::cancelled).
  std::function<bool(std::string_view piece, int32_t token)> on_text;
};

struct GenerateResult {
  std::string text;              // everything emitted (stop string excluded)
  std::vector<int32_t> tokens;   // generated ids (the stopping EOS excluded)
  int64_t prompt_tokens = 0;
  StopReason stop = StopReason::max_tokens;
  double prompt_seconds = 0.0;   // prefill
  double generate_seconds = 0.0; // sampling + decode steps
};

GenerateResult generate(Session& session, Sampler& sampler, const Tokenizer& tokenizer,
                        std::string_view prompt, const GenerateOptions& options = {});

// The same loop from already-tokenized input.
GenerateResult generate_from_tokens(Session& session, Sampler& sampler, const Tokenizer& tokenizer,
                                    std::span<const int32_t> prompt, const GenerateOptions& options = {});

}  // namespace loom
