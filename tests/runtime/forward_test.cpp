#include <catch2/catch.hpp>

#include <numeric>
#include <vector>

#include "loom/error.hpp"
#include "loom/session.hpp"
#include "support/tiny_model.hpp"

using loom::ModelConfig;
using loom::Session;
using loom::SessionOptions;
namespace t = loom::test;

namespace {

std::vector<int32_t> prompt_short() { return {1, 17, 42, 99, 5}; }
std::vector<int32_t> prompt_repeated() { return {7, 7, 7, 7, 7, 7, 7, 7, 3, 7, 7, 7}; }
std::vector<int32_t> prompt_long() {
  std::vector<int32_t> p(120);
  for (size_t i = 0; i < p.size(); ++i) p[i] = static_cast<int32_t>((i * 37 + 11) % 128);
  return p;
}

// Checks prefill (all positions), and prefill of a prefix followed by steps, against the
// reference forward; returns the largest difference seen.
double check_against_reference(const ModelConfig& config, const loom::ModelWeights& weights,
                               const std::vector<int32_t>& tokens, double tolerance,
                               SessionOptions options = {}, const loom::ModelWeights* reference_weights = nullptr) {
  const auto ref = t::reference_logits(config, reference_weights ? *reference_weights : weights, tokens);
  auto model = t::make_model(config, weights);
  double worst = 0.0;
  {
    SessionOptions o = options;
    o.all_logits = true;
    Session s(model, o);
    s.prefill(tokens);
    REQUIRE(s.logit_rows() == static_cast<int64_t>(tokens.size()));
    for (size_t i = 0; i < tokens.size(); ++i) {
      const double d = t::max_abs_diff(s.logits_at(static_cast<int64_t>(i)), ref[i]);
      worst = std::max(worst, d);
      INFO("prefill position " << i);
      CHECK(d < tolerance);
    }
  }
  {
    Session s(model, options);
    const size_t prefix = tokens.size() / 2;
    s.prefill(std::span(tokens).first(prefix == 0 ? 1 : prefix));
    for (size_t i = std::max<size_t>(prefix, 1); i < tokens.size(); ++i) {
      s.step(tokens[i]);
      const double d = t::max_abs_diff(s.logits(), ref[i]);
      worst = std::max(worst, d);
      INFO("step position " << i);
      CHECK(d < tolerance);
    }
    CHECK(s.position() == static_cast<int64_t>(tokens.size()));
  }
  return worst;
}

}  // namespace

TEST_CASE("forward matches the reference: GQA llama, f32, several prompts") {
  auto config = t::tiny_llama_config();
  auto weights = t::random_weights(config, 1);
  for (const auto& p : {prompt_short(), prompt_repeated(), prompt_long()}) {
    const double worst = check_against_reference(config, weights, p, 1e-4);
    CHECK(worst < 1e-4);
  }
}

TEST_CASE("forward matches the reference: MHA, tied output, head_dim != hidden/heads") {
  auto config = t::tiny_llama_config();
  config.n_kv_heads = config.n_heads;  // MHA
  config.tie_word_embeddings = true;
  config.head_dim = 24;  // 4 heads x 24 != 64
  config.rope_dims = 24;
  auto weights = t::random_weights(config, 2);
  REQUIRE(weights.output.shares_storage_with(weights.token_embd));
  check_against_reference(config, weights, prompt_short(), 1e-4);
  check_against_reference(config, weights, prompt_long(), 1e-4);
}

TEST_CASE("forward matches the reference: llama3 rope scaling and linear scaling") {
  auto config = t::tiny_llama_config();
  config.rope_theta = 500000.0;
  config.rope_scaling.kind = loom::RopeScalingKind::llama3;
  config.rope_scaling.factor = 8.0;
  config.rope_scaling.low_freq_factor = 1.0;
  config.rope_scaling.high_freq_factor = 4.0;
  config.rope_scaling.original_max_positions = 64;  // small so every band is exercised
  auto weights = t::random_weights(config, 3);
  check_against_reference(config, weights, prompt_long(), 1e-4);
  config.rope_scaling.kind = loom::RopeScalingKind::linear;
  config.rope_scaling.factor = 4.0;
  check_against_reference(config, weights, prompt_long(), 1e-4);
}

TEST_CASE("forward matches the reference: partial rotary, q/k/v biases, sliding window") {
  auto config = t::tiny_llama_config();
  config.rope_dims = 8;  // half of head_dim 16 rotated
  config.qkv_bias = true;
  config.sliding_window = 5;
  auto weights = t::random_weights(config, 4);
  check_against_reference(config, weights, prompt_long(), 1e-4);
  check_against_reference(config, weights, prompt_repeated(), 1e-4);
}

