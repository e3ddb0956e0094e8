// Session: one sequence, run through the same forward pass as Batch (runtime/forward):
// its KV cache is a pool of the context's length in blocks of kKvBlockTokens positions,
// all the sequence's, so the bytes it allocates are exactly kv_cache_bytes_for(config,
// context, dtype). (One block spanning the context stored each new key's head_dim
// elements a context apart: 39-68 us a decode step on the small bench model at the
// default 4096 positions, 10-25 us in blocks of 16; docs/batching.md.)
#include "loom/session.hpp"

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "loom/convert.hpp"
#include "loom/error.hpp"
#include "runtime/forward.hpp"
#include "runtime/kv_pool.hpp"

namespace loom {

namespace {
constexpr int64_t kDefaultContextCap = 4096;
}  // namespace

struct Session::State {
  std::shared_ptr<const Model> model;
  SessionOptions options;
  int64_t context = 0;
  std::unique_ptr<runtime::KvPool> kv_pool;
  std::unique_ptr<runtime::SeqKv> kv;
  std::unique_ptr<runtime::Forward> forward;
  int64_t logit_rows = 0;  // rows readable from the last pass (0 after reset/rollback)

  const ModelConfig& cfg() const { return model->config(); }

  // One pass over `tokens` appended at the current position.
  void run(std::span<const int32_t> tokens, bool all_logits, bool hidden) {
    if (tokens.empty()) throw Error(ErrorCode::invalid_argument, "no tokens to process");
    const auto n = static_cast<int64_t>(tokens.size());
    if (kv->length() + n > context) {
      throw Error(ErrorCode::context_full,
                  "context full: " + std::to_string(kv->length()) + " tokens in the cache + " + std::to_string(n) +
                      " new exceed the context length " + std::to_string(context));
    }
    if (!kv->prepare_append(n)) throw Error(ErrorCode::internal, "the session's KV blocks are missing");
    runtime::PassSequence seq{.kv = kv.get(), .tokens = tokens, .all_logits = all_logits, .hidden = hidden};
    forward->run(std::span<const runtime::PassSequence>(&seq, 1));
    kv->commit(n);
    logit_rows = forward->logit_rows(0);
  }
};

Session::Session(std::shared_ptr<const Model> model, SessionOptions options)
    : state_(std::make_unique<State>()) {
  if (!model) throw Error(ErrorCode::invalid_argument, "session needs a model");
  State& s = *state_;
  s.model = std::move(model);
  s.options = std::move(options);
  const ModelConfig& c = s.cfg();
  auto pool = s.options.pool ? s.options.pool : std::make_shared<ThreadPool>(s.options.n_threads);
  if (s.options.kv_dtype != DType::f32 && s.options.kv_dtype != DType::f16) {
    throw Error(ErrorCode::invalid_argument,
                "KV cache dtype must be f32 or f16, got " +
                    std::string(dtype_name(s.options.kv_dtype)));
  }
  s.context = s.options.context_length > 0 ? s.options.context_length
                                           : std::min(c.max_positions, kDefaultContextCap);
  if (s.context <= 0) throw Error(ErrorCode::invalid_argument, "context length must be positive");
  if (c.position == PositionKind::learned && s.context > c.max_positions) {
    throw Error(ErrorCode::invalid_argument,
                "context length " + std::to_string(s.context) +
                    " exceeds the model's learned positions (" + std::to_string(c.max_positions) +
                    ")");
  }
  (void)kv_cache_bytes_for(c, s.context, s.options.kv_dtype);  // refuses sizes that overflow
  s.kv_pool = std::make_unique<runtime::KvPool>(c, kKvBlockTokens, (s.context + kKvBlockTokens - 1) / kKvBlockTokens,
                                                s.options.kv_dtype);
  s.kv = std::make_unique<runtime::SeqKv>(*s.kv_pool);
  runtime::ForwardOptions fo;
  fo.pool = std::move(pool);
  fo.trace = s.options.trace;
  fo.bf16_activations = s.options.bf16_activations;
  fo.context_length = s.context;
  s.forward = std::make_unique<runtime::Forward>(s.model, std::move(fo), *s.kv_pool);
}

Session::~Session() = default;

void Session::prefill(std::span<const int32_t> tokens) { state_->run(tokens, state_->options.all_logits, false); }

void Session::prefill(std::span<const int32_t> tokens, bool all_logits) { state_->run(tokens, all_logits, false); }

void Session::step(int32_t token) {
  const int32_t one[1] = {token};
  state_->run(one, false, false);
}

std::span<const float> Session::logits() const {
  const State& s = *state_;
  if (s.logit_rows == 0) throw Error(ErrorCode::invalid_argument, "no logits yet: prefill first");
  const int64_t v = s.cfg().vocab_size;
  return s.forward->logits(0).subspan(static_cast<size_t>((s.logit_rows - 1) * v), static_cast<size_t>(v));
}

std::span<const float> Session::logits_at(int64_t i) const {
  const State& s = *state_;
  if (i < 0 || i >= s.logit_rows) {
    throw Error(ErrorCode::invalid_argument,
                "logit row " + std::to_string(i) + " out of range (" +
                    std::to_string(s.logit_rows) + " rows kept)");
  }
  const int64_t v = s.cfg().vocab_size;
  return s.forward->logits(0).subspan(static_cast<size_t>(i * v), static_cast<size_t>(v));
}

int64_t Session::logit_rows() const noexcept { return state_->logit_rows; }
int64_t Session::position() const noexcept { return state_->kv->length(); }
int64_t Session::context_length() const noexcept { return state_->context; }

void Session::reset() noexcept {
  state_->kv->truncate(0);
  state_->logit_rows = 0;
}

void Session::rollback(int64_t position) {
  if (position < 0 || position > state_->kv->length()) {
    throw Error(ErrorCode::invalid_argument,
                "cannot roll back to position " + std::to_string(position) + " (current " +
                    std::to_string(state_->kv->length()) + ")");
  }
  state_->kv->truncate(position);
  state_->logit_rows = 0;
}

void Session::copy_cache_from(const Session& other, int64_t n, int64_t keep) {
  State& s = *state_;
  const State& o = *other.state_;
  const ModelConfig& a = s.cfg();
  const ModelConfig& b = o.cfg();
  auto differs = [](std::string_view what, int64_t x, int64_t y) {
    throw Error(ErrorCode::invalid_argument, "cannot copy a KV cache between models of different " + std::string(what) +
                                                 " (the source's model has " + std::to_string(y) + ", this one " +
                                                 std::to_string(x) + ")");
  };
  if (a.n_layers != b.n_layers) differs("layer counts", a.n_layers, b.n_layers);
  if (a.n_kv_heads != b.n_kv_heads) differs("KV head counts", a.n_kv_heads, b.n_kv_heads);
  if (a.head_dim != b.head_dim) differs("head sizes", a.head_dim, b.head_dim);
  if (a.position != b.position || a.rope_dims != b.rope_dims || a.rope_theta != b.rope_theta ||
      a.rope_scaling.kind != b.rope_scaling.kind ||
      s.model->weights().rope_interleaved != o.model->weights().rope_interleaved) {
    throw Error(ErrorCode::invalid_argument, "cannot copy a KV cache between models whose positions are encoded differently");
  }
  if (n < 0 || n > o.kv->length()) {
    throw Error(ErrorCode::invalid_argument, "cannot copy " + std::to_string(n) + " positions from a cache holding " +
                                                 std::to_string(o.kv->length()));
  }
  if (n > s.context) {
    throw Error(ErrorCode::context_full, "context full: " + std::to_string(n) + " positions exceed the context length " +
                                             std::to_string(s.context));
  }
  if (keep < 0 || keep > n || keep > s.kv->length()) {
    throw Error(ErrorCode::invalid_argument, "cannot keep " + std::to_string(keep) + " positions of a cache holding " +
                                                 std::to_string(s.kv->length()) + " while copying " + std::to_string(n));
  }
  s.logit_rows = 0;
  if (&s == &o) {  // from itself: its first n positions are already where they go
    s.kv->truncate(n);
    return;
  }
  s.kv->truncate(keep);
  if (n == keep) return;
  if (!s.kv->prepare_append(n - keep)) throw Error(ErrorCode::internal, "the session's KV blocks are missing");
  if (s.kv_pool->same_elements(*o.kv_pool)) {
    // Byte copies, a run of positions per pair of blocks: a draft re-seeding from its
    // target between rounds copied position by position through f32 rows before, half
    // of a q4_k draft step's time on the small shape.
    for (int64_t p = keep; p < n;) {
      const int64_t from_slot = o.kv->slot_of(p), to_slot = s.kv->slot_of(p);
      const int64_t count = std::min({n - p, o.kv_pool->block_tokens() - from_slot, s.kv_pool->block_tokens() - to_slot});
      s.kv_pool->copy_run_from(*o.kv_pool, o.kv->block_of(p), from_slot, s.kv->block_of(p), to_slot, count);
      p += count;
    }
  } else {
    std::vector<float> row(static_cast<size_t>(a.head_dim));
    for (int64_t p = keep; p < n; ++p) {
      for (int64_t l = 0; l < a.n_layers; ++l) {
        for (int kind = 0; kind < 2; ++kind) {
          for (int64_t g = 0; g < a.n_kv_heads; ++g) {
            o.kv_pool->load_row(o.kv->block_of(p), o.kv->slot_of(p), l, kind, g, row.data());
            s.kv_pool->store_row(s.kv->block_of(p), s.kv->slot_of(p), l, kind, g, row.data());
          }
        }
      }
    }
  }
  s.kv->commit(n - keep);
}

std::vector<float> Session::embed(std::span<const int32_t> tokens, Pooling pooling,
                                  bool normalize) {
  reset();
  state_->run(tokens, false, true);
  const int64_t H = state_->cfg().hidden_size;
  const auto n = static_cast<int64_t>(tokens.size());
  std::vector<float> out(static_cast<size_t>(H), 0.0f);
  const float* hidden = state_->forward->hidden(0).data();
  if (pooling == Pooling::last) {
    std::copy(hidden + (n - 1) * H, hidden + n * H, out.begin());
  } else {
    std::vector<double> sum(static_cast<size_t>(H), 0.0);
    for (int64_t t = 0; t < n; ++t) {
      for (int64_t i = 0; i < H; ++i) sum[static_cast<size_t>(i)] += hidden[t * H + i];
    }
    for (int64_t i = 0; i < H; ++i) {
      out[static_cast<size_t>(i)] = static_cast<float>(sum[static_cast<size_t>(i)] / static_cast<double>(n));
    }
  }
  if (normalize) {
    double norm = 0.0;
    for (float f : out) norm += static_cast<double>(f) * f;
    norm = std::sqrt(norm);
    if (norm > 0.0) {
      for (float& f : out) f = static_cast<float>(f / norm);
    }
  }
  return out;
}

std::vector<double> Session::score(std::span<const int32_t> tokens) {
  reset();
  if (tokens.size() < 2) return {};
  state_->run(tokens, true, false);
  const int64_t v = state_->cfg().vocab_size;
  const float* all = state_->forward->logits(0).data();
  std::vector<double> out;
  out.reserve(tokens.size() - 1);
  for (size_t i = 1; i < tokens.size(); ++i) {
    const float* row = all + static_cast<int64_t>(i - 1) * v;
    const float max = *std::max_element(row, row + v);
    double sum = 0.0;
    for (int64_t j = 0; j < v; ++j) sum += std::exp(static_cast<double>(row[j]) - max);
    out.push_back(static_cast<double>(row[tokens[i]]) - max - std::log(sum));
  }
  return out;
}

int64_t Session::kv_cache_bytes() const noexcept { return state_->kv_pool->bytes(); }

const Model& Session::model() const noexcept { return *state_->model; }
ThreadPool& Session::pool() noexcept { return state_->forward->pool(); }
std::shared_ptr<ThreadPool> Session::shared_pool() const noexcept { return state_->forward->options().pool; }

}  // namespace loom
