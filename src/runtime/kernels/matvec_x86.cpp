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
// rows_<isa><L, T> computes T tokens against weight rows with 4T accumulators per row
// (steps_* then finish_*): each weight vector is loaded (and widened) once for T tokens.
// The matvec is T = 1; the GEMM walks tokens in tiles of kTokens (T = 3 on AVX2: 12 of
// the 16 ymm; T = 6 on AVX-512: 24 of the 32 zmm) and the remaining 1..kTokens-1 tokens
// with T = rest. Every T applies the same sequence of FMAs to each token's lanes, so the
// tile shape cannot change a bit. Nothing depends on the thread split either.
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
// token tile passes over them) and, for long rows, columns in blocks whose token rows
// fit in L1 (see rows_* below).
#include <algorithm>
#include <cstring>
#include <utility>
#include <vector>

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

// One weight row against T tokens (x rows x_stride apart), in three parts so the GEMM
// can split the whole steps of a long row into column blocks (the accumulators wait in
// memory between blocks, which changes no bit): zero, steps over [c0, c1) (whole steps
// of 4V columns), finish (the remaining columns and the horizontal sums into out[t]).
template <int T>
struct Acc512 {
  __m512 a[4][T];
};

template <typename L, int T>
LOOM_TARGET_AVX512 inline void steps_avx512(const typename L::T* row, const float* x,
                                            int64_t x_stride, int64_t c0, int64_t c1,
                                            Acc512<T>& acc) {
  constexpr int64_t kV = 16;
  for (int64_t c = c0; c < c1; c += 4 * kV) {
    for (int j = 0; j < 4; ++j) {
      const __m512 w = L::load(row + c + j * kV);
      for (int t = 0; t < T; ++t) {
        acc.a[j][t] = _mm512_fmadd_ps(w, _mm512_loadu_ps(x + t * x_stride + c + j * kV), acc.a[j][t]);
      }
    }
  }
}

