// loom::Batch on every reference model family and weight type loom loads: sequences of
// different lengths decoded together (prompt chunks, greedy steps, a fork, a rollback)
// give logits bit-identical to each sequence run alone in a Session fed token by token.
// And stories260K's greedy run from BOS, batched with other prompts, is llama2.c's.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "loom/batch.hpp"
#include "loom/loader.hpp"
#include "loom/pack.hpp"
#include "loom/session.hpp"
#include "loom/tokenizer.hpp"
#include "runtime/kernels/linear.hpp"
#include "support/reference_data.hpp"
#include "support/test_support.hpp"

namespace fs = std::filesystem;
namespace t = loom::test;
using loom::Batch;
using loom::BatchOptions;
using loom::SeqId;

namespace {

using Tokens = std::vector<int32_t>;
using Row = std::vector<float>;

using loom::test::same_bits;
using loom::test::greedy_token;

// Logits after each token, fed one at a time to a fresh single-threaded session.
std::vector<Row> alone(const std::shared_ptr<const loom::Model>& model, const Tokens& tokens, int64_t context) {
  loom::SessionOptions so;
  so.n_threads = 1;
  so.context_length = context;
  loom::Session s(model, so);
  std::vector<Row> out;
  for (int32_t tok : tokens) {
    s.step(tok);
    out.emplace_back(s.logits().begin(), s.logits().end());
  }
  return out;
}

Tokens random_tokens(std::mt19937& rng, int64_t n, int64_t vocab) {
  Tokens v(static_cast<size_t>(n));
  for (auto& x : v) x = static_cast<int32_t>(rng() % static_cast<uint32_t>(vocab));
  return v;
}

// What a sequence was fed, and the logits the batch gave after each ready point (the
// index of the token they follow).
struct Track {
  Tokens tokens;
  std::vector<std::pair<size_t, Row>> seen;
};

void record_ready(const Batch& batch, const loom::BatchPass& pass, std::map<SeqId, Track>& tracks) {
  for (SeqId id : pass.ready) {
    auto& tr = tracks.at(id);
    const auto l = batch.logits(id);
    tr.seen.emplace_back(tr.tokens.size() - 1, Row(l.begin(), l.end()));
  }
}

void drain(Batch& batch, std::map<SeqId, Track>& tracks) {
  for (;;) {
    bool pending = false;
    for (const auto& [id, tr] : tracks) pending = pending || batch.pending(id) > 0;
    if (!pending) return;
    const auto pass = batch.decode();
    REQUIRE(pass.tokens > 0);
    record_ready(batch, pass, tracks);
  }
}

void feed(Batch& batch, std::map<SeqId, Track>& tracks, SeqId id, const Tokens& more) {
  batch.feed(id, more);
  auto& tk = tracks.at(id).tokens;
  tk.insert(tk.end(), more.begin(), more.end());
}

// 8 prompts of 1..22 tokens through a 13-token budget, 4 greedy steps for all, then a
// fork of one sequence and a rollback of another (into a block the fork shares), each
// continued differently; every ready point's logits must be the lone session's bits.
void check_model(const std::shared_ptr<const loom::Model>& model, const std::string& label) {
  const int64_t vocab = model->config().vocab_size;
  const int64_t context = std::min<int64_t>(64, model->config().max_positions);
  REQUIRE(context >= 32);
  for (int threads : {1, 2}) {
    INFO(label << ", " << threads << " thread(s)");
    std::mt19937 rng(17);
    BatchOptions o;
    o.n_threads = threads;
    o.block_tokens = 4;
    o.context_length = context;
    o.token_budget = 13;
    o.max_sequences = 10;
    Batch batch(model, o);
    std::map<SeqId, Track> tracks;
    for (int i = 0; i < 8; ++i) {
      const SeqId id = batch.add();
      tracks[id] = {};
      feed(batch, tracks, id, random_tokens(rng, 1 + 3 * i, vocab));
    }
    drain(batch, tracks);
    for (int step = 0; step < 4; ++step) {
      for (auto& [id, tr] : tracks) feed(batch, tracks, id, {greedy_token(batch.logits(id))});
      drain(batch, tracks);
    }
    // Fork sequence 3 (14 tokens: three full blocks shared), roll the parent back into a
    // block the fork shares, and send both (and a rolled-back sequence 6) on differently.
    const SeqId parent = 3;
    const SeqId child = batch.fork(parent);
    tracks[child] = {tracks.at(parent).tokens, {}};
    CHECK(same_bits(batch.logits(child), batch.logits(parent)));
    CHECK(batch.stats().blocks_shared > 0);
    std::vector<Track> before_rollback;
    for (const auto& [id, position] : {std::pair<SeqId, size_t>{parent, 6}, std::pair<SeqId, size_t>{6, 11}}) {
      batch.rollback(id, static_cast<int64_t>(position));
      // What it saw so far is checked against the tokens it had then.
      auto& tr = tracks.at(id);
      before_rollback.push_back(tr);
      tr.tokens.resize(position);
      tr.seen.clear();
    }
    feed(batch, tracks, parent, random_tokens(rng, 5, vocab));
    feed(batch, tracks, child, random_tokens(rng, 3, vocab));
    feed(batch, tracks, 6, random_tokens(rng, 2, vocab));
    feed(batch, tracks, 0, {greedy_token(batch.logits(0))});
    drain(batch, tracks);
    for (int step = 0; step < 2; ++step) {
      for (auto& [id, tr] : tracks) feed(batch, tracks, id, {greedy_token(batch.logits(id))});
      drain(batch, tracks);
    }

    std::vector<Track> all = before_rollback;
    for (const auto& [id, tr] : tracks) all.push_back(tr);
    for (size_t k = 0; k < all.size(); ++k) {
      const Track& tr = all[k];
      const auto ref = alone(model, tr.tokens, context);
      for (const auto& [at, row] : tr.seen) {
        INFO("track " << k << " (the first two: before the rollbacks) after token " << at << " of " << tr.tokens.size());
        REQUIRE(at < ref.size());
        CHECK(same_bits(row, ref[at]));
      }
    }
  }
}

std::shared_ptr<const loom::Model> load(const fs::path& path) {
  return loom::load_model(path, t::quiet_load_options());
}

}  // namespace

