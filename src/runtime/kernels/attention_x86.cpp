// The AVX2 and AVX-512 attention kernels (attention.hpp): register tiles of query heads
// x cached keys for the scores, a vectorized exp for the softmax, and query heads x
// head_dim lanes for the weighted sum of values. f16 cache rows are widened exactly
// (F16C) as they are loaded. Every function carries its target attribute, so the file
// builds for any -march; attend() calls the AVX2 family on CPUs with AVX2, FMA and F16C
// and the AVX-512 one (the same bits, twice the lanes) where AVX-512 is on.
//
// The order of every sum is fixed per output (see attention.hpp), so the tile shapes
// below change speed only, never a bit.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "common/simd.hpp"
#include "runtime/kernels/attention.hpp"
#include "runtime/kernels/ops.hpp"
#include "runtime/kernels/vec_math_x86.hpp"

namespace loom::kernels {

namespace {

// ---- loads of 8 lanes (f32, or f16 widened); *_tail reads r < 8 and zero-fills ----

LOOM_TARGET_AVX2 inline __m256 load8(const float* p) { return _mm256_loadu_ps(p); }
LOOM_TARGET_AVX2 inline __m256 load8(const uint16_t* p) {
  return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
}

alignas(32) constexpr int32_t kMaskTable[16] = {-1, -1, -1, -1, -1, -1, -1, -1, 0, 0, 0, 0, 0, 0, 0, 0};
// Lanes 0..r-1 set.
LOOM_TARGET_AVX2 inline __m256i tail_mask(int64_t r) {
  return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(kMaskTable + 8 - r));
}
LOOM_TARGET_AVX2 inline __m256 load_tail(const float* p, int64_t r) { return _mm256_maskload_ps(p, tail_mask(r)); }
LOOM_TARGET_AVX2 inline __m256 load_tail(const uint16_t* p, int64_t r) {
  alignas(16) uint16_t b[8] = {};
  std::memcpy(b, p, static_cast<size_t>(r) * sizeof(uint16_t));
  return _mm256_cvtph_ps(_mm_load_si128(reinterpret_cast<const __m128i*>(b)));
}

LOOM_TARGET_AVX2 void exp_inplace(float* x, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) _mm256_storeu_ps(x + i, exp8(_mm256_loadu_ps(x + i)));
  if (i < n) {
    alignas(32) float b[8];
    std::fill(b, b + 8, -std::numeric_limits<float>::infinity());
    std::memcpy(b, x + i, static_cast<size_t>(n - i) * sizeof(float));
    _mm256_store_ps(b, exp8(_mm256_load_ps(b)));
    std::memcpy(x + i, b, static_cast<size_t>(n - i) * sizeof(float));
  }
}

// s[0..n) := softmax(s): the max, exp(s - max), the sum in 8 lanes (+ the zero-padded
// tail), then a multiply by 1 / sum.
LOOM_TARGET_AVX2 void softmax_row(float* s, int64_t n) {
  const int64_t full = n / 8 * 8;
  __m256 vmax = _mm256_set1_ps(-std::numeric_limits<float>::infinity());
  for (int64_t i = 0; i < full; i += 8) vmax = _mm256_max_ps(vmax, _mm256_loadu_ps(s + i));
  alignas(32) float lanes[8];
  _mm256_store_ps(lanes, vmax);
  float mx = lanes[0];
  for (float v : lanes) mx = std::max(mx, v);
  for (int64_t i = full; i < n; ++i) mx = std::max(mx, s[i]);
  const __m256 m = _mm256_set1_ps(mx);
  __m256 sum = _mm256_setzero_ps();
  for (int64_t i = 0; i < full; i += 8) {
    const __m256 e = exp8(_mm256_sub_ps(_mm256_loadu_ps(s + i), m));
    _mm256_storeu_ps(s + i, e);
    sum = _mm256_add_ps(sum, e);
  }
  if (full < n) {
    alignas(32) float b[8];
    std::fill(b, b + 8, -std::numeric_limits<float>::infinity());
    for (int64_t i = full; i < n; ++i) b[i - full] = s[i] - mx;
    const __m256 e = exp8(_mm256_load_ps(b));
    _mm256_store_ps(b, e);
    sum = _mm256_add_ps(sum, e);  // the padding lanes are exp(-inf) = 0
    std::memcpy(s + full, b, static_cast<size_t>(n - full) * sizeof(float));
  }
  const __m256 inv = _mm256_set1_ps(1.0f / simd::hsum256(sum));
  for (int64_t i = 0; i < full; i += 8) _mm256_storeu_ps(s + i, _mm256_mul_ps(_mm256_loadu_ps(s + i), inv));
  const float inv1 = _mm256_cvtss_f32(inv);
  for (int64_t i = full; i < n; ++i) s[i] *= inv1;
}

