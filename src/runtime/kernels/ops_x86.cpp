// AVX2 versions of the element-wise operations that show up in profiles (ops.hpp). Every
// function carries LOOM_TARGET_AVX2; ops.cpp calls them only on CPUs with AVX2 and FMA.
//
// Element-wise means batch invariant only if an element's result does not depend on
// where it falls in the array: the last n % 8 elements go through the same vector code,
// zero-padded, never through a scalar loop.
#include <cstring>

#include "common/simd.hpp"
#include "runtime/kernels/ops.hpp"
#include "runtime/kernels/vec_math_x86.hpp"

namespace loom::kernels {

namespace {

// silu(g) * u = g / (1 + exp(-g)) * u, 8 lanes.
LOOM_TARGET_AVX2 inline __m256 silu_mul8(__m256 g, __m256 u) {
  const __m256 e = exp8(_mm256_sub_ps(_mm256_setzero_ps(), g));
  return _mm256_mul_ps(_mm256_div_ps(g, _mm256_add_ps(_mm256_set1_ps(1.0f), e)), u);
}

}  // namespace

LOOM_TARGET_AVX2 void silu_mul_avx2(float* gate, const float* up, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    _mm256_storeu_ps(gate + i, silu_mul8(_mm256_loadu_ps(gate + i), _mm256_loadu_ps(up + i)));
  }
  if (i < n) {
    alignas(32) float g[8] = {};
    alignas(32) float u[8] = {};
    const auto rest = static_cast<size_t>(n - i) * sizeof(float);
    std::memcpy(g, gate + i, rest);
    std::memcpy(u, up + i, rest);
    _mm256_store_ps(g, silu_mul8(_mm256_load_ps(g), _mm256_load_ps(u)));
    std::memcpy(gate + i, g, rest);
  }
}

}  // namespace loom::kernels