TEST_CASE("batch families: every reference family decodes batched bit-identically to each sequence alone") {
  LOOM_REQUIRE_REFERENCE(ref);
  const fs::path m = ref / "models";
  const std::vector<fs::path> sources{
      m / "stories260K" / "hf",
      m / "stories260K" / "gguf" / "stories260K-f32.gguf",
      m / "tiny-llama" / "tiny-llama-f32.gguf",
      m / "qwen2-tiny" / "hf",
      m / "gpt2-tiny" / "hf",
      m / "mistral-tiny" / "hf",  // sliding window 8: the prompts and steps run past it
      m / "phi3-tiny" / "hf",
      // The GELU families: parallel residual, shared or two norms, post norms, soft-caps,
      // a window on every other layer (gemma2-tiny's is 8: the steps run past it).
      m / "falcon-tiny" / "hf",
      m / "falcon-tiny-newdec" / "falcon-tiny-newdec-f32.gguf",
      m / "gptneox-tiny" / "hf",
      m / "gemma-tiny" / "hf",
      m / "gemma2-tiny" / "gemma2-tiny-f32.gguf",
  };
  for (const auto& src : sources) check_model(load(src), fs::relative(src, m).string());
}

TEST_CASE("batch families: small-quant in every GGUF type decodes batched bit-identically") {
  LOOM_REQUIRE_REFERENCE(ref);
  const fs::path dir = ref / "models" / "small-quant";
  for (const std::string type : {"f32", "f16", "bf16", "q8_0", "q4_0", "q4_k", "q6_k"}) {
    check_model(load(dir / ("small-quant-" + type + ".gguf")), "small-quant-" + type);
  }
}

TEST_CASE("batch families: small-quant f32 f16 bf16 q8_0 q4_0 q4_k q6_k with packed projections decode batched bit-identically") {
  LOOM_REQUIRE_REFERENCE(ref);
  loom::LoadOptions o = t::quiet_load_options();
  o.repack = loom::RepackMode::automatic;
  for (const std::string type : {"f32", "f16", "bf16", "q8_0", "q4_0", "q4_k", "q6_k"}) {
    check_model(loom::load_model(ref / "models" / "small-quant" / ("small-quant-" + type + ".gguf"), o),
                "small-quant-" + type + " repacked");
  }
}

