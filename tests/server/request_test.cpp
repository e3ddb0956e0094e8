// loom serve's request layer (examples/server/request.hpp): bodies in, validated requests
// or OpenAI-style errors out.
#include <catch2/catch.hpp>

#include <string>
#include <variant>

#include "request.hpp"

namespace s = loom::server;

namespace {

s::RequestLimits limits() {
  s::RequestLimits l;
  l.max_n = 4;
  l.max_prompts = 4;
  l.vocab_size = 512;
  return l;
}

s::CompletionRequest completion_ok(std::string_view body, s::Endpoint e = s::Endpoint::completions) {
  s::ParsedCompletion p = s::parse_completion_request(e, body, limits());
  if (auto* err = std::get_if<s::ApiError>(&p)) FAIL("unexpected error: " << err->to_json());
  return std::get<s::CompletionRequest>(p);
}

s::ApiError completion_error(std::string_view body, s::Endpoint e = s::Endpoint::completions) {
  s::ParsedCompletion p = s::parse_completion_request(e, body, limits());
  REQUIRE(std::holds_alternative<s::ApiError>(p));
  return std::get<s::ApiError>(p);
}

}  // namespace

TEST_CASE("request: a completion request with every supported field") {
  const auto r = completion_ok(R"({"model": "m", "prompt": "Once", "max_tokens": 7, "temperature": 0.5,
      "top_p": 0.9, "n": 2, "stop": ["a", "b"], "seed": 42, "presence_penalty": 0.5, "frequency_penalty": -1,
      "logit_bias": {"13": -100, "7": 2.5}, "logprobs": 3, "stream": true,
      "stream_options": {"include_usage": true}, "user": "ignored", "unknown": {"nested": [1]}})");
  CHECK(r.model == "m");
  REQUIRE(r.prompts == std::vector<std::string>{"Once"});
  CHECK(r.max_tokens == 7);
  CHECK(r.temperature == 0.5);
  CHECK(r.top_p == 0.9);
  CHECK(r.n == 2);
  CHECK(r.stop == std::vector<std::string>{"a", "b"});
  CHECK(r.seed == 42u);
  CHECK(r.presence_penalty == 0.5);
  CHECK(r.frequency_penalty == -1.0);
  REQUIRE(r.logit_bias.size() == 2);
  CHECK(r.logit_bias[0] == std::pair<int32_t, float>{13, -100.0f});
  CHECK(r.logit_bias[1] == std::pair<int32_t, float>{7, 2.5f});
  CHECK(r.logprobs);
  CHECK(r.top_logprobs == 3);
  CHECK(r.stream);
  CHECK(r.include_usage);
}

TEST_CASE("request: defaults are OpenAI's, and null means not given") {
  const auto r = completion_ok(R"({"prompt": "x", "max_tokens": null, "temperature": null, "stop": null, "n": null})");
  CHECK(!r.max_tokens);
  CHECK(r.temperature == 1.0);
  CHECK(r.top_p == 1.0);
  CHECK(r.n == 1);
  CHECK(r.stop.empty());
  CHECK(!r.seed);
  CHECK(!r.stream);
  CHECK(!r.logprobs);
}

TEST_CASE("request: prompts as text lists, token ids and lists of token ids") {
  CHECK(completion_ok(R"({"prompt": ["a", "b"]})").prompts == std::vector<std::string>{"a", "b"});
  CHECK(completion_ok(R"({"prompt": [1, 403, 407]})").token_prompts == std::vector<std::vector<int32_t>>{{1, 403, 407}});
  CHECK(completion_ok(R"({"prompt": [[1, 2], [3]]})").token_prompts.size() == 2);
  CHECK(completion_ok(R"({"prompt": [1.0, 2]})").token_prompts == std::vector<std::vector<int32_t>>{{1, 2}});
  CHECK(completion_error(R"({"prompt": [1, 512]})").param == "prompt[1]");
  CHECK(completion_error(R"({"prompt": [1, -1]})").code == "invalid_value");
  CHECK(completion_error(R"({"prompt": []})").param == "prompt");
  CHECK(completion_error(R"({"prompt": ["a", [1]]})").message.find("mixes") != std::string::npos);
  CHECK(completion_error(R"({"prompt": ["a", "b", "c", "d", "e"]})").param == "prompt");
  // 3 prompts x n 2 = 6 choices > the 4 sequences
  CHECK(completion_error(R"({"prompt": ["a", "b", "c"], "n": 2})").param == "n");
}

