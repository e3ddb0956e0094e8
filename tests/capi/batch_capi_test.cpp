// The C API's batches: sequences decoded together through loom_batch_* give the bits of
// each run alone through a loom_session (the kernels are batch invariant), forks share
// blocks, a full pool is a named, recoverable error, and bad input is a status.
#include <catch2/catch.hpp>

#include <cstddef>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "loom.h"
#include "loom/demo.hpp"
#include "support/test_support.hpp"

namespace {

// A small demo model (fast under the sanitizers), loaded through the C API.
struct Model {
  loom::test::TempDir dir;
  loom_model* model = nullptr;
  int32_t vocab = 0;
  Model() {
    loom::DemoOptions o;
    o.hidden_size = 64;
    o.n_layers = 2;
    o.n_heads = 4;
    o.n_kv_heads = 2;
    o.intermediate_size = 128;
    o.merges = 100;
    loom::write_demo_model(dir.path(), o);
    loom_load_params lp;
    loom_load_params_init(&lp);
    lp.log_level = LOOM_LOG_OFF;
    REQUIRE(loom_model_load(dir.path().c_str(), &lp, &model, nullptr) == LOOM_OK);
    loom_model_info info;
    loom_model_info_init(&info);
    REQUIRE(loom_model_get_info(model, &info) == LOOM_OK);
    vocab = info.vocab_size;
  }
  ~Model() { loom_model_free(model); }
};

struct Batch {
  loom_batch* b = nullptr;
  Batch(const loom_model* m, const loom_batch_params& p) { REQUIRE(loom_batch_create(m, &p, &b, nullptr) == LOOM_OK); }
  ~Batch() { loom_batch_free(b); }
  operator loom_batch*() const { return b; }
};

loom_batch_params params(int32_t n_threads = 2) {
  loom_batch_params p;
  loom_batch_params_init(&p);
  p.context_length = 128;
  p.n_threads = n_threads;
  return p;
}

std::vector<int32_t> random_tokens(std::mt19937& rng, size_t n, int32_t vocab) {
  std::vector<int32_t> t(n);
  for (auto& x : t) x = static_cast<int32_t>(rng() % static_cast<uint32_t>(vocab));
  return t;
}

std::vector<float> copy_logits(const float* p, size_t n) { return p ? std::vector<float>(p, p + n) : std::vector<float>{}; }

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return !a.empty() && a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

// Copies of a sequence's logits (empty when none are readable).
std::vector<float> batch_logits(const loom_batch* b, loom_seq_id id) {
  size_t n = 0;
  const float* l = loom_batch_logits(b, id, &n);
  return copy_logits(l, n);
}

std::vector<float> batch_logits_at(const loom_batch* b, loom_seq_id id, size_t i) {
  size_t n = 0;
  const float* l = loom_batch_logits_at(b, id, i, &n);
  return copy_logits(l, n);
}

// A sequence run alone: a session stepped token by token.
struct Alone {
  loom_session* s = nullptr;
  explicit Alone(const loom_model* m, int32_t n_threads = 2) {
    loom_session_params sp;
    loom_session_params_init(&sp);
    sp.context_length = 128;
    sp.n_threads = n_threads;
    REQUIRE(loom_session_create(m, &sp, &s, nullptr) == LOOM_OK);
  }
  ~Alone() { loom_session_free(s); }
  // Logits after each token.
  std::vector<std::vector<float>> step_all(const std::vector<int32_t>& tokens) {
    std::vector<std::vector<float>> out;
    for (int32_t t : tokens) {
      REQUIRE(loom_step(s, t, nullptr) == LOOM_OK);
      size_t n = 0;
      const float* l = loom_logits(s, &n);
      out.push_back(copy_logits(l, n));
    }
    return out;
  }
};

// Decodes until nothing is pending; returns how many passes ran.
int decode_all(loom_batch* b) {
  int passes = 0;
  for (;;) {
    loom_batch_pass r;
    loom_batch_pass_init(&r);
    REQUIRE(loom_batch_decode(b, &r, nullptr) == LOOM_OK);
    if (r.tokens == 0) return passes;
    ++passes;
    REQUIRE(passes < 1000);
  }
}

std::string message_of(loom_error* err) {
  std::string m = err ? loom_error_message(err) : "";
  loom_error_free(err);
  return m;
}

loom_batch_stats stats_of(const loom_batch* b) {
  loom_batch_stats s;
  loom_batch_stats_init(&s);
  REQUIRE(loom_batch_get_stats(b, &s) == LOOM_OK);
  return s;
}

}  // namespace

