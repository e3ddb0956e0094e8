#include "synthetic_model.hpp"

#include <algorithm>
#include <cstdio>
#include <sstream>
#include <vector>

#include "loom/convert.hpp"
#include "model/weight_slots.hpp"
#include "model/load_repack.hpp"
#include "tensor/kernel_registry.hpp"
#include "tensor/packing.hpp"
#include "tensor/quant/quant.hpp"

namespace loom::bench {

loom::ModelConfig shape_config(const std::string& shape) {
  loom::ModelConfig c;
  c.architecture = "llama";
  c.norm_eps = 1e-5;
  c.bos_token_id = 1;
  c.eos_token_ids = {2};
  if (shape == "1b") {  // Llama-3.2-1B
    c.vocab_size = 128256;
    c.hidden_size = 2048;
    c.intermediate_size = 8192;
    c.n_layers = 16;
    c.n_heads = 32;
    c.n_kv_heads = 8;
    c.head_dim = 64;
    c.max_positions = 131072;
    c.rope_theta = 500000.0;
    c.tie_word_embeddings = true;
    c.rope_scaling.kind = loom::RopeScalingKind::llama3;
    c.rope_scaling.factor = 32.0;
    c.rope_scaling.low_freq_factor = 1.0;
    c.rope_scaling.high_freq_factor = 4.0;
    c.rope_scaling.original_max_positions = 8192;
  } else {
    c.vocab_size = 32000;
    c.hidden_size = 1024;
    c.intermediate_size = 2816;
    c.n_layers = 8;
    c.n_heads = 16;
    c.n_kv_heads = 4;
    c.head_dim = 64;
    c.max_positions = 4096;
    c.rope_theta = 10000.0;
  }
  c.rope_dims = c.head_dim;
  return c;
}

namespace {

// Fast deterministic fill: uniform in [-a, a] from a 64-bit LCG, converted in chunks.
loom::Tensor random_tensor(const loom::Shape& shape, loom::DType dtype, uint64_t& state, float a,
                           float offset) {
  loom::Tensor t = loom::Tensor::empty(shape, dtype);
  const int64_t n = shape.numel();
  std::vector<float> chunk(1 << 16);
  // Chunks of 2^16 elements are whole blocks of every block type, so quantized dtypes
  // (q8_0, q4_k, gq4_32, ...) fill chunk by chunk too.
  const auto& traits = loom::dtype_traits(dtype);
  const auto block_elems = static_cast<size_t>(traits.block_elems);
  const auto block_bytes = static_cast<size_t>(traits.block_bytes);
  for (int64_t done = 0; done < n; done += static_cast<int64_t>(chunk.size())) {
    const auto count = static_cast<size_t>(std::min<int64_t>(static_cast<int64_t>(chunk.size()), n - done));
    for (size_t i = 0; i < count; ++i) {
      state = state * 6364136223846793005ull + 1442695040888963407ull;
      chunk[i] = offset + a * (static_cast<float>(state >> 40) / 8388608.0f - 1.0f);
    }
    auto* dst = static_cast<std::byte*>(t.mutable_raw_data()) + static_cast<size_t>(done) / block_elems * block_bytes;
    if (loom::is_quantized(dtype)) {
      loom::quant::quantize(dtype, chunk.data(), dst, count);
    } else {
      loom::convert(loom::DType::f32, chunk.data(), dtype, dst, count);
    }
  }
  return t;
}

}  // namespace

std::shared_ptr<const loom::Model> synthetic_model(const loom::ModelConfig& c, loom::DType dtype, float output_scale) {
  uint64_t state = 12345;
  loom::ModelWeights w;
  w.layers.resize(static_cast<size_t>(c.n_layers));
  for (const auto& slot : loom::slots::all_slots()) {
    if (!slot.needed(c) || loom::slots::tied_in(c, slot)) continue;
    const int64_t layers = slot.per_layer ? c.n_layers : 1;
    for (int64_t l = 0; l < layers; ++l) {
      const bool vec = loom::slots::is_vector(slot.role);
      const float spread = vec ? 0.1f : slot.name == "output" ? 0.02f * output_scale : 0.02f;
      loom::slots::tensor_of(w, slot, l) =
          random_tensor(slot.shape(c), vec ? loom::DType::f32 : dtype, state, spread, vec ? 1.0f : 0.0f);
    }
  }
  if (c.tie_word_embeddings) w.output = w.token_embd;
  return std::make_shared<const loom::Model>(c, std::move(w));
}

std::shared_ptr<const loom::Model> repacked_copy(const loom::Model& m) {
  const loom::ModelConfig& c = m.config();
  loom::ModelWeights w = m.weights();  // tensors share storage: only packed ones are new
  bool any = false;
  // A tied output's table is packed as the output's matrix, as the loader does.
  loom::slots::for_each_product_matrix(w, [&](loom::Tensor& t, const loom::slots::WeightSlot&, int64_t) {
    const loom::Packing packing = loom::kernel_registry().preferred_packing(t.dtype());
    if (packing == loom::Packing::none || !loom::can_pack(t, packing)) return;
    t = loom::pack(t, packing);
    any = true;
  });
  loom::load::join_shared_input_products(w);  // as the loader leaves them
  return any ? std::make_shared<const loom::Model>(c, std::move(w)) : nullptr;
}

std::optional<std::vector<std::shared_ptr<const loom::Model>>> models_for_repack(
    const std::shared_ptr<const loom::Model>& rows, const std::string& modes) {
  std::vector<std::shared_ptr<const loom::Model>> models;
  for (const auto& mode : split(modes)) {
    if (mode == "off") {
      models.push_back(rows);
    } else if (mode == "auto") {
      if (auto packed = repacked_copy(*rows)) models.push_back(packed);
    } else {
      std::fprintf(stderr, "unknown --repack mode %s (expected off, auto)\n", mode.c_str());
      return std::nullopt;
    }
  }
  return models;
}

std::string layout_of(const loom::Model& m) {
  for (const auto& slot : loom::slots::all_slots()) {
    if (slot.role != loom::slots::Role::matrix || !slot.needed(m.config())) continue;
    for (int64_t l = 0; l < (slot.per_layer ? m.config().n_layers : 1); ++l) {
      const loom::Packing p = loom::slots::tensor_of(m.weights(), slot, l).packing();
      if (p != loom::Packing::none) return std::string(loom::packing_name(p));
    }
  }
  return "rows";
}

// Weight bytes decode reads per token: every projection matrix and the output matrix.
double matrix_bytes(const loom::Model& m) {
  double total = 0;
  const auto& c = m.config();
  for (const auto& slot : loom::slots::all_slots()) {
    if (slot.role != loom::slots::Role::matrix || !slot.needed(c)) continue;
    const int64_t layers = slot.per_layer ? c.n_layers : 1;
    for (int64_t l = 0; l < layers; ++l) {
      total += static_cast<double>(loom::slots::tensor_of(m.weights(), slot, l).nbytes());
    }
  }
  return total;
}

double matrix_params(const loom::ModelConfig& c) {
  double per_layer = static_cast<double>(c.hidden_size) * (2.0 * c.q_dim() + 2.0 * c.kv_dim()) +
                     3.0 * static_cast<double>(c.hidden_size) * c.intermediate_size;
  return per_layer * c.n_layers + output_params(c);
}

double output_params(const loom::ModelConfig& c) { return static_cast<double>(c.vocab_size) * c.hidden_size; }

std::vector<std::string> split(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream ss(s);
  for (std::string item; std::getline(ss, item, ',');) out.push_back(item);
  return out;
}

}  // namespace loom::bench
