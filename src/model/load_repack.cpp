#include "model/load_repack.hpp"

#include <algorithm>
#include <chrono>
#include <map>

#include "loom/convert.hpp"
#include "loom/cpu.hpp"
#include "model/joined_products.hpp"
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

// One matrix's layout at load: a stored packing the kernels do not read (or a dtype
// change) back to rows, counted in `unpacked` by reason; then, when the options ask,
// the packing the kernels read best. The record says what happened.
void settle_one(const LoadOptions& options, std::string_view packed_for, Tensor& t, TensorLoadRecord& rec,
                std::map<std::string, int>& unpacked, ThreadPool& pool) {
  const KernelRegistry& kernels = kernel_registry();
  auto append_layout = [&](const std::string& what) {
    rec.layout_change = rec.layout_change.empty() ? what : rec.layout_change + "; " + what;
  };
  if (t.packing() != Packing::none) {  // stored packed (a pack written with --repack)
    const std::string stored(packing_name(t.packing()));
    const bool kernels_read_it = kernels.preferred_packing(t.dtype()) == t.packing();
    if (kernels_read_it && rec.dtype == t.dtype()) {
      append_layout(stored + " as stored");
      return;
    }
    const std::string reason =
        !kernels_read_it ? "this CPU's kernels (" + isa_description() + ") do not read that layout"
                         : "the load asked for " + std::string(dtype_name(rec.dtype));
    const auto start = std::chrono::steady_clock::now();
    t = unpack_to(t, rec.dtype, rec.conversion, pool);
    rec.repack_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    rec.packing = Packing::none;
    rec.zero_copy = false;
    append_layout("unpacked from " + stored);
    ++unpacked[stored + " (packed for " + (packed_for.empty() ? "an unrecorded ISA" : std::string(packed_for)) +
               ") were unpacked to rows: " + reason];
  }

  if (options.repack == RepackMode::off || t.packing() != Packing::none) return;
  const Packing packing = kernels.preferred_packing(t.dtype());
  if (packing == Packing::none || !can_pack(t, packing)) return;
  const auto start = std::chrono::steady_clock::now();
  t = pack(t, packing, &pool);
  rec.repack_seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  rec.packing = packing;
  rec.zero_copy = false;
  append_layout("repacked " + std::string(packing_name(packing)));
}

}  // namespace

std::array<int64_t, kJoinedProducts.size()> join_shared_input_products(ModelWeights& weights) {
  std::array<int64_t, kJoinedProducts.size()> joined{};
  for (size_t g = 0; g < kJoinedProducts.size(); ++g) {
    const JoinedProducts& group = kJoinedProducts[g];
    for (LayerWeights& L : weights.layers) {
      std::array<Tensor*, 3> parts{};
      for (size_t i = 0; i < group.n_members; ++i) parts[i] = &(L.*group.members[i]);
      const Tensor& first = *parts[0];
      const bool owned_alike = std::all_of(parts.begin(), parts.begin() + group.n_members, [&](const Tensor* t) {
        return t->defined() && !t->is_mapped() && t->is_contiguous() && t->dtype() == first.dtype() &&
               t->packing() == first.packing();
      });
      if (!owned_alike) continue;
      gather_into_one_buffer(std::span<Tensor* const>(parts.data(), group.n_members), /*align=*/1);
      if (joined_view(L, group).defined()) ++joined[g];
    }
  }
  return joined;
}

void settle_layouts(const LoadOptions& options, std::string_view packed_for, ModelWeights& weights,
                    std::vector<TensorLoadRecord>& records, std::vector<std::string>& notes, ThreadPool& pool) {
  std::map<std::string, int> unpacked;  // reason -> matrices
  // A tied output is its table: the table takes the output product's layout and the
  // output shares it again (the embedding lookup unpacks its one row a token,
  // kernels::embedding_row). Packed, the 1B shape's tied output product ran 1.1-1.6x
  // faster for one token (q8_0 the exception) and 2.4-2.7x for eight
  // (docs/quantization.md).
  slots::for_each_product_matrix(weights, [&](Tensor& t, const slots::WeightSlot& owner, int64_t layer) {
    const std::string name = slots::full_name(owner, layer);
    auto rec = std::find_if(records.begin(), records.end(),
                            [&](const TensorLoadRecord& r) { return r.internal_name == name; });
    if (rec != records.end()) settle_one(options, packed_for, t, *rec, unpacked, pool);
  });
  for (const auto& [what, count] : unpacked) {
    notes.push_back(std::to_string(count) + " matri" + (count == 1 ? "x" : "ces") + " stored as " + what);
  }

  const auto joined = join_shared_input_products(weights);
  for (size_t g = 0; g < kJoinedProducts.size(); ++g) {
    if (joined[g] == 0) continue;
    notes.push_back(std::string(kJoinedProducts[g].what) + " of " + std::to_string(joined[g]) + " layer" +
                    (joined[g] == 1 ? "" : "s") + " in one buffer each, multiplied as one matrix");
  }
}

}  // namespace loom::load
