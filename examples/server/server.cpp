#include "server.hpp"

#include <httplib.h>
#include <pthread.h>
#include <signal.h>
#include <sys/socket.h>

#include <atomic>
#include <cerrno>
#include <cinttypes>
#include <cstring>
#include <ctime>
#include <fstream>
#include <map>
#include <optional>
#include <random>
#include <thread>

#include "common/json_writer.hpp"
#include "loom/chat_template.hpp"
#include "loom/error.hpp"
#include "loom/load_report.hpp"
#include "loom/tokenizer.hpp"

namespace loom::server {

namespace {

using Clock = std::chrono::steady_clock;

constexpr const char* kJson = "application/json";

void send_error(httplib::Response& res, const ApiError& e) {
  res.status = e.status;
  if (e.status == 429 || e.status == 503) res.set_header("Retry-After", "1");
  res.set_content(e.to_json(), kJson);
}

ApiError status_error(int status, std::string message, std::string type, std::string code = {}) {
  ApiError e;
  e.status = status;
  e.message = std::move(message);
  e.type = std::move(type);
  e.code = std::move(code);
  return e;
}

int64_t rss_bytes() {
  std::ifstream in("/proc/self/statm");
  int64_t pages = 0, resident = 0;
  in >> pages >> resident;
  return resident * static_cast<int64_t>(::sysconf(_SC_PAGESIZE));
}

void base64(std::string& out, const unsigned char* p, size_t n) {
  static const char* const kAlphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  for (size_t i = 0; i < n; i += 3) {
    const uint32_t b0 = p[i], b1 = i + 1 < n ? p[i + 1] : 0, b2 = i + 2 < n ? p[i + 2] : 0;
    const uint32_t v = (b0 << 16) | (b1 << 8) | b2;
    out += kAlphabet[(v >> 18) & 63];
    out += kAlphabet[(v >> 12) & 63];
    out += i + 1 < n ? kAlphabet[(v >> 6) & 63] : '=';
    out += i + 2 < n ? kAlphabet[v & 63] : '=';
  }
}

std::string float_text(float f) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.9g", static_cast<double>(f));
  return buf;
}

// What one choice has produced so far (non-streaming responses).
struct ChoiceResult {
  std::string text;
  std::vector<TokenLogprob> logprobs;
  std::optional<FinishReason> finish;
};

// Per-request facts the response writers need.
struct ResponseContext {
  bool chat = false;
  std::string id;
  int64_t created = 0;
  std::string model;
  bool logprobs = false;
  std::shared_ptr<const Tokenizer> tok;
};

void write_usage(JsonWriter& w, int64_t prompt, int64_t completion) {
  w.key("usage").begin_object();
  w.field("prompt_tokens", prompt).field("completion_tokens", completion).field("total_tokens", prompt + completion);
  w.end_object();
}

void write_token_bytes(JsonWriter& w, const std::string& piece) {
  w.key("bytes").begin_array();
  for (unsigned char c : piece) w.value(static_cast<int64_t>(c));
  w.end_array();
}

// chat: {"content": [{"token", "logprob", "bytes", "top_logprobs": [...]}]};
// completions: {"tokens", "token_logprobs", "top_logprobs", "text_offset"}.
void write_logprobs(JsonWriter& w, const ResponseContext& ctx, const std::vector<TokenLogprob>& lps,
                    int64_t text_offset) {
  w.key("logprobs");
  if (!ctx.logprobs) {
    w.null();
    return;
  }
  const Tokenizer& tok = *ctx.tok;
  if (ctx.chat) {
    w.begin_object().key("content").begin_array();
    for (const TokenLogprob& lp : lps) {
      const std::string piece = tok.token_to_piece(lp.token);
      w.begin_object().field("token", valid_utf8(piece)).field("logprob", static_cast<double>(lp.logprob));
      write_token_bytes(w, piece);
      w.key("top_logprobs").begin_array();
      for (const auto& [id, l] : lp.top) {
        const std::string p = tok.token_to_piece(id);
        w.begin_object().field("token", valid_utf8(p)).field("logprob", static_cast<double>(l));
        write_token_bytes(w, p);
        w.end_object();
      }
      w.end_array().end_object();
    }
    w.end_array().end_object();
    return;
  }
  w.begin_object();
  w.key("tokens").begin_array();
  for (const TokenLogprob& lp : lps) w.value(valid_utf8(tok.token_to_piece(lp.token)));
  w.end_array().key("token_logprobs").begin_array();
  for (const TokenLogprob& lp : lps) w.value(static_cast<double>(lp.logprob));
  w.end_array().key("top_logprobs").begin_array();
  for (const TokenLogprob& lp : lps) {
    w.begin_object();
    for (const auto& [id, l] : lp.top) w.field(valid_utf8(tok.token_to_piece(id)), static_cast<double>(l));
    w.end_object();
  }
  w.end_array().key("text_offset").begin_array();
  for (const TokenLogprob& lp : lps) {
    w.value(text_offset);
    text_offset += static_cast<int64_t>(tok.token_to_piece(lp.token).size());
  }
  w.end_array().end_object();
}

void write_head(JsonWriter& w, const ResponseContext& ctx, const char* object) {
  w.field("id", ctx.id).field("object", object).field("created", ctx.created).field("model", ctx.model);
  w.field("system_fingerprint", "loom");
}

std::string full_response(const ResponseContext& ctx, const std::vector<ChoiceResult>& choices, int64_t prompt,
                          int64_t completion) {
  JsonWriter w(false);
  w.begin_object();
  write_head(w, ctx, ctx.chat ? "chat.completion" : "text_completion");
  w.key("choices").begin_array();
  for (size_t i = 0; i < choices.size(); ++i) {
    const ChoiceResult& c = choices[i];
    w.begin_object().field("index", static_cast<int64_t>(i));
    if (ctx.chat) {
      w.key("message").begin_object().field("role", "assistant").field("content", valid_utf8(c.text));
      w.key("refusal").null();
      w.end_object();
    } else {
      w.field("text", valid_utf8(c.text));
    }
    write_logprobs(w, ctx, c.logprobs, 0);
    w.field("finish_reason", finish_reason_name(c.finish.value_or(FinishReason::length)));
    w.end_object();
  }
  w.end_array();
  write_usage(w, prompt, completion);
  w.end_object();
  return w.str();
}

// One SSE chunk for one choice: text (or the assistant role first), or the finish.
std::string chunk(const ResponseContext& ctx, int64_t choice, const std::string* text, bool role,
                  const std::vector<TokenLogprob>* lps, std::optional<FinishReason> finish, bool usage_null,
                  int64_t text_offset) {
  JsonWriter w(false);
  w.begin_object();
  write_head(w, ctx, ctx.chat ? "chat.completion.chunk" : "text_completion");
  w.key("choices").begin_array().begin_object().field("index", choice);
  if (ctx.chat) {
    w.key("delta").begin_object();
    if (role) w.field("role", "assistant");
    if (text) w.field("content", valid_utf8(*text));
    w.end_object();
  } else {
    w.field("text", text ? valid_utf8(*text) : std::string());
  }
  if (lps && ctx.logprobs) {
    write_logprobs(w, ctx, *lps, text_offset);
  } else {
    w.key("logprobs").null();
  }
  w.key("finish_reason");
  finish ? w.value(finish_reason_name(*finish)) : w.null();
  w.end_object().end_array();
  if (usage_null) w.key("usage").null();
  w.end_object();
  return "data: " + w.str() + "\n\n";
}

std::string usage_chunk(const ResponseContext& ctx, int64_t prompt, int64_t completion) {
  JsonWriter w(false);
  w.begin_object();
  write_head(w, ctx, ctx.chat ? "chat.completion.chunk" : "text_completion");
  w.key("choices").begin_array().end_array();
  write_usage(w, prompt, completion);
  w.end_object();
  return "data: " + w.str() + "\n\n";
}

// Request counters by path and status, for /metrics.
class RequestCounters {
 public:
  void add(const std::string& path, int status) {
    std::lock_guard lock(mutex_);
    ++counts_[{path, status}];
  }
  std::map<std::pair<std::string, int>, int64_t> snapshot() const {
    std::lock_guard lock(mutex_);
    return counts_;
  }

