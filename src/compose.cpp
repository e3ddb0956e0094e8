// The library's composition root: the one place that wires a higher layer's answers into
// a lower layer's registry (tensor/kernel_registry.hpp), so that no layer includes or
// calls one above it. It belongs to no layer and may include any; it is linked into both
// libloom.a and libloom.so, and the registry references it, so every program that asks
// the registry also links what fills it.
#include "runtime/kernels/linear.hpp"
#include "tensor/kernel_registry.hpp"

namespace loom::detail {

void register_kernels(KernelRegistry& registry) { kernels::register_kernels(registry); }

}  // namespace loom::detail
