#include "model/load_repack.hpp"

#include <algorithm>
#include <chrono>
#include <map>

#include "loom/convert.hpp"
#include "loom/cpu.hpp"
#include "model/weight_slots.hpp"
#include "tensor/gather.hpp"
#include "tensor/kernel_registry.hpp"
#include "tensor/packing.hpp"

namespace loom::load {

namespace {

// A stored packing this CPU's kernels do not read (or a dtype change): rows again.
Tensor unpack_to(const Tensor& packed, DType dtype, ConvertStats& stats, ThreadPool& pool) {
  Tensor rows = unpack(packed, &pool);
  if (dtype == rows.dtype()) return rows;
  Tensor out = Tensor::empty(rows.shape(), dtype);
  stats += convert(rows.dtype(), rows.raw_data(), dtype, out.mutable_raw_data(), static_cast<size_t>(rows.numel()));
  return out;
}

}  // namespace

int64_t join_attention_inputs(ModelWeights& weights) {
  int64_t stacked = 0;
  for (LayerWeights& L : weights.layers) {
    Tensor* parts[] = {&L.attn_q, &L.attn_k, &L.attn_v};
    const bool owned_alike = std::all_of(std::begin(parts), std::end(parts), [&](const Tensor* t) {
      return t->defined() && !t->is_mapped() && t->is_contiguous() && t->dtype() == L.attn_q.dtype() &&
             t->packing() == L.attn_q.packing();
    });
    if (!owned_alike) continue;
    gather_into_one_buffer(parts, /*align=*/1);
    const Tensor* views[] = {&L.attn_q, &L.attn_k, &L.attn_v};
    if (stacked_rows_view(views).defined()) ++stacked;
  }
  return stacked;
}

void settle_layouts(const LoadOptions& options, std::string_view packed_for, ModelWeights& weights,
                    std::vector<TensorLoadRecord>& records, std::vector<std::string>& notes, ThreadPool& pool) {
  const KernelRegistry& kernels = kernel_registry();
  std::map<std::string, int> unpacked;  // reason -> matrices
  for (const slots::WeightSlot& slot : slots::all_slots()) {
    if (slot.role != slots::Role::matrix) continue;
    const int64_t layers = slot.per_layer ? static_cast<int64_t>(weights.layers.size()) : 1;
    for (int64_t layer = 0; layer < layers; ++layer) {
      Tensor& t = slots::tensor_of(weights, slot, layer);
      if (!t.defined() || slots::shares_tied_storage(weights, slot)) continue;
      const std::string name = slots::full_name(slot, layer);
      auto rec = std::find_if(records.begin(), records.end(),
                              [&](const TensorLoadRecord& r) { return r.internal_name == name; });
      if (rec == records.end()) continue;
      auto append_layout = [&](const std::string& what) {
        rec->layout_change = rec->layout_change.empty() ? what : rec->layout_change + "; " + what;
      };

      if (t.packing() != Packing::none) {  // stored packed (a pack written with --repack)
        const std::string stored(packing_name(t.packing()));
        const bool kernels_read_it = kernels.preferred_packing(t.dtype()) == t.packing();
        if (kernels_read_it && rec->dtype == t.dtype()) {
          append_layout(stored + " as stored");
          continue;
        }
        const std::string reason =
            !kernels_read_it ? "this CPU's kernels (" + isa_description() + ") do not read that layout"
                             : "the load asked for " + std::string(dtype_name(rec->dtype));
        const auto start = std::chrono::steady_clock::now();
        t = unpack_to(t, rec->dtype, rec->conversion, pool);
        rec->repack_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
        rec->packing = Packing::none;
        rec->zero_copy = false;
        append_layout("unpacked from " + stored);
        ++unpacked[stored + " (packed for " + (packed_for.empty() ? "an unrecorded ISA" : std::string(packed_for)) +
                   ") were unpacked to rows: " + reason];
      }

      if (options.repack == RepackMode::off || t.packing() != Packing::none) continue;
      const Packing packing = kernels.preferred_packing(t.dtype());
      if (packing == Packing::none || !can_pack(t, packing)) continue;
      const auto start = std::chrono::steady_clock::now();
      t = pack(t, packing, &pool);
      rec->repack_seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      rec->packing = packing;
      rec->zero_copy = false;
      append_layout("repacked " + std::string(packing_name(packing)));
    }
  }
  for (const auto& [what, count] : unpacked) {
    notes.push_back(std::to_string(count) + " matri" + (count == 1 ? "x" : "ces") + " stored as " + what);
  }

  if (const int64_t stacked = join_attention_inputs(weights); stacked > 0) {
    notes.push_back("q, k and v of " + std::to_string(stacked) + " layer" + (stacked == 1 ? "" : "s") +
                    " in one buffer each, multiplied as one matrix");
  }
}

}  // namespace loom::load
