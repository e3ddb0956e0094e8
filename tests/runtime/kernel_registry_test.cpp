// The kernel registry (tensor/kernel_registry.hpp) that the loader asks instead of the
// runtime: once filled (by src/compose.cpp, on first use) it answers exactly what the
// runtime's own linear_supports() answers, for every dtype in the DType table.
#include <catch2/catch.hpp>

#include <string>

#include "loom/dtype.hpp"
#include "runtime/kernels/linear.hpp"
#include "tensor/kernel_registry.hpp"

TEST_CASE("kernel registry: matrix kernels answer as the runtime's linear_supports, for every dtype") {
  int supported = 0;
  for (const auto& t : loom::all_dtypes()) {
    INFO(std::string(t.name));
    CHECK(loom::has_matrix_kernel(t.dtype) == loom::kernels::linear_supports(t.dtype));
    supported += loom::has_matrix_kernel(t.dtype) ? 1 : 0;
  }
  // The plain floating types the kernels take and ones they do not.
  CHECK(loom::has_matrix_kernel(loom::DType::f32));
  CHECK(loom::has_matrix_kernel(loom::DType::bf16));
  CHECK(loom::has_matrix_kernel(loom::DType::q4_k));
  CHECK_FALSE(loom::has_matrix_kernel(loom::DType::f64));
  CHECK_FALSE(loom::has_matrix_kernel(loom::DType::q8_1));
  CHECK_FALSE(loom::has_matrix_kernel(loom::DType::i32));
  CHECK(supported > 3);
}

TEST_CASE("kernel registry: registration fills every entry, once") {
  const loom::KernelRegistry& a = loom::kernel_registry();
  REQUIRE(a.matrix_supports != nullptr);
  CHECK(&loom::kernel_registry() == &a);
  CHECK(a.matrix_supports == &loom::kernels::linear_supports);
}
