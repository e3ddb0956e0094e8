// libFuzzer harness: loom serve's request layer (examples/server/request.hpp). Input: one
// byte choosing the endpoint (completions, chat completions, embeddings), then the
// Authorization header value up to the first '\n', then the body. Every outcome must be a
// validated request or an OpenAI error whose JSON is valid UTF-8 JSON; crashes, over-reads
// and other exceptions are bugs.
#include <simdjson.h>

#include <cstdint>
#include <string>
#include <string_view>
#include <variant>

#include "request.hpp"

namespace {

void check_error_json(const loom::server::ApiError& e) {
  const std::string json = e.to_json();
  simdjson::dom::parser parser;
  simdjson::dom::element doc;
  if (parser.parse(json).get(doc) != simdjson::SUCCESS) __builtin_trap();
  if (e.status < 400 || e.status > 599) __builtin_trap();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  namespace s = loom::server;
  const std::string_view input(reinterpret_cast<const char*>(data) + 1, size - 1);
  const size_t nl = input.find('\n');
  const std::string_view header = nl == std::string_view::npos ? std::string_view() : input.substr(0, nl);
  const std::string_view body = nl == std::string_view::npos ? input : input.substr(nl + 1);

  if (auto e = s::check_authorization(header, "sk-fuzz")) check_error_json(*e);
  const std::string clean = s::valid_utf8(body);
  if (!simdjson::validate_utf8(clean.data(), clean.size())) __builtin_trap();

  s::RequestLimits limits;
  limits.max_n = 8;
  limits.vocab_size = 512;
  volatile size_t sink = 0;
  switch (data[0] % 3) {
    case 0:
    case 1: {
      const auto endpoint = data[0] % 3 == 0 ? s::Endpoint::completions : s::Endpoint::chat_completions;
      const s::ParsedCompletion p = s::parse_completion_request(endpoint, body, limits);
      if (const auto* e = std::get_if<s::ApiError>(&p)) {
        check_error_json(*e);
        break;
      }
      const auto& r = std::get<s::CompletionRequest>(p);
      if (r.n < 1 || r.n > limits.max_n || r.top_logprobs < 0 || r.stop.size() > 4) __builtin_trap();
      for (const auto& [id, bias] : r.logit_bias) {
        if (id < 0 || id >= limits.vocab_size || !(bias >= -100.0f && bias <= 100.0f)) __builtin_trap();
      }
      for (const auto& t : r.token_prompts) {
        for (int32_t id : t) {
          if (id < 0 || id >= limits.vocab_size) __builtin_trap();
        }
      }
      for (const auto& m : r.messages) sink = sink + m.role.size() + m.content.size();
      for (const auto& p2 : r.prompts) sink = sink + p2.size();
      break;
    }
    default: {
      const s::ParsedEmbedding p = s::parse_embedding_request(body, limits);
      if (const auto* e = std::get_if<s::ApiError>(&p)) {
        check_error_json(*e);
        break;
      }
      for (const auto& t : std::get<s::EmbeddingRequest>(p).texts) sink = sink + t.size();
      break;
    }
  }
  (void)sink;
  return 0;
}
