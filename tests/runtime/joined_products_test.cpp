// Products of one input multiplied as one matrix (model/joined_products.hpp: q, k and v;
// a gated FFN's gate and up; tensor/gather.hpp stacked_rows_view; the loader puts owned
// copies back to back, runtime/forward.cpp multiplies them in one product): the one
// product gives each part's bits, for every kernel family, batch and thread count; a
// model whose parts are apart gives the bits of one whose are together, biases included;
// the loader says which layers it joined, and a draft copy joins them too.
#include <catch2/catch.hpp>

#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "loom/exporter.hpp"
#include "loom/loader.hpp"
#include "loom/session.hpp"
#include "loom/speculative.hpp"
#include "loom/thread_pool.hpp"
#include "model/joined_products.hpp"
#include "model/load_repack.hpp"
#include "runtime/kernels/linear.hpp"
#include "support/packed_products.hpp"
#include "support/test_support.hpp"
#include "support/tiny_model.hpp"
#include "tensor/gather.hpp"
#include "tensor/packing.hpp"
#include "tensor/quant/quant.hpp"

namespace t = loom::test;

namespace {

using loom::DType;
using loom::Packing;
using loom::Tensor;

Tensor random_matrix(DType dtype, int64_t rows, int64_t cols, std::mt19937& rng) {
  if (loom::is_quantized(dtype)) return t::random_quantized(dtype, rows, cols, rng);
  const std::vector<float> v = t::normal_floats(rows * cols, rng);
  Tensor out = Tensor::empty(loom::Shape{rows, cols}, dtype);
  loom::convert(DType::f32, v.data(), dtype, out.mutable_raw_data(), v.size());
  return out;
}

// Every output row of the parts' products, token by token, as the one product's rows.
// `rows`: each part's row count.
void check_one_product_is_parts(DType dtype, Packing packing, const std::vector<int64_t>& rows) {
  const int64_t cols = 256;  // whole blocks of every block type
  std::mt19937 rng(static_cast<uint32_t>(17 + static_cast<int>(dtype) + rows.size()));
  std::vector<Tensor> parts;
  for (const int64_t r : rows) {
    parts.push_back(random_matrix(dtype, r, cols, rng));
    if (packing != Packing::none) parts.back() = loom::pack(parts.back(), packing);
  }
  std::vector<Tensor*> pointers;
  std::vector<const Tensor*> views;
  for (Tensor& p : parts) {
    pointers.push_back(&p);
    views.push_back(&p);
  }
  loom::gather_into_one_buffer(pointers, /*align=*/1);
  const Tensor whole = loom::stacked_rows_view(views);
  REQUIRE(whole.defined());
  int64_t n = 0;
  for (const int64_t r : rows) n += r;
  REQUIRE(whole.shape() == loom::Shape{n, cols});
  loom::ThreadPool one(1), two(2);
  for (loom::ThreadPool* pool : {&one, &two}) {
    for (const int64_t tokens : {1, 3, 8}) {
      INFO(loom::dtype_name(dtype) << " " << loom::packing_name(packing) << ", " << rows.size() << " parts, "
                                   << tokens << " tokens, " << pool->size() << " threads");
      const std::vector<float> x = t::normal_floats(tokens * cols, rng);
      std::vector<float> y(static_cast<size_t>(tokens * n));
      loom::kernels::linear(whole, nullptr, x.data(), cols, tokens, y.data(), n, *pool);
      int64_t offset = 0;
      for (size_t i = 0; i < parts.size(); ++i) {
        const int64_t r = rows[i];
        std::vector<float> yp(static_cast<size_t>(tokens * r));
        loom::kernels::linear(parts[i], nullptr, x.data(), cols, tokens, yp.data(), r, *pool);
        for (int64_t tk = 0; tk < tokens; ++tk) {
          CHECK(std::memcmp(y.data() + tk * n + offset, yp.data() + tk * r, static_cast<size_t>(r) * 4) == 0);
        }
        offset += r;
      }
    }
  }
}

// q, k and v (GQA-like: q four times k and v; v ragged, a padded last panel where
// packed), and gate and up (two of one size; up ragged where packed).
void check_joined_shapes(DType dtype, Packing packing) {
  const int64_t panel = loom::packing_info(packing).panel_rows;
  const int64_t q_rows = 4 * panel * (panel == 1 ? 16 : 1), k_rows = q_rows / 4;
  const int64_t v_rows = packing == Packing::none ? k_rows + 3 : k_rows - panel / 2;
  check_one_product_is_parts(dtype, packing, {q_rows, k_rows, v_rows});
  const int64_t f_rows = 3 * panel * (panel == 1 ? 16 : 1);
  check_one_product_is_parts(dtype, packing, {f_rows, packing == Packing::none ? f_rows : f_rows - panel / 4});
}

// Prefill logits of every position, then three decode steps.
std::vector<float> logits_of(const std::shared_ptr<const loom::Model>& model, int threads) {
  loom::SessionOptions o;
  o.all_logits = true;
  o.context_length = 32;
  o.n_threads = threads;
  loom::Session s(model, o);
  const std::vector<int32_t> prompt{1, 4, 9, 16, 25, 36, 49, 64, 81, 100, 3, 7};
  s.prefill(prompt);
  std::vector<float> out;
  for (size_t i = 0; i < prompt.size(); ++i) {
    const auto row = s.logits_at(static_cast<int64_t>(i));
    out.insert(out.end(), row.begin(), row.end());
  }
  for (int32_t token : {5, 50, 11}) {
    s.step(token);
    const auto row = s.logits();
    out.insert(out.end(), row.begin(), row.end());
  }
  return out;
}

// `model`'s weights with each layer's matrices of `groups` moved into a buffer each.
std::shared_ptr<const loom::Model> with_apart(const loom::Model& model, std::initializer_list<loom::Joined> groups) {
  loom::ModelWeights w = model.weights();
  for (loom::LayerWeights& L : w.layers) {
    for (const loom::Joined g : groups) {
      const loom::JoinedProducts& group = loom::joined_products(g);
      const auto members = loom::members_of(L, group);
      for (size_t i = 0; i < group.n_members; ++i) {
        Tensor* one[] = {members[i]};
        loom::gather_into_one_buffer(one);
      }
      CHECK_FALSE(loom::joined_view(L, group).defined());
    }
  }
  return t::make_model(model.config(), std::move(w));
}

bool all_joined(const loom::ModelWeights& w, loom::Joined g) {
  for (const loom::LayerWeights& L : w.layers) {
    if (!loom::joined_view(L, loom::joined_products(g)).defined()) return false;
  }
  return true;
}

// Random weights for `c` with every projection matrix in `dtype` (quantized from f32).
loom::ModelWeights weights_in(const loom::ModelConfig& c, DType dtype) {
  loom::ModelWeights w = t::random_weights(c, 5);
  for (loom::LayerWeights& L : w.layers) {
    for (Tensor* m : {&L.attn_q, &L.attn_k, &L.attn_v, &L.attn_out, &L.ffn_gate, &L.ffn_up, &L.ffn_down}) {
      if (!m->defined()) continue;
      Tensor out = Tensor::empty(m->shape(), dtype);
      if (loom::is_quantized(dtype)) {
        loom::quant::quantize(dtype, m->data<float>(), out.mutable_raw_data(), static_cast<size_t>(m->numel()));
      } else {
        loom::convert(DType::f32, m->raw_data(), dtype, out.mutable_raw_data(), static_cast<size_t>(m->numel()));
      }
      *m = out;
    }
  }
  return w;
}

bool has_note(const loom::LoadReport& r, const std::string& text) {
  for (const auto& n : r.notes) {
    if (n.find(text) != std::string::npos) return true;
  }
  return false;
}

}  // namespace

