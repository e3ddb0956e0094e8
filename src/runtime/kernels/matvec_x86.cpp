// AVX2 and AVX-512 matrix-vector kernels for f32, f16 and bf16 weights (f32 math).
//
// Decode streams every weight byte once per token, so these kernels are about memory
// bandwidth. Each walks its rows one after another, so a thread's whole share of the
// matrix is one sequential stream, which the hardware prefetchers follow on their own:
// with weights on huge pages (see Storage::allocate), software prefetching 1-8 KiB ahead
// made decode 25-45% slower on the small bench model (AMD Zen 4), so there is none.
// (Four interleaved row streams sharing each load of x, the earlier design, were slower
// still on the 1-2 KiB rows of small models: every group of four rows restarted four
// short streams.) x stays in L1; four accumulators per row hide the FMA latency. Every
// row is computed by the same code, so a row's result never depends on how rows were
// split between threads.
#include "common/simd.hpp"
#include "runtime/kernels/matvec_kernels.hpp"

namespace loom::kernels {

namespace {

// ---- lane loaders: widen 16 (AVX-512) or 8 (AVX2) weights to f32 ----
struct F32x16 {
  using T = float;
  LOOM_TARGET_AVX512 static inline __m512 load(const float* p) { return _mm512_loadu_ps(p); }
  LOOM_TARGET_AVX512 static inline __m512 load_masked(const float* p, __mmask16 m) {
    return _mm512_maskz_loadu_ps(m, p);
  }
};
struct F16x16 {
  using T = uint16_t;
  LOOM_TARGET_AVX512 static inline __m512 load(const uint16_t* p) {
    return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
  }
  LOOM_TARGET_AVX512 static inline __m512 load_masked(const uint16_t* p, __mmask16 m) {
    return _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m, p));
  }
};
struct Bf16x16 {
  using T = uint16_t;
  LOOM_TARGET_AVX512 static inline __m512 load(const uint16_t* p) {
    const __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
  }
  LOOM_TARGET_AVX512 static inline __m512 load_masked(const uint16_t* p, __mmask16 m) {
    const __m256i h = _mm256_maskz_loadu_epi16(m, p);
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
  }
};

template <typename L>
LOOM_TARGET_AVX512 inline void matvec_avx512(const typename L::T* w, int64_t stride, const float* x,
                                             float* y, int64_t n_rows, int64_t cols) {
  constexpr int64_t kStep = 64;  // elements per iteration: 4 accumulators x 16 lanes
  const int64_t full = cols / kStep * kStep;
  for (int64_t r = 0; r < n_rows; ++r) {
    const typename L::T* row = w + r * stride;
    __m512 a0 = _mm512_setzero_ps(), a1 = _mm512_setzero_ps();
    __m512 a2 = _mm512_setzero_ps(), a3 = _mm512_setzero_ps();
    int64_t c = 0;
    for (; c < full; c += kStep) {
      a0 = _mm512_fmadd_ps(L::load(row + c), _mm512_loadu_ps(x + c), a0);
      a1 = _mm512_fmadd_ps(L::load(row + c + 16), _mm512_loadu_ps(x + c + 16), a1);
      a2 = _mm512_fmadd_ps(L::load(row + c + 32), _mm512_loadu_ps(x + c + 32), a2);
      a3 = _mm512_fmadd_ps(L::load(row + c + 48), _mm512_loadu_ps(x + c + 48), a3);
    }
    for (; c + 16 <= cols; c += 16) a0 = _mm512_fmadd_ps(L::load(row + c), _mm512_loadu_ps(x + c), a0);
    if (c < cols) {
      const auto tail = static_cast<__mmask16>((1u << (cols - c)) - 1);
      a1 = _mm512_fmadd_ps(L::load_masked(row + c, tail), _mm512_maskz_loadu_ps(tail, x + c), a1);
    }
    y[r] = simd::hsum512(_mm512_add_ps(_mm512_add_ps(a0, a1), _mm512_add_ps(a2, a3)));
  }
}

