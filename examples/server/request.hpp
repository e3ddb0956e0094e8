// loom serve — the request layer: an HTTP request's body (and its Authorization header)
// in, a validated request or an OpenAI-style error out. Pure functions with no server,
// model or thread behind them, so the fuzz harness (tests/fuzz/fuzz_server_request.cpp)
// and the unit tests call them directly.
//
// Validation follows the OpenAI API: unknown fields are ignored, `null` means "not given"
// for every optional field, a wrong type or an out-of-range value is a 400 naming the
// field in `param`, and features loom does not implement (tools, echo, best_of > 1,
// non-text content parts, response_format other than text) are a 400 that says so rather
// than being silently dropped.
//
// Thread-safety: every function may be called from any number of threads at once.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

#include "loom/chat_template.hpp"

namespace loom::server {

// {"error": {"message", "type", "param", "code"}} with the HTTP status it goes with.
struct ApiError {
  int status = 400;
  std::string message;
  std::string type = "invalid_request_error";
  std::string param;  // empty: null
  std::string code;   // empty: null
  std::string to_json() const;
};

ApiError invalid_request(std::string message, std::string param = {}, std::string code = {});

enum class Endpoint : uint8_t { completions, chat_completions, embeddings };

// What the validation needs to know about the server.
struct RequestLimits {
  int64_t max_n = 16;             // choices per request (the scheduler's sequences)
  int64_t max_prompts = 16;       // prompts in one /v1/completions request
  int64_t max_inputs = 256;       // inputs in one /v1/embeddings request
  int32_t vocab_size = 0;         // token ids (prompts, logit_bias) must be below it
};

struct CompletionRequest {
  Endpoint endpoint = Endpoint::completions;
  std::string model;
  std::vector<ChatMessage> messages;               // chat
  std::vector<std::string> prompts;                // completions, as text ...
  std::vector<std::vector<int32_t>> token_prompts; // ... or as token ids (one of the two)
  std::optional<int64_t> max_tokens;               // max_tokens / max_completion_tokens
  double temperature = 1.0;
  double top_p = 1.0;
  int64_t n = 1;
  std::vector<std::string> stop;
  std::optional<uint64_t> seed;
  double presence_penalty = 0.0;
  double frequency_penalty = 0.0;
  std::vector<std::pair<int32_t, float>> logit_bias;
  bool logprobs = false;    // chat: logprobs true; completions: logprobs >= 0
  int64_t top_logprobs = 0; // alternatives per token (chat top_logprobs, completions logprobs)
  bool stream = false;
  bool include_usage = false;  // stream_options.include_usage
};

struct EmbeddingRequest {
  std::string model;
  std::vector<std::string> texts;                // either texts ...
  std::vector<std::vector<int32_t>> token_inputs; // ... or token ids
  bool base64 = false;                           // encoding_format "base64"
};

using ParsedCompletion = std::variant<CompletionRequest, ApiError>;
using ParsedEmbedding = std::variant<EmbeddingRequest, ApiError>;

// `endpoint` is completions or chat_completions.
ParsedCompletion parse_completion_request(Endpoint endpoint, std::string_view body, const RequestLimits& limits);
ParsedEmbedding parse_embedding_request(std::string_view body, const RequestLimits& limits);

// Equal strings in time that depends only on their lengths (API keys).
bool constant_time_equal(std::string_view a, std::string_view b) noexcept;
// The Authorization header value ("" when absent) against the server's key: nullopt when
// the key is empty (no auth) or the header is "Bearer <key>", else a 401.
std::optional<ApiError> check_authorization(std::string_view header, std::string_view api_key);

// `text` with every invalid UTF-8 sequence replaced by U+FFFD (JSON strings must be UTF-8;
// a model can emit raw bytes).
std::string valid_utf8(std::string_view text);

}  // namespace loom::server
