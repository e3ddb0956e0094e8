// Internal: the repacking step of a load (LoadOptions::repack). After the tensors are in
// place and tied ones aliased, each projection matrix whose dtype has a kernel-native
// layout on this CPU (KernelRegistry::preferred_packing) is replaced by a packed copy
// (tensor/packing.hpp), and its record says so. Embeddings (read a row at a time) and a
// tied output projection (it is the embedding) stay as they are.
#pragma once

#include <vector>

#include "loom/load_report.hpp"
#include "loom/loader.hpp"
#include "loom/thread_pool.hpp"
#include "loom/weights.hpp"

namespace loom::load {

void repack_weights(const LoadOptions& options, ModelWeights& weights, std::vector<TensorLoadRecord>& records,
                    ThreadPool& pool);

}  // namespace loom::load