template <typename L, int T>
LOOM_TARGET_AVX512 inline void finish_avx512(const typename L::T* row, const float* x,
                                             int64_t x_stride, int64_t c, int64_t cols,
                                             Acc512<T>& acc, float* out, int64_t out_stride) {
  constexpr int64_t kV = 16;
  for (; c + kV <= cols; c += kV) {
    const __m512 w = L::load(row + c);
    for (int t = 0; t < T; ++t) acc.a[0][t] = _mm512_fmadd_ps(w, _mm512_loadu_ps(x + t * x_stride + c), acc.a[0][t]);
  }
  if (c < cols) {
    const auto tail = static_cast<__mmask16>((1u << (cols - c)) - 1);
    const __m512 w = L::load_masked(row + c, tail);
    for (int t = 0; t < T; ++t) {
      acc.a[1][t] = _mm512_fmadd_ps(w, _mm512_maskz_loadu_ps(tail, x + t * x_stride + c), acc.a[1][t]);
    }
  }
  for (int t = 0; t < T; ++t) {
    out[t * out_stride] = simd::hsum512(_mm512_add_ps(_mm512_add_ps(acc.a[0][t], acc.a[1][t]),
                                                      _mm512_add_ps(acc.a[2][t], acc.a[3][t])));
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

template <int T>
struct Acc256 {
  __m256 a[4][T];
};

template <typename L, int T>
LOOM_TARGET_AVX2 inline void steps_avx2(const typename L::T* row, const float* x, int64_t x_stride,
                                        int64_t c0, int64_t c1, Acc256<T>& acc) {
  constexpr int64_t kV = 8;
  for (int64_t c = c0; c < c1; c += 4 * kV) {
    for (int j = 0; j < 4; ++j) {
      const __m256 w = L::load(row + c + j * kV);
      for (int t = 0; t < T; ++t) {
        acc.a[j][t] = _mm256_fmadd_ps(w, _mm256_loadu_ps(x + t * x_stride + c + j * kV), acc.a[j][t]);
      }
    }
  }
}

template <typename L, int T>
LOOM_TARGET_AVX2 inline void finish_avx2(const typename L::T* row, const float* x, int64_t x_stride,
                                         int64_t c, int64_t cols, Acc256<T>& acc, float* out,
                                         int64_t out_stride) {
  constexpr int64_t kV = 8;
  for (; c + kV <= cols; c += kV) {
    const __m256 w = L::load(row + c);
    for (int t = 0; t < T; ++t) acc.a[0][t] = _mm256_fmadd_ps(w, _mm256_loadu_ps(x + t * x_stride + c), acc.a[0][t]);
  }
  if (c < cols) {
    const Tail8<typename L::T> wt(row + c, cols - c);
    const __m256 w = L::load(wt.v);
    for (int t = 0; t < T; ++t) {
      const Tail8<float> xt(x + t * x_stride + c, cols - c);
      acc.a[1][t] = _mm256_fmadd_ps(w, _mm256_loadu_ps(xt.v), acc.a[1][t]);
    }
  }
  for (int t = 0; t < T; ++t) {
    out[t * out_stride] = simd::hsum256(_mm256_add_ps(_mm256_add_ps(acc.a[0][t], acc.a[1][t]),
                                                      _mm256_add_ps(acc.a[2][t], acc.a[3][t])));
  }
}

// ---- drivers ----
//
// rows<T>: rows [0, n_rows) against tokens [0, T): y[t * y_stride + r]. A row's whole
// steps run in one go when the T token rows of a column block fit in L1 (kL1Bytes),
// else in column blocks of that size, every row of the block visiting a column block
// before the next one (the token rows stay in L1 for all of them); `state` (n_rows x
// 4 x T x V floats) holds the accumulators in between. Same FMAs per lane in the same
// order either way.
constexpr int64_t kL1Bytes = 16 * 1024;

template <typename L, int T>
LOOM_TARGET_AVX512 void rows_avx512(const typename L::T* w, int64_t stride, const float* x,
                                    int64_t xs, float* y, int64_t ys, int64_t n_rows,
                                    int64_t cols, float* state) {
  constexpr int64_t kV = 16;
  constexpr int64_t kStep = 4 * kV;
  constexpr int64_t kBlock = std::max<int64_t>(kStep, kL1Bytes / (T * 4) / kStep * kStep);
  constexpr int64_t kPerRow = 4 * T * kV;
  const int64_t full = cols / kStep * kStep;
  if (full <= kBlock || state == nullptr) {
    for (int64_t r = 0; r < n_rows; ++r) {
      Acc512<T> acc;
      for (auto& chain : acc.a) {
        for (auto& v : chain) v = _mm512_setzero_ps();
      }
      steps_avx512<L, T>(w + r * stride, x, xs, 0, full, acc);
      finish_avx512<L, T>(w + r * stride, x, xs, full, cols, acc, y + r, ys);
    }
    return;
  }
  for (int64_t c0 = 0; c0 < full; c0 += kBlock) {
    const int64_t c1 = std::min(full, c0 + kBlock);
    for (int64_t r = 0; r < n_rows; ++r) {
      float* s = state + r * kPerRow;
      Acc512<T> acc;
      for (int j = 0; j < 4; ++j) {
        for (int t = 0; t < T; ++t) {
          acc.a[j][t] = c0 == 0 ? _mm512_setzero_ps() : _mm512_loadu_ps(s + (j * T + t) * kV);
        }
      }
      steps_avx512<L, T>(w + r * stride, x, xs, c0, c1, acc);
      if (c1 == full) {
        finish_avx512<L, T>(w + r * stride, x, xs, full, cols, acc, y + r, ys);
      } else {
        for (int j = 0; j < 4; ++j) {
          for (int t = 0; t < T; ++t) _mm512_storeu_ps(s + (j * T + t) * kV, acc.a[j][t]);
        }
      }
    }
  }
}

template <typename L, int T>
LOOM_TARGET_AVX2 void rows_avx2(const typename L::T* w, int64_t stride, const float* x,
                                int64_t xs, float* y, int64_t ys, int64_t n_rows, int64_t cols,
                                float* state) {
  constexpr int64_t kV = 8;
  constexpr int64_t kStep = 4 * kV;
  constexpr int64_t kBlock = std::max<int64_t>(kStep, kL1Bytes / (T * 4) / kStep * kStep);
  constexpr int64_t kPerRow = 4 * T * kV;
  const int64_t full = cols / kStep * kStep;
  if (full <= kBlock || state == nullptr) {
    for (int64_t r = 0; r < n_rows; ++r) {
      Acc256<T> acc;
      for (auto& chain : acc.a) {
        for (auto& v : chain) v = _mm256_setzero_ps();
      }
      steps_avx2<L, T>(w + r * stride, x, xs, 0, full, acc);
      finish_avx2<L, T>(w + r * stride, x, xs, full, cols, acc, y + r, ys);
    }
    return;
  }
  for (int64_t c0 = 0; c0 < full; c0 += kBlock) {
    const int64_t c1 = std::min(full, c0 + kBlock);
    for (int64_t r = 0; r < n_rows; ++r) {
      float* s = state + r * kPerRow;
      Acc256<T> acc;
      for (int j = 0; j < 4; ++j) {
        for (int t = 0; t < T; ++t) {
          acc.a[j][t] = c0 == 0 ? _mm256_setzero_ps() : _mm256_loadu_ps(s + (j * T + t) * kV);
        }
      }
      steps_avx2<L, T>(w + r * stride, x, xs, c0, c1, acc);
      if (c1 == full) {
        finish_avx2<L, T>(w + r * stride, x, xs, full, cols, acc, y + r, ys);
      } else {
        for (int j = 0; j < 4; ++j) {
          for (int t = 0; t < T; ++t) _mm256_storeu_ps(s + (j * T + t) * kV, acc.a[j][t]);
        }
      }
    }
  }
}

template <typename L>
struct Avx512Tiles {
  static constexpr int kTokens = 6;
  static constexpr int64_t kLanes = 16;
  template <int T>
  static void rows(const typename L::T* w, int64_t stride, const float* x, int64_t xs, float* y,
                   int64_t ys, int64_t n_rows, int64_t cols, float* state) {
    rows_avx512<L, T>(w, stride, x, xs, y, ys, n_rows, cols, state);
  }
};
template <typename L>
struct Avx2Tiles {
  static constexpr int kTokens = 3;
  static constexpr int64_t kLanes = 8;
  template <int T>
  static void rows(const typename L::T* w, int64_t stride, const float* x, int64_t xs, float* y,
                   int64_t ys, int64_t n_rows, int64_t cols, float* state) {
    rows_avx2<L, T>(w, stride, x, xs, y, ys, n_rows, cols, state);
  }
};

// Decode: one row after another, whole (no column blocks: x is one token, in L1).
template <typename P, typename E>
void matvec(const E* w, int64_t stride, const float* x, float* y, int64_t n_rows, int64_t cols) {
  P::template rows<1>(w, stride, x, 0, y, 0, n_rows, cols, nullptr);
}

// The remaining 1..kTokens-1 tokens, through a table (T must be a compile-time constant).
template <typename P, typename E, int... I>
void rows_rest(int rest, const E* w, int64_t stride, const float* x, int64_t xs, float* y,
               int64_t ys, int64_t n_rows, int64_t cols, float* state,
               std::integer_sequence<int, I...>) {
  using Fn = void (*)(const E*, int64_t, const float*, int64_t, float*, int64_t, int64_t, int64_t,
                      float*);
  static constexpr Fn kFns[] = {&P::template rows<I + 1>...};
  kFns[rest - 1](w, stride, x, xs, y, ys, n_rows, cols, state);
}

template <typename P, typename E>
void gemm(const E* w, int64_t stride, const float* x, int64_t x_stride, int64_t n_tokens, float* y,
          int64_t y_stride, int64_t n_rows, int64_t cols) {
  constexpr int kT = P::kTokens;
  const int64_t block = block_rows(cols, static_cast<int64_t>(sizeof(E)));
  thread_local std::vector<float> state;
  state.resize(static_cast<size_t>(std::min(block, n_rows) * 4 * kT * P::kLanes));
  for (int64_t r0 = 0; r0 < n_rows; r0 += block) {
    const int64_t nr = std::min(block, n_rows - r0);
    const E* wb = w + r0 * stride;
    int64_t t0 = 0;
    for (; t0 + kT <= n_tokens; t0 += kT) {
      P::template rows<kT>(wb, stride, x + t0 * x_stride, x_stride, y + t0 * y_stride + r0,
                           y_stride, nr, cols, state.data());
    }
    if (t0 < n_tokens) {
      rows_rest<P>(static_cast<int>(n_tokens - t0), wb, stride, x + t0 * x_stride, x_stride,
                   y + t0 * y_stride + r0, y_stride, nr, cols, state.data(),
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
