// `loom serve`: the command-line side of the OpenAI-compatible server (examples/server):
// flags to ServerOptions, SIGINT/SIGTERM to a graceful shutdown, the listening address on
// stdout. Built only when cpp-httplib was found (LOOM_HAVE_SERVER).
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "loom/model.hpp"

namespace loom::cli {

struct ServeCommandOptions {
  std::string host = "127.0.0.1";
  int port = 8080;
  int64_t parallel = 4;
  int64_t context_length = 0;
  int64_t kv_pool_tokens = 0;
  int64_t kv_pool_bytes = 0;
  int64_t queue = 64;
  int n_threads = 0;
  DType kv_dtype = DType::f32;  // the KV cache's entries (--kv-type)
  std::string api_key;
  std::string model_name;
  std::string chat_template;       // source
  std::string chat_template_name;
  int64_t max_body_bytes = 1 << 20;
  double drain_seconds = 10.0;
  bool access_log = true;
};

// "4096" (tokens) or "512M", "2G", "64MiB" (bytes): fills tokens or bytes. Throws
// std::invalid_argument with a message for anything else.
void parse_kv_pool(const std::string& text, int64_t& tokens, int64_t& bytes);

// Call before anything starts a thread (signals are blocked here for every thread).
void prepare_serve_signals();
// Serves until SIGINT or SIGTERM, then shuts down gracefully; returns the exit code (0).
int serve(std::shared_ptr<const Model> model, const ServeCommandOptions& options);

}  // namespace loom::cli