// ---- scores: NQ query heads x NK consecutive keys, one accumulator each ----
// q rows are zero-padded to a whole number of 8-lane chunks (qstride), so the tail chunk
// multiplies zeros by the zero-filled key lanes.

template <int NQ, int NK, typename E>
LOOM_TARGET_AVX2 void scores_tile(const float* q, int64_t qstride, const E* k, int64_t hd, float scale, float* s,
                                  int64_t sstride) {
  __m256 acc[NQ][NK];
  for (int h = 0; h < NQ; ++h) {
    for (int j = 0; j < NK; ++j) acc[h][j] = _mm256_setzero_ps();
  }
  const int64_t full = hd / 8 * 8;
  for (int64_t c = 0; c < full; c += 8) {
    __m256 kv[NK];
    for (int j = 0; j < NK; ++j) kv[j] = load8(k + j * hd + c);
    for (int h = 0; h < NQ; ++h) {
      const __m256 qv = _mm256_loadu_ps(q + h * qstride + c);
      for (int j = 0; j < NK; ++j) acc[h][j] = _mm256_fmadd_ps(qv, kv[j], acc[h][j]);
    }
  }
  if (full < hd) {
    __m256 kv[NK];
    for (int j = 0; j < NK; ++j) kv[j] = load_tail(k + j * hd + full, hd - full);
    for (int h = 0; h < NQ; ++h) {
      const __m256 qv = _mm256_loadu_ps(q + h * qstride + full);
      for (int j = 0; j < NK; ++j) acc[h][j] = _mm256_fmadd_ps(qv, kv[j], acc[h][j]);
    }
  }
  for (int h = 0; h < NQ; ++h) {
    for (int j = 0; j < NK; ++j) s[h * sstride + j] = simd::hsum256(acc[h][j]) * scale;
  }
}

template <int NQ, typename E>
LOOM_TARGET_AVX2 void scores_segment(const float* q, int64_t qstride, const E* k, int64_t n, int64_t hd, float scale,
                                     float* s, int64_t sstride) {
  int64_t j = 0;
  for (; j + 3 <= n; j += 3) scores_tile<NQ, 3>(q, qstride, k + j * hd, hd, scale, s + j, sstride);
  if (n - j == 2) scores_tile<NQ, 2>(q, qstride, k + j * hd, hd, scale, s + j, sstride);
  if (n - j == 1) scores_tile<NQ, 1>(q, qstride, k + j * hd, hd, scale, s + j, sstride);
}

// ---- weighted sum: out[h][d0 ..] += p[h][i] * v_i[d0 ..] over the segment's positions,
// NQ heads x DC chunks of 8 lanes (TAIL: one chunk of r < 8 lanes) ----

template <int NQ, int DC, bool TAIL, typename E>
LOOM_TARGET_AVX2 void wsum_chunks(const float* p, int64_t pstride, const E* v, int64_t n, int64_t hd, int64_t d0,
                                  int64_t r, float* out, int64_t ostride) {
  __m256 acc[NQ][DC];
  for (int h = 0; h < NQ; ++h) {
    for (int c = 0; c < DC; ++c) {
      float* o = out + h * ostride + d0 + 8 * c;
      acc[h][c] = TAIL ? _mm256_maskload_ps(o, tail_mask(r)) : _mm256_loadu_ps(o);
    }
  }
  for (int64_t i = 0; i < n; ++i) {
    const E* vi = v + i * hd + d0;
    __m256 vv[DC];
    for (int c = 0; c < DC; ++c) vv[c] = TAIL ? load_tail(vi, r) : load8(vi + 8 * c);
    for (int h = 0; h < NQ; ++h) {
      const __m256 pb = _mm256_broadcast_ss(p + h * pstride + i);
      for (int c = 0; c < DC; ++c) acc[h][c] = _mm256_fmadd_ps(pb, vv[c], acc[h][c]);
    }
  }
  for (int h = 0; h < NQ; ++h) {
    for (int c = 0; c < DC; ++c) {
      float* o = out + h * ostride + d0 + 8 * c;
      if (TAIL) {
        _mm256_maskstore_ps(o, tail_mask(r), acc[h][c]);
      } else {
        _mm256_storeu_ps(o, acc[h][c]);
      }
    }
  }
}