TEST_CASE("forward matches the reference: GPT-2 style LayerNorm, GELU, learned positions, biases") {
  auto config = t::tiny_gpt2_config(128);
  config.intermediate_size = t::tiny_llama_config().intermediate_size;  // as this test always had it
  auto weights = t::random_weights(config, 5);
  check_against_reference(config, weights, prompt_long(), 1e-4);
}

TEST_CASE("interleaved-RoPE q/k rows (GGUF order) give the same logits as rotate-half rows") {
  auto config = t::tiny_llama_config();
  auto weights = t::random_weights(config, 6);
  auto permuted = weights;
  for (auto& L : permuted.layers) {
    L.attn_q = t::permute_rows_for_interleaved_rope(L.attn_q, config.n_heads, config.head_dim);
    L.attn_k = t::permute_rows_for_interleaved_rope(L.attn_k, config.n_kv_heads, config.head_dim);
  }
  permuted.rope_interleaved = true;
  check_against_reference(config, permuted, prompt_long(), 1e-4, {}, &weights);
}

TEST_CASE("f16 and bf16 weights match the reference computed on the same rounded weights") {
  auto config = t::tiny_llama_config();
  SessionOptions exact;
  exact.bf16_activations = false;  // f32 activations: exact to the stored weights
  for (auto dt : {loom::DType::f16, loom::DType::bf16}) {
    INFO(loom::dtype_name(dt));
    auto weights = t::random_weights(config, 7, dt);
    check_against_reference(config, weights, prompt_long(), 1e-4, exact);
  }
  // The opt-in bf16 prefill rounds activations to bf16 for the dot products (on CPUs with
  // AVX512-BF16): close, not exact.
  SessionOptions rounded;
  rounded.bf16_activations = true;
  auto weights = t::random_weights(config, 7, loom::DType::bf16);
  const double worst = check_against_reference(config, weights, prompt_long(), 5e-2, rounded);
  WARN("bf16 weights with bf16 activations: worst |logit diff| " << worst);
}

TEST_CASE("an f16 KV cache stays close to the f32 one") {
  auto config = t::tiny_llama_config();
  auto weights = t::random_weights(config, 8);
  SessionOptions o;
  o.kv_dtype = loom::DType::f16;
  const double worst = check_against_reference(config, weights, prompt_long(), 5e-3, o);
  CHECK(worst > 0.0);  // it really is a different (rounded) cache
}

TEST_CASE("results do not depend on the thread count") {
  auto config = t::tiny_llama_config();
  auto weights = t::random_weights(config, 9);
  auto model = t::make_model(config, weights);
  const auto p = prompt_long();
  std::vector<std::vector<float>> outs;
  for (int threads : {1, 2, 3}) {
    SessionOptions o;
    o.n_threads = threads;
    Session s(model, o);
    s.prefill(p);
    s.step(5);
    s.step(9);
    outs.emplace_back(s.logits().begin(), s.logits().end());
  }
  CHECK(outs[0] == outs[1]);
  CHECK(outs[0] == outs[2]);
}

TEST_CASE("context full, bad ids and rollback leave the session consistent") {
  auto config = t::tiny_llama_config();
  auto model = t::make_model(config, t::random_weights(config, 10));
  SessionOptions o;
  o.context_length = 8;
  Session s(model, o);
  // Prefill four, step two: the same kernels that the replay after rollback uses.
  s.prefill(std::vector<int32_t>{1, 2, 3, 4});
  s.step(5);
  s.step(6);
  const std::vector<float> after_six(s.logits().begin(), s.logits().end());
  try {
    s.prefill(std::vector<int32_t>{7, 8, 9});
    FAIL("expected context_full");
  } catch (const loom::Error& e) {
    CHECK(e.code() == loom::ErrorCode::context_full);
  }
  CHECK(s.position() == 6);
  CHECK_THROWS_AS(s.step(500), loom::Error);
  CHECK_THROWS_AS(s.step(-1), loom::Error);
  CHECK(s.position() == 6);
  CHECK(std::vector<float>(s.logits().begin(), s.logits().end()) == after_six);

  // Roll back two tokens and feed them again: identical logits.
  s.rollback(4);
  CHECK(s.position() == 4);
  s.step(5);
  s.step(6);
  CHECK(std::vector<float>(s.logits().begin(), s.logits().end()) == after_six);
  CHECK_THROWS_AS(s.rollback(7), loom::Error);
  s.step(7);
  s.step(8);
  CHECK_THROWS_AS(s.step(9), loom::Error);
  s.reset();
  CHECK(s.position() == 0);
  CHECK_THROWS_AS(s.logits(), loom::Error);
  // An 8-position context takes one 16-position block (kKvBlockTokens).
  CHECK(s.kv_cache_bytes() == loom::kv_cache_bytes_for(config, 8, loom::DType::f32));
  CHECK(s.kv_cache_bytes() == 2 * 2 * 2 * 16 * 16 * 4);
}