 private:
  mutable std::mutex mutex_;
  std::map<std::pair<std::string, int>, int64_t> counts_;
};

// The access log's timing: the handler thread that read the request writes the response.
thread_local Clock::time_point t_request_start;

const char* const kKnownPaths[] = {"/v1/completions", "/v1/chat/completions", "/v1/embeddings", "/v1/models",
                                   "/health", "/metrics"};

}  // namespace

struct Server::Impl {
  std::shared_ptr<const Model> model;
  ServerOptions options;
  std::shared_ptr<const Tokenizer> tok;
  std::optional<ChatTemplate> chat_template;
  std::unique_ptr<Scheduler> scheduler;
  httplib::Server http;
  socket_t listen_socket = INVALID_SOCKET;  // the bound socket (start())
  std::thread listener;
  std::atomic<bool> listener_done{false};  // listen_after_bind() returned
  int port = -1;
  bool running = false;
  std::atomic<int64_t> open_streams{0};
  std::atomic<uint64_t> next_id{1};
  RequestCounters counters;
  RequestLimits limits;
  Clock::time_point started = Clock::now();

  std::string new_id(const char* prefix) {
    char buf[48];
    std::snprintf(buf, sizeof buf, "%s%016llx", prefix,
                  static_cast<unsigned long long>(next_id.fetch_add(1) * 0x9E3779B97F4A7C15ull));
    return buf;
  }