template <int NQ, typename E>
LOOM_TARGET_AVX2 void wsum_segment(const float* p, int64_t pstride, const E* v, int64_t n, int64_t hd, float* out,
                                   int64_t ostride) {
  // Chunks per pass: enough independent FMA chains to hide the latency, few enough that
  // NQ x DC accumulators fit the 16 registers beside the values.
  constexpr int kDC = NQ <= 2 ? 4 : 2;
  const int64_t full = hd / 8 * 8;
  int64_t d0 = 0;
  for (; d0 + 8 * kDC <= full; d0 += 8 * kDC) wsum_chunks<NQ, kDC, false>(p, pstride, v, n, hd, d0, 8, out, ostride);
  for (; d0 < full; d0 += 8) wsum_chunks<NQ, 1, false>(p, pstride, v, n, hd, d0, 8, out, ostride);
  if (full < hd) wsum_chunks<NQ, 1, true>(p, pstride, v, n, hd, full, hd - full, out, ostride);
}

// ---- AVX-512: the same sums, twice the lanes per instruction ----
//
// Scores: one zmm holds two keys' 8-lane chunks (lanes 0-7 key j, 8-15 key j+1) against
// the query chunk in both halves, so each FMA is the AVX2 kernel's FMA for two keys;
// each half is then summed with hsum256's pairing (128-bit halves, then lanes 2 apart,
// then neighbours: simd::hsum256_halves8). Weighted sum: 16 lanes of head_dim per vector; every lane is its own
// sequential chain over the positions, so the vector width cannot change a bit. Both give
// exactly the AVX2 kernels' outputs (tested).

LOOM_TARGET_AVX512 inline __m512 load2x8(const float* p, int64_t stride) {
  return _mm512_insertf32x8(_mm512_castps256_ps512(_mm256_loadu_ps(p)), _mm256_loadu_ps(p + stride), 1);
}
LOOM_TARGET_AVX512 inline __m512 load2x8(const uint16_t* p, int64_t stride) {
  const __m256i h = _mm256_inserti128_si256(
      _mm256_castsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))),
      _mm_loadu_si128(reinterpret_cast<const __m128i*>(p + stride)), 1);
  return _mm512_cvtph_ps(h);
}
// Two keys' r < 8 tail lanes, zero-filled.
template <typename E>
LOOM_TARGET_AVX512 inline __m512 load2x8_tail(const E* p, int64_t stride, int64_t r) {
  alignas(64) E b[16] = {};
  std::memcpy(b, p, static_cast<size_t>(r) * sizeof(E));
  std::memcpy(b + 8, p + stride, static_cast<size_t>(r) * sizeof(E));
  return load2x8(b, 8);
}

template <int NQ, int NP, typename E>
LOOM_TARGET_AVX512 void scores_tile_512(const float* q2, int64_t q2stride, const E* k, int64_t hd, float scale,
                                        float* s, int64_t sstride) {
  __m512 acc[NQ][NP];
  for (int h = 0; h < NQ; ++h) {
    for (int j = 0; j < NP; ++j) acc[h][j] = _mm512_setzero_ps();
  }
  const int64_t full = hd / 8 * 8;
  for (int64_t c = 0; c < full; c += 8) {
    __m512 kv[NP];
    for (int j = 0; j < NP; ++j) kv[j] = load2x8(k + 2 * j * hd + c, hd);
    for (int h = 0; h < NQ; ++h) {
      const __m512 qv = _mm512_loadu_ps(q2 + h * q2stride + 2 * c);
      for (int j = 0; j < NP; ++j) acc[h][j] = _mm512_fmadd_ps(qv, kv[j], acc[h][j]);
    }
  }
  if (full < hd) {
    __m512 kv[NP];
    for (int j = 0; j < NP; ++j) kv[j] = load2x8_tail(k + 2 * j * hd + full, hd, hd - full);
    for (int h = 0; h < NQ; ++h) {
      const __m512 qv = _mm512_loadu_ps(q2 + h * q2stride + 2 * full);
      for (int j = 0; j < NP; ++j) acc[h][j] = _mm512_fmadd_ps(qv, kv[j], acc[h][j]);
    }
  }
  // Each half's sum with hsum256's pairs, eight accumulators at a time.
  constexpr int kN = NQ * NP;
  __m512 v[8];
  float sums[16];
  for (int b = 0; b < kN; b += 8) {
    for (int i = 0; i < 8; ++i) v[i] = b + i < kN ? acc[(b + i) / NP][(b + i) % NP] : _mm512_setzero_ps();
    simd::hsum256_halves8(v, sums);
    for (int i = 0; i < 8 && b + i < kN; ++i) {
      const int h = (b + i) / NP, j = (b + i) % NP;
      s[h * sstride + 2 * j] = sums[2 * i] * scale;
      s[h * sstride + 2 * j + 1] = sums[2 * i + 1] * scale;
    }
  }
}

