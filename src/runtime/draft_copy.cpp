// The quantized copy of a target as its speculative draft (loom/speculative.hpp): every
// projection and embedding matrix converted to the draft's dtype in memory, the rest
// (norms, biases, config, tokenizer) shared with the target.
#include <algorithm>
#include <string>
#include <vector>

#include "loom/convert.hpp"
#include "loom/error.hpp"
#include "loom/speculative.hpp"
#include "model/weight_slots.hpp"
#include "runtime/kernels/linear.hpp"
#include "tensor/gather.hpp"
#include "tensor/packing.hpp"
#include "tensor/quant/quant.hpp"

namespace loom {

namespace {

// `t` in `dtype`; a matrix whose rows are not whole blocks of a block type stays as it is
// (as loom convert --quantize does). Quantized on `pool` when there is one.
Tensor converted(const Tensor& stored, DType dtype, ThreadPool* pool) {
  if (stored.dtype() == dtype) return stored;
  const Tensor t = unpack(stored);  // a packed target matrix: its rows
  const auto n = static_cast<size_t>(t.numel());
  if (is_quantized(dtype)) {
    if (t.shape().row_length() % dtype_traits(dtype).block_elems != 0) return t;
    Tensor out = Tensor::empty(t.shape(), dtype);
    if (is_quantized(t.dtype())) {  // re-quantizing: through f32
      std::vector<float> values(n);
      convert(t.dtype(), t.raw_data(), DType::f32, values.data(), n);
      quant::quantize_from(DType::f32, values.data(), dtype, out.mutable_raw_data(), n, pool);
    } else {
      quant::quantize_from(t.dtype(), t.raw_data(), dtype, out.mutable_raw_data(), n, pool);
    }
    return out;
  }
  Tensor out = Tensor::empty(t.shape(), dtype);
  convert(t.dtype(), t.raw_data(), dtype, out.mutable_raw_data(), n);
  return out;
}

}  // namespace

std::shared_ptr<const Model> make_draft_copy(const Model& target, DType dtype, ThreadPool* pool) {
  if (!is_quantized(dtype) && dtype != DType::f32 && dtype != DType::f16 && dtype != DType::bf16) {
    throw Error(ErrorCode::invalid_argument,
                "a draft copy needs a weight dtype (f32, f16, bf16 or a quantized type), got " +
                    std::string(dtype_name(dtype)));
  }
  if (is_quantized(dtype) && !quant::can_quantize(dtype)) {
    throw Error(ErrorCode::unsupported, "loom cannot quantize to " + std::string(dtype_name(dtype)));
  }
  const ModelConfig& c = target.config();
  ModelWeights w = target.weights();  // shares every tensor; the matrices are replaced below
  const Tensor embd_before = w.token_embd;
  // A converted matrix is owned memory whatever the target's load options (no zero-copy
  // mapping to keep), so it takes its kernel-native layout wherever this CPU has one:
  // loom_speculative_decode --rows f32-q8_0, draft time per round 16-24 ms packed
  // against 22-26 row-major (two rounds alternating, 2026-12-03).
  // Walked layer by layer (the model-wide tensors first, layer -1), slots in table order
  // within a layer, so that in the one buffer below each layer's q, k and v lie back to
  // back and the forward pass multiplies them as one matrix (stacked_rows_view; where a
  // matrix's bytes are not a multiple of the buffer's 64-byte alignment they stay apart).
  std::vector<Tensor*> owned;  // the tensors converted or packed here (not shared with the target)
  for (int64_t l = -1; l < c.n_layers; ++l) {
    for (const auto& slot : slots::all_slots()) {
      if (slots::is_vector(slot.role) || !slot.needed(c) || slot.per_layer != (l >= 0)) continue;
      Tensor& t = slots::tensor_of(w, slot, std::max<int64_t>(l, 0));
      if (!t.defined()) continue;
      // A tied output keeps sharing the (converted) embedding.
      if (slot.ties_to != slots::Slot::none && t.raw_data() == embd_before.raw_data()) continue;
      const void* before = t.raw_data();
      t = converted(t, dtype, pool);
      if (t.raw_data() == before) continue;  // the target's own matrix, shared as it is
      const Packing packing = kernels::preferred_packing(t.dtype());
      // A tied output's table is a product's matrix too (the loader packs it likewise).
      const bool product = slot.role == slots::Role::matrix || slots::is_tied_table(target.weights(), slot);
      if (product && t.packing() == Packing::none && can_pack(t, packing)) {
        t = pack(t, packing, pool);
      }
      owned.push_back(&t);
    }
  }
  // The copy's matrices in one buffer: one allocation on huge pages instead of one on
  // 4 KiB pages per matrix (tensor/gather.hpp). The first draft pass of a generation on
  // the small bench shape, q4_k copy of the f16 target: 44-57 ms before, 4-6 ms after.
  gather_into_one_buffer(owned);
  if (w.output.defined() && w.output.raw_data() == embd_before.raw_data()) w.output = w.token_embd;
  return std::make_shared<const Model>(c, std::move(w), target.tokenizer(), nullptr, target.generation_defaults());
}

std::shared_ptr<const Model> load_draft_copy(const std::filesystem::path& target_path, DType dtype, LoadOptions load) {
  if (!is_quantized(dtype)) {
    load.target_dtype = dtype;
    return load_model(target_path, load);
  }
  return make_draft_copy(*load_model(target_path, load), dtype, load.pool.get());
}

}  // namespace loom