TEST_CASE("C API batch: 4 sequences decoded together equal each run alone through a session, bit for bit") {
  Model m;
  auto p = params();
  p.token_budget = 8;  // prompt chunks across several passes, mixed with decode tokens
  Batch b(m.model, p);
  std::mt19937 rng(3);
  const size_t lengths[] = {3, 7, 12, 21};
  std::vector<std::vector<int32_t>> prompts;
  std::vector<loom_seq_id> ids;
  for (size_t len : lengths) {
    prompts.push_back(random_tokens(rng, len, m.vocab));
    loom_seq_id id = -1;
    REQUIRE(loom_batch_add(b, &id, nullptr) == LOOM_OK);
    ids.push_back(id);
  }
  for (size_t i = 0; i < ids.size(); ++i) {
    // The last sequence keeps logits for every prompt token (scoring).
    REQUIRE(loom_batch_feed(b, ids[i], prompts[i].data(), prompts[i].size(), i == 3 ? 1 : 0, nullptr) == LOOM_OK);
    CHECK(loom_batch_pending(b, ids[i]) == static_cast<int32_t>(prompts[i].size()));
  }
  const int passes = decode_all(b);
  CHECK(passes >= 5);  // 43 prompt tokens at 8 per pass

  // Greedy generation, each sequence with its own sampler; every later pass holds one
  // decode token of each sequence.
  std::vector<loom_sampler*> samplers(ids.size());
  loom_sampler_params sp;
  loom_sampler_params_init(&sp);
  sp.temperature = 0.0f;
  for (auto& s : samplers) REQUIRE(loom_sampler_create(&sp, &s, nullptr) == LOOM_OK);
  std::vector<std::vector<int32_t>> all = prompts;
  std::vector<std::vector<std::vector<float>>> batched(ids.size());  // logits after each generated token's pass
  std::vector<std::vector<float>> after_prompt(ids.size());
  for (size_t i = 0; i < ids.size(); ++i) {
    size_t n = 0;
    const float* l = loom_batch_logits(b, ids[i], &n);
    REQUIRE(l != nullptr);
    CHECK(n == static_cast<size_t>(m.vocab));
    after_prompt[i] = copy_logits(l, n);
    CHECK(loom_batch_position(b, ids[i]) == static_cast<int32_t>(prompts[i].size()));
  }
  CHECK(loom_batch_logit_rows(b, ids[3]) == prompts[3].size());
  CHECK(loom_batch_logit_rows(b, ids[0]) == 1);
  for (int step = 0; step < 5; ++step) {
    for (size_t i = 0; i < ids.size(); ++i) {
      int32_t token = -1;
      REQUIRE(loom_batch_sample(b, ids[i], samplers[i], &token, nullptr) == LOOM_OK);
      REQUIRE(token >= 0);
      REQUIRE(token < m.vocab);
      all[i].push_back(token);
      REQUIRE(loom_batch_feed(b, ids[i], &token, 1, 0, nullptr) == LOOM_OK);
    }
    loom_batch_pass r;
    loom_batch_pass_init(&r);
    REQUIRE(loom_batch_decode(b, &r, nullptr) == LOOM_OK);
    CHECK(r.tokens == 4);
    CHECK(r.n_ready == 4);
    CHECK(r.n_partial == 0);
    size_t n_ready = 0;
    REQUIRE(loom_batch_ready(b, nullptr, 0, &n_ready) == LOOM_OK);
    REQUIRE(n_ready == 4);
    std::vector<loom_seq_id> ready(n_ready);
    REQUIRE(loom_batch_ready(b, ready.data(), ready.size(), &n_ready) == LOOM_OK);
    CHECK(ready == ids);
    for (size_t i = 0; i < ids.size(); ++i) {
      batched[i].push_back(batch_logits(b, ids[i]));
    }
  }
  for (auto* s : samplers) loom_sampler_free(s);

  for (size_t i = 0; i < ids.size(); ++i) {
    INFO("sequence " << i);
    Alone alone(m.model);
    const auto ref = alone.step_all(all[i]);
    const size_t np = prompts[i].size();
    CHECK(std::memcmp(ref[np - 1].data(), after_prompt[i].data(), after_prompt[i].size() * sizeof(float)) == 0);
    for (size_t k = 0; k < batched[i].size(); ++k) {
      INFO("generated token " << k);
      CHECK(same_bits(ref[np + k], batched[i][k]));
    }
    // A new feed without all_logits starts a new run of rows: only the last is kept.
    CHECK(loom_batch_logit_rows(b, ids[i]) == 1);
  }
}

