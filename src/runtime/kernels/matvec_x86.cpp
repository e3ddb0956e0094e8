// AVX2 and AVX-512 products of f32, f16 and bf16 weights with f32 activations: the
// decode matvec (one token) and the prefill GEMM (many tokens), built from ONE tile
// function per ISA so that every (row, token) output is summed in the same order
// whatever the batch: row t of a many-token product is bit-identical to the product of
// token t alone (batch invariance, docs/runtime.md).
//
// The order, per (row, token), with V lanes (8 AVX2, 16 AVX-512):
//   four V-lane accumulators a0..a3; for each whole step of 4V columns c,
//     a_j += W[c + jV .. +V] * x[c + jV .. +V]   (one FMA per lane, k ascending);
//   then each remaining whole V-vector goes into a0 (in order);
//   then the last cols % V columns, zero-filled to V lanes, go into a1 (one FMA);
//   result = hsum((a0 + a1) + (a2 + a3)) (simd::hsum256 / hsum512).
// f16 / bf16 weights are widened exactly to f32 in registers (F16C / a shift), so the
// widening cannot change a bit.
//
// tile<L, T> computes T tokens against one weight row with 4T accumulators: each weight
// vector is loaded (and widened) once for T tokens. The matvec is tile<L, 1>; the GEMM
// walks tokens in tiles of kTokens (T = 3 on AVX2: 12 of the 16 ymm; T = 6 on AVX-512:
// 24 of the 32 zmm) and the remaining 1..kTokens-1 tokens with tile<L, rest>, which
// applies the same per-token sequence of FMAs. Nothing depends on the thread split.
//
// Decode streams every weight byte once per token, so the matvec is about memory
// bandwidth. It walks its rows one after another, so a thread's whole share of the
// matrix is one sequential stream, which the hardware prefetchers follow on their own:
// with weights on huge pages (see Storage::allocate), software prefetching 1-8 KiB ahead
// made decode 25-45% slower on the small bench model (AMD Zen 4), so there is none.
// (Four interleaved row streams sharing each load of x, the earlier design, were slower
// still on the 1-2 KiB rows of small models: every group of four rows restarted four
// short streams.) x stays in L1; the four accumulators per row hide the FMA latency.
//
// The GEMM walks rows in blocks of about kBlockBytes of weights (kept in L2 while every
// token tile passes over them); a token tile's activations stay in L1/L2 for the block.
#include <algorithm>
#include <cstring>
#include <utility>

#include "common/simd.hpp"
#include "runtime/kernels/matvec_kernels.hpp"

