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

// out[2u + h] = hsum256 of half h (lanes 8h .. 8h + 7) of v[u], for eight vectors: the
// adds of hsum256 (128-bit halves, then lanes 2 apart, then neighbours) in the same
// pairs and operand order, done for several vectors at once after shuffling their
// partial sums side by side (21 instructions where sixteen hsum256 take about 100).
LOOM_TARGET_AVX512 inline void hsum256_halves8(const __m512* v, float* out) {
  __m512 b[4], c[2];
  for (int i = 0; i < 4; ++i) {  // quarters 0 + 1 and 2 + 3: halves 4i .. 4i + 3, 4 lanes each
    b[i] = _mm512_add_ps(_mm512_shuffle_f32x4(v[2 * i], v[2 * i + 1], 0x88),
                         _mm512_shuffle_f32x4(v[2 * i], v[2 * i + 1], 0xDD));
  }
  for (int i = 0; i < 2; ++i) {  // lanes 0 + 2, 1 + 3 of each quarter
    c[i] = _mm512_add_ps(_mm512_shuffle_ps(b[2 * i], b[2 * i + 1], 0x44),
                         _mm512_shuffle_ps(b[2 * i], b[2 * i + 1], 0xEE));
  }
  // lanes 0 + 1: lane 4m + k holds half 4k + m
  const __m512 d = _mm512_add_ps(_mm512_shuffle_ps(c[0], c[1], 0x88), _mm512_shuffle_ps(c[0], c[1], 0xDD));
  alignas(64) float lanes[16];
  _mm512_store_ps(lanes, d);
  for (int m = 0; m < 4; ++m) {
    for (int k = 0; k < 4; ++k) out[4 * k + m] = lanes[4 * m + k];
  }
}

// out[i] = hsum512(v[i]) for sixteen vectors, bit for bit: hsum512 first adds lane i to
// lane i + 8, which here folds two vectors into the halves of one; the rest is hsum256
// on each half (hsum256_halves8).
LOOM_TARGET_AVX512 inline void hsum512_x16(const __m512* v, float* out) {
  __m512 a[8];
  for (int i = 0; i < 8; ++i) {  // [v(2i) lanes i + (i+8) | v(2i+1) ...], 8 lanes each
    a[i] = _mm512_add_ps(_mm512_shuffle_f32x4(v[2 * i], v[2 * i + 1], 0x44),
                         _mm512_shuffle_f32x4(v[2 * i], v[2 * i + 1], 0xEE));
  }
  hsum256_halves8(a, out);
}

}  // namespace loom::simd