TEST_CASE("C API batch: all_logits rows across prompt chunks equal a session's token-by-token logits") {
  Model m;
  auto p = params();
  p.token_budget = 5;
  Batch b(m.model, p);
  std::mt19937 rng(8);
  const auto prompt = random_tokens(rng, 13, m.vocab);
  loom_seq_id id = -1;
  REQUIRE(loom_batch_add(b, &id, nullptr) == LOOM_OK);
  REQUIRE(loom_batch_feed(b, id, prompt.data(), prompt.size(), 1, nullptr) == LOOM_OK);
  CHECK(decode_all(b) == 3);
  REQUIRE(loom_batch_logit_rows(b, id) == prompt.size());
  Alone alone(m.model);
  const auto ref = alone.step_all(prompt);
  for (size_t i = 0; i < prompt.size(); ++i) {
    INFO("row " << i);
    CHECK(same_bits(ref[i], batch_logits_at(b, id, i)));
  }
  size_t n = 7;
  CHECK(loom_batch_logits_at(b, id, prompt.size(), &n) == nullptr);
  CHECK(n == 0);
  CHECK(same_bits(ref.back(), batch_logits(b, id)));
}

TEST_CASE("C API batch: a fork shares its parent's blocks and goes on like a fresh sequence") {
  Model m;
  auto p = params();
  p.block_tokens = 16;
  Batch b(m.model, p);
  std::mt19937 rng(21);
  const auto prefix = random_tokens(rng, 40, m.vocab);
  const auto tail = random_tokens(rng, 6, m.vocab);
  loom_seq_id parent = -1, child = -1, fresh = -1;
  REQUIRE(loom_batch_add(b, &parent, nullptr) == LOOM_OK);
  REQUIRE(loom_batch_feed(b, parent, prefix.data(), prefix.size(), 0, nullptr) == LOOM_OK);
  // A parent with pending tokens cannot be forked.
  loom_error* err = nullptr;
  CHECK(loom_batch_fork(b, parent, &child, &err) == LOOM_ERR_INVALID_ARGUMENT);
  CHECK(message_of(err).find("pending") != std::string::npos);
  decode_all(b);
  const auto before = stats_of(b);
  CHECK(before.blocks_shared == 0);
  CHECK(before.blocks_used == 3);  // 40 positions in blocks of 16

  REQUIRE(loom_batch_fork(b, parent, &child, nullptr) == LOOM_OK);
  CHECK(child != parent);
  CHECK(loom_batch_position(b, child) == 40);
  const auto forked = stats_of(b);
  CHECK(forked.sequences == 2);
  CHECK(forked.blocks_shared == 3);
  CHECK(forked.blocks_used == 3);  // nothing copied
  // The child starts with the parent's logits.
  const auto parent_logits = batch_logits(b, parent);
  REQUIRE(parent_logits.size() == static_cast<size_t>(m.vocab));
  CHECK(same_bits(parent_logits, batch_logits(b, child)));

  // The child's continuation equals a fresh sequence fed prefix + tail.
  std::vector<int32_t> whole = prefix;
  whole.insert(whole.end(), tail.begin(), tail.end());
  REQUIRE(loom_batch_add(b, &fresh, nullptr) == LOOM_OK);
  REQUIRE(loom_batch_feed(b, child, tail.data(), tail.size(), 0, nullptr) == LOOM_OK);
  REQUIRE(loom_batch_feed(b, fresh, whole.data(), whole.size(), 0, nullptr) == LOOM_OK);
  loom_batch_pass r;
  loom_batch_pass_init(&r);
  REQUIRE(loom_batch_decode(b, &r, nullptr) == LOOM_OK);  // one pass: within the budget
  CHECK(r.tokens == static_cast<int32_t>(tail.size() + whole.size()));
  CHECK(r.n_ready == 2);
  CHECK(same_bits(batch_logits(b, child), batch_logits(b, fresh)));
  // The parent is untouched by its child's writes (copy on write of the partial block).
  CHECK(same_bits(parent_logits, batch_logits(b, parent)));
  const auto after = stats_of(b);
  CHECK(after.blocks_shared == 2);  // the two full blocks; the third was copied
  CHECK(after.passes >= 2);
  CHECK(after.tokens_processed == static_cast<int64_t>(prefix.size() + tail.size() + whole.size()));

  REQUIRE(loom_batch_remove(b, child, nullptr) == LOOM_OK);
  CHECK(loom_batch_contains(b, child) == 0);
  size_t n_ready = 9;
  REQUIRE(loom_batch_ready(b, nullptr, 0, &n_ready) == LOOM_OK);
  CHECK(n_ready == 1);  // the removed child is left out of the last decode's list
}