  void routes();
  void completion(const httplib::Request& req, httplib::Response& res, Endpoint endpoint);
  void embeddings(const httplib::Request& req, httplib::Response& res);
  std::string metrics() const;
  // The queue's answer as an error, or nullopt when accepted.
  static std::optional<ApiError> refused(Scheduler::Admission a) {
    if (a == Scheduler::Admission::queue_full) {
      return status_error(429, "the server's request queue is full; retry shortly", "rate_limit_error",
                          "rate_limit_exceeded");
    }
    if (a == Scheduler::Admission::shutting_down) {
      return status_error(503, "the server is shutting down", "server_error", "shutting_down");
    }
    return std::nullopt;
  }
};

Server::Server(std::shared_ptr<const Model> model, ServerOptions options) : impl_(std::make_unique<Impl>()) {
  Impl& s = *impl_;
  s.model = std::move(model);
  s.options = std::move(options);
  s.tok = s.model->tokenizer();
  if (!s.tok) throw Error(ErrorCode::unsupported, "the model has no tokenizer to serve with");
  const std::string& source = s.options.chat_template.empty() ? s.tok->chat_template() : s.options.chat_template;
  if (!source.empty()) s.chat_template = ChatTemplate::compile(source, s.options.chat_template_name);
  s.scheduler = std::make_unique<Scheduler>(s.model, s.options.scheduler);
  s.limits.max_n = s.scheduler->max_sequences();
  s.limits.max_prompts = s.scheduler->max_sequences();
  s.limits.vocab_size = s.tok->vocab_size();
  s.routes();
}

Server::~Server() {
  if (impl_->running) shutdown();
}

Scheduler& Server::scheduler() { return *impl_->scheduler; }
int Server::port() const noexcept { return impl_->port; }

int Server::start() {
  Impl& s = *impl_;
  ::signal(SIGPIPE, SIG_IGN);
  const int threads = s.options.http_threads > 0
                          ? s.options.http_threads
                          : static_cast<int>(s.options.scheduler.parallel + s.options.scheduler.queue_capacity + 8);
  s.http.new_task_queue = [threads] { return new httplib::ThreadPool(static_cast<size_t>(threads)); };
  s.http.set_payload_max_length(s.options.max_body_bytes);
  s.http.set_keep_alive_timeout(s.options.keep_alive_seconds);
  s.http.set_keep_alive_max_count(1000);
  s.http.set_read_timeout(30, 0);
  s.http.set_write_timeout(30, 0);
  // httplib binds each address it tries on a socket it hands this callback first; the
  // one bound last is the listening socket, whose backlog is then raised (listen(2) on a
  // listening socket only updates its backlog).
  s.http.set_socket_options([&s](socket_t sock) {
    httplib::default_socket_options(sock);
    s.listen_socket = sock;
  });
  s.port = s.options.port == 0 ? s.http.bind_to_any_port(s.options.host)
                               : (s.http.bind_to_port(s.options.host, s.options.port) ? s.options.port : -1);
  if (s.port < 0) {
    throw Error(ErrorCode::io, "cannot listen on " + s.options.host + ":" + std::to_string(s.options.port));
  }
  if (s.options.listen_backlog > 0 && ::listen(s.listen_socket, s.options.listen_backlog) != 0) {
    // Still serving, with httplib's backlog: worth a warning, not a failed start.
    s.options.logger.log(LogLevel::warn, "cannot raise the listen backlog to " +
                                             std::to_string(s.options.listen_backlog) + ": " + std::strerror(errno));
  }
  s.running = true;
  s.listener_done = false;
  s.listener = std::thread([&s] {
    s.http.listen_after_bind();
    s.listener_done = true;
  });
  // httplib's stop() does nothing until its accept loop has marked itself running: a
  // shutdown() right after start() would leave the listener in accept() for good and hang
  // its join. So start() returns once the loop runs (or has already ended).
  while (!s.http.is_running() && !s.listener_done) std::this_thread::sleep_for(std::chrono::microseconds(100));
  return s.port;
}

