// Aggregate generation tokens/s of `loom serve` (examples/server, in-process, over
// loopback HTTP) at several --parallel values on a generated Llama-shaped model: the
// issue's target is --parallel 8 at least 3x --parallel 1 on the small shape.
//
//   build/bench/loom_serve_throughput [--shape small|1b] [--dtype f16] [--parallel 1,8] [--clients 8]
//                                     [--requests 2] [--prompt 32] [--gen 32] [--threads N] [--tokenizer PATH]
//                                     [--repack off|auto]
//
// `clients` threads each send `requests` non-streaming completions one after another
// (distinct token-id prompts, greedy, EOS banned so each generates exactly `gen` tokens).
// tokens/s = every request's completion tokens / the wall time of the whole run. The
// model's vocabulary (32000) is the Llama 2 tokenizer's, which the server needs to
// decode text: by default the reference set's tiny-llama tokenizer. --repack auto serves the
// model with its matrices in their kernel layouts, as `loom serve --repack auto` loads them.
#include <httplib.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "loom/log.hpp"
#include "loom/tokenizer.hpp"
#include "server.hpp"
#include "synthetic_model.hpp"

namespace {

using Clock = std::chrono::steady_clock;

std::filesystem::path default_tokenizer() {
  const char* ref = std::getenv("LOOM_REFERENCE_DIR");
  const std::filesystem::path dir = ref && *ref ? std::filesystem::path(ref) : std::filesystem::path(LOOM_SOURCE_DIR) / "../shared/reference";
  return dir / "models/tiny-llama/hf";
}

}  // namespace

int main(int argc, char** argv) {
  std::map<std::string, std::string> args{{"--shape", "small"}, {"--dtype", "f16"},    {"--parallel", "1,8"},
                                          {"--clients", "8"},     {"--requests", "2"}, {"--prompt", "32"},
                                          {"--gen", "32"},        {"--threads", "0"},  {"--tokenizer", default_tokenizer().string()},
                                          {"--repack", "off"}};
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!args.count(argv[i])) {
      std::fprintf(stderr, "unknown flag %s\n", argv[i]);
      return 2;
    }
    args[argv[i]] = argv[i + 1];
  }
  const int clients = std::stoi(args["--clients"]), requests = std::stoi(args["--requests"]);
  const int prompt_len = std::stoi(args["--prompt"]), gen = std::stoi(args["--gen"]);
  auto tok = loom::Tokenizer::load(args["--tokenizer"]);
  const loom::ModelConfig config = loom::bench::shape_config(args["--shape"]);
  if (tok->vocab_size() != config.vocab_size) {
    std::fprintf(stderr, "the tokenizer has %d tokens, the %s shape %lld\n", tok->vocab_size(), args["--shape"].c_str(),
                 static_cast<long long>(config.vocab_size));
    return 2;
  }
  const std::optional<loom::DType> dtype = loom::dtype_from_name(args["--dtype"]);
  if (!dtype) {
    std::fprintf(stderr, "unknown --dtype %s\n", args["--dtype"].c_str());
    return 2;
  }
  const auto rows = loom::bench::synthetic_model(config, *dtype);
  // One mode: rows, or the packed copy (rows where no matrix of this dtype has a packing).
  if (loom::bench::split(args["--repack"]).size() != 1) {
    std::fprintf(stderr, "--repack takes one mode here (off or auto)\n");
    return 2;
  }
  const auto models = loom::bench::models_for_repack(rows, args["--repack"]);
  if (!models) return 2;
  const auto& bare = models->empty() ? rows : models->front();
  const auto model = std::make_shared<const loom::Model>(bare->config(), bare->weights(), tok);
  std::printf("serve_throughput: shape %s (%s, %s), %d clients x %d requests, prompt %d tokens, %d generated each\n",
              args["--shape"].c_str(), args["--dtype"].c_str(), loom::bench::layout_of(*bare).c_str(), clients,
              requests, prompt_len, gen);
  double first = 0.0;
  for (const std::string& p : loom::bench::split(args["--parallel"])) {
    loom::server::ServerOptions so;
    so.port = 0;
    so.logger = loom::Logger::silent();
    so.scheduler.parallel = std::stoi(p);
    so.scheduler.context_length = prompt_len + gen + 16;
    so.scheduler.n_threads = std::stoi(args["--threads"]);
    so.scheduler.queue_capacity = clients * 2;
    loom::server::Server server(model, so);
    const int port = server.start();
    std::vector<std::thread> threads;
    std::vector<int64_t> tokens(static_cast<size_t>(clients), 0);
    std::vector<int> failures(static_cast<size_t>(clients), 0);
    const auto t0 = Clock::now();
    for (int c = 0; c < clients; ++c) {
      threads.emplace_back([&, c] {
        httplib::Client cli("127.0.0.1", port);
        cli.set_read_timeout(600, 0);
        for (int r = 0; r < requests; ++r) {
          std::string ids = "[1";
          for (int i = 1; i < prompt_len; ++i) ids += "," + std::to_string(100 + (c * 7919 + r * 104729 + i * 31) % 31000);
          const std::string body = R"({"prompt": )" + ids + R"(], "max_tokens": )" + std::to_string(gen) +
                                   R"(, "temperature": 0, "logit_bias": {"2": -100}})";
          auto res = cli.Post("/v1/completions", body, "application/json");
          if (!res || res->status != 200) {
            ++failures[static_cast<size_t>(c)];
            continue;
          }
          const size_t at = res->body.find("\"completion_tokens\":");
          if (at != std::string::npos) tokens[static_cast<size_t>(c)] += std::stoll(res->body.substr(at + 20));
        }
      });
    }
    for (auto& t : threads) t.join();
    const double seconds = std::chrono::duration<double>(Clock::now() - t0).count();
    int64_t total = 0;
    int failed = 0;
    for (int c = 0; c < clients; ++c) {
      total += tokens[static_cast<size_t>(c)];
      failed += failures[static_cast<size_t>(c)];
    }
    const double tps = static_cast<double>(total) / seconds;
    if (first == 0.0) first = tps;
    std::printf("--parallel %-3s %8.1f tokens/s aggregate (%lld tokens in %.2f s, %d failed)  %.2fx the first\n",
                p.c_str(), tps, static_cast<long long>(total), seconds, failed, tps / first);
    std::fflush(stdout);
    server.shutdown();
  }
  return 0;
}