TEST_CASE("C API batch: a full pool fails the feed naming the sequence, and a rollback makes room") {
  Model m;
  auto p = params();
  p.block_tokens = 16;
  p.pool_tokens = 32;  // two blocks
  Batch b(m.model, p);
  CHECK(stats_of(b).blocks_total == 2);
  std::mt19937 rng(4);
  const auto long_prompt = random_tokens(rng, 20, m.vocab);
  const auto short_prompt = random_tokens(rng, 5, m.vocab);
  loom_seq_id a = -1, c = -1;
  REQUIRE(loom_batch_add(b, &a, nullptr) == LOOM_OK);
  REQUIRE(loom_batch_add(b, &c, nullptr) == LOOM_OK);
  REQUIRE(loom_batch_feed(b, a, long_prompt.data(), long_prompt.size(), 0, nullptr) == LOOM_OK);
  loom_error* err = nullptr;
  REQUIRE(loom_batch_feed(b, c, short_prompt.data(), short_prompt.size(), 0, &err) == LOOM_ERR_KV_POOL_FULL);
  REQUIRE(err != nullptr);
  CHECK(loom_error_status(err) == LOOM_ERR_KV_POOL_FULL);
  const std::string msg = message_of(err);
  CHECK(msg.find("sequence " + std::to_string(c) + " needs 1 more block") != std::string::npos);
  CHECK(msg.find("0 of 2 are free") != std::string::npos);
  // Nothing changed: c holds nothing, a still has its prompt pending.
  CHECK(loom_batch_pending(b, c) == 0);
  CHECK(loom_batch_position(b, c) == 0);
  CHECK(loom_batch_pending(b, a) == 20);

  decode_all(b);
  REQUIRE(loom_batch_rollback(b, a, 10, nullptr) == LOOM_OK);  // frees a's second block
  CHECK(loom_batch_position(b, a) == 10);
  CHECK(loom_batch_logits(b, a, nullptr) == nullptr);  // rolled back: no logits until the next feed
  CHECK(stats_of(b).blocks_free == 1);
  REQUIRE(loom_batch_feed(b, c, short_prompt.data(), short_prompt.size(), 0, nullptr) == LOOM_OK);
  decode_all(b);
  Alone alone(m.model);
  const auto ref = alone.step_all(short_prompt);
  CHECK(same_bits(ref.back(), batch_logits(b, c)));
}

