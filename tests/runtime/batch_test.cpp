// loom::Batch: many sequences in one pass over a paged KV pool. Logits are compared bit
// for bit with each sequence run alone (a Session), since the pass is batch invariant.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstring>
#include <map>
#include <random>
#include <vector>

#include "loom/batch.hpp"
#include "loom/error.hpp"
#include "loom/session.hpp"
#include "support/test_support.hpp"
#include "support/tiny_model.hpp"

namespace {

using loom::Batch;
using loom::BatchOptions;
using loom::SeqId;

std::vector<int32_t> random_tokens(std::mt19937& rng, int64_t n, int64_t vocab) {
  std::vector<int32_t> t(static_cast<size_t>(n));
  for (auto& x : t) x = static_cast<int32_t>(rng() % static_cast<uint32_t>(vocab));
  return t;
}

using loom::test::same_bits;
// Logits after each token of `tokens`, fed one at a time to a fresh session.
std::vector<std::vector<float>> alone(const std::shared_ptr<const loom::Model>& model,
                                      std::span<const int32_t> tokens, int threads) {
  loom::SessionOptions so;
  so.n_threads = threads;
  so.bf16_activations = false;
  loom::Session s(model, so);
  std::vector<std::vector<float>> out;
  for (int32_t t : tokens) {
    s.step(t);
    out.emplace_back(s.logits().begin(), s.logits().end());
  }
  return out;
}

std::shared_ptr<const loom::Model> model_of(loom::DType dtype, uint32_t seed = 11) {
  const auto cfg = loom::test::tiny_llama_config();
  return loom::test::make_model(cfg, loom::test::random_weights(cfg, seed, dtype));
}

}  // namespace

TEST_CASE("batch: 8 sequences of different lengths decoded together equal each run alone, bit for bit") {
  for (auto dtype : {loom::DType::f32, loom::DType::f16, loom::DType::bf16}) {
    auto model = model_of(dtype);
    const int64_t vocab = model->config().vocab_size;
    for (int threads : {1, 2}) {
      std::mt19937 rng(5);
      BatchOptions o;
      o.n_threads = threads;
      o.block_tokens = 4;
      o.context_length = 64;
      o.token_budget = 13;  // prompts are split into chunks across passes
      Batch batch(model, o);
      std::map<SeqId, std::vector<int32_t>> prompt, generated;
      for (int i = 0; i < 8; ++i) {
        const SeqId id = batch.add();
        prompt[id] = random_tokens(rng, 1 + 3 * i, vocab);
        batch.feed(id, prompt[id]);
      }
      // Prefill in chunks, then 6 greedy steps for everybody.
      int steps = 0;
      while (steps < 6) {
        const auto pass = batch.decode();
        REQUIRE(pass.tokens > 0);
        bool all_ready = true;
        for (const auto& [id, p] : prompt) all_ready = all_ready && batch.pending(id) == 0;
        if (!all_ready) continue;
        for (const auto& [id, p] : prompt) {
          const auto l = batch.logits(id);
          const int32_t next = static_cast<int32_t>(std::max_element(l.begin(), l.end()) - l.begin());
          generated[id].push_back(next);
          const int32_t one[1] = {next};
          batch.feed(id, one);
        }
        ++steps;
      }
      batch.decode();
      for (const auto& [id, p] : prompt) {
        std::vector<int32_t> all = p;
        all.insert(all.end(), generated[id].begin(), generated[id].end());
        const auto ref = alone(model, all, 1);
        INFO("dtype " << loom::dtype_name(dtype) << " threads " << threads << " sequence " << id);
        CHECK(same_bits(batch.logits(id), ref.back()));
        // The greedy continuation is the single-sequence one.
        for (size_t k = 0; k + 1 < generated[id].size(); ++k) {
          const auto& row = ref[p.size() - 1 + k];
          CHECK(std::max_element(row.begin(), row.end()) - row.begin() == generated[id][k]);
        }
      }
    }
  }
}