struct F32x8 {
  using T = float;
  LOOM_TARGET_AVX2 static inline __m256 load(const float* p) { return _mm256_loadu_ps(p); }
  static inline float scalar(const float* p) { return *p; }
};
struct F16x8 {
  using T = uint16_t;
  LOOM_TARGET_AVX2 static inline __m256 load(const uint16_t* p) {
    return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  }
  LOOM_TARGET_AVX2 static inline float scalar(const uint16_t* p) {
    return _mm_cvtss_f32(_mm_cvtph_ps(_mm_cvtsi32_si128(*p)));
  }
};
struct Bf16x8 {
  using T = uint16_t;
  LOOM_TARGET_AVX2 static inline __m256 load(const uint16_t* p) {
    const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
  }
  static inline float scalar(const uint16_t* p) {
    const uint32_t bits = static_cast<uint32_t>(*p) << 16;
    float f;
    __builtin_memcpy(&f, &bits, 4);
    return f;
  }
};

template <typename L>
LOOM_TARGET_AVX2 inline void matvec_avx2(const typename L::T* w, int64_t stride, const float* x,
                                         float* y, int64_t n_rows, int64_t cols) {
  constexpr int64_t kStep = 32;  // elements per iteration: 4 accumulators x 8 lanes
  const int64_t full = cols / kStep * kStep;
  for (int64_t r = 0; r < n_rows; ++r) {
    const typename L::T* row = w + r * stride;
    __m256 a0 = _mm256_setzero_ps(), a1 = _mm256_setzero_ps();
    __m256 a2 = _mm256_setzero_ps(), a3 = _mm256_setzero_ps();
    int64_t c = 0;
    for (; c < full; c += kStep) {
      a0 = _mm256_fmadd_ps(L::load(row + c), _mm256_loadu_ps(x + c), a0);
      a1 = _mm256_fmadd_ps(L::load(row + c + 8), _mm256_loadu_ps(x + c + 8), a1);
      a2 = _mm256_fmadd_ps(L::load(row + c + 16), _mm256_loadu_ps(x + c + 16), a2);
      a3 = _mm256_fmadd_ps(L::load(row + c + 24), _mm256_loadu_ps(x + c + 24), a3);
    }
    for (; c + 8 <= cols; c += 8) a0 = _mm256_fmadd_ps(L::load(row + c), _mm256_loadu_ps(x + c), a0);
    float sum = simd::hsum256(_mm256_add_ps(_mm256_add_ps(a0, a1), _mm256_add_ps(a2, a3)));
    for (; c < cols; ++c) sum += L::scalar(row + c) * x[c];
    y[r] = sum;
  }
}

}  // namespace

void matvec_f32_avx512(const float* w, int64_t s, const float* x, float* y, int64_t n, int64_t c) {
  matvec_avx512<F32x16>(w, s, x, y, n, c);
}
void matvec_f16_avx512(const uint16_t* w, int64_t s, const float* x, float* y, int64_t n, int64_t c) {
  matvec_avx512<F16x16>(w, s, x, y, n, c);
}
void matvec_bf16_avx512(const uint16_t* w, int64_t s, const float* x, float* y, int64_t n, int64_t c) {
  matvec_avx512<Bf16x16>(w, s, x, y, n, c);
}
void matvec_f32_avx2(const float* w, int64_t s, const float* x, float* y, int64_t n, int64_t c) {
  matvec_avx2<F32x8>(w, s, x, y, n, c);
}
void matvec_f16_avx2(const uint16_t* w, int64_t s, const float* x, float* y, int64_t n, int64_t c) {
  matvec_avx2<F16x8>(w, s, x, y, n, c);
}
void matvec_bf16_avx2(const uint16_t* w, int64_t s, const float* x, float* y, int64_t n, int64_t c) {
  matvec_avx2<Bf16x8>(w, s, x, y, n, c);
}

}  // namespace loom::kernels