TEST_CASE("C API batch: bad ids, NULLs, empty feeds and a full context are statuses that change nothing") {
  Model m;
  auto p = params(1);
  p.context_length = 16;
  Batch b(m.model, p);
  loom_seq_id id = -1;
  REQUIRE(loom_batch_add(b, &id, nullptr) == LOOM_OK);
  const int32_t tokens[] = {1, 2, 3};
  constexpr loom_status kBad = LOOM_ERR_INVALID_ARGUMENT;
  loom_error* err = nullptr;

  CHECK(loom_batch_feed(b, 99, tokens, 3, 0, &err) == kBad);
  CHECK(message_of(err).find("sequence 99") != std::string::npos);
  CHECK(loom_batch_feed(b, id, tokens, 0, 0, &err) == kBad);
  CHECK(message_of(err).find("no tokens") != std::string::npos);
  CHECK(loom_batch_feed(b, id, nullptr, 3, 0, nullptr) == kBad);
  const int32_t outside[] = {1, m.vocab};
  CHECK(loom_batch_feed(b, id, outside, 2, 0, &err) == kBad);
  CHECK(message_of(err).find("outside the vocabulary") != std::string::npos);
  const std::vector<int32_t> too_many(17, 1);
  CHECK(loom_batch_feed(b, id, too_many.data(), too_many.size(), 0, &err) == LOOM_ERR_CONTEXT_FULL);
  CHECK(message_of(err).find("context length 16") != std::string::npos);
  CHECK(loom_batch_pending(b, id) == 0);

  CHECK(loom_batch_fork(b, 99, &id, nullptr) == kBad);
  CHECK(loom_batch_rollback(b, 99, 0, nullptr) == kBad);
  CHECK(loom_batch_rollback(b, id, 1, nullptr) == kBad);  // past its position
  CHECK(loom_batch_rollback(b, id, -1, nullptr) == kBad);
  CHECK(loom_batch_trim(b, id, 0, 1, nullptr) == kBad);
  CHECK(loom_batch_remove(b, 99, nullptr) == kBad);
  CHECK(loom_batch_context_shift(b, 99, 1, 0, nullptr, nullptr) == kBad);
  CHECK(loom_batch_position(b, 99) == -1);
  CHECK(loom_batch_pending(b, 99) == -1);
  CHECK(loom_batch_contains(b, 99) == 0);
  CHECK(loom_batch_contains(b, id) == 1);
  CHECK(loom_batch_logit_rows(b, 99) == 0);
  size_t n = 5;
  CHECK(loom_batch_logits(b, 99, &n) == nullptr);
  CHECK(n == 0);
  CHECK(loom_batch_logits(b, id, &n) == nullptr);  // nothing decoded yet
  CHECK(loom_batch_context_length(b) == 16);

  loom_sampler* sampler = nullptr;
  REQUIRE(loom_sampler_create(nullptr, &sampler, nullptr) == LOOM_OK);
  int32_t token = -1;
  CHECK(loom_batch_sample(b, id, sampler, &token, &err) == kBad);  // no logits yet
  CHECK(message_of(err).find("no logits") != std::string::npos);
  REQUIRE(loom_batch_feed(b, id, tokens, 3, 0, nullptr) == LOOM_OK);
  CHECK(loom_batch_sample(b, id, sampler, &token, &err) == kBad);  // pending
  CHECK(message_of(err).find("pending") != std::string::npos);
  CHECK(loom_batch_sample(b, 99, sampler, &token, nullptr) == kBad);
  CHECK(loom_batch_sample(b, id, nullptr, &token, nullptr) == kBad);
  CHECK(loom_batch_sample(b, id, sampler, nullptr, nullptr) == kBad);
  loom_sampler_free(sampler);

  // The ready list: buffer too small reports the size needed.
  REQUIRE(loom_batch_decode(b, nullptr, nullptr) == LOOM_OK);
  CHECK(loom_batch_position(b, id) == 3);
  size_t n_ready = 0;
  CHECK(loom_batch_ready(b, nullptr, 0, &n_ready) == LOOM_OK);
  CHECK(n_ready == 1);
  loom_seq_id none[1];
  CHECK(loom_batch_ready(b, none, 0, &n_ready) == LOOM_ERR_BUFFER_TOO_SMALL);
  CHECK(n_ready == 1);
  CHECK(loom_batch_ready(b, none, 1, nullptr) == kBad);
  // A decode with nothing pending is an empty pass and keeps nothing ready.
  loom_batch_pass r;
  loom_batch_pass_init(&r);
  REQUIRE(loom_batch_decode(b, &r, nullptr) == LOOM_OK);
  CHECK(r.tokens == 0);
  CHECK(r.n_ready == 0);
}