TEST_CASE("joined products: one product gives the parts' products' bits, every kernel family, batch and thread count") {
  check_joined_shapes(DType::f32, Packing::none);
  check_joined_shapes(DType::f16, Packing::none);
  check_joined_shapes(DType::q8_0, Packing::none);
  check_joined_shapes(DType::q4_k, Packing::none);
  for (const Packing p : {Packing::f32_x64, Packing::f16_x64, Packing::bf16_x64, Packing::q8_0_x16, Packing::q4_0_x16,
                          Packing::q4_k_x16, Packing::q6_k_x16, Packing::gq4_32_x16}) {
    check_joined_shapes(loom::packing_info(p).dtype, p);
  }
}

TEST_CASE("joined products: a repacking load joins q|k|v and gate|up, and the logits are those of the parts apart") {
  // Llama-shaped (RoPE, GQA, a gated FFN) and GPT-2-shaped (q, k and v biases, MHA, a
  // plain FFN: nothing to join there), with the joined parts' rows whole panels of the
  // plain packings (64) and the quantized ones (16).
  loom::ModelConfig llama = t::tiny_llama_config();
  llama.hidden_size = 128;
  llama.n_heads = 8;
  llama.n_kv_heads = 4;
  llama.head_dim = 16;
  llama.rope_dims = 16;
  llama.intermediate_size = 192;
  loom::ModelConfig gpt2 = t::tiny_gpt2_config();
  for (const loom::ModelConfig& c : {llama, gpt2}) {
    const bool gated = c.ffn == loom::FfnKind::gated;
    for (const DType dtype : {DType::f16, DType::q8_0}) {
      INFO(c.architecture << ", " << loom::dtype_name(dtype));
      t::TempDir dir;
      loom::export_model(c, weights_in(c, dtype), dir / "m.gguf", loom::ExportFormat::gguf);
      loom::LoadOptions o = t::quiet_load_options();
      o.repack = loom::RepackMode::automatic;
      const auto model = loom::load_model(dir / "m.gguf", o);
      if (loom::kernels::preferred_packing(dtype) == Packing::none) {
        WARN("SKIPPED: no packed " << loom::dtype_name(dtype) << " kernels on this CPU: the matrices stay mapped");
        continue;
      }
      const std::string layers = std::to_string(c.n_layers) + " layers in one buffer";
      CHECK(has_note(*model->load_report(), "q, k and v of " + layers));
      CHECK(has_note(*model->load_report(), "gate and up of " + layers) == gated);
      CHECK(all_joined(model->weights(), loom::Joined::qkv));
      CHECK(all_joined(model->weights(), loom::Joined::gate_up) == gated);
      // A quantized draft copy lays each layer's joined parts out the same way.
      const auto draft = loom::make_draft_copy(*model, DType::q8_0);
      if (loom::kernels::preferred_packing(DType::q8_0) != Packing::none) {
        CHECK(all_joined(draft->weights(), loom::Joined::qkv));
        CHECK(all_joined(draft->weights(), loom::Joined::gate_up) == gated);
      }
      const std::initializer_list<loom::Joined> qkv{loom::Joined::qkv}, gate_up{loom::Joined::gate_up},
          both{loom::Joined::qkv, loom::Joined::gate_up};
      for (const auto groups : {qkv, gate_up, both}) {
        if (!gated && groups.size() == 1 && *groups.begin() == loom::Joined::gate_up) continue;
        const auto apart = with_apart(*model, groups);
        for (const int threads : {1, 2}) {
          INFO(threads << " threads, " << groups.size() << " group(s) apart");
          const std::vector<float> together = logits_of(model, threads), separate = logits_of(apart, threads);
          REQUIRE(together.size() == separate.size());
          CHECK(std::memcmp(together.data(), separate.data(), together.size() * sizeof(float)) == 0);
        }
      }
    }
  }
}

