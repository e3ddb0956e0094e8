#include "model/load_repack.hpp"

#include <algorithm>
#include <chrono>

#include "model/weight_slots.hpp"
#include "tensor/kernel_registry.hpp"
#include "tensor/packing.hpp"

namespace loom::load {

void repack_weights(const LoadOptions& options, ModelWeights& weights, std::vector<TensorLoadRecord>& records,
                    ThreadPool& pool) {
  if (options.repack == RepackMode::off) return;
  const KernelRegistry& kernels = kernel_registry();
  for (const slots::WeightSlot& slot : slots::all_slots()) {
    if (slot.role != slots::Role::matrix) continue;
    const int64_t layers = slot.per_layer ? static_cast<int64_t>(weights.layers.size()) : 1;
    for (int64_t layer = 0; layer < layers; ++layer) {
      Tensor& t = slots::tensor_of(weights, slot, layer);
      if (!t.defined() || slots::shares_tied_storage(weights, slot)) continue;
      const Packing packing = kernels.preferred_packing(t.dtype());
      if (packing == Packing::none || !can_pack(t, packing)) continue;
      const auto start = std::chrono::steady_clock::now();
      t = pack(t, packing, &pool);
      const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      const std::string name = slots::full_name(slot, layer);
      auto rec = std::find_if(records.begin(), records.end(),
                              [&](const TensorLoadRecord& r) { return r.internal_name == name; });
      if (rec == records.end()) continue;
      rec->packing = packing;
      rec->repack_seconds = seconds;
      rec->zero_copy = false;
      const std::string what = "repacked " + std::string(packing_name(packing));
      rec->layout_change = rec->layout_change.empty() ? what : rec->layout_change + "; " + what;
    }
  }
}

}  // namespace loom::load