TEST_CASE("C API batch: creation validates its params and an older, smaller struct gets defaults") {
  Model m;
  loom_batch* b = reinterpret_cast<loom_batch*>(0x1);
  auto p = params(1);
  p.kv_dtype = LOOM_DTYPE_BF16;
  CHECK(loom_batch_create(m.model, &p, &b, nullptr) == LOOM_ERR_INVALID_ARGUMENT);
  CHECK(b == nullptr);
  p = params(1);
  p.max_sequences = 0;
  CHECK(loom_batch_create(m.model, &p, &b, nullptr) == LOOM_ERR_INVALID_ARGUMENT);
  p = params(1);
  p.pool_bytes = 1;  // not one block
  loom_error* err = nullptr;
  CHECK(loom_batch_create(m.model, &p, &b, &err) == LOOM_ERR_INVALID_ARGUMENT);
  CHECK(message_of(err).find("cannot hold one block") != std::string::npos);
  p = params(1);
  p.n_threads = -1;
  CHECK(loom_batch_create(m.model, &p, &b, nullptr) == LOOM_ERR_INVALID_ARGUMENT);
  CHECK(loom_batch_create(nullptr, &p, &b, nullptr) == LOOM_ERR_INVALID_ARGUMENT);
  p = params(1);
  CHECK(loom_batch_create(m.model, &p, nullptr, nullptr) == LOOM_ERR_INVALID_ARGUMENT);

  // NULL params: the defaults (16 sequences, blocks of 16, a context of the model's
  // length capped at 4096).
  REQUIRE(loom_batch_create(m.model, nullptr, &b, nullptr) == LOOM_OK);
  CHECK(stats_of(b).block_tokens == 16);
  CHECK(loom_batch_context_length(b) == 1024);
  loom_batch_free(b);

  // An older caller's struct ends before block_tokens: what it sets is used, the rest
  // (block_tokens here, set but beyond its size) keeps the defaults.
  p = params(1);
  p.max_sequences = 2;
  p.context_length = 64;
  p.block_tokens = 4;
  p.struct_size = static_cast<uint32_t>(offsetof(loom_batch_params, block_tokens));
  REQUIRE(loom_batch_create(m.model, &p, &b, nullptr) == LOOM_OK);
  const auto s = stats_of(b);
  CHECK(s.block_tokens == 16);
  CHECK(s.blocks_total == 2 * 64 / 16);  // max_sequences full contexts
  CHECK(loom_batch_context_length(b) == 64);
  loom_seq_id id = -1;
  CHECK(loom_batch_add(b, &id, nullptr) == LOOM_OK);
  CHECK(loom_batch_add(b, &id, nullptr) == LOOM_OK);
  CHECK(loom_batch_add(b, &id, &err) == LOOM_ERR_INVALID_ARGUMENT);
  CHECK(message_of(err).find("maximum of 2 sequences") != std::string::npos);
  // A stats struct from an older caller gets only its fields.
  loom_batch_stats small;
  std::memset(&small, 0xAB, sizeof small);
  small.struct_size = static_cast<uint32_t>(offsetof(loom_batch_stats, blocks_total));
  REQUIRE(loom_batch_get_stats(b, &small) == LOOM_OK);
  CHECK(small.sequences == 2);
  CHECK(small.block_tokens == 16);
  CHECK(small.blocks_free == static_cast<int64_t>(0xABABABABABABABABull));
  CHECK(small.struct_size == offsetof(loom_batch_stats, blocks_total));
  loom_batch_free(b);
}

namespace {
int32_t cancel_when_set(void* user) { return *static_cast<int*>(user); }
}  // namespace

