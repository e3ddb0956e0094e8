// loom serve — an OpenAI-compatible HTTP server on loom's public C++ API.
//
// Endpoints: POST /v1/completions, POST /v1/chat/completions (stream false: one JSON body;
// stream true: server-sent events in OpenAI's chunk format ending with `data: [DONE]`),
// POST /v1/embeddings, GET /v1/models, GET /health, GET /metrics (Prometheus text).
// docs/server.md says what each field does and what is not supported.
//
// HTTP is cpp-httplib (a pool of handler threads); each handler validates its request
// (request.hpp), tokenizes it (the tokenizer and the compiled chat template are immutable,
// so any thread may use them) and submits it to the Scheduler (scheduler.hpp), whose one
// thread owns the loom::Batch; tokens come back through the job's Channel. A full queue is
// a 429 with Retry-After; a client that disconnects mid-stream cancels its job, which frees
// its KV blocks before the next pass.
//
// Ownership: the Server shares the Model and owns the scheduler and the HTTP server.
// Thread-safety: start() and shutdown() from one controlling thread; the rest is internal.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdio>
#include <memory>
#include <string>

#include "loom/log.hpp"
#include "loom/model.hpp"
#include "scheduler.hpp"

namespace loom::server {

struct ServerOptions {
  std::string host = "127.0.0.1";
  int port = 8080;                  // 0: any free port (start() returns it)
  std::string api_key;              // non-empty: every endpoint but /health needs "Bearer KEY"
  std::string model_name = "loom";  // what /v1/models lists and responses name
  std::string chat_template;        // template source; empty: the tokenizer's (if any)
  std::string chat_template_name = "the model's chat template";
  size_t max_body_bytes = 1 << 20;  // larger bodies get 413
  int http_threads = 0;             // 0: parallel + queue capacity + 8
  int keep_alive_seconds = 3;       // idle keep-alive connections close after this
  // Connections the kernel queues before the server accepts them (listen(2)'s backlog,
  // capped by net.core.somaxconn). cpp-httplib's own is 5: a burst of more clients than
  // that lost its SYNs and waited for TCP's 1-second retransmission.
  int listen_backlog = 512;
  std::chrono::milliseconds drain_timeout{10000};  // shutdown: running jobs may finish for this long
  SchedulerOptions scheduler;
  Logger logger = Logger::global(); // access log (info) and server messages
};

class Server {
 public:
  // Throws loom::Error for a model without a tokenizer or a chat template that does not compile.
  Server(std::shared_ptr<const Model> model, ServerOptions options);
  ~Server();  // shutdown() if still running
  Server(const Server&) = delete;
  Server& operator=(const Server&) = delete;

  // Binds and starts serving on a thread of its own; returns the port. Throws
  // loom::Error(io) when the address cannot be bound. Ignores SIGPIPE process-wide (a
  // write to a closed connection must fail, not kill the process).
  int start();
  // Stops accepting work (new requests get 503, /health says so), lets running jobs finish
  // for drain_timeout, ends the rest with a 503 error, then stops the HTTP server.
  void shutdown();

  Scheduler& scheduler();
  int port() const noexcept;

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

// For a host program: call block_shutdown_signals() first thing (before any thread is
// made, so that every thread inherits the mask), then wait_for_shutdown_signal() returns
// the SIGINT or SIGTERM that arrived.
void block_shutdown_signals();
int wait_for_shutdown_signal();

}  // namespace loom::server