TEST_CASE("batch families: packs quantized by loom decode batched bit-identically, as rows and with packed projections") {
  LOOM_REQUIRE_REFERENCE(ref);
  t::TempDir tmp;
  loom::LoadOptions repacked = t::quiet_load_options();
  repacked.repack = loom::RepackMode::automatic;
  for (const auto& [name, group] : {std::pair{std::string("gq4"), 32}, std::pair{std::string("gq4"), 128},
                                    std::pair{std::string("gq8"), 64}, std::pair{std::string("q4_k"), 0},
                                    std::pair{std::string("q8_0"), 0}, std::pair{std::string("q4_1"), 0},
                                    std::pair{std::string("q5_0"), 0}, std::pair{std::string("q5_1"), 0},
                                    std::pair{std::string("q2_k"), 0}, std::pair{std::string("q3_k"), 0}}) {
    loom::PackOptions po;
    po.load.logger = loom::Logger::silent();
    po.quantize = name;
    po.group_size = group;
    const std::string label = "small-quant " + name + "_" + std::to_string(group) + " pack";
    const fs::path pack = tmp / (name + "_" + std::to_string(group));
    loom::write_pack(ref / "models" / "small-quant" / "small-quant-f32.gguf", pack, po);
    check_model(load(pack), label);
    const auto model = loom::load_model(pack, repacked);
    // 4 layers x 7 projections and the untied output.
    // Repacked where this CPU's kernels read the type packed (every one of these types
    // on AVX-512 VNNI and on AVX2; none at the scalar level).
    const auto dtype = loom::dtype_from_name(group == 0 ? name : name + "_" + std::to_string(group));
    REQUIRE(dtype.has_value());
    const bool packed = loom::kernels::preferred_packing(*dtype) != loom::Packing::none;
    CHECK(model->load_report()->repacked_tensors == (packed ? 29 : 0));
    check_model(model, label + ", repacked");
  }
}

TEST_CASE("batch families: stories260K greedy runs in a batch equal the lone runs and llama2.c's 200 tokens") {
  LOOM_REQUIRE_REFERENCE(ref);
  const fs::path dir = ref / "models" / "stories260K";
  const auto expected = t::read_ids(dir / "expected" / "greedy200.ids.txt");
  REQUIRE(expected.size() == 200);
  auto model = load(dir / "hf");
  REQUIRE(model->tokenizer());
  const auto& tok = *model->tokenizer();
  std::vector<Tokens> prompts{{1}};
  for (const std::string text : {"Once upon a time", "The cat sat on the", "Lily and Ben went to the zoo",
                                 "One day, a little bird"}) {
    prompts.push_back(tok.encode(text, true, false));
  }
  constexpr size_t steps = 200;
  const int64_t context = 256;
  BatchOptions o;
  o.n_threads = 2;
  o.block_tokens = 16;
  o.context_length = context;
  o.token_budget = 7;  // the prompts come in chunks while the BOS-only run decodes
  Batch batch(model, o);
  std::vector<SeqId> ids;
  std::vector<Tokens> generated(prompts.size());
  for (const auto& p : prompts) {
    ids.push_back(batch.add());
    batch.feed(ids.back(), p);
  }
  // Each sequence takes its next greedy token as soon as its logits are ready, so the
  // passes mix decode steps with other sequences' prompt chunks.
  while (true) {
    bool going = false;
    for (size_t i = 0; i < ids.size(); ++i) going = going || generated[i].size() < steps || batch.pending(ids[i]) > 0;
    if (!going) break;
    const auto pass = batch.decode();
    REQUIRE(pass.tokens > 0);
    for (SeqId id : pass.ready) {
      const size_t i = static_cast<size_t>(std::find(ids.begin(), ids.end(), id) - ids.begin());
      if (generated[i].size() >= steps) continue;
      const int32_t next = greedy_token(batch.logits(id));
      generated[i].push_back(next);
      if (generated[i].size() < steps) batch.feed(id, std::span<const int32_t>(&next, 1));
    }
  }
  CHECK(generated[0] == expected);
  // The others equal their lone greedy runs.
  for (size_t i = 1; i < prompts.size(); ++i) {
    INFO("prompt " << i);
    loom::SessionOptions so;
    so.n_threads = 1;
    so.context_length = context;
    loom::Session s(model, so);
    s.prefill(prompts[i]);
    Tokens lone;
    for (size_t k = 0; k < steps; ++k) {
      lone.push_back(greedy_token(s.logits()));
      if (k + 1 < steps) s.step(lone.back());
    }
    CHECK(generated[i] == lone);
  }
}