TEST_CASE("C API batch: the cancel callback stops a decode with nothing changed") {
  Model m;
  int cancel = 1;
  auto p = params(1);
  p.cancel = cancel_when_set;
  p.cancel_user = &cancel;
  Batch b(m.model, p);
  loom_seq_id id = -1;
  REQUIRE(loom_batch_add(b, &id, nullptr) == LOOM_OK);
  const int32_t tokens[] = {5, 6, 7, 8};
  REQUIRE(loom_batch_feed(b, id, tokens, 4, 0, nullptr) == LOOM_OK);
  loom_batch_pass r;
  loom_batch_pass_init(&r);
  r.tokens = 77;
  loom_error* err = nullptr;
  CHECK(loom_batch_decode(b, &r, &err) == LOOM_ERR_CANCELLED);
  CHECK(message_of(err).find("cancelled") != std::string::npos);
  CHECK(r.tokens == 77);  // not written
  CHECK(loom_batch_pending(b, id) == 4);
  CHECK(loom_batch_position(b, id) == 0);
  CHECK(stats_of(b).passes == 0);
  cancel = 0;
  REQUIRE(loom_batch_decode(b, &r, nullptr) == LOOM_OK);
  CHECK(r.tokens == 4);
  CHECK(loom_batch_position(b, id) == 4);
}

TEST_CASE("C API batch: trim and context shift keep a sequence going past its context") {
  Model m;
  auto p = params(1);
  p.context_length = 32;
  p.block_tokens = 8;
  Batch b(m.model, p);
  std::mt19937 rng(9);
  const auto prompt = random_tokens(rng, 30, m.vocab);
  loom_seq_id id = -1;
  REQUIRE(loom_batch_add(b, &id, nullptr) == LOOM_OK);
  REQUIRE(loom_batch_feed(b, id, prompt.data(), prompt.size(), 0, nullptr) == LOOM_OK);
  decode_all(b);
  int32_t dropped = -1;
  REQUIRE(loom_batch_context_shift(b, id, 2, 4, &dropped, nullptr) == LOOM_OK);
  CHECK(dropped == 0);  // 30 + 2 fits
  REQUIRE(loom_batch_context_shift(b, id, 8, 4, &dropped, nullptr) == LOOM_OK);
  CHECK(dropped == 13);  // at least half of the 26 after the kept 4
  CHECK(loom_batch_position(b, id) == 17);
  loom_error* err = nullptr;
  CHECK(loom_batch_context_shift(b, id, 30, 4, &dropped, &err) == LOOM_ERR_CONTEXT_FULL);
  CHECK(dropped == 0);
  message_of(err);
  REQUIRE(loom_batch_trim(b, id, 0, 2, nullptr) == LOOM_OK);
  CHECK(loom_batch_position(b, id) == 15);
  const int32_t next = 3;
  REQUIRE(loom_batch_feed(b, id, &next, 1, 0, nullptr) == LOOM_OK);
  decode_all(b);
  CHECK(loom_batch_position(b, id) == 16);
  size_t n = 0;
  CHECK(loom_batch_logits(b, id, &n) != nullptr);
  CHECK(n == static_cast<size_t>(m.vocab));
}

namespace {
struct SamplerMap {
  std::vector<loom_seq_id> ids;
  std::vector<loom_sampler*> samplers;
  loom_seq_id skip = -1;
};
loom_sampler* sampler_of(void* user, loom_seq_id seq) {
  auto* m = static_cast<SamplerMap*>(user);
  if (seq == m->skip) return nullptr;
  for (size_t i = 0; i < m->ids.size(); ++i) {
    if (m->ids[i] == seq) return m->samplers[i];
  }
  return nullptr;
}
}  // namespace

