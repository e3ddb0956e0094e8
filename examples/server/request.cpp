#include "request.hpp"

#include <simdjson.h>

#include <charconv>
#include <cmath>
#include <functional>
#include <limits>
#include <map>

#include "common/json_writer.hpp"

namespace loom::server {

namespace dom = simdjson::dom;
using Type = dom::element_type;

std::string ApiError::to_json() const {
  JsonWriter w(/*pretty=*/false);
  w.begin_object().key("error").begin_object();
  w.field("message", valid_utf8(message)).field("type", type);
  w.key("param");
  param.empty() ? w.null() : w.value(param);
  w.key("code");
  code.empty() ? w.null() : w.value(code);
  w.end_object().end_object();
  return w.str();
}

ApiError invalid_request(std::string message, std::string param, std::string code) {
  ApiError e;
  e.message = std::move(message);
  e.param = std::move(param);
  e.code = std::move(code);
  return e;
}

namespace {

// Thrown inside the parsers, caught at their boundary.
struct Invalid {
  ApiError error;
};

[[noreturn]] void fail(std::string message, std::string param, std::string code = {}) {
  throw Invalid{invalid_request(std::move(message), std::move(param), std::move(code))};
}

const char* type_name(Type t) {
  switch (t) {
    case Type::ARRAY: return "an array";
    case Type::OBJECT: return "an object";
    case Type::INT64:
    case Type::UINT64: return "an integer";
    case Type::DOUBLE: return "a number";
    case Type::STRING: return "a string";
    case Type::BOOL: return "a boolean";
    case Type::NULL_VALUE: return "null";
  }
  return "a value";
}

[[noreturn]] void wrong_type(const std::string& param, const char* expected, dom::element v) {
  fail("'" + param + "' must be " + expected + ", got " + type_name(v.type()), param, "invalid_type");
}

bool is_null(dom::element v) { return v.type() == Type::NULL_VALUE; }

double number(dom::element v, const std::string& param, double lo, double hi) {
  double d = 0;
  switch (v.type()) {
    case Type::INT64: d = static_cast<double>(int64_t(v)); break;
    case Type::UINT64: d = static_cast<double>(uint64_t(v)); break;
    case Type::DOUBLE: d = double(v); break;
    default: wrong_type(param, "a number", v);
  }
  if (!(d >= lo && d <= hi)) {
    char buf[128];
    std::snprintf(buf, sizeof buf, "'%s' must be between %g and %g, got %g", param.c_str(), lo, hi, d);
    fail(buf, param, "invalid_value");
  }
  return d;
}

// Integers may come as whole doubles (2.0): some clients serialize every number so.
int64_t integer(dom::element v, const std::string& param, int64_t lo, int64_t hi) {
  int64_t i = 0;
  switch (v.type()) {
    case Type::INT64: i = int64_t(v); break;
    case Type::UINT64: i = std::numeric_limits<int64_t>::max(); break;  // > every hi we use
    case Type::DOUBLE: {
      const double d = double(v);
      if (!(std::floor(d) == d && std::fabs(d) < 9.0e15)) wrong_type(param, "an integer", v);
      i = static_cast<int64_t>(d);
      break;
    }
    default: wrong_type(param, "an integer", v);
  }
  if (i < lo || i > hi) {
    fail("'" + param + "' must be between " + std::to_string(lo) + " and " + std::to_string(hi) + ", got " +
             (v.type() == Type::UINT64 ? std::to_string(uint64_t(v)) : std::to_string(i)),
         param, "invalid_value");
  }
  return i;
}

bool boolean(dom::element v, const std::string& param) {
  if (v.type() != Type::BOOL) wrong_type(param, "a boolean", v);
  return bool(v);
}

std::string string(dom::element v, const std::string& param) {
  if (v.type() != Type::STRING) wrong_type(param, "a string", v);
  return std::string(std::string_view(v));
}

dom::object object(dom::element v, const std::string& param) {
  if (v.type() != Type::OBJECT) wrong_type(param, "an object", v);
  return dom::object(v);
}

dom::array array(dom::element v, const std::string& param) {
  if (v.type() != Type::ARRAY) wrong_type(param, "an array", v);
  return dom::array(v);
}

std::vector<int32_t> token_ids(dom::array a, const std::string& param, const RequestLimits& limits) {
  std::vector<int32_t> ids;
  ids.reserve(a.size());
  size_t i = 0;
  for (dom::element t : a) {
    const std::string p = param + "[" + std::to_string(i++) + "]";
    ids.push_back(static_cast<int32_t>(integer(t, p, 0, std::max<int64_t>(limits.vocab_size, 1) - 1)));
  }
  if (ids.empty()) fail("'" + param + "' must not be an empty list of tokens", param, "invalid_value");
  return ids;
}

// A string, or an array of strings / of token ids / of arrays of token ids.
void text_or_tokens(dom::element v, const std::string& param, const RequestLimits& limits, int64_t max_items,
                    std::vector<std::string>& texts, std::vector<std::vector<int32_t>>& tokens) {
  if (v.type() == Type::STRING) {
    texts.push_back(std::string(std::string_view(v)));
    return;
  }
  if (v.type() != Type::ARRAY) wrong_type(param, "a string or an array", v);
  dom::array a(v);
  if (a.size() == 0) fail("'" + param + "' must not be empty", param, "invalid_value");
  dom::element first = a.at(0);
  if (first.type() == Type::INT64 || first.type() == Type::UINT64 || first.type() == Type::DOUBLE) {
    tokens.push_back(token_ids(a, param, limits));
    return;
  }
  if (static_cast<int64_t>(a.size()) > max_items) {
    fail("'" + param + "' holds " + std::to_string(a.size()) + " items; at most " + std::to_string(max_items) +
             " are allowed",
         param, "invalid_value");
  }
  size_t i = 0;
  for (dom::element item : a) {
    const std::string p = param + "[" + std::to_string(i++) + "]";
    if (item.type() == Type::STRING) {
      if (!tokens.empty()) fail("'" + param + "' mixes text and tokens", p, "invalid_value");
      texts.push_back(std::string(std::string_view(item)));
    } else if (item.type() == Type::ARRAY) {
      if (!texts.empty()) fail("'" + param + "' mixes text and tokens", p, "invalid_value");
      tokens.push_back(token_ids(dom::array(item), p, limits));
    } else {
      wrong_type(p, "a string or an array of token ids", item);
    }
  }
}

// Chat message content: a string, null (assistant turns with tool calls), or a list of
// {"type": "text", "text": ...} parts, joined.
std::string content_text(dom::element v, const std::string& param) {
  if (v.type() == Type::STRING) return std::string(std::string_view(v));
  if (v.type() == Type::NULL_VALUE) return {};
  if (v.type() != Type::ARRAY) wrong_type(param, "a string or an array of content parts", v);
  std::string text;
  size_t i = 0;
  for (dom::element part : dom::array(v)) {
    const std::string p = param + "[" + std::to_string(i++) + "]";
    dom::object o = object(part, p);
    dom::element type, t;
    if (o["type"].get(type) != simdjson::SUCCESS) fail("'" + p + ".type' is required", p + ".type", "missing_required_parameter");
    const std::string kind = string(type, p + ".type");
    if (kind != "text") {
      fail("content parts of type '" + kind + "' are not supported (text only)", p + ".type", "unsupported_value");
    }
    if (o["text"].get(t) != simdjson::SUCCESS) fail("'" + p + ".text' is required", p + ".text", "missing_required_parameter");
    text += string(t, p + ".text");
  }
  return text;
}

std::vector<ChatMessage> messages(dom::element v) {
  dom::array a = array(v, "messages");
  if (a.size() == 0) fail("'messages' must hold at least one message", "messages", "invalid_value");
  std::vector<ChatMessage> out;
  size_t i = 0;
  for (dom::element m : a) {
    const std::string p = "messages[" + std::to_string(i++) + "]";
    dom::object o = object(m, p);
    dom::element role, content;
    if (o["role"].get(role) != simdjson::SUCCESS) fail("'" + p + ".role' is required", p + ".role", "missing_required_parameter");
    ChatMessage msg;
    msg.role = string(role, p + ".role");
    // "developer" is the newer name of the system role (o1 and later).
    if (msg.role == "developer") msg.role = "system";
    static const char* const kRoles[] = {"system", "user", "assistant", "tool"};
    if (std::find(std::begin(kRoles), std::end(kRoles), msg.role) == std::end(kRoles)) {
      fail("'" + p + ".role' must be one of system, developer, user, assistant, tool; got '" + msg.role + "'",
           p + ".role", "invalid_value");
    }
    if (o["content"].get(content) == simdjson::SUCCESS) {
      msg.content = content_text(content, p + ".content");
    } else if (msg.role != "assistant") {
      fail("'" + p + ".content' is required", p + ".content", "missing_required_parameter");
    }
    out.push_back(std::move(msg));
  }
  return out;
}

std::vector<std::string> stops(dom::element v) {
  std::vector<std::string> out;
  if (v.type() == Type::STRING) {
    out.push_back(std::string(std::string_view(v)));
  } else if (v.type() == Type::ARRAY) {
    size_t i = 0;
    for (dom::element s : dom::array(v)) out.push_back(string(s, "stop[" + std::to_string(i++) + "]"));
    if (out.size() > 4) fail("'stop' holds at most 4 strings, got " + std::to_string(out.size()), "stop", "invalid_value");
  } else {
    wrong_type("stop", "a string or an array of strings", v);
  }
  std::erase(out, std::string());  // an empty stop string would stop before anything
  return out;
}

std::vector<std::pair<int32_t, float>> logit_bias(dom::element v, const RequestLimits& limits) {
  std::vector<std::pair<int32_t, float>> out;
  for (auto [key, value] : object(v, "logit_bias")) {
    int64_t id = -1;
    const auto [end, ec] = std::from_chars(key.data(), key.data() + key.size(), id);
    const std::string p = "logit_bias." + std::string(key);
    if (ec != std::errc() || end != key.data() + key.size() || id < 0 || id >= limits.vocab_size) {
      fail("'logit_bias' keys must be token ids below " + std::to_string(limits.vocab_size) + ", got '" +
               std::string(key) + "'",
           "logit_bias", "invalid_value");
    }
    out.emplace_back(static_cast<int32_t>(id), static_cast<float>(number(value, p, -100.0, 100.0)));
  }
  return out;
}

simdjson::dom::object parse_body(simdjson::dom::parser& parser, std::string_view body) {
  dom::element doc;
  if (parser.parse(body.data(), body.size(), /*realloc_if_needed=*/true).get(doc) != simdjson::SUCCESS) {
    fail("We could not parse the JSON body of your request. (HINT: This likely means you aren't using your HTTP "
         "library correctly. The OpenAI API expects a JSON payload.)",
         {}, "invalid_json");
  }
  if (doc.type() != Type::OBJECT) fail("the request body must be a JSON object", {}, "invalid_json");
  return dom::object(doc);
}

using Field = std::function<void(dom::element)>;

// Runs the handler of every known, non-null field; unknown fields are ignored.
void for_fields(dom::object o, const std::map<std::string_view, Field>& fields) {
  for (auto [key, value] : o) {
    const auto it = fields.find(key);
    if (it != fields.end() && !is_null(value)) it->second(value);
  }
}

}  // namespace

ParsedCompletion parse_completion_request(Endpoint endpoint, std::string_view body, const RequestLimits& limits) {
  try {
    dom::parser parser;
    dom::object o = parse_body(parser, body);
    CompletionRequest r;
    r.endpoint = endpoint;
    const bool chat = endpoint == Endpoint::chat_completions;
    bool have_input = false;
    std::optional<int64_t> legacy_logprobs;
    std::map<std::string_view, Field> fields{
        {"model", [&](dom::element v) { r.model = string(v, "model"); }},
        {"max_tokens", [&](dom::element v) { r.max_tokens = integer(v, "max_tokens", 1, 1 << 30); }},
        {"temperature", [&](dom::element v) { r.temperature = number(v, "temperature", 0.0, 2.0); }},
        {"top_p", [&](dom::element v) { r.top_p = number(v, "top_p", 0.0, 1.0); }},
        {"n", [&](dom::element v) { r.n = integer(v, "n", 1, limits.max_n); }},
        {"stop", [&](dom::element v) { r.stop = stops(v); }},
        {"seed", [&](dom::element v) {
           if (v.type() == Type::UINT64) {
             r.seed = uint64_t(v);
           } else {
             r.seed = static_cast<uint64_t>(integer(v, "seed", std::numeric_limits<int64_t>::min(),
                                                    std::numeric_limits<int64_t>::max()));
           }
         }},
        {"presence_penalty", [&](dom::element v) { r.presence_penalty = number(v, "presence_penalty", -2.0, 2.0); }},
        {"frequency_penalty", [&](dom::element v) { r.frequency_penalty = number(v, "frequency_penalty", -2.0, 2.0); }},
        {"logit_bias", [&](dom::element v) { r.logit_bias = logit_bias(v, limits); }},
        {"stream", [&](dom::element v) { r.stream = boolean(v, "stream"); }},
        {"stream_options", [&](dom::element v) {
           dom::element u;
           if (object(v, "stream_options")["include_usage"].get(u) == simdjson::SUCCESS && !is_null(u)) {
             r.include_usage = boolean(u, "stream_options.include_usage");
           }
         }},
        {"best_of", [&](dom::element v) {
           if (integer(v, "best_of", 1, 20) != 1) fail("'best_of' other than 1 is not supported", "best_of", "unsupported_value");
         }},
    };
    if (chat) {
      fields.emplace("messages", [&](dom::element v) {
        r.messages = messages(v);
        have_input = true;
      });
      fields.emplace("max_completion_tokens",
                     [&](dom::element v) { r.max_tokens = integer(v, "max_completion_tokens", 1, 1 << 30); });
      fields.emplace("logprobs", [&](dom::element v) { r.logprobs = boolean(v, "logprobs"); });
      fields.emplace("top_logprobs", [&](dom::element v) { r.top_logprobs = integer(v, "top_logprobs", 0, 20); });
      fields.emplace("tools", [&](dom::element v) {
        if (array(v, "tools").size() > 0) fail("tools (function calling) are not supported", "tools", "unsupported_value");
      });
      fields.emplace("response_format", [&](dom::element v) {
        dom::element t;
        if (object(v, "response_format")["type"].get(t) == simdjson::SUCCESS && string(t, "response_format.type") != "text") {
          fail("response_format other than 'text' is not supported", "response_format", "unsupported_value");
        }
      });
    } else {
      fields.emplace("prompt", [&](dom::element v) {
        text_or_tokens(v, "prompt", limits, limits.max_prompts, r.prompts, r.token_prompts);
        have_input = true;
      });
      fields.emplace("logprobs", [&](dom::element v) { legacy_logprobs = integer(v, "logprobs", 0, 5); });
      fields.emplace("echo", [&](dom::element v) {
        if (boolean(v, "echo")) fail("'echo' is not supported", "echo", "unsupported_value");
      });
      fields.emplace("suffix", [&](dom::element v) {
        if (!string(v, "suffix").empty()) fail("'suffix' is not supported", "suffix", "unsupported_value");
      });
    }
    for_fields(o, fields);
    if (!have_input) {
      const char* what = chat ? "messages" : "prompt";
      fail(std::string("'") + what + "' is required", what, "missing_required_parameter");
    }
    if (chat && r.top_logprobs > 0 && !r.logprobs) {
      fail("'top_logprobs' needs 'logprobs' to be true", "top_logprobs", "invalid_value");
    }
    if (legacy_logprobs) {
      r.logprobs = true;
      r.top_logprobs = *legacy_logprobs;
    }
    const int64_t prompts = static_cast<int64_t>(r.prompts.size() + r.token_prompts.size());
    if (!chat && prompts * r.n > limits.max_n) {
      fail(std::to_string(prompts) + " prompts x n " + std::to_string(r.n) + " choices exceed the server's " +
               std::to_string(limits.max_n) + " sequences",
           "n", "invalid_value");
    }
    return r;
  } catch (const Invalid& e) {
    return e.error;
  }
}

ParsedEmbedding parse_embedding_request(std::string_view body, const RequestLimits& limits) {
  try {
    dom::parser parser;
    dom::object o = parse_body(parser, body);
    EmbeddingRequest r;
    bool have_input = false;
    const std::map<std::string_view, Field> fields{
        {"model", [&](dom::element v) { r.model = string(v, "model"); }},
        {"input", [&](dom::element v) {
           text_or_tokens(v, "input", limits, limits.max_inputs, r.texts, r.token_inputs);
           have_input = true;
         }},
        {"encoding_format", [&](dom::element v) {
           const std::string f = string(v, "encoding_format");
           if (f != "float" && f != "base64") {
             fail("'encoding_format' must be 'float' or 'base64', got '" + f + "'", "encoding_format", "invalid_value");
           }
           r.base64 = f == "base64";
         }},
        {"dimensions", [&](dom::element v) {
           (void)integer(v, "dimensions", 1, 1 << 20);
           fail("'dimensions' is not supported (the model's hidden size is returned)", "dimensions", "unsupported_value");
         }},
    };
    for_fields(o, fields);
    if (!have_input) fail("'input' is required", "input", "missing_required_parameter");
    return r;
  } catch (const Invalid& e) {
    return e.error;
  }
}

bool constant_time_equal(std::string_view a, std::string_view b) noexcept {
  // Every byte of the longer string is visited whatever the contents; the length
  // difference is folded into the result rather than returned early.
  const size_t n = std::max(a.size(), b.size());
  unsigned diff = a.size() == b.size() ? 0u : 1u;
  for (size_t i = 0; i < n; ++i) {
    const unsigned char x = i < a.size() ? static_cast<unsigned char>(a[i]) : 0;
    const unsigned char y = i < b.size() ? static_cast<unsigned char>(b[i]) : 0;
    diff |= static_cast<unsigned>(x ^ y);
  }
  return diff == 0;
}

std::optional<ApiError> check_authorization(std::string_view header, std::string_view api_key) {
  if (api_key.empty()) return std::nullopt;
  ApiError e;
  e.status = 401;
  e.code = "invalid_api_key";
  constexpr std::string_view kBearer = "Bearer ";
  if (header.empty()) {
    e.message = "You didn't provide an API key. You need to provide your API key in an Authorization header using "
                "Bearer auth (i.e. Authorization: Bearer YOUR_KEY).";
    return e;
  }
  const bool bearer = header.size() >= kBearer.size() && header.substr(0, kBearer.size()) == kBearer;
  if (bearer && constant_time_equal(header.substr(kBearer.size()), api_key)) return std::nullopt;
  e.message = "Incorrect API key provided.";
  return e;
}

std::string valid_utf8(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  size_t i = 0;
  while (i < s.size()) {
    const auto c = static_cast<unsigned char>(s[i]);
    size_t len = 0;
    uint32_t min = 0;
    if (c < 0x80) {
      out += static_cast<char>(c);
      ++i;
      continue;
    } else if ((c & 0xE0) == 0xC0) {
      len = 2, min = 0x80;
    } else if ((c & 0xF0) == 0xE0) {
      len = 3, min = 0x800;
    } else if ((c & 0xF8) == 0xF0) {
      len = 4, min = 0x10000;
    }
    bool ok = len > 0 && i + len <= s.size();
    uint32_t cp = ok ? (c & (0x7Fu >> len)) : 0;
    for (size_t k = 1; ok && k < len; ++k) {
      const auto cc = static_cast<unsigned char>(s[i + k]);
      ok = (cc & 0xC0) == 0x80;
      cp = (cp << 6) | (cc & 0x3Fu);
    }
    ok = ok && cp >= min && cp <= 0x10FFFF && !(cp >= 0xD800 && cp <= 0xDFFF);
    if (ok) {
      out.append(s.substr(i, len));
      i += len;
    } else {
      out += "\xEF\xBF\xBD";
      ++i;
    }
  }
  return out;
}

}  // namespace loom::server