void Server::shutdown() {
  Impl& s = *impl_;
  if (!s.running) return;
  s.running = false;
  Scheduler& sch = *s.scheduler;
  sch.begin_drain();
  s.options.logger.log(LogLevel::info, "shutting down: new requests get 503; waiting for running ones");
  if (!sch.wait_idle(s.options.drain_timeout)) {
    s.options.logger.log(LogLevel::warn, "shutting down: cancelling the requests still running");
    sch.cancel_all(status_error(503, "the server is shutting down", "server_error", "shutting_down"));
  }
  // Streams write their last events (an error after a cancel, then [DONE]) before the
  // HTTP server stops, since a stopping server cuts chunked responses short.
  for (auto deadline = Clock::now() + std::chrono::seconds(2); s.open_streams > 0 && Clock::now() < deadline;) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  s.http.stop();
  if (s.listener.joinable()) s.listener.join();
}

void Server::Impl::routes() {
  http.set_pre_routing_handler([this](const httplib::Request& req, httplib::Response& res) {
    t_request_start = Clock::now();
    if (req.path == "/health") return httplib::Server::HandlerResponse::Unhandled;
    if (auto e = check_authorization(req.get_header_value("Authorization"), options.api_key)) {
      send_error(res, *e);
      return httplib::Server::HandlerResponse::Handled;
    }
    return httplib::Server::HandlerResponse::Unhandled;
  });
  // Errors httplib produces itself (404, 413, unparseable requests) get OpenAI bodies too.
  http.set_error_handler(httplib::Server::HandlerWithResponse([this](const httplib::Request& req, httplib::Response& res) {
    if (!res.body.empty() || res.content_length_ > 0 || res.is_chunked_content_provider_) {
      return httplib::Server::HandlerResponse::Unhandled;
    }
    ApiError e;
    e.status = res.status;
    if (res.status == 404) {
      e.message = "Unknown request URL: " + req.method + " " + req.path;
      e.code = "unknown_url";
    } else if (res.status == 413) {
      e.message = "the request body is larger than " + std::to_string(options.max_body_bytes) + " bytes";
      e.code = "request_too_large";
    } else {
      e.message = "the request could not be handled (HTTP " + std::to_string(res.status) + ")";
    }
    send_error(res, e);
    return httplib::Server::HandlerResponse::Handled;
  }));
  http.set_exception_handler([](const httplib::Request&, httplib::Response& res, std::exception_ptr ep) {
    std::string what = "unknown exception";
    try {
      std::rethrow_exception(ep);
    } catch (const std::exception& e) {
      what = e.what();
    } catch (...) {
    }
    send_error(res, status_error(500, "internal error: " + what, "server_error"));
  });
  http.set_logger([this](const httplib::Request& req, const httplib::Response& res) {
    const double ms = std::chrono::duration<double, std::milli>(Clock::now() - t_request_start).count();
    bool known = false;
    for (const char* p : kKnownPaths) known = known || req.path == p;
    counters.add(known ? req.path : "other", res.status);
    if (options.logger.enabled(LogLevel::info)) {
      char buf[160];
      std::snprintf(buf, sizeof buf, "\" %d %.1f ms", res.status, ms);
      options.logger.log(LogLevel::info, "access: " + req.remote_addr + " \"" + req.method + " " + req.path + buf);
    }
  });
  http.Post("/v1/completions",
            [this](const httplib::Request& q, httplib::Response& r) { completion(q, r, Endpoint::completions); });
  http.Post("/v1/chat/completions",
            [this](const httplib::Request& q, httplib::Response& r) { completion(q, r, Endpoint::chat_completions); });
  http.Post("/v1/embeddings", [this](const httplib::Request& q, httplib::Response& r) { embeddings(q, r); });
  auto models = [this](const httplib::Request&, httplib::Response& res) {
    JsonWriter w(false);
    w.begin_object().field("object", "list").key("data").begin_array();
    w.begin_object().field("id", options.model_name).field("object", "model");
    w.field("created", static_cast<int64_t>(std::time(nullptr))).field("owned_by", "loom");
    w.end_object().end_array().end_object();
    res.set_content(w.str(), kJson);
  };
  http.Get("/v1/models", models);
  http.Get("/health", [this](const httplib::Request&, httplib::Response& res) {
    if (scheduler->draining()) {
      res.status = 503;
      res.set_content(R"({"status":"shutting down"})", kJson);
    } else {
      res.set_content(R"({"status":"ok"})", kJson);
    }
  });
  http.Get("/metrics", [this](const httplib::Request&, httplib::Response& res) {
    res.set_content(metrics(), "text/plain; version=0.0.4");
  });
}

