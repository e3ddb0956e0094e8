// Internal: include this (not <immintrin.h>) in files with hand-written x86 kernels.
// Each kernel function carries its own target attribute, so files build for any
// -march and the run-time dispatcher (loom/cpu.hpp) picks what the CPU supports.
#pragma once

// GCC 12's AVX-512 headers build results from _mm*_undefined_*(), which trips
// -Wuninitialized at our call sites (fixed in GCC 13). Only files with hand-written
// kernels include this header, so the warning stays on everywhere else.
// (-Wmaybe-uninitialized, hit by Eigen too, is off for GCC < 13 in LoomCompilerFlags.)
// The diagnostic state is read where the warning points (inside <immintrin.h>), so this
// precedes the include.
#if defined(__GNUC__) && !defined(__clang__) && __GNUC__ < 13
#pragma GCC diagnostic ignored "-Wuninitialized"
#endif

#include <immintrin.h>

#define LOOM_TARGET_AVX2 __attribute__((target("avx2,fma,f16c")))
#define LOOM_TARGET_AVX512 \
  __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx2,fma,f16c")))
#define LOOM_TARGET_AVX512_BF16 \
  __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx512bf16,avx2,fma,f16c")))
#define LOOM_TARGET_AVX512_VNNI \
  __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx2,fma,f16c")))

namespace loom::simd {

// Horizontal sums.
LOOM_TARGET_AVX2 inline float hsum256(__m256 v) {
  const __m128 lo = _mm256_castps256_ps128(v);
  const __m128 hi = _mm256_extractf128_ps(v, 1);
  __m128 s = _mm_add_ps(lo, hi);
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

LOOM_TARGET_AVX512 inline float hsum512(__m512 v) {
  // Fold the upper 256 bits onto the lower ones, then finish in 256-bit registers.
  const __m512 folded = _mm512_add_ps(v, _mm512_shuffle_f32x4(v, v, 0xEE));
  return hsum256(_mm512_castps512_ps256(folded));
}

}  // namespace loom::simd
