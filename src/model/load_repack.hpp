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
// Each changed tensor's record says so. Then each layer's q, k and v, where loom owns
// their copies (repacked or converted) in one dtype and layout, are put back to back in
// one buffer, so the forward pass multiplies them as one matrix (tensor/gather.hpp,
// stacked_rows_view); a note counts the layers.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "loom/load_report.hpp"
#include "loom/loader.hpp"
#include "loom/thread_pool.hpp"
#include "loom/weights.hpp"

namespace loom::load {

// Each layer's q, k and v, where loom owns their copies (not mapped, contiguous) in one
// dtype and layout, copied back to back into one buffer, so the forward pass multiplies
// them as one matrix (stacked_rows_view): one product instead of three, and in decode k
// and v (a quarter of q's rows each with grouped query attention) stop running on one
// thread while the others wait (docs/runtime.md, "q, k and v in one product"). Returns
// the layers whose three now read as one matrix. The last step of settle_layouts; the
// bench's synthetic models call it too.
int64_t join_attention_inputs(ModelWeights& weights);

// `packed_for`: the ISA the source says its packed tensors were made for ("" unknown).
void settle_layouts(const LoadOptions& options, std::string_view packed_for, ModelWeights& weights,
                    std::vector<TensorLoadRecord>& records, std::vector<std::string>& notes, ThreadPool& pool);

}  // namespace loom::load