TEST_CASE("request: chat messages, content parts and roles") {
  const auto r = completion_ok(R"({"messages": [{"role": "developer", "content": "Be brief."},
      {"role": "user", "content": [{"type": "text", "text": "Hi "}, {"type": "text", "text": "there"}]},
      {"role": "assistant", "content": null}, {"role": "user", "content": "again", "name": "x"}],
      "max_completion_tokens": 5, "logprobs": true, "top_logprobs": 2})",
                               s::Endpoint::chat_completions);
  REQUIRE(r.messages.size() == 4);
  CHECK(r.messages[0].role == "system");
  CHECK(r.messages[1].content == "Hi there");
  CHECK(r.messages[2].content.empty());
  CHECK(r.max_tokens == 5);
  CHECK(r.logprobs);
  CHECK(r.top_logprobs == 2);
  const auto chat = s::Endpoint::chat_completions;
  CHECK(completion_error(R"({"messages": []})", chat).param == "messages");
  CHECK(completion_error(R"({"messages": [{"role": "robot", "content": "x"}]})", chat).param == "messages[0].role");
  CHECK(completion_error(R"({"messages": [{"role": "user"}]})", chat).param == "messages[0].content");
  CHECK(completion_error(R"({"messages": [{"content": "x"}]})", chat).code == "missing_required_parameter");
  CHECK(completion_error(R"({"messages": [{"role": "user", "content": [{"type": "image_url"}]}]})", chat).code ==
        "unsupported_value");
  CHECK(completion_error(R"({"messages": [{"role": "user", "content": "x"}], "top_logprobs": 2})", chat).param ==
        "top_logprobs");
  CHECK(completion_error(R"({"messages": [{"role": "user", "content": "x"}], "tools": [{"type": "function"}]})", chat)
            .param == "tools");
  CHECK(completion_error(R"({"prompt": "x"})", chat).param == "messages");
}

TEST_CASE("request: wrong types and out-of-range values name the field") {
  struct Case {
    const char* body;
    const char* param;
    const char* code;
  };
  const Case cases[] = {
      {R"({"prompt": "x", "max_tokens": "5"})", "max_tokens", "invalid_type"},
      {R"({"prompt": "x", "max_tokens": 0})", "max_tokens", "invalid_value"},
      {R"({"prompt": "x", "max_tokens": 1.5})", "max_tokens", "invalid_type"},
      {R"({"prompt": "x", "temperature": 2.5})", "temperature", "invalid_value"},
      {R"({"prompt": "x", "temperature": "hot"})", "temperature", "invalid_type"},
      {R"({"prompt": "x", "top_p": -0.1})", "top_p", "invalid_value"},
      {R"({"prompt": "x", "n": 5})", "n", "invalid_value"},
      {R"({"prompt": "x", "n": 0})", "n", "invalid_value"},
      {R"({"prompt": "x", "stop": 3})", "stop", "invalid_type"},
      {R"({"prompt": "x", "stop": ["a", "b", "c", "d", "e"]})", "stop", "invalid_value"},
      {R"({"prompt": "x", "stop": ["a", 1]})", "stop[1]", "invalid_type"},
      {R"({"prompt": "x", "seed": "1"})", "seed", "invalid_type"},
      {R"({"prompt": "x", "presence_penalty": 3})", "presence_penalty", "invalid_value"},
      {R"({"prompt": "x", "logit_bias": {"abc": 1}})", "logit_bias", "invalid_value"},
      {R"({"prompt": "x", "logit_bias": {"600": 1}})", "logit_bias", "invalid_value"},
      {R"({"prompt": "x", "logit_bias": {"5": 101}})", "logit_bias.5", "invalid_value"},
      {R"({"prompt": "x", "logit_bias": [1]})", "logit_bias", "invalid_type"},
      {R"({"prompt": "x", "logprobs": 6})", "logprobs", "invalid_value"},
      {R"({"prompt": "x", "stream": "yes"})", "stream", "invalid_type"},
      {R"({"prompt": "x", "stream_options": {"include_usage": 1}})", "stream_options.include_usage", "invalid_type"},
      {R"({"prompt": "x", "echo": true})", "echo", "unsupported_value"},
      {R"({"prompt": "x", "best_of": 2})", "best_of", "unsupported_value"},
      {R"({"prompt": 5})", "prompt", "invalid_type"},
      {R"({"max_tokens": 5})", "prompt", "missing_required_parameter"},
      {R"({"prompt": "x", "model": 1})", "model", "invalid_type"},
  };
  for (const Case& c : cases) {
    INFO(c.body);
    const s::ApiError e = completion_error(c.body);
    CHECK(e.status == 400);
    CHECK(e.type == "invalid_request_error");
    CHECK(e.param == c.param);
    CHECK(e.code == c.code);
  }
}

