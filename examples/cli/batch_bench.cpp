// `loom bench --batch`: the measuring loop over one loom::Batch per batch size.
#include "batch_bench.hpp"

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <sstream>
#include <stdexcept>

#include "common/json_writer.hpp"
#include "common/median.hpp"
#include "loom/batch.hpp"
#include "loom/thread_pool.hpp"

namespace loom::cli {

namespace {

using Clock = std::chrono::steady_clock;

constexpr int64_t kMaxBatch = 4096;

double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

// Greedy: the exact argmax, ties to the lowest id (as loom::Sampler's greedy pick).
int32_t argmax(std::span<const float> logits) {
  return static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
}

struct Timing {
  double prefill = 0.0;
  double decode = 0.0;
};

// One repetition: B fresh sequences, prompts prefilled until every one is ready, then
// gen_tokens passes of one token each.
Timing run_once(Batch& batch, const std::vector<std::vector<int32_t>>& prompts, int gen_tokens) {
  std::vector<SeqId> ids;
  for (const auto& p : prompts) {
    ids.push_back(batch.add());
    batch.feed(ids.back(), p);
  }
  Timing t;
  auto t0 = Clock::now();
  size_t ready = 0;
  while (ready < ids.size()) ready += batch.decode().ready.size();
  t.prefill = seconds_since(t0);
  t0 = Clock::now();
  for (int step = 0; step < gen_tokens; ++step) {
    for (SeqId id : ids) {
      const int32_t token = argmax(batch.logits(id));
      batch.feed(id, std::span<const int32_t>(&token, 1));
    }
    batch.decode();
  }
  t.decode = seconds_since(t0);
  for (SeqId id : ids) batch.remove(id);
  return t;
}

}  // namespace

std::vector<int64_t> parse_batch_sizes(const std::string& text) {
  std::vector<int64_t> out;
  std::stringstream ss(text);
  for (std::string item; std::getline(ss, item, ',');) {
    char* end = nullptr;
    const long long v = std::strtoll(item.c_str(), &end, 10);
    if (item.empty() || *end != '\0' || v < 1 || v > kMaxBatch) {
      throw std::invalid_argument("--batch expects batch sizes from 1 to " + std::to_string(kMaxBatch) +
                                  " separated by commas, got '" + item + "'");
    }
    out.push_back(v);
  }
  if (out.empty() || text.back() == ',') {
    throw std::invalid_argument("--batch expects batch sizes from 1 to " + std::to_string(kMaxBatch) +
                                " separated by commas, got '" + text + "'");
  }
  return out;
}

void batch_bench(const std::shared_ptr<const Model>& model, const BatchBenchOptions& o, std::FILE* out) {
  const int64_t vocab = model->config().vocab_size;
  auto pool = std::make_shared<ThreadPool>(o.n_threads);
  if (!o.json) {
    std::fprintf(out, "model    %s (%s, %.1f MB of weights)\n", o.model_name.c_str(),
                 model->config().architecture.c_str(), static_cast<double>(model->weight_bytes()) / 1e6);
    std::fprintf(out, "threads  %d; %d-token prompts, %d decode passes, median of %d reps; KV cache in %s\n",
                 pool->size(), o.prompt_tokens, o.gen_tokens, o.reps, std::string(dtype_name(o.kv_dtype)).c_str());
  }
  for (const int64_t b : o.batch_sizes) {
    // Deterministic, different prompts per sequence.
    std::vector<std::vector<int32_t>> prompts(static_cast<size_t>(b));
    for (int64_t s = 0; s < b; ++s) {
      auto& p = prompts[static_cast<size_t>(s)];
      p.resize(static_cast<size_t>(o.prompt_tokens));
      for (int64_t i = 0; i < o.prompt_tokens; ++i) {
        p[static_cast<size_t>(i)] = static_cast<int32_t>(((i + 1009 * s) * 7919 + 13) % vocab);
      }
    }
    BatchOptions bo;
    bo.max_sequences = b;
    bo.context_length = o.prompt_tokens + o.gen_tokens + 1;
    bo.kv_dtype = o.kv_dtype;
    bo.token_budget = std::max<int64_t>(bo.token_budget, b);  // every decode token in one pass
    bo.pool = pool;
    Batch batch(model, bo);
    std::vector<double> pre, dec;
    // One unmeasured run first, as llama-bench and llama-batched-bench do: the first
    // touches every mapped weight page and grows the scratch buffers.
    run_once(batch, prompts, o.gen_tokens);
    for (int r = 0; r < o.reps; ++r) {
      const Timing t = run_once(batch, prompts, o.gen_tokens);
      pre.push_back(t.prefill);
      dec.push_back(t.decode);
    }
    const double pre_s = median(pre);
    const double dec_s = median(dec);
    const double pre_tps = static_cast<double>(b) * o.prompt_tokens / pre_s;
    const double dec_tps = static_cast<double>(b) * o.gen_tokens / dec_s;
    if (o.json) {
      JsonWriter w(false);
      w.begin_object()
          .field("batch", b)
          .field("threads", pool->size())
          .field("prompt_tokens", o.prompt_tokens)
          .field("gen_tokens", o.gen_tokens)
          .field("reps", o.reps)
          .field("kv_type", dtype_name(o.kv_dtype))
          .field("model", o.model_name)
          .field("prefill_seconds", pre_s)
          .field("decode_seconds", dec_s)
          .field("prefill_tokens_per_s", pre_tps)
          .field("decode_tokens_per_s", dec_tps)
          .field("decode_gb_per_s", static_cast<double>(model->decode_weight_bytes()) * o.gen_tokens / dec_s / 1e9)
          .end_object();
      std::fprintf(out, "%s\n", w.str().c_str());
    } else {
      std::fprintf(out, "batch %3lld  prefill %6lld tokens: %.4f s, %9.1f tok/s   decode %3lld x %d tokens: %.4f s, %9.1f tok/s\n",
                   static_cast<long long>(b), static_cast<long long>(b * o.prompt_tokens), pre_s, pre_tps,
                   static_cast<long long>(b), o.gen_tokens, dec_s, dec_tps);
    }
    std::fflush(out);
  }
}

}  // namespace loom::cli
