#include "model/load_repack.hpp"

#include <algorithm>
#include <chrono>
#include <map>
#include <memory>
#include <vector>

#include "loom/convert.hpp"
#include "loom/cpu.hpp"
#include "model/joined_products.hpp"
#include "model/weight_slots.hpp"
#include "tensor/gather.hpp"
#include "tensor/kernel_registry.hpp"
#include "tensor/mapped_pages.hpp"
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

// The load record of `slot`'s tensor of `layer` in `records` (a vector of
// TensorLoadRecord, const or not), or null.
template <class Records>
auto* record_of(Records& records, const slots::WeightSlot& slot, int64_t layer) {
  const std::string name = slots::full_name(slot, layer);
  const auto rec = std::find_if(records.begin(), records.end(),
                                [&](const TensorLoadRecord& r) { return r.internal_name == name; });
  return rec == records.end() ? nullptr : &*rec;
}

// The packing a row-major matrix takes at load: the one this CPU's kernels read best,
// where the options ask for repacking and the matrix can hold it; else none.
Packing packing_at_load(const LoadOptions& options, const Tensor& t) {
  if (options.repack == RepackMode::off || t.packing() != Packing::none) return Packing::none;
  const Packing packing = kernel_registry().preferred_packing(t.dtype());
  return packing != Packing::none && can_pack(t, packing) ? packing : Packing::none;
}

// Where settle_one packs a matrix: a buffer of its own (no storage), or `storage` at
// `offset`.
struct PackPlace {
  std::shared_ptr<Storage> storage;
  uint64_t offset = 0;
};

// For each layer's group of one input (kJoinedProducts) whose matrices settle_one will
// all pack (row-major as loaded, each with a load record, one dtype and so one packing,
// every one but the last whole panels), one buffer for the group and each member's place
// in it, in order: packed straight there, back to back, they are joined without the copy
// join_shared_input_products would otherwise make (on the 1B f16 GGUF, 1.3 GB of q, k,
// v, gate and up, 0.7 s of a 5.7 s load).
std::map<const Tensor*, PackPlace> plan_joined_packing(const LoadOptions& options, const ModelWeights& weights,
                                                       const std::vector<TensorLoadRecord>& records) {
  std::map<const Tensor*, PackPlace> places;
  for (size_t l = 0; l < weights.layers.size(); ++l) {
    for (const JoinedProducts& group : kJoinedProducts) {
      const auto members = members_of(weights.layers[l], group);
      const Tensor& first = *members[0];
      const Packing packing = first.defined() ? packing_at_load(options, first) : Packing::none;
      if (packing == Packing::none) continue;
      const int64_t panel_rows = packing_info(packing).panel_rows;
      bool all = true;
      uint64_t total = 0;
      for (size_t i = 0; i < group.n_members && all; ++i) {
        const Tensor& t = *members[i];
        all = t.defined() && packing_at_load(options, t) == packing &&
              (i + 1 == group.n_members || t.shape()[0] % panel_rows == 0) &&
              record_of(records, slots::slot(group.members[i]), static_cast<int64_t>(l)) != nullptr;
        if (all) total += static_cast<uint64_t>(packed_nbytes(packing, t.shape()));
      }
      if (!all) continue;
      auto storage = Storage::allocate(static_cast<size_t>(total));
      uint64_t offset = 0;
      for (size_t i = 0; i < group.n_members; ++i) {
        places[members[i]] = {storage, offset};
        offset += static_cast<uint64_t>(packed_nbytes(packing, members[i]->shape()));
      }
    }
  }
  return places;
}

// A mapped view's pages, kept while settle_layouts replaces the tensor with an owned copy
// (packed, or unpacked to rows) and handed back once no tensor holds the view (a tied
// output's table is held by the output too until it is handed the copy). Without this a
// repacking load held every repacked matrix twice, mapped rows and packed copy (peak RSS
// of `loom inspect --repack auto`, 1B shape: q4_k GGUF 1.44 -> 0.91 GB, f16 GGUF 4.89 ->
// 3.00 GB; docs/cli-and-packs.md).
struct MappedRows {
  std::weak_ptr<const Storage> view;
  MappedPages pages;

  static MappedRows of(const Tensor& t) { return {t.storage(), MappedPages::of(t)}; }
  // Gives the pages back when no tensor holds the view; true once done.
  bool release_if_unread() const {
    if (!view.expired()) return false;
    pages.release();
    return true;
  }
};

// One matrix's layout at load: a stored packing the kernels do not read (or a dtype
// change) back to rows, counted in `unpacked` by reason; then, when the options ask,
// the packing the kernels read best, into `place` when there is one. The record says
// what happened.
void settle_one(const LoadOptions& options, std::string_view packed_for, Tensor& t, TensorLoadRecord& rec,
                std::map<std::string, int>& unpacked, ThreadPool& pool, const PackPlace* place) {
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

  const Packing packing = packing_at_load(options, t);
  if (packing == Packing::none) return;
  const auto start = std::chrono::steady_clock::now();
  t = place != nullptr ? pack_into(t, packing, place->storage, place->offset, &pool) : pack(t, packing, &pool);
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
      if (joined_view(L, group).defined()) {  // packed back to back already (plan_joined_packing)
        ++joined[g];
        continue;
      }
      const auto parts = members_of(L, group);
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
  const auto places = plan_joined_packing(options, weights, records);
  // A tied output is its table: the table takes the output product's layout and the
  // output shares it again (the embedding lookup unpacks its one row a token,
  // kernels::embedding_row). Packed, the 1B shape's tied output product ran 1.1-1.6x
  // faster for one token (q8_0 the exception) and 2.4-2.7x for eight
  // (docs/quantization.md).
  // Mapped rows a copy replaced, handed back as soon as no tensor holds them (MappedRows):
  // one matrix later for a tied table, whose output takes the copy after settle_one.
  std::vector<MappedRows> replaced;
  auto release_unread = [&] { std::erase_if(replaced, [](const MappedRows& m) { return m.release_if_unread(); }); };
  slots::for_each_product_matrix(weights, [&](Tensor& t, const slots::WeightSlot& owner, int64_t layer) {
    release_unread();
    TensorLoadRecord* rec = record_of(records, owner, layer);
    if (rec == nullptr) return;
    const auto place = places.find(&t);
    MappedRows rows = MappedRows::of(t);
    settle_one(options, packed_for, t, *rec, unpacked, pool, place != places.end() ? &place->second : nullptr);
    if (rows.pages.file != nullptr && t.storage() != rows.view.lock()) replaced.push_back(std::move(rows));
  });
  release_unread();
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
