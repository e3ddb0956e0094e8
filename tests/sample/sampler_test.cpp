#include <catch2/catch.hpp>

#include <cmath>
#include <map>
#include <vector>

#include "loom/error.hpp"
#include "loom/sampler.hpp"

using loom::Sampler;
using loom::SamplerParams;

namespace {
SamplerParams greedy() {
  SamplerParams p;
  p.temperature = 0.0f;
  return p;
}
SamplerParams unfiltered(float temperature = 1.0f) {
  SamplerParams p;
  p.temperature = temperature;
  p.top_k = 0;
  p.top_p = 1.0f;
  p.min_p = 0.0f;
  return p;
}
}  // namespace

TEST_CASE("greedy is the exact argmax, ties to the lowest id") {
  Sampler s(greedy());
  CHECK(s.sample(std::vector<float>{0.1f, 2.0f, -1.0f, 1.99f}) == 1);
  CHECK(s.sample(std::vector<float>{3.0f, 1.0f, 3.0f, 3.0f}) == 0);
  CHECK(s.sample(std::vector<float>{-5.0f, 7.0f, 7.0f}) == 1);
  CHECK(s.sample(std::vector<float>{42.0f}) == 0);  // a single candidate
}

TEST_CASE("the same seed gives the same tokens, reset replays them") {
  std::vector<float> logits(50);
  for (size_t i = 0; i < logits.size(); ++i) logits[i] = std::sin(static_cast<float>(i)) * 2.0f;
  auto p = unfiltered();
  p.seed = 1234;
  Sampler a(p), b(p);
  std::vector<int32_t> ta, tb;
  for (int i = 0; i < 200; ++i) {
    ta.push_back(a.sample(logits));
    tb.push_back(b.sample(logits));
  }
  CHECK(ta == tb);
  a.reset();
  std::vector<int32_t> again;
  for (int i = 0; i < 200; ++i) again.push_back(a.sample(logits));
  CHECK(again == ta);
  p.seed = 99;
  Sampler c(p);
  std::vector<int32_t> tc;
  for (int i = 0; i < 200; ++i) tc.push_back(c.sample(logits));
  CHECK(tc != ta);
}

TEST_CASE("the RNG sequence is fixed (portable across platforms)") {
  loom::Rng rng(0);
  // xoshiro256** seeded by splitmix64(0): first outputs as the reference algorithm gives.
  const uint64_t first = rng.next_u64();
  const uint64_t second = rng.next_u64();
  loom::Rng again(0);
  CHECK(again.next_u64() == first);
  CHECK(again.next_u64() == second);
  CHECK(first != second);
  loom::Rng r2(7);
  for (int i = 0; i < 1000; ++i) {
    const double u = r2.next_double();
    CHECK(u >= 0.0);
    CHECK(u < 1.0);
  }
}

TEST_CASE("draws follow the softmax distribution") {
  const std::vector<float> logits{0.0f, 1.0f, 2.0f, 0.5f};
  Sampler s(unfiltered());
  std::map<int32_t, int> counts;
  const int n = 40000;
  for (int i = 0; i < n; ++i) ++counts[s.sample(logits)];
  double z = 0.0;
  for (float l : logits) z += std::exp(l);
  for (int id = 0; id < 4; ++id) {
    const double want = std::exp(logits[static_cast<size_t>(id)]) / z;
    CHECK(std::abs(counts[id] / static_cast<double>(n) - want) < 0.01);
  }
}

TEST_CASE("top-k = 1, top-p = 0 and a tiny temperature all give the argmax") {
  const std::vector<float> logits{0.3f, 0.1f, 0.35f, 0.2f};
  auto p = unfiltered();
  p.top_k = 1;
  Sampler k1(p);
  auto q = unfiltered();
  q.top_p = 0.0f;
  Sampler p0(q);
  Sampler cold(unfiltered(1e-6f));
  for (int i = 0; i < 100; ++i) {
    CHECK(k1.sample(logits) == 2);
    CHECK(p0.sample(logits) == 2);
    CHECK(cold.sample(logits) == 2);
  }
  // A tiny temperature with huge logits must not overflow into NaN.
  Sampler frozen(unfiltered(1e-30f));
  CHECK(frozen.sample(std::vector<float>{1e30f, -1e30f, 3e30f}) == 2);
}

TEST_CASE("top-p = 1 keeps every candidate, top-p keeps the smallest nucleus") {
  std::vector<float> logits(300);
  for (size_t i = 0; i < logits.size(); ++i) logits[i] = static_cast<float>(i % 17) * 0.1f;
  Sampler all(unfiltered());
  all.sample(logits);
  CHECK(all.last_candidates().items.size() == logits.size());

  // Probabilities 0.5, 0.25, 0.125, 0.125: p = 0.7 keeps two, p = 0.8 keeps three.
  const std::vector<float> halves{std::log(0.5f), std::log(0.25f), std::log(0.125f), std::log(0.125f)};
  auto p = unfiltered();
  p.top_p = 0.7f;
  Sampler s(p);
  s.sample(halves);
  CHECK(s.last_candidates().items.size() == 2);
  p.top_p = 0.8f;
  Sampler s2(p);
  s2.sample(halves);
  CHECK(s2.last_candidates().items.size() == 3);
}