void Server::Impl::completion(const httplib::Request& req, httplib::Response& res, Endpoint endpoint) {
  const bool chat = endpoint == Endpoint::chat_completions;
  ParsedCompletion parsed = parse_completion_request(endpoint, req.body, limits);
  if (auto* e = std::get_if<ApiError>(&parsed)) return send_error(res, *e);
  CompletionRequest& r = std::get<CompletionRequest>(parsed);

  // Tokens: the chat template's rendering (special-token text parsed, a BOS unless the
  // template wrote one), or each prompt as `loom run` tokenizes it.
  GenerationJob job;
  try {
    if (chat) {
      if (!chat_template) {
        return send_error(res, invalid_request("this model has no chat template (a base model?): use /v1/completions, "
                                               "or start loom serve with --chat-template FILE",
                                               "messages", "no_chat_template"));
      }
      ChatTemplateInputs in;
      in.messages = std::move(r.messages);
      in.add_generation_prompt = true;
      in.bos_token = tok->bos_token();
      in.eos_token = tok->eos_token();
      const std::string text = chat_template->render(in);
      const bool has_bos = !in.bos_token.empty() && text.starts_with(in.bos_token);
      job.prompts.push_back(tok->encode(text, tok->add_bos() && !has_bos, /*parse_special=*/true));
    } else {
      for (const std::string& p : r.prompts) job.prompts.push_back(tok->encode(p, /*add_special=*/true, false));
      for (auto& t : r.token_prompts) job.prompts.push_back(std::move(t));
    }
  } catch (const Error& e) {
    return send_error(res, invalid_request(e.what(), chat ? "messages" : "prompt"));
  }
  const int64_t ctx = scheduler->context_length();
  int64_t longest = 0;
  for (const auto& p : job.prompts) {
    if (p.empty()) return send_error(res, invalid_request("the prompt encodes to no tokens", chat ? "messages" : "prompt"));
    longest = std::max<int64_t>(longest, static_cast<int64_t>(p.size()));
  }
  const std::string where = chat ? "messages" : "prompt";
  if (longest >= ctx) {
    return send_error(res, invalid_request("This model's maximum context length is " + std::to_string(ctx) +
                                               " tokens. However, your " + where + " is " + std::to_string(longest) +
                                               " tokens, leaving no room for the completion.",
                                           where, "context_length_exceeded"));
  }
  if (r.max_tokens && longest + *r.max_tokens > ctx) {
    return send_error(res, invalid_request("This model's maximum context length is " + std::to_string(ctx) +
                                               " tokens. However, you requested " +
                                               std::to_string(longest + *r.max_tokens) + " tokens (" +
                                               std::to_string(longest) + " in the " + where + ", " +
                                               std::to_string(*r.max_tokens) +
                                               " in the completion). Please reduce the length.",
                                           "max_tokens", "context_length_exceeded"));
  }
  job.max_tokens = r.max_tokens.value_or(chat ? ctx - longest : std::min<int64_t>(16, ctx - longest));
  job.n = r.n;
  job.stop = r.stop;
  job.logprobs = r.logprobs;
  job.top_logprobs = r.top_logprobs;
  // OpenAI's sampling: temperature and top_p only (no top-k or min-p); penalties over the
  // completion so far; without a seed, a fresh one per request.
  SamplerParams& sp = job.sampler;
  sp.temperature = static_cast<float>(r.temperature);
  sp.top_p = static_cast<float>(r.top_p);
  sp.top_k = 0;
  sp.min_p = 0.0f;
  sp.repeat_penalty = 1.0f;
  sp.presence_penalty = static_cast<float>(r.presence_penalty);
  sp.frequency_penalty = static_cast<float>(r.frequency_penalty);
  sp.penalty_last_n = -1;
  sp.logit_bias = r.logit_bias;
  if (r.seed) {
    sp.seed = *r.seed;
  } else {
    thread_local std::random_device rd;
    sp.seed = (static_cast<uint64_t>(rd()) << 32) ^ rd();
  }
  const size_t n_choices = job.prompts.size() * static_cast<size_t>(job.n);

  Scheduler::Admission admission{};
  std::shared_ptr<Channel> channel = scheduler->submit(std::move(job), admission);
  if (auto e = refused(admission)) return send_error(res, *e);

  auto ctxp = std::make_shared<ResponseContext>();
  ctxp->chat = chat;
  ctxp->id = new_id(chat ? "chatcmpl-" : "cmpl-");
  ctxp->created = static_cast<int64_t>(std::time(nullptr));
  ctxp->model = r.model.empty() ? options.model_name : r.model;
  ctxp->logprobs = r.logprobs;
  ctxp->tok = tok;

  if (!r.stream) {
    std::vector<ChoiceResult> choices(n_choices);
    for (;;) {
      std::vector<Event> events;
      channel->wait(events, std::chrono::milliseconds(1000));
      for (Event& e : events) {
        if (e.kind == Event::Kind::error) return send_error(res, e.error);
        if (e.kind == Event::Kind::done) {
          return res.set_content(full_response(*ctxp, choices, e.prompt_tokens, e.completion_tokens), kJson);
        }
        ChoiceResult& c = choices.at(static_cast<size_t>(e.choice));
        if (e.kind == Event::Kind::text) {
          c.text += e.text;
          for (auto& lp : e.logprobs) c.logprobs.push_back(std::move(lp));
        } else if (e.kind == Event::Kind::finish) {
          c.finish = e.finish;
        }
      }
    }
  }

  // Streaming: the chunked provider runs on this handler thread while httplib writes.
  struct StreamState {
    std::vector<bool> role_sent;
    std::vector<int64_t> offsets;  // completions logprobs text_offset per choice
    bool include_usage = false;
    bool finished = false;
  };
  auto st = std::make_shared<StreamState>();
  st->role_sent.assign(n_choices, false);
  st->offsets.assign(n_choices, 0);
  st->include_usage = r.include_usage;
  ++open_streams;
  res.set_header("Cache-Control", "no-cache");
  res.set_header("X-Accel-Buffering", "no");
  res.set_chunked_content_provider(
      "text/event-stream",
      [channel, ctxp, st](size_t, httplib::DataSink& sink) {
        std::vector<Event> events;
        if (!channel->wait(events, std::chrono::milliseconds(100))) return true;  // called again
        std::string out;
        bool end = false;
        for (Event& e : events) {
          const auto i = static_cast<size_t>(e.choice);
          if (e.kind == Event::Kind::error) {
            out += "data: " + e.error.to_json() + "\n\n";
            end = true;
            break;
          }
          if (e.kind == Event::Kind::done) {
            if (st->include_usage) out += usage_chunk(*ctxp, e.prompt_tokens, e.completion_tokens);
            end = true;
            break;
          }
          if (i >= st->role_sent.size()) continue;
          if (ctxp->chat && !st->role_sent[i]) {
            static const std::string empty;
            out += chunk(*ctxp, e.choice, &empty, true, nullptr, std::nullopt, st->include_usage, 0);
            st->role_sent[i] = true;
          }
          if (e.kind == Event::Kind::text) {
            out += chunk(*ctxp, e.choice, &e.text, false, &e.logprobs, std::nullopt, st->include_usage, st->offsets[i]);
            for (const auto& lp : e.logprobs) st->offsets[i] += static_cast<int64_t>(ctxp->tok->token_to_piece(lp.token).size());
          } else if (e.kind == Event::Kind::finish) {
            out += chunk(*ctxp, e.choice, nullptr, false, nullptr, e.finish, st->include_usage, 0);
          }
        }
        if (end) out += "data: [DONE]\n\n";
        if (!out.empty() && !sink.write(out.data(), out.size())) {
          channel->cancel();  // the client went away: free its sequences now
          return false;
        }
        if (end) {
          st->finished = true;
          sink.done();
        }
        return true;
      },
      [this, channel, st](bool success) {
        if (!success || !st->finished) channel->cancel();
        --open_streams;
      });
}