TEST_CASE("joined products: gate|up with up's bias and a GELU gate gives the bits of gate and up apart") {
  // Built in memory (no format gives a gated FFN an up bias here): row-major f32, so
  // every layer joins (one-row panels), then the same weights with gate and up apart.
  loom::ModelConfig c = t::tiny_llama_config();
  c.activation = loom::Activation::gelu_tanh;
  c.ffn_bias = true;
  loom::ModelWeights w = t::random_weights(c, 11);
  REQUIRE(w.layers[0].ffn_up_bias.defined());
  const auto joined = loom::load::join_shared_input_products(w);
  CHECK(joined[static_cast<size_t>(loom::Joined::qkv)] == c.n_layers);
  CHECK(joined[static_cast<size_t>(loom::Joined::gate_up)] == c.n_layers);
  const auto model = t::make_model(c, std::move(w));
  REQUIRE(all_joined(model->weights(), loom::Joined::gate_up));
  const auto apart = with_apart(*model, {loom::Joined::gate_up});
  for (const int threads : {1, 2}) {
    INFO(threads << " threads");
    const std::vector<float> together = logits_of(model, threads), separate = logits_of(apart, threads);
    REQUIRE(together.size() == separate.size());
    CHECK(std::memcmp(together.data(), separate.data(), together.size() * sizeof(float)) == 0);
  }
}
