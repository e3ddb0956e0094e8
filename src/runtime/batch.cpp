// loom::Batch: sequences, their pending tokens and block tables, and the scheduler that
// turns pending tokens into one forward pass (runtime/forward) per decode().
#include "loom/batch.hpp"

#include <algorithm>
#include <map>
#include <string>

#include "loom/error.hpp"
#include "runtime/forward.hpp"
#include "runtime/kv_pool.hpp"

namespace loom {

namespace {

constexpr int64_t kDefaultContextCap = 4096;

struct Sequence {
  explicit Sequence(runtime::KvPool& pool) : kv(pool) {}
  runtime::SeqKv kv;
  std::vector<int32_t> pending;  // fed, not yet processed: pending[done..]
  size_t done = 0;
  bool all_logits = false;       // keep a row for every pending token
  std::vector<float> logits;     // [logit_rows, vocab], readable when !has_pending()
  int64_t logit_rows = 0;

  int64_t pending_count() const noexcept { return static_cast<int64_t>(pending.size() - done); }
  void clear_pending() noexcept {
    pending.clear();
    done = 0;
    all_logits = false;
  }
};

std::string seq_name(SeqId id) { return "sequence " + std::to_string(id); }

}  // namespace

struct Batch::State {
  std::shared_ptr<const Model> model;
  BatchOptions options;
  int64_t context = 0;
  std::unique_ptr<runtime::KvPool> kv_pool;
  std::unique_ptr<runtime::Forward> forward;
  std::map<SeqId, Sequence> seqs;  // ordered by id: the prompt-chunk order
  SeqId next_id = 0;
  int64_t passes = 0;
  int64_t tokens_processed = 0;

  const ModelConfig& cfg() const { return model->config(); }

  Sequence& get(SeqId id) {
    auto it = seqs.find(id);
    if (it == seqs.end()) throw Error(ErrorCode::invalid_argument, "unknown or removed " + seq_name(id));
    return it->second;
  }
  const Sequence& get(SeqId id) const { return const_cast<State*>(this)->get(id); }

  void check_capacity() const {
    if (static_cast<int64_t>(seqs.size()) >= options.max_sequences) {
      throw Error(ErrorCode::invalid_argument,
                  "the batch already holds its maximum of " + std::to_string(options.max_sequences) + " sequences");
    }
  }

