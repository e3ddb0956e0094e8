#include "serve_command.hpp"

#include <cctype>
#include <csignal>
#include <cstdio>
#include <stdexcept>

#include "loom/log.hpp"
#include "server.hpp"

namespace loom::cli {

void parse_kv_pool(const std::string& text, int64_t& tokens, int64_t& bytes) {
  size_t used = 0;
  long long v = 0;
  try {
    v = std::stoll(text, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (used == 0 || v <= 0) throw std::invalid_argument("--kv-pool expects tokens (4096) or bytes (512M, 2G), got '" + text + "'");
  std::string suffix = text.substr(used);
  for (char& c : suffix) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  struct Unit {
    const char* name;
    int shift;
  };
  static const Unit kUnits[] = {{"", -1}, {"K", 10}, {"KB", 10}, {"KIB", 10}, {"M", 20}, {"MB", 20},
                                {"MIB", 20}, {"G", 30}, {"GB", 30}, {"GIB", 30}};
  for (const Unit& u : kUnits) {
    if (suffix != u.name) continue;
    if (u.shift < 0) {
      tokens = v;
      bytes = 0;
    } else {
      if (v > (int64_t{1} << (62 - u.shift))) throw std::invalid_argument("--kv-pool is too large: '" + text + "'");
      bytes = static_cast<int64_t>(v) << u.shift;
      tokens = 0;
    }
    return;
  }
  throw std::invalid_argument("--kv-pool: unknown unit '" + text.substr(used) + "' (use K, M or G for bytes)");
}

void prepare_serve_signals() { server::block_shutdown_signals(); }

int serve(std::shared_ptr<const Model> model, const ServeCommandOptions& o) {
  server::ServerOptions so;
  so.host = o.host;
  so.port = o.port;
  so.api_key = o.api_key;
  so.model_name = o.model_name;
  so.chat_template = o.chat_template;
  if (!o.chat_template_name.empty()) so.chat_template_name = o.chat_template_name;
  so.max_body_bytes = static_cast<size_t>(o.max_body_bytes);
  so.drain_timeout = std::chrono::milliseconds(static_cast<int64_t>(o.drain_seconds * 1000.0));
  so.scheduler.parallel = o.parallel;
  so.scheduler.context_length = o.context_length;
  so.scheduler.queue_capacity = o.queue;
  so.scheduler.n_threads = o.n_threads;
  so.scheduler.kv_dtype = o.kv_dtype;
  if (o.kv_pool_tokens > 0) so.scheduler.pool_tokens = o.kv_pool_tokens;
  so.scheduler.pool_bytes = o.kv_pool_bytes;
  if (!o.access_log) {
    so.logger = Logger::to_sink(
        [](LogLevel, std::string_view m) { std::fprintf(stderr, "loom: %.*s\n", static_cast<int>(m.size()), m.data()); },
        LogLevel::warn);
  }
  server::Server server(std::move(model), so);
  const int port = server.start();
  const int64_t blocks = server.scheduler().stats().blocks_total;
  std::printf("loom serve: listening on http://%s:%d (model %s, %lld sequences x %lld tokens, %lld KV blocks in %s%s)\n",
              o.host.c_str(), port, o.model_name.c_str(), static_cast<long long>(o.parallel),
              static_cast<long long>(server.scheduler().context_length()), static_cast<long long>(blocks),
              std::string(dtype_name(o.kv_dtype)).c_str(),
              o.api_key.empty() ? "" : ", API key required");
  std::fflush(stdout);
  const int sig = server::wait_for_shutdown_signal();
  std::fprintf(stderr, "loom serve: %s: shutting down\n", sig == SIGINT ? "SIGINT" : "SIGTERM");
  server.shutdown();
  std::fprintf(stderr, "loom serve: stopped\n");
  return 0;
}

}  // namespace loom::cli
