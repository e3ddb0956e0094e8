// loom::Batch under stress: several batches over one shared model on several threads
// (the TSan CI step runs the "threads: " case), a cancelled pass, a KV pool that runs out
// in the middle of generation and is recovered by the host, and thousands of add/remove
// cycles. After every fault the surviving sequences' logits must still be the bits of
// each sequence run alone, and the pool's counters must show no leaked block.
#include <catch2/catch.hpp>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <map>
#include <random>
#include <string>
#include <thread>
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
using Tokens = std::vector<int32_t>;
using Row = std::vector<float>;

using loom::test::same_bits;
using loom::test::greedy_token;

const std::shared_ptr<const loom::Model>& shared_model() {
  static const auto model = [] {
    const auto cfg = loom::test::tiny_llama_config();
    return loom::test::make_model(cfg, loom::test::random_weights(cfg, 29));
  }();
  return model;
}

// Logits after the last of `tokens`, fed one at a time to a fresh single-threaded session.
Row alone(const Tokens& tokens) {
  loom::SessionOptions so;
  so.n_threads = 1;
  so.context_length = 64;
  loom::Session s(shared_model(), so);
  for (int32_t t : tokens) s.step(t);
  return {s.logits().begin(), s.logits().end()};
}

// A prompt and its greedy continuation, computed alone: the reference for batched runs.
struct Greedy {
  Tokens prompt;
  Tokens continuation;
  Row last;  // logits after the last continuation token
};

Greedy greedy_alone(const Tokens& prompt, int steps) {
  loom::SessionOptions so;
  so.n_threads = 1;
  so.context_length = 64;
  loom::Session s(shared_model(), so);
  Greedy g{prompt, {}, {}};
  s.prefill(prompt);
  for (int k = 0; k < steps; ++k) {
    g.continuation.push_back(greedy_token(s.logits()));
    s.step(g.continuation.back());
  }
  g.last.assign(s.logits().begin(), s.logits().end());
  return g;
}

Tokens prompt_of(uint32_t seed, int64_t n) {
  std::mt19937 rng(seed);
  Tokens t(static_cast<size_t>(n));
  for (auto& x : t) x = static_cast<int32_t>(rng() % 128);
  return t;
}

// Runs the prompts as one batch (chunked by a small budget) for `steps` greedy steps each;
// returns each sequence's continuation and its last logits.
std::vector<Greedy> greedy_batched(const std::vector<Tokens>& prompts, int steps, int threads) {
  BatchOptions o;
  o.n_threads = threads;
  o.block_tokens = 4;
  o.context_length = 64;
  o.token_budget = 9;
  Batch batch(shared_model(), o);
  std::vector<Greedy> out;
  std::vector<SeqId> ids;
  for (const auto& p : prompts) {
    ids.push_back(batch.add());
    batch.feed(ids.back(), p);
    out.push_back({p, {}, {}});
  }
  for (;;) {
    const auto pass = batch.decode();
    if (pass.tokens == 0) break;
    for (SeqId id : pass.ready) {
      auto& g = out[static_cast<size_t>(id)];
      const auto l = batch.logits(id);
      if (static_cast<int>(g.continuation.size()) == steps) {
        g.last.assign(l.begin(), l.end());
        continue;
      }
      g.continuation.push_back(greedy_token(l));
      batch.feed(id, std::span<const int32_t>(&g.continuation.back(), 1));
    }
  }
  return out;
}

}  // namespace

