#include "tensor/kernel_registry.hpp"

#include "loom/error.hpp"

namespace loom {

const KernelRegistry& kernel_registry() {
  // A function-local static: filled by the first caller, exactly once even when threads
  // race to it; a throw leaves it unfilled and the next call tries again.
  static const KernelRegistry registry = [] {
    KernelRegistry r;
    detail::register_kernels(r);
    if (r.matrix_supports == nullptr || r.preferred_packing == nullptr) {
      throw Error(ErrorCode::internal, "the runtime registered no matrix kernels (src/compose.cpp)");
    }
    return r;
  }();
  return registry;
}

bool has_matrix_kernel(DType dtype) { return kernel_registry().matrix_supports(dtype); }

}  // namespace loom
