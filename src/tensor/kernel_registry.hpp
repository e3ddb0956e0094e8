// Internal: which dtypes the runtime's kernels compute on, as a table the runtime fills.
//
// A lower layer that must know what the runtime can do (the loader keeps a weight's
// stored dtype only when a matrix kernel exists for it, and widens it to f32 otherwise)
// asks this registry instead of including the runtime: dependencies point downwards only
// (docs/architecture.md, "Layers and folders").
//
// Filling is explicit and happens once, on first use: kernel_registry() calls
// detail::register_kernels(), which the library's composition root (src/compose.cpp)
// defines by handing the registry to the runtime (kernels::register_kernels). No global
// constructor is involved, so neither the order of static initialisation nor a static
// link that leaves out unreferenced objects can change the answers: whatever asks the
// registry links the code that fills it. Every function may be called from any thread.
#pragma once

#include "loom/dtype.hpp"
#include "loom/tensor.hpp"

namespace loom {

// One entry per question a lower layer asks the runtime. Every entry must be set.
struct KernelRegistry {
  // True when the runtime's matrix kernel (kernels::linear) handles weights of `dtype`.
  bool (*matrix_supports)(DType dtype) noexcept = nullptr;
  // The kernel-native layout (tensor/packing.hpp) the matrix kernel prefers for weights
  // of `dtype` on this CPU, or Packing::none (the loader's LoadOptions::repack asks).
  Packing (*preferred_packing)(DType dtype) noexcept = nullptr;
};

// The filled registry. Throws Error(internal) when registration left an entry unset.
const KernelRegistry& kernel_registry();

// kernel_registry().matrix_supports(dtype).
bool has_matrix_kernel(DType dtype);

namespace detail {
// Fills `registry`. Defined once, by the composition root (src/compose.cpp), not by the
// runtime itself: this layer names no function of a layer above it.
void register_kernels(KernelRegistry& registry);
}  // namespace detail

}  // namespace loom