TEST_CASE("request: bodies that are not a JSON object are invalid_json") {
  for (const char* body : {"", "{", "[1]", "\"x\"", "{\"prompt\": \"x\",}", "{\"prompt\": \"\xff\"}", "nul"}) {
    INFO(body);
    const s::ApiError e = completion_error(body);
    CHECK(e.status == 400);
    CHECK(e.code == "invalid_json");
  }
}

TEST_CASE("request: embeddings take a string or a list, float or base64") {
  auto ok = [](std::string_view body) {
    auto p = s::parse_embedding_request(body, limits());
    REQUIRE(std::holds_alternative<s::EmbeddingRequest>(p));
    return std::get<s::EmbeddingRequest>(p);
  };
  auto err = [](std::string_view body) {
    auto p = s::parse_embedding_request(body, limits());
    REQUIRE(std::holds_alternative<s::ApiError>(p));
    return std::get<s::ApiError>(p);
  };
  CHECK(ok(R"({"input": "hello"})").texts == std::vector<std::string>{"hello"});
  CHECK(ok(R"({"input": ["a", "b"], "encoding_format": "base64"})").base64);
  CHECK(ok(R"({"input": [[1, 2], [3]]})").token_inputs.size() == 2);
  CHECK(err(R"({"input": 3})").param == "input");
  CHECK(err(R"({})").code == "missing_required_parameter");
  CHECK(err(R"({"input": "a", "encoding_format": "int8"})").param == "encoding_format");
  CHECK(err(R"({"input": "a", "dimensions": 8})").code == "unsupported_value");
}

TEST_CASE("request: the error body is OpenAI's shape, with null param and code when unset") {
  s::ApiError e = s::invalid_request("bad \"thing\"\n");
  CHECK(e.to_json() ==
        R"({"error":{"message":"bad \"thing\"\n","type":"invalid_request_error","param":null,"code":null}})");
  e.param = "n";
  e.code = "invalid_value";
  CHECK(e.to_json() == R"({"error":{"message":"bad \"thing\"\n","type":"invalid_request_error","param":"n","code":"invalid_value"}})");
}

TEST_CASE("request: the API key is checked as a Bearer token") {
  CHECK(!s::check_authorization("", ""));
  CHECK(!s::check_authorization("anything", ""));
  CHECK(!s::check_authorization("Bearer sk-1", "sk-1"));
  for (const char* h : {"", "Bearer sk-2", "Bearer sk-1x", "Bearer sk-", "bearer sk-1", "sk-1", "Basic sk-1"}) {
    INFO(h);
    const auto e = s::check_authorization(h, "sk-1");
    REQUIRE(e);
    CHECK(e->status == 401);
    CHECK(e->code == "invalid_api_key");
  }
  CHECK(s::constant_time_equal("abc", "abc"));
  CHECK(!s::constant_time_equal("abc", "abd"));
  CHECK(!s::constant_time_equal("abc", "abcd"));
  CHECK(!s::constant_time_equal("", "a"));
  CHECK(s::constant_time_equal("", ""));
}

TEST_CASE("request: invalid UTF-8 becomes U+FFFD, valid text is kept") {
  CHECK(s::valid_utf8("h\xc3\xa9llo \xe4\xb8\xad") == "h\xc3\xa9llo \xe4\xb8\xad");
  CHECK(s::valid_utf8("a\xff" "b") == "a\xef\xbf\xbd" "b");
  CHECK(s::valid_utf8("\xc3") == "\xef\xbf\xbd");                 // cut short
  CHECK(s::valid_utf8("\xc0\xaf") == "\xef\xbf\xbd\xef\xbf\xbd");  // overlong
  CHECK(s::valid_utf8("\xed\xa0\x80") == "\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd");  // a surrogate
}
