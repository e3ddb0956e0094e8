// Internal: the layout step of a load, after the tensors are in place and tied ones
// aliased. Two jobs, both on projection matrices only (embeddings are read a row at a
// time, and a tied output projection is the embedding):
//  - A matrix a pack stored in a kernel-native layout (TensorRecord::packing) stays in
//    it, mapped, where this CPU's kernels read that layout (KernelRegistry::
//    preferred_packing) and its dtype is the one wanted in memory; otherwise it is
//    unpacked to rows (converted to the wanted dtype if that differs), and a note in the
//    report says which packing, for which ISA, and why.
//  - With LoadOptions::repack == automatic, each row-major matrix whose dtype has a
//    kernel-native layout on this CPU is replaced by a packed copy (tensor/packing.hpp).
// Each changed tensor's record says so. Each layer's q, k and v, and a gated FFN's gate
// and up, where loom owns their copies (repacked or converted) in one dtype and layout,
// end up back to back in one buffer (packed straight there when the load repacks them
// all, else copied there afterwards), so the forward pass multiplies them as one matrix
// (model/joined_products.hpp); a note per group counts the layers.
#pragma once

#include <array>
#include <string>
#include <string_view>
#include <vector>

#include "loom/load_report.hpp"
#include "loom/loader.hpp"
#include "loom/thread_pool.hpp"
#include "loom/weights.hpp"
#include "model/joined_products.hpp"

namespace loom::load {

// Each layer's products of one input (model/joined_products.hpp: q, k and v; a gated
// FFN's gate and up), where loom owns their copies (not mapped, contiguous) in one dtype
// and layout, copied back to back into one buffer unless they are so already (packed
// there by settle_layouts), so the forward pass multiplies them as one matrix
// (joined_view): one product, one activation quantizing and one parallel section
// instead of two or three, and in decode k and v (a quarter of q's rows each with
// grouped query attention) stop running on one thread while the others wait
// (docs/runtime.md, "Products of one input"). Returns, per group of kJoinedProducts, the
// layers whose matrices now read as one. The last step of settle_layouts; the bench's
// synthetic models call it too.
std::array<int64_t, kJoinedProducts.size()> join_shared_input_products(ModelWeights& weights);

// `packed_for`: the ISA the source says its packed tensors were made for ("" unknown).
void settle_layouts(const LoadOptions& options, std::string_view packed_for, ModelWeights& weights,
                    std::vector<TensorLoadRecord>& records, std::vector<std::string>& notes, ThreadPool& pool);

}  // namespace loom::load