TEST_CASE("batch: all_logits rows across prompt chunks equal token-by-token logits") {
  auto model = model_of(loom::DType::f32);
  std::mt19937 rng(9);
  const auto tokens = random_tokens(rng, 23, model->config().vocab_size);
  BatchOptions o;
  o.token_budget = 5;
  o.context_length = 32;
  Batch batch(model, o);
  const SeqId a = batch.add();
  const SeqId b = batch.add();
  batch.feed(a, tokens, /*all_logits=*/true);
  const int32_t other[3] = {1, 2, 3};
  batch.feed(b, other);
  while (batch.pending(a) > 0 || batch.pending(b) > 0) batch.decode();
  REQUIRE(batch.logit_rows(a) == 23);
  const auto ref = alone(model, tokens, 1);
  for (int64_t i = 0; i < 23; ++i) {
    INFO("row " << i);
    CHECK(same_bits(batch.logits_at(a, i), ref[static_cast<size_t>(i)]));
  }
}

TEST_CASE("batch: a fork shares its parent's blocks and continues like a fresh sequence") {
  auto model = model_of(loom::DType::f32);
  std::mt19937 rng(3);
  const auto doc = random_tokens(rng, 18, model->config().vocab_size);
  BatchOptions o;
  o.block_tokens = 4;
  o.context_length = 40;
  o.pool_tokens = 64;  // 16 blocks
  Batch batch(model, o);
  const SeqId root = batch.add();
  batch.feed(root, doc);
  batch.decode();
  const auto before = batch.stats();
  CHECK(before.blocks_used == 5);  // 18 positions in blocks of 4
  CHECK(before.blocks_shared == 0);

  std::vector<SeqId> kids;
  for (int i = 0; i < 3; ++i) kids.push_back(batch.fork(root));
  auto st = batch.stats();
  CHECK(st.blocks_used == 5);  // nothing copied yet
  CHECK(st.blocks_shared == 5);
  CHECK(same_bits(batch.logits(kids[0]), batch.logits(root)));

  // Each question appends to its own copy of the partial last block.
  std::map<SeqId, std::vector<int32_t>> question;
  for (size_t i = 0; i < kids.size(); ++i) {
    question[kids[i]] = random_tokens(rng, 3 + static_cast<int64_t>(i), model->config().vocab_size);
    batch.feed(kids[i], question[kids[i]]);
  }
  batch.decode();
  st = batch.stats();
  CHECK(st.blocks_shared == 4);  // the four full blocks of the document
  for (SeqId k : kids) {
    std::vector<int32_t> all = doc;
    all.insert(all.end(), question[k].begin(), question[k].end());
    INFO("fork " << k);
    CHECK(same_bits(batch.logits(k), alone(model, all, 1).back()));
  }
  // The parent is untouched by its children's writes.
  const int32_t next[1] = {7};
  batch.feed(root, next);
  batch.decode();
  std::vector<int32_t> root_all = doc;
  root_all.push_back(7);
  CHECK(same_bits(batch.logits(root), alone(model, root_all, 1).back()));

  // Removing every holder frees the blocks.
  for (SeqId k : kids) batch.remove(k);
  batch.remove(root);
  st = batch.stats();
  CHECK(st.blocks_used == 0);
  CHECK(st.blocks_free == st.blocks_total);
}

TEST_CASE("batch: rollback then a different continuation equals a fresh sequence") {
  auto model = model_of(loom::DType::f16);
  std::mt19937 rng(4);
  const auto tokens = random_tokens(rng, 12, model->config().vocab_size);
  BatchOptions o;
  o.block_tokens = 4;
  o.context_length = 32;
  Batch batch(model, o);
  const SeqId s = batch.add();
  batch.feed(s, tokens);
  batch.decode();
  const SeqId f = batch.fork(s);
  batch.rollback(s, 6);  // inside a block the fork still shares
  CHECK(batch.position(s) == 6);
  const int32_t alt[2] = {5, 9};
  batch.feed(s, alt);
  batch.decode();
  std::vector<int32_t> want(tokens.begin(), tokens.begin() + 6);
  want.push_back(5);
  want.push_back(9);
  CHECK(same_bits(batch.logits(s), alone(model, want, 2).back()));
  // The fork still sees the original tokens.
  const int32_t more[1] = {1};
  batch.feed(f, more);
  batch.decode();
  std::vector<int32_t> fork_all = tokens;
  fork_all.push_back(1);
  CHECK(same_bits(batch.logits(f), alone(model, fork_all, 2).back()));
}