TEST_CASE("a session continues bit-identically from a cache copied from another session") {
  auto config = t::tiny_llama_config();
  auto model = t::make_model(config, t::random_weights(config, 11));
  SessionOptions o;
  o.context_length = 16;
  o.n_threads = 1;
  Session a(model, o);
  a.prefill(std::vector<int32_t>{1, 2, 3, 4, 5, 6});
  a.step(7);
  const std::vector<float> want(a.logits().begin(), a.logits().end());
  // b holds other tokens first: the copy replaces them.
  Session b(model, o);
  b.prefill(std::vector<int32_t>{9, 9, 9});
  b.copy_cache_from(a, 6);
  CHECK(b.position() == 6);
  CHECK_THROWS_AS(b.logits(), loom::Error);  // cleared: feed a token first
  b.step(7);
  CHECK(std::vector<float>(b.logits().begin(), b.logits().end()) == want);
  // Into an f16 cache (converted), and from a shorter prefix, too.
  SessionOptions h = o;
  h.kv_dtype = loom::DType::f16;
  Session c(model, h);
  c.copy_cache_from(a, 3);
  c.prefill(std::vector<int32_t>{4, 5, 6, 7});
  CHECK(t::max_abs_diff(c.logits(), std::vector<double>(want.begin(), want.end())) < 1e-2);

  // Keeping a prefix copies only the rest: b holds a's first 6 positions and the token 7
  // (its own), re-synced up to a's 7 positions without touching the first 6. The copy
  // is by bytes (same layout), so a's cache is reproduced exactly.
  const auto logits_of = [](Session& s) { return std::vector<float>(s.logits().begin(), s.logits().end()); };
  b.copy_cache_from(a, 7, 6);
  CHECK(b.position() == 7);
  a.step(8);
  b.step(8);
  CHECK(logits_of(b) == logits_of(a));
  // Into a cache of another size (a session's cache is one block of its context: the
  // keys' stride differs), from a kept prefix.
  SessionOptions longer = o;
  longer.context_length = 24;
  Session p(model, longer);
  p.prefill(std::vector<int32_t>{1, 2, 3});
  p.copy_cache_from(a, 8, 3);
  CHECK(p.position() == 8);
  p.step(9);
  a.step(9);
  CHECK(logits_of(p) == logits_of(a));
  // From itself: its first n positions stay, as a rollback would leave them.
  Session self(model, o);
  self.prefill(std::vector<int32_t>{1, 2, 3, 4, 5, 6});
  self.copy_cache_from(self, 6, 2);
  CHECK(self.position() == 6);
  self.copy_cache_from(self, 5);
  CHECK(self.position() == 5);
  self.step(6);
  Session fresh(model, o);
  fresh.prefill(std::vector<int32_t>{1, 2, 3, 4, 5});
  fresh.step(6);
  CHECK(logits_of(self) == logits_of(fresh));
  // Keeping more than this session holds, or more than is copied, is refused.
  Session q(model, o);
  q.prefill(std::vector<int32_t>{1, 2});
  CHECK_THROWS_WITH(q.copy_cache_from(a, 6, 3), Catch::Contains("cannot keep 3 positions of a cache holding 2"));
  CHECK_THROWS_AS(q.copy_cache_from(a, 1, 2), loom::Error);
  CHECK(q.position() == 2);

  // Refusals change nothing: more positions than the source holds, a context too small,
  // a model of another shape.
  CHECK_THROWS_AS(b.copy_cache_from(a, 11), loom::Error);
  SessionOptions small = o;
  small.context_length = 4;
  Session d(model, small);
  try {
    d.copy_cache_from(a, 6);
    FAIL("expected context_full");
  } catch (const loom::Error& e) {
    CHECK(e.code() == loom::ErrorCode::context_full);
  }
  auto other_config = config;
  other_config.n_layers = 3;
  Session e(t::make_model(other_config, t::random_weights(other_config, 12)), o);
  e.prefill(std::vector<int32_t>{1, 2});
  CHECK_THROWS_WITH(e.copy_cache_from(a, 6), Catch::Contains("different layer counts (the source's model has 2, this one 3)"));
  CHECK(e.position() == 2);
}

TEST_CASE("scoring returns per-token log-probabilities of the reference") {
  auto config = t::tiny_llama_config();
  auto weights = t::random_weights(config, 11);
  auto model = t::make_model(config, weights);
  const auto p = prompt_short();
  Session s(model);
  const auto lp = s.score(p);
  REQUIRE(lp.size() == p.size() - 1);
  const auto ref = t::reference_logits(config, weights, p);
  for (size_t i = 1; i < p.size(); ++i) {
    const auto& row = ref[i - 1];
    const double mx = *std::max_element(row.begin(), row.end());
    double sum = 0.0;
    for (double v : row) sum += std::exp(v - mx);
    const double want = row[static_cast<size_t>(p[i])] - mx - std::log(sum);
    CHECK(std::abs(lp[i - 1] - want) < 1e-4);
    CHECK(lp[i - 1] < 0.0);
  }
}