TEST_CASE("threads: several batches on one model decode concurrently, each equal to the lone runs") {
  constexpr int kThreads = 3;
  constexpr int kSteps = 5;
  std::vector<std::vector<Tokens>> prompts(kThreads);
  std::vector<std::vector<Greedy>> want(kThreads);
  for (int t = 0; t < kThreads; ++t) {
    for (int i = 0; i < 4; ++i) {
      prompts[t].push_back(prompt_of(static_cast<uint32_t>(100 * t + i), 2 + 5 * i + t));
      want[t].push_back(greedy_alone(prompts[t].back(), kSteps));
    }
  }
  std::vector<std::vector<Greedy>> got(kThreads);
  std::vector<std::string> errors(kThreads);
  std::atomic<int> ready{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      ++ready;
      while (ready.load() < kThreads) std::this_thread::yield();  // start together
      try {
        // Two rounds: a batch's second life on the same thread pool-less model.
        for (int round = 0; round < 2; ++round) got[t] = greedy_batched(prompts[t], kSteps, 1 + (t + round) % 2);
      } catch (const std::exception& e) {
        errors[t] = e.what();
      }
    });
  }
  for (auto& th : threads) th.join();
  for (int t = 0; t < kThreads; ++t) {
    INFO("thread " << t);
    REQUIRE(errors[t].empty());
    REQUIRE(got[t].size() == want[t].size());
    for (size_t i = 0; i < want[t].size(); ++i) {
      INFO("sequence " << i);
      CHECK(got[t][i].continuation == want[t][i].continuation);
      CHECK(same_bits(got[t][i].last, want[t][i].last));
    }
  }
}

TEST_CASE("batch faults: a cancel callback stops a pass with cancelled and nothing changes") {
  const std::vector<Tokens> prompts{prompt_of(1, 11), prompt_of(2, 3), prompt_of(3, 17)};
  BatchOptions o;
  o.n_threads = 1;
  o.block_tokens = 4;
  o.context_length = 64;
  o.token_budget = 6;
  Batch batch(shared_model(), o);
  for (const auto& p : prompts) batch.feed(batch.add(), p);
  int asked = 0;
  int cancelled = 0;
  // Every other pass is cancelled: the pending counts, positions and pool stay as they were.
  while (batch.pending(0) + batch.pending(1) + batch.pending(2) > 0) {
    const auto before = batch.stats();
    const int64_t pend[3] = {batch.pending(0), batch.pending(1), batch.pending(2)};
    try {
      batch.decode([&] { return ++asked % 2 == 1; });
    } catch (const loom::Error& e) {
      CHECK(e.code() == loom::ErrorCode::cancelled);
      ++cancelled;
      const auto after = batch.stats();
      CHECK(after.passes == before.passes);
      CHECK(after.blocks_used == before.blocks_used);
      CHECK(after.tokens_processed == before.tokens_processed);
      for (SeqId id = 0; id < 3; ++id) CHECK(batch.pending(id) == pend[id]);
    }
  }
  CHECK(cancelled >= 3);  // 31 tokens in passes of 6
  for (SeqId id = 0; id < 3; ++id) {
    INFO("sequence " << id);
    CHECK(same_bits(batch.logits(id), alone(prompts[static_cast<size_t>(id)])));
  }
  // A callback that never cancels is asked once per pass that runs.
  const int32_t one[1] = {5};
  batch.feed(1, one);
  int calls = 0;
  batch.decode([&] { return ++calls > 1; });
  CHECK(calls == 1);
}