TEST_CASE("batch: a full pool fails the feed that needs blocks, naming the sequence, and nothing is lost") {
  auto model = model_of(loom::DType::f32);
  BatchOptions o;
  o.block_tokens = 4;
  o.context_length = 32;
  o.pool_tokens = 16;  // 4 blocks
  Batch batch(model, o);
  const SeqId a = batch.add();
  const SeqId b = batch.add();
  const std::vector<int32_t> ta{1, 2, 3, 4, 5, 6, 7, 8, 9, 10};  // 3 blocks
  batch.feed(a, ta);
  batch.decode();
  const std::vector<float> a_logits(batch.logits(a).begin(), batch.logits(a).end());
  const std::vector<int32_t> tb{11, 12, 13, 14, 15, 16, 17, 18};  // 2 blocks, 1 free
  try {
    batch.feed(b, tb);
    FAIL("the pool had room");
  } catch (const loom::Error& e) {
    CHECK(e.code() == loom::ErrorCode::kv_pool_full);
    const std::string msg = e.what();
    CHECK(msg.find("sequence 1") != std::string::npos);
    CHECK(msg.find("needs 2 more blocks") != std::string::npos);
    CHECK(msg.find("1 of 4 are free") != std::string::npos);
  }
  CHECK(batch.pending(b) == 0);
  CHECK(same_bits(batch.logits(a), a_logits));
  CHECK(batch.stats().blocks_free == 1);
  // The host makes room and retries.
  batch.rollback(a, 4);
  batch.feed(b, tb);
  batch.decode();
  CHECK(same_bits(batch.logits(b), alone(model, tb, 1).back()));
  // A pool too small for one block is refused at creation.
  BatchOptions tiny = o;
  tiny.pool_tokens = 0;
  tiny.pool_bytes = 100;
  CHECK_THROWS_AS(Batch(model, tiny), loom::Error);
}

TEST_CASE("batch: bad ids and arguments are clear errors and change nothing") {
  auto model = model_of(loom::DType::f32);
  BatchOptions o;
  o.max_sequences = 2;
  o.context_length = 8;
  Batch batch(model, o);
  const SeqId a = batch.add();
  const int32_t t[2] = {1, 2};
  CHECK_THROWS_WITH(batch.feed(99, t), Catch::Contains("unknown or removed sequence 99"));
  CHECK_THROWS_WITH(batch.feed(a, std::span<const int32_t>()), Catch::Contains("no tokens"));
  const int32_t bad[1] = {100000};
  CHECK_THROWS_WITH(batch.feed(a, bad), Catch::Contains("outside the vocabulary"));
  const std::vector<int32_t> long_prompt(9, 1);
  try {
    batch.feed(a, long_prompt);
    FAIL("fed past the context");
  } catch (const loom::Error& e) {
    CHECK(e.code() == loom::ErrorCode::context_full);
  }
  CHECK(batch.pending(a) == 0);
  batch.feed(a, t);
  CHECK_THROWS_WITH(batch.fork(a), Catch::Contains("pending tokens"));
  CHECK_THROWS_WITH(batch.trim(a, 0, 1), Catch::Contains("pending tokens"));
  CHECK_THROWS_WITH(batch.logits(a), Catch::Contains("pending tokens"));
  CHECK_THROWS(batch.decode([] { return true; }));
  CHECK(batch.pending(a) == 2);
  batch.decode();
  CHECK(batch.position(a) == 2);
  batch.add();
  CHECK_THROWS_WITH(batch.add(), Catch::Contains("maximum of 2 sequences"));
  batch.remove(a);
  CHECK_THROWS(batch.remove(a));
  CHECK_THROWS(batch.position(a));
  CHECK(batch.decode().tokens == 0);  // nothing pending
}