  [[noreturn]] void pool_full(SeqId id, int64_t needed) const {
    throw Error(ErrorCode::kv_pool_full,
                "the KV pool is full: " + seq_name(id) + " needs " + std::to_string(needed) + " more block" +
                    (needed == 1 ? "" : "s") + " of " + std::to_string(kv_pool->block_tokens()) + " positions and " +
                    std::to_string(kv_pool->free_blocks()) + " of " + std::to_string(kv_pool->n_blocks()) +
                    " are free (remove, roll back or trim a sequence, then retry)");
  }
};

Batch::Batch(std::shared_ptr<const Model> model, BatchOptions options) : state_(std::make_unique<State>()) {
  if (!model) throw Error(ErrorCode::invalid_argument, "a batch needs a model");
  State& s = *state_;
  s.model = std::move(model);
  s.options = std::move(options);
  const ModelConfig& c = s.cfg();
  BatchOptions& o = s.options;
  if (o.max_sequences <= 0 || o.max_sequences > (int64_t{1} << 20)) {
    throw Error(ErrorCode::invalid_argument, "max_sequences must be between 1 and 2^20, got " + std::to_string(o.max_sequences));
  }
  if (o.block_tokens <= 0 || o.block_tokens > 65536) {
    throw Error(ErrorCode::invalid_argument, "block_tokens must be between 1 and 65536, got " + std::to_string(o.block_tokens));
  }
  if (o.token_budget <= 0) throw Error(ErrorCode::invalid_argument, "token_budget must be positive");
  if (o.pool_tokens < 0 || o.pool_bytes < 0) throw Error(ErrorCode::invalid_argument, "the KV pool size is negative");
  s.context = o.context_length > 0 ? o.context_length : std::min(c.max_positions, kDefaultContextCap);
  if (s.context <= 0) throw Error(ErrorCode::invalid_argument, "context length must be positive");
  if (c.position == PositionKind::learned && s.context > c.max_positions) {
    throw Error(ErrorCode::invalid_argument, "context length " + std::to_string(s.context) +
                                                 " exceeds the model's learned positions (" +
                                                 std::to_string(c.max_positions) + ")");
  }
  const int64_t block_bytes = runtime::kv_block_bytes(c, o.block_tokens, o.kv_dtype);
  int64_t n_blocks = 0;
  if (o.pool_tokens > 0) {
    n_blocks = (o.pool_tokens + o.block_tokens - 1) / o.block_tokens;
  } else if (o.pool_bytes > 0) {
    n_blocks = o.pool_bytes / block_bytes;
    if (n_blocks == 0) {
      throw Error(ErrorCode::invalid_argument,
                  "a KV pool of " + std::to_string(o.pool_bytes) + " bytes cannot hold one block of " +
                      std::to_string(block_bytes) + " bytes (" + std::to_string(o.block_tokens) + " positions)");
    }
  } else {
    const int64_t per_seq = (s.context + o.block_tokens - 1) / o.block_tokens;
    if (__builtin_mul_overflow(per_seq, o.max_sequences, &n_blocks)) {
      throw Error(ErrorCode::out_of_memory, "the default KV pool size overflows");
    }
  }
  s.kv_pool = std::make_unique<runtime::KvPool>(c, o.block_tokens, n_blocks, o.kv_dtype);
  runtime::ForwardOptions fo;
  fo.pool = o.pool ? o.pool : std::make_shared<ThreadPool>(o.n_threads);
  fo.context_length = s.context;
  // Batch invariance: activations stay f32 (no bf16 rounding of prompt chunks only).
  fo.bf16_activations = false;
  s.forward = std::make_unique<runtime::Forward>(s.model, std::move(fo), *s.kv_pool);
}

Batch::~Batch() = default;

SeqId Batch::add() {
  State& s = *state_;
  s.check_capacity();
  const SeqId id = s.next_id++;
  s.seqs.emplace(id, Sequence(*s.kv_pool));
  return id;
}

void Batch::feed(SeqId id, std::span<const int32_t> tokens, bool all_logits) {
  State& s = *state_;
  Sequence& q = s.get(id);
  if (tokens.empty()) throw Error(ErrorCode::invalid_argument, seq_name(id) + ": no tokens to feed");
  const int64_t vocab = s.cfg().vocab_size;
  for (int32_t t : tokens) {
    if (t < 0 || t >= vocab) {
      throw Error(ErrorCode::invalid_argument, seq_name(id) + ": token id " + std::to_string(t) +
                                                   " is outside the vocabulary (0.." + std::to_string(vocab - 1) + ")");
    }
  }
  const int64_t total = q.pending_count() + static_cast<int64_t>(tokens.size());
  if (q.kv.length() + total > s.context) {
    throw Error(ErrorCode::context_full, seq_name(id) + ": " + std::to_string(q.kv.length()) + " tokens in the cache + " +
                                             std::to_string(total) + " pending exceed the context length " +
                                             std::to_string(s.context));
  }
  if (!q.kv.prepare_append(total)) s.pool_full(id, q.kv.blocks_needed(total));
  if (q.done > 0) {
    q.pending.erase(q.pending.begin(), q.pending.begin() + static_cast<std::ptrdiff_t>(q.done));
    q.done = 0;
  }
  if (q.pending.empty()) {
    // A new run of tokens: the previous logits no longer describe the next position.
    q.all_logits = all_logits;
    q.logits.clear();
    q.logit_rows = 0;
  } else {
    q.all_logits = q.all_logits || all_logits;
  }
  q.pending.insert(q.pending.end(), tokens.begin(), tokens.end());
}

std::vector<SampledToken> Batch::sample_ready(std::span<const SeqId> ready,
                                              const std::function<Sampler*(SeqId)>& sampler_of,
                                              bool feed_back) {
  State& s = *state_;
  if (!sampler_of) throw Error(ErrorCode::invalid_argument, "sample_ready needs a sampler for each sequence");
  // Everything that can be refused is checked before any sampler draws.
  std::vector<std::pair<SeqId, Sampler*>> work;
  int64_t blocks = 0;
  for (size_t i = 0; i < ready.size(); ++i) {
    const SeqId id = ready[i];
    const Sequence& q = s.get(id);
    if (std::find(ready.begin(), ready.begin() + static_cast<std::ptrdiff_t>(i), id) !=
        ready.begin() + static_cast<std::ptrdiff_t>(i)) {
      throw Error(ErrorCode::invalid_argument, seq_name(id) + " is listed twice");
    }
    (void)logits(id);  // names the sequence when it has none readable
    Sampler* sampler = sampler_of(id);
    if (sampler == nullptr) continue;
    if (feed_back) {
      if (q.kv.length() + 1 > s.context) {
        throw Error(ErrorCode::context_full, seq_name(id) + ": its " + std::to_string(q.kv.length()) +
                                                 " positions fill the context length; no room for the sampled token");
      }
      blocks += q.kv.blocks_needed(1);
      if (blocks > s.kv_pool->free_blocks()) {
        throw Error(ErrorCode::kv_pool_full,
                    "the KV pool is full: feeding the sampled tokens back needs " + std::to_string(blocks) +
                        " blocks up to " + seq_name(id) + " and " + std::to_string(s.kv_pool->free_blocks()) +
                        " are free (nothing was drawn; remove, roll back or trim a sequence, then retry)");
      }
    }
    work.emplace_back(id, sampler);
  }
  std::vector<SampledToken> out;
  out.reserve(work.size());
  for (const auto& [id, sampler] : work) {
    try {
      out.push_back({id, sampler->sample(logits(id))});
    } catch (const Error& e) {
      throw Error(e.code(), seq_name(id) + ": " + e.detail(), e.context());
    }
  }
  if (feed_back) {
    // A host stage may pick any id: refuse before feeding anything, so no feed fails midway.
    const int64_t vocab = s.cfg().vocab_size;
    for (const auto& t : out) {
      if (t.token < 0 || t.token >= vocab) {
        throw Error(ErrorCode::invalid_argument, seq_name(t.seq) + ": the sampler picked token id " +
                                                     std::to_string(t.token) + ", outside the vocabulary (0.." +
                                                     std::to_string(vocab - 1) + "); nothing was fed");
      }
    }
    for (const auto& t : out) feed(t.seq, std::span<const int32_t>(&t.token, 1));
  }
  return out;
}

SeqId Batch::fork(SeqId parent) {
  State& s = *state_;
  const Sequence& p = s.get(parent);
  if (p.pending_count() > 0) {
    throw Error(ErrorCode::invalid_argument, "cannot fork " + seq_name(parent) + ": it has " +
                                                 std::to_string(p.pending_count()) +
                                                 " pending tokens (decode them first)");
  }
  s.check_capacity();
  const SeqId id = s.next_id++;
  Sequence child(*s.kv_pool);
  child.kv.share_prefix(p.kv, p.kv.length());
  child.logits = p.logits;
  child.logit_rows = p.logit_rows;
  s.seqs.emplace(id, std::move(child));
  return id;
}

void Batch::rollback(SeqId id, int64_t position) {
  Sequence& q = state_->get(id);
  if (position < 0 || position > q.kv.length()) {
    throw Error(ErrorCode::invalid_argument, "cannot roll " + seq_name(id) + " back to position " +
                                                 std::to_string(position) + " (it holds " +
                                                 std::to_string(q.kv.length()) + ")");
  }
  q.clear_pending();
  q.kv.truncate(position);
  q.logits.clear();
  q.logit_rows = 0;
}

void Batch::trim(SeqId id, int64_t begin, int64_t end) {
  State& s = *state_;
  Sequence& q = s.get(id);
  const int64_t length = q.kv.length();
  if (q.pending_count() > 0) {
    throw Error(ErrorCode::invalid_argument, "cannot trim " + seq_name(id) + " while it has pending tokens");
  }
  if (begin < 0 || begin > end || end > length) {
    throw Error(ErrorCode::invalid_argument, "cannot trim positions [" + std::to_string(begin) + ", " +
                                                 std::to_string(end) + ") of " + seq_name(id) + " (it holds " +
                                                 std::to_string(length) + ")");
  }
  const int64_t d = end - begin;
  if (d == 0) return;
  const int64_t new_length = length - d;
  // Positions [begin, new_length) are rewritten: their blocks must be this sequence's own.
  if (!q.kv.make_exclusive(begin, new_length)) s.pool_full(id, q.kv.shared_blocks(begin, new_length));
  for (int64_t p = begin; p < new_length; ++p) {
    s.kv_pool->copy_run_from(*s.kv_pool, q.kv.block_of(p + d), q.kv.slot_of(p + d), q.kv.block_of(p), q.kv.slot_of(p),
                             1);
  }
  q.kv.truncate(new_length);
  s.forward->rerotate_keys(q.kv, begin, new_length, -d);
  q.logits.clear();
  q.logit_rows = 0;
}

void Batch::remove(SeqId id) {
  State& s = *state_;
  s.get(id);
  s.seqs.erase(id);
}

BatchPass Batch::decode(const std::function<bool()>& cancel) {
  State& s = *state_;
  BatchPass out;
  // Schedule: single pending tokens (decode steps) first, then prompt chunks by id, within
  // the token budget.
  struct Planned {
    SeqId id;
    Sequence* seq;
    int64_t n;
  };
  std::vector<Planned> plan;
  int64_t budget = s.options.token_budget;
  for (auto& [id, q] : s.seqs) {
    if (budget == 0) break;
    if (q.pending_count() == 1) {
      plan.push_back({id, &q, 1});
      --budget;
    }
  }
  for (auto& [id, q] : s.seqs) {
    if (budget == 0) break;
    if (q.pending_count() > 1) {
      const int64_t n = std::min(budget, q.pending_count());
      plan.push_back({id, &q, n});
      budget -= n;
    }
  }
  if (plan.empty()) return out;
  if (cancel && cancel()) throw Error(ErrorCode::cancelled, "the host cancelled the pass");

  std::vector<runtime::PassSequence> pass;
  pass.reserve(plan.size());
  for (const auto& p : plan) {
    const bool last_chunk = p.n == p.seq->pending_count();
    pass.push_back(runtime::PassSequence{
        .kv = &p.seq->kv,
        .tokens = std::span<const int32_t>(p.seq->pending.data() + p.seq->done, static_cast<size_t>(p.n)),
        .all_logits = p.seq->all_logits,
        .want_logits = last_chunk || p.seq->all_logits,
        .hidden = false});
  }
  s.forward->run(pass);

  // Commit.
  const int64_t vocab = s.cfg().vocab_size;
  for (size_t i = 0; i < plan.size(); ++i) {
    const auto& p = plan[i];
    Sequence& q = *p.seq;
    const bool last_chunk = p.n == q.pending_count();
    q.kv.commit(p.n);
    q.done += static_cast<size_t>(p.n);
    const auto rows = s.forward->logits(i);
    if (q.all_logits) {
      q.logits.insert(q.logits.end(), rows.begin(), rows.end());
      q.logit_rows += static_cast<int64_t>(rows.size()) / vocab;
    } else if (last_chunk) {
      q.logits.assign(rows.end() - vocab, rows.end());
      q.logit_rows = 1;
    }
    out.tokens += p.n;
    if (last_chunk) {
      q.clear_pending();
      out.ready.push_back(p.id);
    } else {
      out.partial.push_back(p.id);
    }
  }
  ++s.passes;
  s.tokens_processed += out.tokens;
  return out;
}

std::span<const float> Batch::logits(SeqId id) const {
  const Sequence& q = state_->get(id);
  if (q.logit_rows == 0 || q.pending_count() > 0) {
    throw Error(ErrorCode::invalid_argument, "no logits readable for " + seq_name(id) +
                                                 (q.pending_count() > 0 ? " (it has pending tokens: decode first)" : " yet"));
  }
  const int64_t v = state_->cfg().vocab_size;
  return {q.logits.data() + (q.logit_rows - 1) * v, static_cast<size_t>(v)};
}

std::span<const float> Batch::logits_at(SeqId id, int64_t i) const {
  const Sequence& q = state_->get(id);
  if (i < 0 || i >= q.logit_rows) {
    throw Error(ErrorCode::invalid_argument, "logit row " + std::to_string(i) + " of " + seq_name(id) +
                                                 " out of range (" + std::to_string(q.logit_rows) + " rows kept)");
  }
  const int64_t v = state_->cfg().vocab_size;
  return {q.logits.data() + i * v, static_cast<size_t>(v)};
}

int64_t Batch::logit_rows(SeqId id) const { return state_->get(id).logit_rows; }
bool Batch::contains(SeqId id) const noexcept { return state_->seqs.count(id) > 0; }
int64_t Batch::position(SeqId id) const { return state_->get(id).kv.length(); }
int64_t Batch::pending(SeqId id) const { return state_->get(id).pending_count(); }
int64_t Batch::context_length() const noexcept { return state_->context; }
const Model& Batch::model() const noexcept { return *state_->model; }
ThreadPool& Batch::pool() noexcept { return state_->forward->pool(); }

std::vector<SeqId> Batch::sequences() const {
  std::vector<SeqId> ids;
  for (const auto& [id, q] : state_->seqs) ids.push_back(id);
  return ids;
}

BatchStats Batch::stats() const {
  const State& s = *state_;
  const auto p = s.kv_pool->stats();
  BatchStats out;
  out.sequences = static_cast<int64_t>(s.seqs.size());
  out.block_tokens = p.block_tokens;
  out.blocks_total = p.blocks_total;
  out.blocks_used = p.blocks_used;
  out.blocks_shared = p.blocks_shared;
  out.blocks_free = p.blocks_free;
  out.bytes_total = p.bytes_total;
  out.bytes_used = p.blocks_used * p.block_bytes;
  out.passes = s.passes;
  out.tokens_processed = s.tokens_processed;
  return out;
}

int64_t context_shift(Batch& batch, SeqId seq, int64_t needed, int64_t keep_first) {
  const int64_t ctx = batch.context_length();
  const int64_t pos = batch.position(seq);
  if (needed < 0 || keep_first < 0) throw Error(ErrorCode::invalid_argument, "context_shift: negative size");
  if (pos + needed <= ctx) return 0;
  if (keep_first + needed > ctx) {
    throw Error(ErrorCode::context_full, "context shift: " + std::to_string(needed) + " new positions after the " +
                                             std::to_string(keep_first) + " kept ones exceed the context length " +
                                             std::to_string(ctx));
  }
  const int64_t movable = std::max<int64_t>(0, pos - keep_first);
  const int64_t drop = std::min(movable, std::max(pos + needed - ctx, movable / 2));
  batch.trim(seq, keep_first, keep_first + drop);
  return drop;
}

}  // namespace loom