namespace loom::kernels {

namespace {

constexpr int64_t kBlockBytes = 128 * 1024;

int64_t block_rows(int64_t cols, int64_t elem_bytes) {
  return std::max<int64_t>(1, kBlockBytes / std::max<int64_t>(1, cols * elem_bytes));
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

// One weight row against T tokens (x rows x_stride apart); out[t] for t < T.
template <typename L, int T>
LOOM_TARGET_AVX512 inline void tile_avx512(const typename L::T* row, const float* x,
                                           int64_t x_stride, int64_t cols, float* out) {
  constexpr int64_t kV = 16;
  constexpr int64_t kStep = 4 * kV;
  const int64_t full = cols / kStep * kStep;
  __m512 a0[T], a1[T], a2[T], a3[T];
  for (int t = 0; t < T; ++t) a0[t] = a1[t] = a2[t] = a3[t] = _mm512_setzero_ps();
  int64_t c = 0;
  for (; c < full; c += kStep) {
    const __m512 w0 = L::load(row + c);
    for (int t = 0; t < T; ++t) a0[t] = _mm512_fmadd_ps(w0, _mm512_loadu_ps(x + t * x_stride + c), a0[t]);
    const __m512 w1 = L::load(row + c + kV);
    for (int t = 0; t < T; ++t) a1[t] = _mm512_fmadd_ps(w1, _mm512_loadu_ps(x + t * x_stride + c + kV), a1[t]);
    const __m512 w2 = L::load(row + c + 2 * kV);
    for (int t = 0; t < T; ++t) a2[t] = _mm512_fmadd_ps(w2, _mm512_loadu_ps(x + t * x_stride + c + 2 * kV), a2[t]);
    const __m512 w3 = L::load(row + c + 3 * kV);
    for (int t = 0; t < T; ++t) a3[t] = _mm512_fmadd_ps(w3, _mm512_loadu_ps(x + t * x_stride + c + 3 * kV), a3[t]);
  }
  for (; c + kV <= cols; c += kV) {
    const __m512 w = L::load(row + c);
    for (int t = 0; t < T; ++t) a0[t] = _mm512_fmadd_ps(w, _mm512_loadu_ps(x + t * x_stride + c), a0[t]);
  }
  if (c < cols) {
    const auto tail = static_cast<__mmask16>((1u << (cols - c)) - 1);
    const __m512 w = L::load_masked(row + c, tail);
    for (int t = 0; t < T; ++t) {
      a1[t] = _mm512_fmadd_ps(w, _mm512_maskz_loadu_ps(tail, x + t * x_stride + c), a1[t]);
    }
  }
  for (int t = 0; t < T; ++t) {
    out[t] = simd::hsum512(_mm512_add_ps(_mm512_add_ps(a0[t], a1[t]), _mm512_add_ps(a2[t], a3[t])));
  }
}

struct F32x8 {
  using T = float;
  LOOM_TARGET_AVX2 static inline __m256 load(const float* p) { return _mm256_loadu_ps(p); }
};
struct F16x8 {
  using T = uint16_t;
  LOOM_TARGET_AVX2 static inline __m256 load(const uint16_t* p) {
    return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  }
};
struct Bf16x8 {
  using T = uint16_t;
  LOOM_TARGET_AVX2 static inline __m256 load(const uint16_t* p) {
    const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
  }
};

// n < 8 elements copied into a zeroed 8-lane buffer (zero bits are 0.0 in all three
// dtypes), so the tail never reads past the row.
template <typename E>
struct Tail8 {
  E v[8] = {};
  Tail8(const E* p, int64_t n) { std::memcpy(v, p, static_cast<size_t>(n) * sizeof(E)); }
};

template <typename L, int T>
LOOM_TARGET_AVX2 inline void tile_avx2(const typename L::T* row, const float* x, int64_t x_stride,
                                       int64_t cols, float* out) {
  constexpr int64_t kV = 8;
  constexpr int64_t kStep = 4 * kV;
  const int64_t full = cols / kStep * kStep;
  __m256 a0[T], a1[T], a2[T], a3[T];
  for (int t = 0; t < T; ++t) a0[t] = a1[t] = a2[t] = a3[t] = _mm256_setzero_ps();
  int64_t c = 0;
  for (; c < full; c += kStep) {
    const __m256 w0 = L::load(row + c);
    for (int t = 0; t < T; ++t) a0[t] = _mm256_fmadd_ps(w0, _mm256_loadu_ps(x + t * x_stride + c), a0[t]);
    const __m256 w1 = L::load(row + c + kV);
    for (int t = 0; t < T; ++t) a1[t] = _mm256_fmadd_ps(w1, _mm256_loadu_ps(x + t * x_stride + c + kV), a1[t]);
    const __m256 w2 = L::load(row + c + 2 * kV);
    for (int t = 0; t < T; ++t) a2[t] = _mm256_fmadd_ps(w2, _mm256_loadu_ps(x + t * x_stride + c + 2 * kV), a2[t]);
    const __m256 w3 = L::load(row + c + 3 * kV);
    for (int t = 0; t < T; ++t) a3[t] = _mm256_fmadd_ps(w3, _mm256_loadu_ps(x + t * x_stride + c + 3 * kV), a3[t]);
  }
  for (; c + kV <= cols; c += kV) {
    const __m256 w = L::load(row + c);
    for (int t = 0; t < T; ++t) a0[t] = _mm256_fmadd_ps(w, _mm256_loadu_ps(x + t * x_stride + c), a0[t]);
  }
  if (c < cols) {
    const Tail8<typename L::T> wt(row + c, cols - c);
    const __m256 w = L::load(wt.v);
    for (int t = 0; t < T; ++t) {
      const Tail8<float> xt(x + t * x_stride + c, cols - c);
      a1[t] = _mm256_fmadd_ps(w, _mm256_loadu_ps(xt.v), a1[t]);
    }
  }
  for (int t = 0; t < T; ++t) {
    out[t] = simd::hsum256(_mm256_add_ps(_mm256_add_ps(a0[t], a1[t]), _mm256_add_ps(a2[t], a3[t])));
  }
}

// ---- drivers, shared by both ISAs through a Tiles policy ----

template <typename L>
struct Avx512Tiles {
  static constexpr int kTokens = 6;
  template <int T>
  LOOM_TARGET_AVX512 static void run(const typename L::T* row, const float* x, int64_t xs,
                                     int64_t cols, float* out) {
    tile_avx512<L, T>(row, x, xs, cols, out);
  }
};
template <typename L>
struct Avx2Tiles {
  static constexpr int kTokens = 3;
  template <int T>
  LOOM_TARGET_AVX2 static void run(const typename L::T* row, const float* x, int64_t xs,
                                   int64_t cols, float* out) {
    tile_avx2<L, T>(row, x, xs, cols, out);
  }
};

template <typename P, typename E>
void matvec(const E* w, int64_t stride, const float* x, float* y, int64_t n_rows, int64_t cols) {
  for (int64_t r = 0; r < n_rows; ++r) P::template run<1>(w + r * stride, x, 0, cols, y + r);
}

// Tokens [t0, t0 + T) of rows [0, n_rows) of one block: Y[t, r] for each.
template <typename P, int T, typename E>
void gemm_token_tile(const E* w, int64_t stride, const float* x, int64_t x_stride, float* y,
                     int64_t y_stride, int64_t n_rows, int64_t cols) {
  float out[T];
  for (int64_t r = 0; r < n_rows; ++r) {
    P::template run<T>(w + r * stride, x, x_stride, cols, out);
    for (int t = 0; t < T; ++t) y[t * y_stride + r] = out[t];
  }
}

// The remaining 1..kTokens-1 tokens, through a table (T must be a compile-time constant).
template <typename P, typename E, int... I>
void gemm_rest(int rest, const E* w, int64_t stride, const float* x, int64_t x_stride, float* y,
               int64_t y_stride, int64_t n_rows, int64_t cols, std::integer_sequence<int, I...>) {
  using Fn = void (*)(const E*, int64_t, const float*, int64_t, float*, int64_t, int64_t, int64_t);
  static constexpr Fn kFns[] = {&gemm_token_tile<P, I + 1, E>...};
  kFns[rest - 1](w, stride, x, x_stride, y, y_stride, n_rows, cols);
}

template <typename P, typename E>
void gemm(const E* w, int64_t stride, const float* x, int64_t x_stride, int64_t n_tokens, float* y,
          int64_t y_stride, int64_t n_rows, int64_t cols) {
  constexpr int kT = P::kTokens;
  const int64_t block = block_rows(cols, static_cast<int64_t>(sizeof(E)));
  for (int64_t r0 = 0; r0 < n_rows; r0 += block) {
    const int64_t nr = std::min(block, n_rows - r0);
    const E* wb = w + r0 * stride;
    int64_t t0 = 0;
    for (; t0 + kT <= n_tokens; t0 += kT) {
      gemm_token_tile<P, kT>(wb, stride, x + t0 * x_stride, x_stride, y + t0 * y_stride + r0,
                             y_stride, nr, cols);
    }
    if (t0 < n_tokens) {
      gemm_rest<P>(static_cast<int>(n_tokens - t0), wb, stride, x + t0 * x_stride, x_stride,
                   y + t0 * y_stride + r0, y_stride, nr, cols,
                   std::make_integer_sequence<int, kT - 1>{});
    }
  }
}

}  // namespace

void matvec_f32_avx512(const float* w, int64_t s, const float* x, float* y, int64_t n, int64_t c) {
  matvec<Avx512Tiles<F32x16>>(w, s, x, y, n, c);
}
void matvec_f16_avx512(const uint16_t* w, int64_t s, const float* x, float* y, int64_t n, int64_t c) {
  matvec<Avx512Tiles<F16x16>>(w, s, x, y, n, c);
}
void matvec_bf16_avx512(const uint16_t* w, int64_t s, const float* x, float* y, int64_t n, int64_t c) {
  matvec<Avx512Tiles<Bf16x16>>(w, s, x, y, n, c);
}
void matvec_f32_avx2(const float* w, int64_t s, const float* x, float* y, int64_t n, int64_t c) {
  matvec<Avx2Tiles<F32x8>>(w, s, x, y, n, c);
}
void matvec_f16_avx2(const uint16_t* w, int64_t s, const float* x, float* y, int64_t n, int64_t c) {
  matvec<Avx2Tiles<F16x8>>(w, s, x, y, n, c);
}
void matvec_bf16_avx2(const uint16_t* w, int64_t s, const float* x, float* y, int64_t n, int64_t c) {
  matvec<Avx2Tiles<Bf16x8>>(w, s, x, y, n, c);
}

void gemm_f32_avx512(const float* w, int64_t s, const float* x, int64_t xs, int64_t nt, float* y,
                     int64_t ys, int64_t n, int64_t c) {
  gemm<Avx512Tiles<F32x16>>(w, s, x, xs, nt, y, ys, n, c);
}
void gemm_f16_avx512(const uint16_t* w, int64_t s, const float* x, int64_t xs, int64_t nt, float* y,
                     int64_t ys, int64_t n, int64_t c) {
  gemm<Avx512Tiles<F16x16>>(w, s, x, xs, nt, y, ys, n, c);
}
void gemm_bf16_avx512(const uint16_t* w, int64_t s, const float* x, int64_t xs, int64_t nt,
                      float* y, int64_t ys, int64_t n, int64_t c) {
  gemm<Avx512Tiles<Bf16x16>>(w, s, x, xs, nt, y, ys, n, c);
}
void gemm_f32_avx2(const float* w, int64_t s, const float* x, int64_t xs, int64_t nt, float* y,
                   int64_t ys, int64_t n, int64_t c) {
  gemm<Avx2Tiles<F32x8>>(w, s, x, xs, nt, y, ys, n, c);
}
void gemm_f16_avx2(const uint16_t* w, int64_t s, const float* x, int64_t xs, int64_t nt, float* y,
                   int64_t ys, int64_t n, int64_t c) {
  gemm<Avx2Tiles<F16x8>>(w, s, x, xs, nt, y, ys, n, c);
}
void gemm_bf16_avx2(const uint16_t* w, int64_t s, const float* x, int64_t xs, int64_t nt, float* y,
                    int64_t ys, int64_t n, int64_t c) {
  gemm<Avx2Tiles<Bf16x8>>(w, s, x, xs, nt, y, ys, n, c);
}

}  // namespace loom::kernels