TEST_CASE("batch: trimming the middle re-rotates keys: logits match a fresh sequence of the kept tokens") {
  // One layer: its cached keys and values depend only on their token and position, so a
  // trimmed cache is a fresh one up to the rotation's rounding. (In deeper models the kept
  // entries still carry what they attended to before the trim, as with any context shift.)
  auto cfg = loom::test::tiny_llama_config();
  cfg.n_layers = 1;
  auto model = loom::test::make_model(cfg, loom::test::random_weights(cfg, 21, loom::DType::f32));
  std::mt19937 rng(8);
  const auto tokens = random_tokens(rng, 20, model->config().vocab_size);
  BatchOptions o;
  o.block_tokens = 4;
  o.context_length = 32;
  Batch batch(model, o);
  const SeqId s = batch.add();
  batch.feed(s, tokens);
  batch.decode();
  const SeqId f = batch.fork(s);  // trimming must copy the blocks it shares
  batch.trim(s, 3, 9);
  CHECK(batch.position(s) == 14);
  const int32_t next[1] = {4};
  batch.feed(s, next);
  batch.decode();
  std::vector<int32_t> kept(tokens.begin(), tokens.begin() + 3);
  kept.insert(kept.end(), tokens.begin() + 9, tokens.end());
  kept.push_back(4);
  const auto ref = alone(model, kept, 1).back();
  const auto got = batch.logits(s);
  double worst = 0.0, scale = 0.0;
  for (size_t i = 0; i < ref.size(); ++i) {
    worst = std::max(worst, static_cast<double>(std::abs(got[i] - ref[i])));
    scale = std::max(scale, static_cast<double>(std::abs(ref[i])));
  }
  INFO("max |trimmed - fresh| " << worst << " of max |logit| " << scale);
  CHECK(worst <= 1e-4 * std::max(1.0, scale));
  // The fork kept its untrimmed tokens.
  batch.feed(f, next);
  batch.decode();
  std::vector<int32_t> fork_all = tokens;
  fork_all.push_back(4);
  CHECK(same_bits(batch.logits(f), alone(model, fork_all, 1).back()));
}

TEST_CASE("batch: context shift keeps the first tokens and lets a conversation run far past the context") {
  auto model = model_of(loom::DType::f32);
  BatchOptions o;
  o.block_tokens = 4;
  o.context_length = 16;
  Batch batch(model, o);
  const SeqId s = batch.add();
  const std::vector<int32_t> system{1, 2, 3};
  batch.feed(s, system);
  batch.decode();
  int64_t dropped = 0;
  for (int step = 0; step < 100; ++step) {
    dropped += loom::context_shift(batch, s, 1, 3);
    const auto l = batch.position(s) > 0 && batch.logit_rows(s) > 0 ? batch.logits(s) : std::span<const float>();
    const int32_t next = l.empty() ? 5 : static_cast<int32_t>(std::max_element(l.begin(), l.end()) - l.begin());
    const int32_t one[1] = {next};
    batch.feed(s, one);
    batch.decode();
    REQUIRE(batch.position(s) <= 16);
  }
  CHECK(dropped >= 103 - 16);
  CHECK(batch.stats().blocks_used <= 4);
}

TEST_CASE("batch: sample_ready draws every ready sequence with its own sampler and feeds the tokens back") {
  auto model = model_of(loom::DType::f32);
  const int64_t vocab = model->config().vocab_size;
  std::mt19937 rng(9);
  BatchOptions o;
  o.n_threads = 2;
  o.block_tokens = 4;
  o.context_length = 48;
  Batch batch(model, o);
  std::map<SeqId, std::vector<int32_t>> prompt;
  std::map<SeqId, loom::Sampler> samplers;
  for (int i = 0; i < 4; ++i) {
    const SeqId id = batch.add();
    prompt[id] = random_tokens(rng, 2 + 5 * i, vocab);
    batch.feed(id, prompt[id]);
    loom::SamplerParams sp;
    sp.temperature = i == 3 ? 0.8f : 0.0f;  // greedy, except one sequence that samples
    sp.seed = 100 + static_cast<uint64_t>(i);
    samplers.emplace(id, loom::Sampler(sp));
  }
  // Sequence 2 gets no sampler: it is skipped, and stays as it is.
  auto sampler_of = [&](SeqId id) -> loom::Sampler* { return id == 2 ? nullptr : &samplers.at(id); };
  std::map<SeqId, std::vector<int32_t>> generated;
  for (int step = 0; step < 5; ++step) {
    const auto pass = batch.decode();
    REQUIRE_FALSE(pass.ready.empty());
    const auto drawn = batch.sample_ready(pass.ready, sampler_of, /*feed_back=*/true);
    for (const auto& t : drawn) {
      REQUIRE(t.seq != 2);
      generated[t.seq].push_back(t.token);
      CHECK(batch.pending(t.seq) == 1);
    }
    CHECK(drawn.size() == 3);
  }
  CHECK(batch.position(2) == static_cast<int64_t>(prompt[2].size()));
  CHECK(batch.pending(2) == 0);
  // Each sequence equals the same sampler run over it alone.
  for (SeqId id : {SeqId{0}, SeqId{1}, SeqId{3}}) {
    loom::SessionOptions so;
    so.n_threads = 1;
    loom::Session session(model, so);
    loom::SamplerParams sp;
    sp.temperature = id == 3 ? 0.8f : 0.0f;
    sp.seed = 100 + static_cast<uint64_t>(id);
    loom::Sampler sampler(sp);
    session.prefill(prompt[id]);
    std::vector<int32_t> expect;
    for (int step = 0; step < 5; ++step) {
      expect.push_back(sampler.sample(session.logits()));
      session.step(expect.back());
    }
    CHECK(generated[id] == expect);
  }
}

