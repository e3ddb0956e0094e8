// q, k and v multiplied as one matrix (tensor/gather.hpp stacked_rows_view; the loader
// puts owned copies back to back, runtime/forward.cpp multiplies them in one product):
// the one product gives each part's bits, for every kernel family, batch and thread
// count; a model whose q, k and v are apart gives the bits of one whose are together,
// biases included; the loader says which layers it joined, and a draft copy joins them too.
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

// Every output row of the three products, token by token, as the one product's rows.
void check_one_product_is_three(DType dtype, Packing packing) {
  const int64_t panel = loom::packing_info(packing).panel_rows;
  const int64_t cols = 256;  // whole blocks of every block type
  std::mt19937 rng(static_cast<uint32_t>(17 + static_cast<int>(dtype)));
  // GQA-like: q four times k and v; v ragged (a padded last panel) where packed.
  const int64_t q_rows = 4 * panel * (panel == 1 ? 16 : 1), k_rows = q_rows / 4;
  const int64_t v_rows = packing == Packing::none ? k_rows + 3 : k_rows - panel / 2;
  Tensor q = random_matrix(dtype, q_rows, cols, rng), k = random_matrix(dtype, k_rows, cols, rng),
         v = random_matrix(dtype, v_rows, cols, rng);
  if (packing != Packing::none) {
    q = loom::pack(q, packing);
    k = loom::pack(k, packing);
    v = loom::pack(v, packing);
  }
  std::vector<Tensor*> parts{&q, &k, &v};
  loom::gather_into_one_buffer(parts, /*align=*/1);
  const Tensor* views[] = {&q, &k, &v};
  const Tensor whole = loom::stacked_rows_view(views);
  REQUIRE(whole.defined());
  const int64_t n = q_rows + k_rows + v_rows;
  REQUIRE(whole.shape() == loom::Shape{n, cols});
  loom::ThreadPool one(1), two(2);
  for (loom::ThreadPool* pool : {&one, &two}) {
    for (const int64_t tokens : {1, 3, 8}) {
      INFO(loom::dtype_name(dtype) << " " << loom::packing_name(packing) << ", " << tokens << " tokens, "
                                   << pool->size() << " threads");
      const std::vector<float> x = t::normal_floats(tokens * cols, rng);
      std::vector<float> yq(static_cast<size_t>(tokens * q_rows)), yk(static_cast<size_t>(tokens * k_rows)),
          yv(static_cast<size_t>(tokens * v_rows)), y(static_cast<size_t>(tokens * n));
      loom::kernels::linear(q, nullptr, x.data(), cols, tokens, yq.data(), q_rows, *pool);
      loom::kernels::linear(k, nullptr, x.data(), cols, tokens, yk.data(), k_rows, *pool);
      loom::kernels::linear(v, nullptr, x.data(), cols, tokens, yv.data(), v_rows, *pool);
      loom::kernels::linear(whole, nullptr, x.data(), cols, tokens, y.data(), n, *pool);
      for (int64_t tk = 0; tk < tokens; ++tk) {
        CHECK(std::memcmp(y.data() + tk * n, yq.data() + tk * q_rows, static_cast<size_t>(q_rows) * 4) == 0);
        CHECK(std::memcmp(y.data() + tk * n + q_rows, yk.data() + tk * k_rows, static_cast<size_t>(k_rows) * 4) == 0);
        CHECK(std::memcmp(y.data() + tk * n + q_rows + k_rows, yv.data() + tk * v_rows,
                          static_cast<size_t>(v_rows) * 4) == 0);
      }
    }
  }
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

// `model`'s weights with each layer's q, k and v moved into a buffer of their own.
std::shared_ptr<const loom::Model> with_qkv_apart(const loom::Model& model) {
  loom::ModelWeights w = model.weights();
  for (loom::LayerWeights& L : w.layers) {
    for (Tensor* part : {&L.attn_q, &L.attn_k, &L.attn_v}) {
      Tensor* one[] = {part};
      loom::gather_into_one_buffer(one);
    }
    const Tensor* views[] = {&L.attn_q, &L.attn_k, &L.attn_v};
    CHECK_FALSE(loom::stacked_rows_view(views).defined());
  }
  return t::make_model(model.config(), std::move(w));
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

TEST_CASE("stacked q|k|v: one product gives the three products' bits, every kernel family, batch and thread count") {
  check_one_product_is_three(DType::f32, Packing::none);
  check_one_product_is_three(DType::f16, Packing::none);
  check_one_product_is_three(DType::q8_0, Packing::none);
  check_one_product_is_three(DType::q4_k, Packing::none);
  for (const Packing p : {Packing::f32_x64, Packing::f16_x64, Packing::bf16_x64, Packing::q8_0_x16, Packing::q4_0_x16,
                          Packing::q4_k_x16, Packing::q6_k_x16, Packing::gq4_32_x16}) {
    check_one_product_is_three(loom::packing_info(p).dtype, p);
  }
}

TEST_CASE("stacked q|k|v: a repacking load joins each layer's q, k and v, and the logits are those of q, k, v apart") {
  // Llama-shaped (RoPE, GQA) and GPT-2-shaped (q, k and v biases, MHA), with q, k and v
  // rows whole panels of the plain packings (64) and the quantized ones (16).
  loom::ModelConfig llama = t::tiny_llama_config();
  llama.hidden_size = 128;
  llama.n_heads = 8;
  llama.n_kv_heads = 4;
  llama.head_dim = 16;
  llama.rope_dims = 16;
  loom::ModelConfig gpt2 = t::tiny_gpt2_config();
  for (const loom::ModelConfig& c : {llama, gpt2}) {
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
      CHECK(has_note(*model->load_report(), "q, k and v of " + std::to_string(c.n_layers) + " layers in one buffer"));
      for (const loom::LayerWeights& L : model->weights().layers) {
        const Tensor* views[] = {&L.attn_q, &L.attn_k, &L.attn_v};
        CHECK(loom::stacked_rows_view(views).defined());
      }
      // A quantized draft copy lays each layer's q, k and v out the same way.
      const auto draft = loom::make_draft_copy(*model, DType::q8_0);
      if (loom::kernels::preferred_packing(DType::q8_0) != Packing::none) {
        for (const loom::LayerWeights& L : draft->weights().layers) {
          const Tensor* views[] = {&L.attn_q, &L.attn_k, &L.attn_v};
          CHECK(loom::stacked_rows_view(views).defined());
        }
      }
      const auto apart = with_qkv_apart(*model);
      for (const int threads : {1, 2}) {
        INFO(threads << " threads");
        const std::vector<float> together = logits_of(model, threads), separate = logits_of(apart, threads);
        REQUIRE(together.size() == separate.size());
        CHECK(std::memcmp(together.data(), separate.data(), together.size() * sizeof(float)) == 0);
      }
    }
  }
}