// q2: each head's zero-padded query with every 8-lane chunk doubled ([chunk | chunk]).
template <int NQ, typename E>
LOOM_TARGET_AVX512 void scores_segment_512(const float* q, int64_t qstride, const float* q2, int64_t q2stride,
                                           const E* k, int64_t n, int64_t hd, float scale, float* s,
                                           int64_t sstride) {
  int64_t j = 0;
  for (; j + 6 <= n; j += 6) scores_tile_512<NQ, 3>(q2, q2stride, k + j * hd, hd, scale, s + j, sstride);
  for (; j + 2 <= n; j += 2) scores_tile_512<NQ, 1>(q2, q2stride, k + j * hd, hd, scale, s + j, sstride);
  if (j < n) scores_tile<NQ, 1>(q, qstride, k + j * hd, hd, scale, s + j, sstride);
}

LOOM_TARGET_AVX512 inline __m512 load16(const float* p) { return _mm512_loadu_ps(p); }
LOOM_TARGET_AVX512 inline __m512 load16(const uint16_t* p) {
  return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
}
LOOM_TARGET_AVX512 inline __m512 load16_tail(const float* p, __mmask16 m) { return _mm512_maskz_loadu_ps(m, p); }
LOOM_TARGET_AVX512 inline __m512 load16_tail(const uint16_t* p, __mmask16 m) {
  return _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m, p));
}

template <int NQ, int DC, bool TAIL, typename E>
LOOM_TARGET_AVX512 void wsum_chunks_512(const float* p, int64_t pstride, const E* v, int64_t n, int64_t hd,
                                        int64_t d0, __mmask16 m, float* out, int64_t ostride) {
  __m512 acc[NQ][DC];
  for (int h = 0; h < NQ; ++h) {
    for (int c = 0; c < DC; ++c) {
      float* o = out + h * ostride + d0 + 16 * c;
      acc[h][c] = TAIL ? _mm512_maskz_loadu_ps(m, o) : _mm512_loadu_ps(o);
    }
  }
  for (int64_t i = 0; i < n; ++i) {
    const E* vi = v + i * hd + d0;
    __m512 vv[DC];
    for (int c = 0; c < DC; ++c) vv[c] = TAIL ? load16_tail(vi, m) : load16(vi + 16 * c);
    for (int h = 0; h < NQ; ++h) {
      const __m512 pb = _mm512_set1_ps(p[h * pstride + i]);
      for (int c = 0; c < DC; ++c) acc[h][c] = _mm512_fmadd_ps(pb, vv[c], acc[h][c]);
    }
  }
  for (int h = 0; h < NQ; ++h) {
    for (int c = 0; c < DC; ++c) {
      float* o = out + h * ostride + d0 + 16 * c;
      if (TAIL) {
        _mm512_mask_storeu_ps(o, m, acc[h][c]);
      } else {
        _mm512_storeu_ps(o, acc[h][c]);
      }
    }
  }
}

template <int NQ, typename E>
LOOM_TARGET_AVX512 void wsum_segment_512(const float* p, int64_t pstride, const E* v, int64_t n, int64_t hd,
                                         float* out, int64_t ostride) {
  // NQ x kDC accumulators (at most 16) beside kDC value vectors.
  constexpr int kDC = NQ <= 2 ? 8 / NQ : 4;
  const int64_t full = hd / 16 * 16;
  int64_t d0 = 0;
  for (; d0 + 16 * kDC <= full; d0 += 16 * kDC) {
    wsum_chunks_512<NQ, kDC, false>(p, pstride, v, n, hd, d0, 0xFFFF, out, ostride);
  }
  for (; d0 < full; d0 += 16) wsum_chunks_512<NQ, 1, false>(p, pstride, v, n, hd, d0, 0xFFFF, out, ostride);
  if (full < hd) {
    const auto m = static_cast<__mmask16>((1u << (hd - full)) - 1);
    wsum_chunks_512<NQ, 1, true>(p, pstride, v, n, hd, full, m, out, ostride);
  }
}

// Requests the n cached rows at p into L1. The paged cache keeps a head's rows of one
// block contiguous (16 positions: 4 KiB of f32 keys at head_dim 64) but blocks far apart,
// which the hardware prefetchers do not follow across; decode over a long context waited
// on memory at every block without this.
template <typename E>
inline void prefetch_rows(const void* p, int64_t n, int64_t hd) {
  const auto* b = static_cast<const char*>(p);
  const auto bytes = static_cast<size_t>(n * hd) * sizeof(E);
  for (size_t o = 0; o < bytes; o += 64) _mm_prefetch(b + o, _MM_HINT_T0);
}