TEST_CASE("embeddings pool the final hidden states") {
  auto config = t::tiny_llama_config();
  auto weights = t::random_weights(config, 12);
  auto model = t::make_model(config, weights);
  const auto p = prompt_short();
  const auto hidden = t::reference_hidden(config, weights, p);
  Session s(model);
  auto last = s.embed(p, loom::Pooling::last, false);
  auto mean = s.embed(p, loom::Pooling::mean, false);
  auto unit = s.embed(p, loom::Pooling::mean, true);
  REQUIRE(last.size() == static_cast<size_t>(config.hidden_size));
  double norm = 0.0;
  for (size_t i = 0; i < last.size(); ++i) {
    CHECK(std::abs(last[i] - hidden.back()[i]) < 1e-4);
    double m = 0.0;
    for (const auto& row : hidden) m += row[i];
    m /= static_cast<double>(hidden.size());
    CHECK(std::abs(mean[i] - m) < 1e-4);
    norm += static_cast<double>(unit[i]) * unit[i];
  }
  CHECK(std::abs(norm - 1.0) < 1e-5);
}

TEST_CASE("the debug hook sees every stage with checksums") {
  auto config = t::tiny_llama_config();
  auto model = t::make_model(config, t::random_weights(config, 13));
  std::vector<std::string> names;
  std::vector<double> sums;
  SessionOptions o;
  o.trace = [&](const loom::TraceEvent& e) {
    names.emplace_back(e.name);
    double s = 0.0;
    for (int64_t i = 0; i < e.n_tokens * e.dim; ++i) s += e.values[i];
    sums.push_back(s - e.checksum);
  };
  Session s(model, o);
  s.prefill(prompt_short());
  const std::vector<std::string> want{"embd", "blk.0.attn_out", "blk.0.ffn_out", "blk.1.attn_out",
                                      "blk.1.ffn_out", "output_norm", "logits"};
  CHECK(names == want);
  for (double d : sums) CHECK(d == 0.0);
}

TEST_CASE("the debug hook sees the same stages in a parallel-residual block") {
  // GPT-NeoX style: x + attn(n1(x)) + ffn(n2(x)). attn_out is the residual plus the
  // attention branch, as in a sequential block; ffn_out is the layer's output.
  auto config = t::tiny_gpt2_config();
  config.architecture = "gptneox";
  config.position = loom::PositionKind::rope;
  config.activation = loom::Activation::gelu_erf;
  config.parallel_residual = true;
  config.tie_word_embeddings = false;
  auto model = t::make_model(config, t::random_weights(config, 15));
  std::vector<std::string> names;
  std::vector<std::vector<float>> values;
  SessionOptions o;
  o.trace = [&](const loom::TraceEvent& e) {
    names.emplace_back(e.name);
    values.emplace_back(e.values, e.values + e.n_tokens * e.dim);
  };
  Session s(model, o);
  s.prefill(prompt_short());
  const std::vector<std::string> want{"embd", "blk.0.attn_out", "blk.0.ffn_out", "blk.1.attn_out",
                                      "blk.1.ffn_out", "output_norm", "logits"};
  CHECK(names == want);
  // Both stages of a layer start from the same input: they differ by the FFN branch only.
  REQUIRE(values.size() == want.size());
  CHECK(values[1] != values[2]);
  CHECK(values[1] != values[0]);
}

TEST_CASE("a model rejects weights that disagree with its config, naming the slot") {
  auto config = t::tiny_llama_config();
  auto weights = t::random_weights(config, 14);
  auto bad = weights;
  bad.layers[1].attn_k = loom::Tensor::zeros(loom::Shape{64, 64}, loom::DType::f32);
  try {
    loom::Model m(config, bad);
    FAIL("expected shape mismatch");
  } catch (const loom::Error& e) {
    CHECK(e.code() == loom::ErrorCode::shape_mismatch);
    CHECK(e.context().tensor == "blk.1.attn_k");
    CHECK(std::string(e.what()).find("[32, 64]") != std::string::npos);
  }
  auto missing = weights;
  missing.output_norm = loom::Tensor();
  try {
    loom::Model m(config, missing);
    FAIL("expected missing tensor");
  } catch (const loom::Error& e) {
    CHECK(e.code() == loom::ErrorCode::missing_tensor);
    CHECK(e.context().tensor == "output_norm");
  }
  auto bad_config = config;
  bad_config.n_kv_heads = 3;
  CHECK_THROWS_AS(loom::Model(bad_config, weights), loom::Error);
}