TEST_CASE("batch faults: a pool exhausted mid-generation is recovered by remove and rollback, nothing corrupted") {
  BatchOptions o;
  o.n_threads = 1;
  o.block_tokens = 4;
  o.context_length = 64;
  o.pool_tokens = 40;  // 10 blocks for 4 sequences that would need 16
  Batch batch(shared_model(), o);
  std::map<SeqId, Tokens> fed;
  for (int i = 0; i < 4; ++i) {
    const SeqId id = batch.add();
    fed[id] = prompt_of(static_cast<uint32_t>(40 + i), 3 + i);
    batch.feed(id, fed[id]);
  }
  batch.decode();
  int full = 0, removed = 0, rolled_back = 0;
  for (int step = 0; step < 40 && !fed.empty(); ++step) {
    for (auto it = fed.begin(); it != fed.end();) {
      const SeqId id = it->first;
      const int32_t next = greedy_token(batch.logits(id));
      const auto before = batch.stats();
      try {
        batch.feed(id, std::span<const int32_t>(&next, 1));
        it->second.push_back(next);
        ++it;
      } catch (const loom::Error& e) {
        REQUIRE(e.code() == loom::ErrorCode::kv_pool_full);
        ++full;
        // Nothing moved: the failing feed reserved nothing, the sequence keeps its logits.
        CHECK(batch.stats().blocks_free == before.blocks_free);
        CHECK(batch.pending(id) == 0);
        CHECK(same_bits(batch.logits(id), alone(it->second)));
        if (full % 2 == 1) {
          // Free a whole sequence: this one.
          batch.remove(id);
          ++removed;
          it = fed.erase(it);
        } else {
          // Roll this one back to its first token and continue it with `next`: the
          // freed blocks serve the others, and this one needs none (block 0 has room).
          batch.rollback(id, 1);
          it->second.resize(1);
          ++rolled_back;
          batch.feed(id, std::span<const int32_t>(&next, 1));
          it->second.push_back(next);
          ++it;
        }
      }
    }
    batch.decode();
    // After every pass, every survivor is still exactly its lone run.
    for (const auto& [id, toks] : fed) {
      INFO("step " << step << " sequence " << id << " (" << toks.size() << " tokens)");
      REQUIRE(same_bits(batch.logits(id), alone(toks)));
    }
  }
  CHECK(full >= 2);
  CHECK(removed >= 1);
  CHECK(rolled_back >= 1);
  const auto st = batch.stats();
  CHECK(st.blocks_used + st.blocks_free == st.blocks_total);
}

TEST_CASE("batch faults: thousands of add, feed, fork, decode and remove cycles leave the pool empty") {
  BatchOptions o;
  o.n_threads = 1;
  o.block_tokens = 4;
  o.context_length = 32;
  o.max_sequences = 8;
  o.pool_tokens = 64;  // 16 blocks: feeds fail now and then
  Batch batch(shared_model(), o);
  std::mt19937 rng(77);
  std::vector<SeqId> live;
  int full = 0, forks = 0, passes = 0;
  for (int cycle = 0; cycle < 3000; ++cycle) {
    const uint32_t op = rng() % 8;
    if (live.size() < 8 && (op < 3 || live.empty())) {
      live.push_back(batch.add());
    } else if (op < 5) {
      const SeqId id = live[rng() % live.size()];
      const int64_t room = batch.context_length() - batch.position(id) - batch.pending(id);
      if (room > 0) {
        const auto toks = prompt_of(rng(), 1 + static_cast<int64_t>(rng() % static_cast<uint32_t>(std::min<int64_t>(room, 9))));
        try {
          batch.feed(id, toks);
        } catch (const loom::Error& e) {
          REQUIRE(e.code() == loom::ErrorCode::kv_pool_full);
          ++full;
        }
      }
    } else if (op == 5 && live.size() < 8) {
      const SeqId id = live[rng() % live.size()];
      if (batch.pending(id) == 0) {
        live.push_back(batch.fork(id));
        ++forks;
      }
    } else if (op == 6) {
      if (batch.decode().tokens > 0) ++passes;
    } else {
      const size_t k = rng() % live.size();
      batch.remove(live[k]);
      live.erase(live.begin() + static_cast<std::ptrdiff_t>(k));
    }
    const auto st = batch.stats();
    REQUIRE(st.blocks_used + st.blocks_free == st.blocks_total);
    REQUIRE(st.sequences == static_cast<int64_t>(live.size()));
  }
  CHECK(full > 0);
  CHECK(forks > 0);
  CHECK(passes > 0);
  for (SeqId id : live) batch.remove(id);
  const auto st = batch.stats();
  CHECK(st.sequences == 0);
  CHECK(st.blocks_used == 0);
  CHECK(st.blocks_shared == 0);
  CHECK(st.blocks_free == st.blocks_total);
  CHECK(st.bytes_used == 0);
}