TEST_CASE("top-k and min-p keep exactly the expected candidates") {
  const std::vector<float> logits{1.0f, 4.0f, 3.0f, 2.0f, 4.0f, 0.0f};
  auto p = unfiltered();
  p.top_k = 3;
  Sampler k(p);
  k.sample(logits);
  std::vector<int32_t> ids;
  for (const auto& c : k.last_candidates().items) ids.push_back(c.id);
  CHECK(ids == std::vector<int32_t>{1, 4, 2});  // ties in logit go to the lower id first

  auto m = unfiltered();
  m.min_p = 0.3f;  // keeps p >= 0.3 p_max  <=>  logit >= 4 + ln 0.3 = 2.796
  Sampler mp(m);
  mp.sample(logits);
  ids.clear();
  for (const auto& c : mp.last_candidates().items) ids.push_back(c.id);
  std::sort(ids.begin(), ids.end());
  CHECK(ids == std::vector<int32_t>{1, 2, 4});
}

TEST_CASE("all mass in one token always picks it") {
  std::vector<float> logits(1000, 0.0f);
  logits[777] = 200.0f;
  Sampler s(unfiltered(1.5f));
  for (int i = 0; i < 50; ++i) CHECK(s.sample(logits) == 777);
}

TEST_CASE("NaN and infinite logits are refused") {
  Sampler s(unfiltered());
  try {
    s.sample(std::vector<float>{0.0f, NAN, 1.0f});
    FAIL("expected an error");
  } catch (const loom::Error& e) {
    CHECK(e.code() == loom::ErrorCode::numeric);
    CHECK(std::string(e.what()).find("token 1") != std::string::npos);
  }
  CHECK_THROWS_AS(s.sample(std::vector<float>{INFINITY, 0.0f}), loom::Error);
  CHECK_THROWS_AS(s.sample(std::vector<float>{0.0f, -INFINITY}), loom::Error);
  CHECK_THROWS_AS(s.sample(std::vector<float>{}), loom::Error);
}

TEST_CASE("penalties follow llama.cpp's arithmetic over the last N tokens") {
  auto p = greedy();
  p.repeat_penalty = 2.0f;
  p.frequency_penalty = 0.5f;
  p.presence_penalty = 0.25f;
  p.penalty_last_n = 3;
  Sampler s(p);
  for (int32_t t : {0, 1, 1, 2}) s.accept(t);  // window of 3: {1, 1, 2}; token 0 is outside
  const std::vector<float> logits{1.0f, 4.0f, -2.0f, 3.0f};
  const int32_t token = s.sample(logits);
  std::map<int32_t, float> after;
  for (const auto& c : s.last_candidates().items) after[c.id] = c.logit;
  CHECK(after[0] == Approx(1.0f));                       // outside the window
  CHECK(after[1] == Approx(4.0f / 2 - 2 * 0.5f - 0.25f));  // 0.75
  CHECK(after[2] == Approx(-2.0f * 2 - 1 * 0.5f - 0.25f)); // -4.75
  CHECK(after[3] == Approx(3.0f));
  CHECK(token == 3);
}

TEST_CASE("logit bias shifts and bans, banning everything is an error") {
  auto p = greedy();
  p.logit_bias = {{2, 10.0f}, {0, -INFINITY}};
  Sampler s(p);
  CHECK(s.sample(std::vector<float>{5.0f, 1.0f, 0.0f}) == 2);
  CHECK(s.last_candidates().items.size() == 2);
  auto q = greedy();
  q.logit_bias = {{0, -INFINITY}, {1, -INFINITY}};
  Sampler banned(q);
  CHECK_THROWS_AS(banned.sample(std::vector<float>{1.0f, 2.0f}), loom::Error);

  // The first bias given for a token wins; ids outside the vocabulary change nothing.
  auto twice = greedy();
  twice.logit_bias = {{1, 10.0f}, {1, -10.0f}, {7, 100.0f}};
  Sampler first_wins(twice);
  CHECK(first_wins.sample(std::vector<float>{5.0f, 1.0f, 0.0f}) == 1);
  CHECK(first_wins.last_candidates().items.size() == 3);

  // A finite bias that takes a logit to -inf bans it like an explicit -inf.
  auto overflow = greedy();
  overflow.logit_bias = {{0, -3e38f}};
  Sampler overflowed(overflow);
  CHECK(overflowed.sample(std::vector<float>{-3e38f, -1.0f}) == 1);
  CHECK(overflowed.last_candidates().items.size() == 1);
}

TEST_CASE("custom stages see and rewrite the candidates, after the built-in filters") {
  auto p = unfiltered();
  p.top_k = 3;
  Sampler s(p);
  size_t seen = 0;
  s.add_stage(loom::make_stage("only-even", [&](loom::CandidateList& list, loom::SamplerContext& ctx) {
    seen = list.items.size();
    CHECK(ctx.history.size() <= 10);
    std::erase_if(list.items, [](const loom::Candidate& c) { return c.id % 2 != 0; });
    list.normalized = false;
  }));
  const std::vector<float> logits{0.0f, 5.0f, 4.0f, 3.0f, 2.0f, 1.0f};
  for (int i = 0; i < 10; ++i) {
    // top-k keeps {1, 2, 3}; the stage leaves only the even one.
    CHECK(s.sample(logits) == 2);
  }
  CHECK(seen == 3);  // top-k ran first
  const auto names = s.stage_names();
  CHECK(names.back() == "only-even");
  CHECK(names.front() == "logit_bias");

  Sampler empty(unfiltered());
  empty.add_stage(loom::make_stage("drop-all", [](loom::CandidateList& l, loom::SamplerContext&) { l.items.clear(); }));
  CHECK_THROWS_AS(empty.sample(logits), loom::Error);
  CHECK_THROWS_AS(Sampler(SamplerParams{.repeat_penalty = 0.0f}), loom::Error);
}