template <int NQ, typename E, bool kWide>
LOOM_TARGET_AVX2 void attend_tile(const float* q, std::span<const KvSegment> segments, int64_t n_keys,
                                  const AttentionShape& shape, float* scores, float* out) {
  const int64_t hd = shape.head_dim;
  const int64_t qstride = (hd + 7) / 8 * 8;
  thread_local std::vector<float> qpad_storage;
  std::vector<float>& qpad = qpad_storage;
  qpad.assign(static_cast<size_t>(NQ * qstride), 0.0f);
  for (int h = 0; h < NQ; ++h) std::memcpy(qpad.data() + h * qstride, q + h * hd, static_cast<size_t>(hd) * sizeof(float));
  // The AVX-512 scores read each 8-lane query chunk twice over ([chunk | chunk]).
  thread_local std::vector<float> q2_storage;
  std::vector<float>& q2 = q2_storage;
  if constexpr (kWide) {
    q2.resize(static_cast<size_t>(NQ * 2 * qstride));
    for (int64_t i = 0; i < NQ * qstride; i += 8) {
      std::memcpy(q2.data() + 2 * i, qpad.data() + i, 8 * sizeof(float));
      std::memcpy(q2.data() + 2 * i + 8, qpad.data() + i, 8 * sizeof(float));
    }
  }
  int64_t at = 0;
  for (size_t i = 0; i < segments.size(); ++i) {
    const KvSegment& seg = segments[i];
    if (i + 1 < segments.size()) prefetch_rows<E>(segments[i + 1].keys, segments[i + 1].n, hd);
    const auto* keys = static_cast<const E*>(seg.keys);
    if constexpr (kWide) {
      scores_segment_512<NQ>(qpad.data(), qstride, q2.data(), 2 * qstride, keys, seg.n, hd, shape.scale,
                             scores + at, n_keys);
    } else {
      scores_segment<NQ>(qpad.data(), qstride, keys, seg.n, hd, shape.scale, scores + at, n_keys);
    }
    at += seg.n;
  }
  prefetch_rows<E>(segments[0].values, segments[0].n, hd);
  for (int h = 0; h < NQ; ++h) {
    float* s = scores + h * n_keys;
    if (shape.softcap > 0) softcap(s, n_keys, shape.softcap);
    softmax_row(s, n_keys);
  }
  std::fill(out, out + NQ * hd, 0.0f);
  at = 0;
  for (size_t i = 0; i < segments.size(); ++i) {
    const KvSegment& seg = segments[i];
    if (i + 1 < segments.size()) prefetch_rows<E>(segments[i + 1].values, segments[i + 1].n, hd);
    const auto* values = static_cast<const E*>(seg.values);
    if constexpr (kWide) {
      wsum_segment_512<NQ>(scores + at, n_keys, values, seg.n, hd, out, hd);
    } else {
      wsum_segment<NQ>(scores + at, n_keys, values, seg.n, hd, out, hd);
    }
    at += seg.n;
  }
}

template <typename E, bool kWide>
void attend_typed(const float* q, int64_t n_queries, std::span<const KvSegment> segments, int64_t n_keys,
                  const AttentionShape& shape, float* scores, float* out) {
  switch (n_queries) {
    case 1: return attend_tile<1, E, kWide>(q, segments, n_keys, shape, scores, out);
    case 2: return attend_tile<2, E, kWide>(q, segments, n_keys, shape, scores, out);
    case 3: return attend_tile<3, E, kWide>(q, segments, n_keys, shape, scores, out);
    default: return attend_tile<4, E, kWide>(q, segments, n_keys, shape, scores, out);
  }
}

}  // namespace

void attend_avx2(const float* q, int64_t n_queries, std::span<const KvSegment> segments, int64_t n_keys,
                 const AttentionShape& shape, float* scores, float* out) {
  if (shape.f16) return attend_typed<uint16_t, false>(q, n_queries, segments, n_keys, shape, scores, out);
  attend_typed<float, false>(q, n_queries, segments, n_keys, shape, scores, out);
}

void attend_avx512(const float* q, int64_t n_queries, std::span<const KvSegment> segments, int64_t n_keys,
                   const AttentionShape& shape, float* scores, float* out) {
  if (shape.f16) return attend_typed<uint16_t, true>(q, n_queries, segments, n_keys, shape, scores, out);
  attend_typed<float, true>(q, n_queries, segments, n_keys, shape, scores, out);
}

void exp_avx2(float* x, int64_t n) { exp_inplace(x, n); }

}  // namespace loom::kernels
