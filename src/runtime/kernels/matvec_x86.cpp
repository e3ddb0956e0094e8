// AVX2 and AVX-512 matrix-vector kernels for f32, f16 and bf16 weights (f32 math).
//
// Decode streams every weight byte once per token, so these kernels are about memory
// bandwidth: four rows per iteration share each load of x, and each row keeps its own
// accumulator so the loads of four independent streams stay in flight.
#include "common/simd.hpp"
#include "runtime/kernels/matvec_kernels.hpp"

namespace loom::kernels {

namespace {

// Four row streams at once are more than the hardware prefetchers keep ahead of on their
// own; asking for each stream's line 1 KiB ahead lifts decode from about the bandwidth
// of a plain streaming sum to above it (measured on Sapphire Rapids).
constexpr int64_t kPrefetchBytes = 1024;
template <typename T>
constexpr int64_t kLineElems = 64 / static_cast<int64_t>(sizeof(T));

// Prefetches the line kPrefetchBytes ahead of column c in one of the four row streams.
// Near the end of a row that line belongs to the row four ahead (the stream's next
// row-group), not to the next row, which another stream is already reading: without
// this, every group of four rows starts four cold streams, which costs most on the short
// rows (1-2 KiB) of small models. A prefetch past the matrix never faults.
template <typename T>
inline void prefetch_stream(const T* row, int64_t c, int64_t cols, int64_t group_stride) {
  const int64_t ahead = c + kPrefetchBytes / static_cast<int64_t>(sizeof(T));
  const T* p = ahead < cols ? row + ahead : row + group_stride + (ahead - cols);
  __builtin_prefetch(reinterpret_cast<const char*>(p), 0, 3);
}

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
  const int64_t full = cols / 16 * 16;
  const auto tail = static_cast<__mmask16>((1u << (cols - full)) - 1);
  int64_t r = 0;
  for (; r + 4 <= n_rows; r += 4) {
    const typename L::T* w0 = w + r * stride;
    const typename L::T* w1 = w0 + stride;
    const typename L::T* w2 = w1 + stride;
    const typename L::T* w3 = w2 + stride;
    __m512 a0 = _mm512_setzero_ps(), a1 = _mm512_setzero_ps();
    __m512 a2 = _mm512_setzero_ps(), a3 = _mm512_setzero_ps();
    for (int64_t c = 0; c < full; c += 16) {
      if ((c & (kLineElems<typename L::T> - 1)) == 0) {
        prefetch_stream(w0, c, cols, 4 * stride);
        prefetch_stream(w1, c, cols, 4 * stride);
        prefetch_stream(w2, c, cols, 4 * stride);
        prefetch_stream(w3, c, cols, 4 * stride);
      }
      const __m512 xv = _mm512_loadu_ps(x + c);
      a0 = _mm512_fmadd_ps(L::load(w0 + c), xv, a0);
      a1 = _mm512_fmadd_ps(L::load(w1 + c), xv, a1);
      a2 = _mm512_fmadd_ps(L::load(w2 + c), xv, a2);
      a3 = _mm512_fmadd_ps(L::load(w3 + c), xv, a3);
    }
    if (tail) {
      const __m512 xv = _mm512_maskz_loadu_ps(tail, x + full);
      a0 = _mm512_fmadd_ps(L::load_masked(w0 + full, tail), xv, a0);
      a1 = _mm512_fmadd_ps(L::load_masked(w1 + full, tail), xv, a1);
      a2 = _mm512_fmadd_ps(L::load_masked(w2 + full, tail), xv, a2);
      a3 = _mm512_fmadd_ps(L::load_masked(w3 + full, tail), xv, a3);
    }
    y[r] = simd::hsum512(a0);
    y[r + 1] = simd::hsum512(a1);
    y[r + 2] = simd::hsum512(a2);
    y[r + 3] = simd::hsum512(a3);
  }
  // Leftover rows accumulate in exactly the order the 4-row loop uses, so a row's
  // result never depends on how rows were split between threads.
  for (; r < n_rows; ++r) {
    const typename L::T* w0 = w + r * stride;
    __m512 a0 = _mm512_setzero_ps();
    for (int64_t c = 0; c < full; c += 16) a0 = _mm512_fmadd_ps(L::load(w0 + c), _mm512_loadu_ps(x + c), a0);
    if (tail) {
      a0 = _mm512_fmadd_ps(L::load_masked(w0 + full, tail), _mm512_maskz_loadu_ps(tail, x + full), a0);
    }
    y[r] = simd::hsum512(a0);
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
  const int64_t full = cols / 8 * 8;
  int64_t r = 0;
  for (; r + 4 <= n_rows; r += 4) {
    const typename L::T* w0 = w + r * stride;
    const typename L::T* w1 = w0 + stride;
    const typename L::T* w2 = w1 + stride;
    const typename L::T* w3 = w2 + stride;
    __m256 a0 = _mm256_setzero_ps(), a1 = _mm256_setzero_ps();
    __m256 a2 = _mm256_setzero_ps(), a3 = _mm256_setzero_ps();
    for (int64_t c = 0; c < full; c += 8) {
      if ((c & (kLineElems<typename L::T> - 1)) == 0) {
        prefetch_stream(w0, c, cols, 4 * stride);
        prefetch_stream(w1, c, cols, 4 * stride);
        prefetch_stream(w2, c, cols, 4 * stride);
        prefetch_stream(w3, c, cols, 4 * stride);
      }
      const __m256 xv = _mm256_loadu_ps(x + c);
      a0 = _mm256_fmadd_ps(L::load(w0 + c), xv, a0);
      a1 = _mm256_fmadd_ps(L::load(w1 + c), xv, a1);
      a2 = _mm256_fmadd_ps(L::load(w2 + c), xv, a2);
      a3 = _mm256_fmadd_ps(L::load(w3 + c), xv, a3);
    }
    float s0 = simd::hsum256(a0), s1 = simd::hsum256(a1), s2 = simd::hsum256(a2), s3 = simd::hsum256(a3);
    for (int64_t c = full; c < cols; ++c) {
      s0 += L::scalar(w0 + c) * x[c];
      s1 += L::scalar(w1 + c) * x[c];
      s2 += L::scalar(w2 + c) * x[c];
      s3 += L::scalar(w3 + c) * x[c];
    }
    y[r] = s0;
    y[r + 1] = s1;
    y[r + 2] = s2;
    y[r + 3] = s3;
  }
  for (; r < n_rows; ++r) {
    const typename L::T* w0 = w + r * stride;
    __m256 a0 = _mm256_setzero_ps();
    for (int64_t c = 0; c < full; c += 8) a0 = _mm256_fmadd_ps(L::load(w0 + c), _mm256_loadu_ps(x + c), a0);
    float s0 = simd::hsum256(a0);
    for (int64_t c = full; c < cols; ++c) s0 += L::scalar(w0 + c) * x[c];
    y[r] = s0;
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