void Server::Impl::embeddings(const httplib::Request& req, httplib::Response& res) {
  ParsedEmbedding parsed = parse_embedding_request(req.body, limits);
  if (auto* e = std::get_if<ApiError>(&parsed)) return send_error(res, *e);
  EmbeddingRequest& r = std::get<EmbeddingRequest>(parsed);
  EmbeddingJob job;
  for (const std::string& t : r.texts) job.inputs.push_back(tok->encode(t, /*add_special=*/true, false));
  for (auto& t : r.token_inputs) job.inputs.push_back(std::move(t));
  const int64_t ctx = scheduler->context_length();
  for (size_t i = 0; i < job.inputs.size(); ++i) {
    const std::string param = "input[" + std::to_string(i) + "]";
    if (job.inputs[i].empty()) return send_error(res, invalid_request(param + " encodes to no tokens", "input"));
    if (static_cast<int64_t>(job.inputs[i].size()) > ctx) {
      return send_error(res, invalid_request(param + " is " + std::to_string(job.inputs[i].size()) +
                                                 " tokens; this model's maximum context length is " +
                                                 std::to_string(ctx) + " tokens",
                                             "input", "context_length_exceeded"));
    }
  }
  const size_t count = job.inputs.size();
  Scheduler::Admission admission{};
  std::shared_ptr<Channel> channel = scheduler->submit(std::move(job), admission);
  if (auto e = refused(admission)) return send_error(res, *e);
  std::vector<std::vector<float>> vectors(count);
  for (;;) {
    std::vector<Event> events;
    channel->wait(events, std::chrono::milliseconds(1000));
    for (Event& e : events) {
      if (e.kind == Event::Kind::error) return send_error(res, e.error);
      if (e.kind == Event::Kind::embedding) vectors.at(static_cast<size_t>(e.choice)) = std::move(e.embedding);
      if (e.kind != Event::Kind::done) continue;
      JsonWriter w(false);
      w.begin_object().field("object", "list").key("data").begin_array();
      for (size_t i = 0; i < count; ++i) {
        w.begin_object().field("object", "embedding").field("index", static_cast<int64_t>(i)).key("embedding");
        if (r.base64) {
          std::string b;
          base64(b, reinterpret_cast<const unsigned char*>(vectors[i].data()), vectors[i].size() * sizeof(float));
          w.value(b);
        } else {
          std::string arr = "[";
          for (size_t k = 0; k < vectors[i].size(); ++k) arr += (k ? "," : "") + float_text(vectors[i][k]);
          w.raw(arr + "]");
        }
        w.end_object();
      }
      w.end_array().field("model", r.model.empty() ? options.model_name : r.model);
      w.key("usage").begin_object().field("prompt_tokens", e.prompt_tokens).field("total_tokens", e.prompt_tokens);
      w.end_object().end_object();
      return res.set_content(w.str(), kJson);
    }
  }
}