TEST_CASE("C API batch: loom_batch_sample_ready draws and feeds every ready sequence like one loom_batch_sample each") {
  Model m;
  std::mt19937 rng(21);
  std::vector<std::vector<int32_t>> prompts;
  for (size_t len : {3u, 9u, 5u}) prompts.push_back(random_tokens(rng, len, m.vocab));
  loom_sampler_params sp;
  loom_sampler_params_init(&sp);
  sp.temperature = 0.9f;  // sampled, seeded: the same draws both ways
  std::vector<std::vector<int32_t>> results[2];
  for (int way = 0; way < 2; ++way) {
    Batch b(m.model, params());
    SamplerMap map;
    for (size_t i = 0; i < prompts.size(); ++i) {
      loom_seq_id id = -1;
      REQUIRE(loom_batch_add(b, &id, nullptr) == LOOM_OK);
      REQUIRE(loom_batch_feed(b, id, prompts[i].data(), prompts[i].size(), 0, nullptr) == LOOM_OK);
      loom_sampler* s = nullptr;
      sp.seed = 7 + i;
      REQUIRE(loom_sampler_create(&sp, &s, nullptr) == LOOM_OK);
      map.ids.push_back(id);
      map.samplers.push_back(s);
    }
    loom_batch_pass first;
    loom_batch_pass_init(&first);
    REQUIRE(loom_batch_decode(b, &first, nullptr) == LOOM_OK);  // every prompt in one pass
    REQUIRE(first.n_ready == 3);
    results[way].resize(prompts.size());
    for (int step = 0; step < 6; ++step) {
      if (way == 0) {
        for (size_t i = 0; i < map.ids.size(); ++i) {
          int32_t token = -1;
          REQUIRE(loom_batch_sample(b, map.ids[i], map.samplers[i], &token, nullptr) == LOOM_OK);
          results[way][i].push_back(token);
          REQUIRE(loom_batch_feed(b, map.ids[i], &token, 1, 0, nullptr) == LOOM_OK);
        }
      } else {
        loom_seq_id ids[3] = {-1, -1, -1};
        int32_t tokens[3] = {-1, -1, -1};
        size_t n = 0;
        loom_error* err = nullptr;
        // Too small an output: the count, and nothing drawn or fed.
        CHECK(loom_batch_sample_ready(b, sampler_of, &map, 1, ids, tokens, 2, &n, &err) == LOOM_ERR_BUFFER_TOO_SMALL);
        CHECK(n == 3);
        CHECK(message_of(err).find("3 sequences") != std::string::npos);
        CHECK(loom_batch_pending(b, map.ids[0]) == 0);
        REQUIRE(loom_batch_sample_ready(b, sampler_of, &map, 1, ids, tokens, 3, &n, nullptr) == LOOM_OK);
        REQUIRE(n == 3);
        for (size_t i = 0; i < n; ++i) {
          CHECK(ids[i] == map.ids[i]);
          CHECK(loom_batch_pending(b, ids[i]) == 1);
          results[way][i].push_back(tokens[i]);
        }
      }
      loom_batch_pass r;
      loom_batch_pass_init(&r);
      REQUIRE(loom_batch_decode(b, &r, nullptr) == LOOM_OK);
      CHECK(r.n_ready == 3);
    }
    if (way == 1) {
      // A sequence without a sampler is skipped; a NULL callback or count is refused.
      map.skip = map.ids[1];
      loom_seq_id ids[3];
      int32_t tokens[3];
      size_t n = 0;
      REQUIRE(loom_batch_sample_ready(b, sampler_of, &map, 0, ids, tokens, 3, &n, nullptr) == LOOM_OK);
      CHECK(n == 2);
      CHECK(ids[1] == map.ids[2]);
      CHECK(loom_batch_pending(b, map.ids[0]) == 0);  // not fed
      // Nobody to sample: NULL outputs are fine and nothing is drawn.
      SamplerMap none;
      REQUIRE(loom_batch_sample_ready(b, sampler_of, &none, 1, nullptr, nullptr, 0, &n, nullptr) == LOOM_OK);
      CHECK(n == 0);
      CHECK(loom_batch_pending(b, map.ids[0]) == 0);
      CHECK(loom_batch_sample_ready(b, sampler_of, &map, 0, nullptr, nullptr, 3, &n, nullptr) == LOOM_ERR_INVALID_ARGUMENT);
      CHECK(loom_batch_sample_ready(b, nullptr, &map, 0, ids, tokens, 3, &n, nullptr) == LOOM_ERR_INVALID_ARGUMENT);
      CHECK(loom_batch_sample_ready(b, sampler_of, &map, 0, ids, tokens, 3, nullptr, nullptr) == LOOM_ERR_INVALID_ARGUMENT);
      CHECK(loom_batch_sample_ready(nullptr, sampler_of, &map, 0, ids, tokens, 3, &n, nullptr) == LOOM_ERR_INVALID_ARGUMENT);
    }
    for (auto* s : map.samplers) loom_sampler_free(s);
  }
  CHECK(results[0] == results[1]);
}