TEST_CASE("batch: sample_ready refuses before drawing: unknown, repeated or pending ids, and no room to feed") {
  auto model = model_of(loom::DType::f32);
  BatchOptions o;
  o.n_threads = 1;
  o.block_tokens = 4;
  o.context_length = 8;
  o.pool_tokens = 12;  // 3 blocks
  Batch batch(model, o);
  const SeqId a = batch.add();
  const SeqId b = batch.add();
  batch.feed(a, std::vector<int32_t>{1, 2, 3, 4});
  batch.feed(b, std::vector<int32_t>{5, 6, 7, 8});
  batch.decode();
  loom::SamplerParams sp;
  sp.temperature = 0.0f;
  loom::Sampler sa(sp), sb(sp);
  auto of = [&](SeqId id) -> loom::Sampler* { return id == a ? &sa : &sb; };
  const std::vector<SeqId> both{a, b};
  auto logits_a = std::vector<float>(batch.logits(a).begin(), batch.logits(a).end());

  // 2 blocks used, 1 free: feeding both sampled tokens back needs 2 new blocks.
  try {
    batch.sample_ready(both, of, true);
    FAIL("expected kv_pool_full");
  } catch (const loom::Error& e) {
    CHECK(e.code() == loom::ErrorCode::kv_pool_full);
    CHECK_THAT(e.what(), Catch::Contains("needs 2 blocks"));
  }
  CHECK(batch.pending(a) == 0);
  CHECK(batch.pending(b) == 0);
  CHECK(same_bits(batch.logits(a), logits_a));
  CHECK(sa.last_candidates().items.empty());  // nothing was drawn

  const std::vector<SeqId> twice{a, a};
  CHECK_THROWS_WITH(batch.sample_ready(twice, of), Catch::Contains("listed twice"));
  const std::vector<SeqId> unknown{a, 77};
  CHECK_THROWS_WITH(batch.sample_ready(unknown, of), Catch::Contains("sequence 77"));
  CHECK(sa.last_candidates().items.empty());

  // Without feeding back it only draws; one sequence then feeds, the other is full.
  const auto drawn = batch.sample_ready(both, of);
  REQUIRE(drawn.size() == 2);
  CHECK(batch.pending(a) == 0);
  batch.feed(b, std::vector<int32_t>{drawn[1].token, 1, 2, 3});  // b reaches the context length
  batch.decode();
  CHECK_THROWS_WITH(batch.sample_ready(std::vector<SeqId>{b}, of, true), Catch::Contains("context length"));
  CHECK(batch.pending(b) == 0);
}

TEST_CASE("batch: sample_ready feeds nothing when a host stage picks an id outside the vocabulary") {
  auto model = model_of(loom::DType::f32);
  BatchOptions o;
  o.n_threads = 1;
  o.context_length = 16;
  Batch batch(model, o);
  const SeqId a = batch.add();
  const SeqId b = batch.add();
  batch.feed(a, std::vector<int32_t>{1, 2, 3});
  batch.feed(b, std::vector<int32_t>{4, 5});
  const auto pass = batch.decode();
  REQUIRE(pass.ready.size() == 2);
  loom::SamplerParams sp;
  sp.temperature = 0.0f;
  loom::Sampler good(sp), bad(sp);
  // A stage that leaves one candidate with an id past the vocabulary.
  bad.add_stage(loom::make_stage("out of range", [](loom::CandidateList& c, loom::SamplerContext&) {
    c.items.resize(1);
    c.items[0].id = 1 << 20;
  }));
  auto of = [&](SeqId id) -> loom::Sampler* { return id == a ? &good : &bad; };
  CHECK_THROWS_WITH(batch.sample_ready(pass.ready, of, true), Catch::Contains("outside the vocabulary"));
  CHECK(batch.pending(a) == 0);  // a drew first, but nothing was fed
  CHECK(batch.pending(b) == 0);
  CHECK(batch.logit_rows(a) == 1);  // its logits are still readable
}