std::string Server::Impl::metrics() const {
  const SchedulerStats st = scheduler->stats();
  std::string out;
  auto metric = [&](const char* name, const char* type, const char* help, const std::string& value,
                    const std::string& labels = {}) {
    out += std::string("# HELP ") + name + " " + help + "\n# TYPE " + name + " " + type + "\n";
    out += std::string(name) + labels + " " + value + "\n";
  };
  auto num = [](double v) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.6g", v);
    return std::string(buf);
  };
  out += "# HELP loom_http_requests_total HTTP responses by path and status.\n# TYPE loom_http_requests_total counter\n";
  for (const auto& [key, count] : counters.snapshot()) {
    out += "loom_http_requests_total{path=\"" + key.first + "\",status=\"" + std::to_string(key.second) + "\"} " +
           std::to_string(count) + "\n";
  }
  metric("loom_jobs_total", "counter", "Generation and embedding jobs finished (any outcome).", std::to_string(st.jobs_total));
  metric("loom_jobs_cancelled_total", "counter", "Jobs dropped because the client went away.", std::to_string(st.cancelled_total));
  metric("loom_embedding_jobs_total", "counter", "Embedding jobs answered.", std::to_string(st.embeddings_total));
  metric("loom_prompt_tokens_total", "counter", "Prompt tokens fed.", std::to_string(st.prompt_tokens_total));
  metric("loom_generated_tokens_total", "counter", "Tokens generated.", std::to_string(st.generated_tokens_total));
  metric("loom_decode_passes_total", "counter", "Batch forward passes.", std::to_string(st.passes_total));
  metric("loom_busy_seconds_total", "counter", "Seconds the scheduler spent in passes and embeddings.", num(st.busy_seconds));
  metric("loom_generated_tokens_per_second", "gauge", "Generated tokens per busy second since start.",
         num(st.busy_seconds > 0 ? static_cast<double>(st.generated_tokens_total) / st.busy_seconds : 0.0));
  metric("loom_queue_depth", "gauge", "Jobs waiting for room.", std::to_string(st.queue_depth));
  metric("loom_active_sequences", "gauge", "Sequences being decoded.", std::to_string(st.active_sequences));
  metric("loom_kv_blocks_total", "gauge", "KV pool blocks.", std::to_string(st.blocks_total));
  metric("loom_kv_blocks_used", "gauge", "KV pool blocks in use.", std::to_string(st.blocks_used));
  metric("loom_kv_blocks_free", "gauge", "KV pool blocks free.", std::to_string(st.blocks_free));
  metric("loom_process_resident_memory_bytes", "gauge", "Resident set size of the process.", std::to_string(rss_bytes()));
  metric("loom_uptime_seconds", "gauge", "Seconds since the server was made.",
         num(std::chrono::duration<double>(Clock::now() - started).count()));
  // The load report's summary (a model built in memory has none).
  const std::shared_ptr<const LoadReport>& lr = model->load_report();
  auto label = [](const std::string& v) {
    const std::string quoted = JsonWriter::escape(v);  // Prometheus label values escape as JSON strings do
    return quoted.substr(1, quoted.size() - 2);
  };
  metric("loom_model_info", "gauge", "The model served (load report summary).", "1",
         "{name=\"" + label(options.model_name) + "\",architecture=\"" + label(model->config().architecture) +
             "\",format=\"" + label(lr ? lr->format : "memory") + "\",tensors=\"" +
             std::to_string(lr ? lr->loaded_tensors : 0) + "\",zero_copy=\"" +
             std::to_string(lr ? lr->zero_copy_tensors : 0) + "\"}");
  metric("loom_model_weight_bytes", "gauge", "Bytes of weights.", std::to_string(model->weight_bytes()));
  metric("loom_model_load_seconds", "gauge", "Seconds the load took.", num(lr ? lr->load_seconds : 0.0));
  metric("loom_context_length", "gauge", "Tokens per sequence.", std::to_string(scheduler->context_length()));
  metric("loom_parallel_sequences", "gauge", "Sequences decoded together at most.", std::to_string(scheduler->max_sequences()));
  return out;
}

void block_shutdown_signals() {
  // A shell starts background jobs with SIGINT ignored, and an ignored signal never
  // reaches sigwait(): take the default disposition back (blocked, so it cannot kill us).
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
  ::signal(SIGINT, SIG_DFL);
  ::signal(SIGTERM, SIG_DFL);
  ::signal(SIGPIPE, SIG_IGN);
}

int wait_for_shutdown_signal() {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  int sig = 0;
  while (sigwait(&set, &sig) != 0) {
  }
  return sig;
}

}  // namespace loom::server
