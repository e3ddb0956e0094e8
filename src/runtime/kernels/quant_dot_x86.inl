// 256-bit x86 quantized dot-product kernels, compiled twice: as the AVX2 family
// (quant_dot_avx2.cpp: QD_VNNI 0, u8*s8 products through vpmaddubsw + vpmaddwd) and as
// part of the AVX-512 VNNI family (quant_dot_avx512.cpp: QD_VNNI 1, vpdpbusd / vpdpwssd
// on 256-bit registers through AVX512VL). The including file defines QD_TARGET (the
// target attribute every function here carries) and QD_VNNI, and opens the namespace.
//
// Activation quants are in [-127, 127] (quantize_activations guarantees it), so
// sign-transfer tricks (|w| * sign(w)a) and 16-bit pair sums never overflow.
//
// Layout reminders (byte offsets): q8_0 act: d f16 @0, qs @2. q8_k act: d f32 @0,
// qs @4, bsums i16[16] @260.

#define QD_INLINE QD_TARGET __attribute__((always_inline)) inline

namespace {

constexpr size_t kActQ8_0 = 34;
constexpr size_t kActQ8K = 292;
constexpr size_t kActQ8KQs = 4;
constexpr size_t kActQ8KBsums = 260;

QD_INLINE float f16(const uint8_t* p) {
  uint16_t h;
  std::memcpy(&h, p, sizeof h);
  return _cvtsh_ss(h);
}

QD_INLINE float f32_at(const uint8_t* p) {
  float v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

QD_INLINE __m256i load256(const uint8_t* p) {
  return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
}

QD_INLINE __m128i load128(const uint8_t* p) {
  return _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
}

// acc + (sums of 4 adjacent u8*s8 products) per i32 lane.
QD_INLINE __m256i dot_u8s8(__m256i acc, __m256i u, __m256i s) {
#if QD_VNNI
  return _mm256_dpbusd_epi32(acc, u, s);
#else
  const __m256i pairs = _mm256_maddubs_epi16(u, s);
  return _mm256_add_epi32(acc, _mm256_madd_epi16(pairs, _mm256_set1_epi16(1)));
#endif
}

// acc + (sums of 2 adjacent i16*i16 products) per i32 lane.
QD_INLINE __m256i dot_i16(__m256i acc, __m256i a, __m256i b) {
#if QD_VNNI
  return _mm256_dpwssd_epi32(acc, a, b);
#else
  return _mm256_add_epi32(acc, _mm256_madd_epi16(a, b));
#endif
}

// Weight rows are streamed once per token, far more than the caches hold; the
// hardware prefetcher alone does not run far enough ahead of a kernel that also
// computes, so each kernel requests the bytes it will need kPrefetchDistance later.
#ifndef QD_PREFETCH
#define QD_PREFETCH 2048
#endif
constexpr size_t kPrefetchDistance = QD_PREFETCH;

QD_INLINE void prefetch_ahead(const uint8_t* p, size_t bytes) {
  for (size_t o = 0; o < bytes; o += 64) {
    _mm_prefetch(reinterpret_cast<const char*>(p + kPrefetchDistance + o), _MM_HINT_T0);
  }
}

QD_INLINE float hsum(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

// 16 bytes of nibbles -> 32 bytes in element order: the low nibbles (elements 0-15),
// then the high nibbles (elements 16-31).
QD_INLINE __m256i nibbles_32(const uint8_t* qs) {
  const __m128i raw = load128(qs);
  const __m256i both = _mm256_set_m128i(_mm_srli_epi16(raw, 4), raw);
  return _mm256_and_si256(both, _mm256_set1_epi8(0x0F));
}

// 32 bits -> 32 bytes, 0xFF where the bit is set (byte j <- bit j).
QD_INLINE __m256i bits_to_bytes(uint32_t bits) {
  const __m256i spread = _mm256_shuffle_epi8(
      _mm256_set1_epi32(static_cast<int>(bits)),
      _mm256_set_epi64x(0x0303030303030303, 0x0202020202020202, 0x0101010101010101, 0));
  const __m256i select = _mm256_set1_epi64x(static_cast<int64_t>(0x8040201008040201ull));
  return _mm256_cmpeq_epi8(_mm256_and_si256(spread, select), select);
}

// Broadcasts the i16 pair (scales[2c], scales[2c+1]) of a 16 x i16 vector as
// [scales[2c] x 8 | scales[2c+1] x 8]: the per-group scales of elements 32c..32c+31
// laid out like the 16 i16 lanes of vpmaddubsw's result.
QD_INLINE __m256i group_pair_scales(__m256i scales16, int c) {
  const __m256i pair = _mm256_permutevar8x32_epi32(scales16, _mm256_set1_epi32(c));
  const __m256i spread = _mm256_set_epi8(3, 2, 3, 2, 3, 2, 3, 2, 3, 2, 3, 2, 3, 2, 3, 2,  //
                                         1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0);
  return _mm256_shuffle_epi8(pair, spread);
}

// ===================== 32-element types, q8_0 activations =====================
//
// A weight block unpacks into 32 int8 (signed types) or uint8 (types with a min)
// values in element order. Signed: sum(w*a) = sum(|w| * sign(w)a). With a min m:
// d*da*sum(q*a) + m*da*sum(a).

struct WQ8_0 {
  static constexpr size_t kBytes = 34;
  static constexpr bool kHasMin = false;
  QD_INLINE static __m256i values(const uint8_t* b) { return load256(b + 2); }
  QD_INLINE static float min(const uint8_t*) { return 0.0f; }
};

struct WQ4_0 {
  static constexpr size_t kBytes = 18;
  static constexpr bool kHasMin = false;
  QD_INLINE static __m256i values(const uint8_t* b) {
    return _mm256_sub_epi8(nibbles_32(b + 2), _mm256_set1_epi8(8));
  }
  QD_INLINE static float min(const uint8_t*) { return 0.0f; }
};

struct WQ5_0 {
  static constexpr size_t kBytes = 22;
  static constexpr bool kHasMin = false;
  // q - 16 in int8: keep the nibble where bit 4 is set, else put 0xF in the top nibble.
  QD_INLINE static __m256i values(const uint8_t* b) {
    uint32_t qh;
    std::memcpy(&qh, b + 2, sizeof qh);
    const __m256i high =
        _mm256_andnot_si256(bits_to_bytes(qh), _mm256_set1_epi8(static_cast<char>(0xF0)));
    return _mm256_or_si256(nibbles_32(b + 6), high);
  }
  QD_INLINE static float min(const uint8_t*) { return 0.0f; }
};

struct WQ4_1 {
  static constexpr size_t kBytes = 20;
  static constexpr bool kHasMin = true;
  QD_INLINE static __m256i values(const uint8_t* b) { return nibbles_32(b + 4); }
  QD_INLINE static float min(const uint8_t* b) { return f16(b + 2); }
};

struct WQ5_1 {
  static constexpr size_t kBytes = 24;
  static constexpr bool kHasMin = true;
  QD_INLINE static __m256i values(const uint8_t* b) {
    uint32_t qh;
    std::memcpy(&qh, b + 4, sizeof qh);
    const __m256i high = _mm256_and_si256(bits_to_bytes(qh), _mm256_set1_epi8(0x10));
    return _mm256_or_si256(nibbles_32(b + 8), high);
  }
  QD_INLINE static float min(const uint8_t* b) { return f16(b + 2); }
};

// Accumulates weight block b into acc[t] for every activation of the tile.
template <class W, int Nt>
QD_INLINE void legacy_block(const uint8_t* wb, const ActTile& acts, size_t b, __m256* acc) {
  const size_t at = b * kActQ8_0;
  const __m256i q = W::values(wb);
  // The block's scale broadcast once for the tile; each token's scale product is then a
  // vector multiply by its scale broadcast from memory (a load, not a shuffle), the same
  // bits as the scalar product broadcast.
  const __m256 dw = _mm256_set1_ps(f16(wb));
  if constexpr (W::kHasMin) {
    const __m256 m = _mm256_set1_ps(W::min(wb));
    for (int t = 0; t < Nt; ++t) {
      const uint8_t* ab = acts.rows[t] + at;
      const __m256i a = load256(ab + 2);
      const __m256 da = _mm256_broadcast_ss(acts.scales[t] + b);
      const __m256i prod = dot_u8s8(_mm256_setzero_si256(), q, a);
      const __m256i asum = dot_u8s8(_mm256_setzero_si256(), _mm256_set1_epi8(1), a);
      acc[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(prod), _mm256_mul_ps(dw, da), acc[t]);
      acc[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(asum), _mm256_mul_ps(m, da), acc[t]);
    }
  } else {
    const __m256i magnitude = _mm256_sign_epi8(q, q);
    for (int t = 0; t < Nt; ++t) {
      const uint8_t* ab = acts.rows[t] + at;
      const __m256i a = _mm256_sign_epi8(load256(ab + 2), q);
      const __m256i prod = dot_u8s8(_mm256_setzero_si256(), magnitude, a);
      acc[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(prod), _mm256_mul_ps(dw, _mm256_broadcast_ss(acts.scales[t] + b)),
                               acc[t]);
    }
  }
}

template <class W>
struct Legacy {
  template <int Nt>
  struct Tile {
    QD_TARGET static void run(const uint8_t* w, const ActTile& acts, int64_t blocks,
                              float* out) {
      // Two accumulator sets (even / odd blocks) hide the f32 FMA latency when the tile
      // is narrow; wide tiles already have Nt independent chains.
      __m256 even[Nt];
      __m256 odd[Nt];
      for (int t = 0; t < Nt; ++t) even[t] = odd[t] = _mm256_setzero_ps();
      int64_t b = 0;
      for (; b + 1 < blocks; b += 2) {
        const auto at = static_cast<size_t>(b);
        prefetch_ahead(w + at * W::kBytes, 2 * W::kBytes);
        legacy_block<W, Nt>(w + at * W::kBytes, acts, at, even);
        legacy_block<W, Nt>(w + (at + 1) * W::kBytes, acts, at + 1, odd);
      }
      if (b < blocks) {
        const auto at = static_cast<size_t>(b);
        legacy_block<W, Nt>(w + at * W::kBytes, acts, at, even);
      }
      for (int t = 0; t < Nt; ++t) out[t] = hsum(_mm256_add_ps(even[t], odd[t]));
    }
  };
};

// ===================== loom's group types, q8_0 activations =====================
//
// A weight block is one group of G elements with one f16 scale; it meets G/32 q8_0
// activation blocks (tile scales indexed by activation block). gq8 takes the
// sign-transfer product like q8_0 (Grouped); gq4 multiplies its unsigned levels and
// corrects for the zero point once per row (GroupedU4).

template <int G>
struct WGq8 {
  static constexpr int kGroup = G;
  static constexpr size_t kBytes = 2 + G;
  QD_INLINE static __m256i values(const uint8_t* b, int s) { return load256(b + 2 + 32 * s); }
};

// Independent f32 accumulation chains per activation: every 32-element run ends in one
// FMA into its chain, so a single chain would cap a narrow tile at one run per FMA
// latency (~4 cycles for 16-34 bytes of weights). The count is the same for every tile
// width (batch invariance: a token's result must not depend on how many tokens share
// its tile), so the tiles stop at two tokens (AtMostTwo below): four chains x two
// tokens fill 8 of the 16 ymm, four tokens would spill.
inline constexpr int kGroupChains = 4;

// Tiles of 3 or 4 tokens run as a tile of 2 then one of the rest: the same per-token
// sums as any width (the weight row is read again, from L1).
template <template <int> class K>
struct AtMostTwo {
  template <int Nt>
  struct Tile {
    QD_TARGET static void run(const uint8_t* w, const ActTile& acts, int64_t blocks,
                              float* out) {
      if constexpr (Nt <= 2) {
        K<Nt>::run(w, acts, blocks, out);
      } else {
        K<2>::run(w, acts, blocks, out);
        ActTile rest;
        for (int t = 2; t < Nt; ++t) {
          const auto i = static_cast<size_t>(t);
          rest.rows[i - 2] = acts.rows[i];
          rest.scales[i - 2] = acts.scales[i];
          rest.prepared[i - 2] = acts.prepared[i];
        }
        K<Nt - 2>::run(w, rest, blocks, out + 2);
      }
    }
  };
};

// The chain a run accumulates into must be a compile-time constant (a run-time index
// would put the accumulators in memory): blocks go in steps that cover whole multiples of
// kChains runs, and the loops over them are fully unrolled.
template <int kRuns, int kChains>
inline constexpr int kBlockStep = kChains > kRuns ? kChains / kRuns : 1;

template <class W>
struct Grouped {
  static constexpr int kRuns = W::kGroup / 32;

  template <int Nt, int kChains>
  QD_INLINE static void block_at(const uint8_t* w, const ActTile& acts, size_t b, int chain0,
                                 __m256 (&acc)[kChains][Nt]) {
    const uint8_t* wb = w + b * W::kBytes;
    prefetch_ahead(wb, W::kBytes);
    const __m256 dw = _mm256_set1_ps(f16(wb));
#pragma GCC unroll 4
    for (int s = 0; s < kRuns; ++s) {
      const int c = (chain0 + s) % kChains;
      const size_t ai = b * kRuns + static_cast<size_t>(s);
      const __m256i q = W::values(wb, s);
      const __m256i magnitude = _mm256_sign_epi8(q, q);
      for (int t = 0; t < Nt; ++t) {
        const __m256i a = _mm256_sign_epi8(load256(acts.rows[t] + ai * kActQ8_0 + 2), q);
        const __m256i prod = dot_u8s8(_mm256_setzero_si256(), magnitude, a);
        const __m256 scale = _mm256_mul_ps(dw, _mm256_broadcast_ss(acts.scales[t] + ai));
        acc[c][t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(prod), scale, acc[c][t]);
      }
    }
  }

  template <int Nt>
  struct Tile {
    QD_TARGET static void run(const uint8_t* w, const ActTile& acts, int64_t blocks,
                              float* out) {
      constexpr int kChains = kGroupChains;
      constexpr int kStep = kBlockStep<kRuns, kChains>;
      __m256 acc[kChains][Nt];
      for (auto& chain : acc) {
        for (auto& a : chain) a = _mm256_setzero_ps();
      }
      const auto n = static_cast<size_t>(blocks);
      size_t b = 0;
      for (; b + kStep <= n; b += kStep) {
#pragma GCC unroll 4
        for (int k = 0; k < kStep; ++k) block_at<Nt, kChains>(w, acts, b + static_cast<size_t>(k), k * kRuns, acc);
      }
      for (; b < n; ++b) block_at<Nt, kChains>(w, acts, b, 0, acc);
      for (int t = 0; t < Nt; ++t) {
        __m256 sum = acc[0][t];
        for (int c = 1; c < kChains; ++c) sum = _mm256_add_ps(sum, acc[c][t]);
        out[t] = hsum(sum);
      }
    }
  };
};

// gq4 without the sign transfer: the unsigned levels q (0..15) go straight into the u8
// side of the product, and the zero point comes back as a per-row correction
// d_w * z * (d_a * sum(q_a)), with d_a * sum(q_a) of every activation block computed once
// per dot_rows call (the Preparation below). Three vector operations fewer per 32
// elements than the sign-transfer form, which matters because gq4 decode is
// compute-bound.
template <int G>
size_t gq4_act_sums_bytes(int64_t blocks) {
  return static_cast<size_t>(blocks) * (G / 32) * sizeof(float);
}

template <int G>
void gq4_act_sums(const uint8_t* row, const float* scales, int64_t blocks, uint8_t* out) {
  const int64_t n = blocks * (G / 32);
  for (int64_t i = 0; i < n; ++i) {
    const auto* q = reinterpret_cast<const int8_t*>(row + static_cast<size_t>(i) * kActQ8_0 + 2);
    int sum = 0;
    for (int j = 0; j < 32; ++j) sum += q[j];
    const float v = scales[i] * static_cast<float>(sum);
    std::memcpy(out + static_cast<size_t>(i) * sizeof(float), &v, sizeof v);
  }
}

// nibbles_32 without a shuffle-port insert: the 16 bytes broadcast to both halves by
// the load itself, the upper half shifted right by 4.
QD_INLINE __m256i nibbles_32_broadcast(const uint8_t* qs) {
  const __m256i both = _mm256_broadcastsi128_si256(load128(qs));
  return _mm256_and_si256(_mm256_srlv_epi64(both, _mm256_set_epi64x(4, 4, 0, 0)),
                          _mm256_set1_epi8(0x0F));
}

template <int G>
struct GroupedU4 {
  static constexpr int kRuns = G / 32;
  static constexpr size_t kBytes = 4 + G / 2;

  template <int Nt, int kChains>
  QD_INLINE static void block_at(const uint8_t* w, const ActTile& acts, size_t b, int chain0,
                                 __m256 (&acc)[kChains][Nt], float (&correction)[kChains][Nt]) {
    const uint8_t* wb = w + b * kBytes;
    prefetch_ahead(wb, kBytes);
    const float dw = f16(wb);
    const __m256 dwv = _mm256_set1_ps(dw);
    const float dz = dw * static_cast<float>(wb[2] & 0xF);
#pragma GCC unroll 4
    for (int s = 0; s < kRuns; ++s) {
      const int c = (chain0 + s) % kChains;
      const size_t ai = b * kRuns + static_cast<size_t>(s);
      const __m256i q = nibbles_32_broadcast(wb + 4 + 16 * s);
      for (int t = 0; t < Nt; ++t) {
        const __m256i prod = dot_u8s8(_mm256_setzero_si256(), q, load256(acts.rows[t] + ai * kActQ8_0 + 2));
        const __m256 scale = _mm256_mul_ps(dwv, _mm256_broadcast_ss(acts.scales[t] + ai));
        acc[c][t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(prod), scale, acc[c][t]);
        float asum;
        std::memcpy(&asum, acts.prepared[t] + ai * sizeof(float), sizeof asum);
        correction[c][t] += dz * asum;
      }
    }
  }

  template <int Nt>
  struct Tile {
    QD_TARGET static void run(const uint8_t* w, const ActTile& acts, int64_t blocks,
                              float* out) {
      constexpr int kChains = kGroupChains;
      constexpr int kStep = kBlockStep<kRuns, kChains>;
      __m256 acc[kChains][Nt];
      float correction[kChains][Nt];
      for (int c = 0; c < kChains; ++c) {
        for (int t = 0; t < Nt; ++t) {
          acc[c][t] = _mm256_setzero_ps();
          correction[c][t] = 0.0f;
        }
      }
      const auto n = static_cast<size_t>(blocks);
      size_t b = 0;
      for (; b + kStep <= n; b += kStep) {
#pragma GCC unroll 4
        for (int k = 0; k < kStep; ++k) {
          block_at<Nt, kChains>(w, acts, b + static_cast<size_t>(k), k * kRuns, acc, correction);
        }
      }
      for (; b < n; ++b) block_at<Nt, kChains>(w, acts, b, 0, acc, correction);
      for (int t = 0; t < Nt; ++t) {
        __m256 sum = acc[0][t];
        float corr = correction[0][t];
        for (int c = 1; c < kChains; ++c) {
          sum = _mm256_add_ps(sum, acc[c][t]);
          corr += correction[c][t];
        }
        out[t] = hsum(sum) - corr;
      }
    }
  };
};

// ===================== k-quants, q8_k activations =====================

// q4_k / q5_k: the 8 six-bit scales and mins packed in 12 bytes (see k4_scale_min),
// unpacked four at a time with 32-bit masks.
struct ScalesMins {
  uint32_t sc[2];
  uint32_t m[2];
};
QD_INLINE ScalesMins unpack_k4_scales(const uint8_t* p) {
  uint32_t s[3];
  std::memcpy(s, p, sizeof s);
  ScalesMins out;
  out.sc[0] = s[0] & 0x3F3F3F3Fu;
  out.m[0] = s[1] & 0x3F3F3F3Fu;
  out.sc[1] = (s[2] & 0x0F0F0F0Fu) | (((s[0] >> 6) & 0x03030303u) << 4);
  out.m[1] = ((s[2] >> 4) & 0x0F0F0F0Fu) | (((s[1] >> 6) & 0x03030303u) << 4);
  return out;
}

// [m0, m0, m1, m1, ..., m7, m7] as i16: one min per pair of 16-element bsums.
QD_INLINE __m256i mins_per_bsum(const ScalesMins& sm) {
  const __m128i m8 =
      _mm_cvtepu8_epi16(_mm_set_epi32(0, 0, static_cast<int>(sm.m[1]), static_cast<int>(sm.m[0])));
  return _mm256_set_m128i(_mm_unpackhi_epi16(m8, m8), _mm_unpacklo_epi16(m8, m8));
}

QD_INLINE int scale_byte(const ScalesMins& sm, int g) {
  return static_cast<int>((sm.sc[g / 4] >> (8 * (g % 4))) & 0xFF);
}

// q4_k and q5_k: 4 pairs of 32-element groups, low nibbles then high nibbles of the
// same 32 bytes; q5_k adds bit g of qh[l] as bit 4 of element l of group g.
template <bool kFifthBit>
struct KWithMin {
  static constexpr size_t kBytes = kFifthBit ? 176 : 144;
  static constexpr size_t kScales = 4;
  static constexpr size_t kQh = 16;
  static constexpr size_t kQs = kFifthBit ? 48 : 16;

  template <int Nt>
  struct Tile {
    QD_TARGET static void run(const uint8_t* w, const ActTile& acts, int64_t blocks,
                              float* out) {
      __m256 acc[Nt];
      for (int t = 0; t < Nt; ++t) acc[t] = _mm256_setzero_ps();
      const __m256i low_mask = _mm256_set1_epi8(0x0F);
      for (int64_t b = 0; b < blocks; ++b) {
        const uint8_t* wb = w + static_cast<size_t>(b) * kBytes;
        const size_t at = static_cast<size_t>(b) * kActQ8K;
        prefetch_ahead(wb, kBytes);
        const float d = f16(wb);
        const float dmin = f16(wb + 2);
        const ScalesMins sm = unpack_k4_scales(wb + kScales);
        __m256i sum_lo[Nt];
        __m256i sum_hi[Nt];
        for (int t = 0; t < Nt; ++t) sum_lo[t] = sum_hi[t] = _mm256_setzero_si256();
        [[maybe_unused]] const __m256i qh = kFifthBit ? load256(wb + kQh) : _mm256_setzero_si256();
        for (int p = 0; p < 4; ++p) {
          const __m256i raw = load256(wb + kQs + 32 * static_cast<size_t>(p));
          __m256i lo = _mm256_and_si256(raw, low_mask);
          __m256i hi = _mm256_and_si256(_mm256_srli_epi16(raw, 4), low_mask);
          if constexpr (kFifthBit) {
            const __m256i bit_lo = _mm256_set1_epi8(static_cast<char>(1 << (2 * p)));
            const __m256i bit_hi = _mm256_set1_epi8(static_cast<char>(1 << (2 * p + 1)));
            const __m256i sixteen = _mm256_set1_epi8(0x10);
            lo = _mm256_or_si256(
                lo,
                _mm256_and_si256(_mm256_cmpeq_epi8(_mm256_and_si256(qh, bit_lo), bit_lo), sixteen));
            hi = _mm256_or_si256(
                hi,
                _mm256_and_si256(_mm256_cmpeq_epi8(_mm256_and_si256(qh, bit_hi), bit_hi), sixteen));
          }
          const __m256i s_lo = _mm256_set1_epi16(static_cast<short>(scale_byte(sm, 2 * p)));
          const __m256i s_hi = _mm256_set1_epi16(static_cast<short>(scale_byte(sm, 2 * p + 1)));
          for (int t = 0; t < Nt; ++t) {
            const uint8_t* qa = acts.rows[t] + at + kActQ8KQs + 64 * static_cast<size_t>(p);
            sum_lo[t] = dot_i16(sum_lo[t], _mm256_maddubs_epi16(lo, load256(qa)), s_lo);
            sum_hi[t] = dot_i16(sum_hi[t], _mm256_maddubs_epi16(hi, load256(qa + 32)), s_hi);
          }
        }
        const __m256i mins = mins_per_bsum(sm);
        for (int t = 0; t < Nt; ++t) {
          const uint8_t* ab = acts.rows[t] + at;
          const float da = f32_at(ab);
          const __m256i msum = _mm256_madd_epi16(load256(ab + kActQ8KBsums), mins);
          const __m256i sum = _mm256_add_epi32(sum_lo[t], sum_hi[t]);
          acc[t] = _mm256_fmadd_ps(_mm256_set1_ps(d * da), _mm256_cvtepi32_ps(sum), acc[t]);
          acc[t] = _mm256_fnmadd_ps(_mm256_set1_ps(dmin * da), _mm256_cvtepi32_ps(msum), acc[t]);
        }
      }
      for (int t = 0; t < Nt; ++t) out[t] = hsum(acc[t]);
    }
  };
};

// q6_k: per 128 elements, ql[64] holds low nibbles (elements 0-63 in the low halves,
// 64-127 in the high halves) and qh[32] two high bits per element in 4 planes. Levels
// are stored biased by 32: sum((q - 32) a) = sum(q a) - 32 sum(bsum_g) per group.
struct Q6K {
  template <int Nt>
  struct Tile {
    QD_TARGET static void run(const uint8_t* w, const ActTile& acts, int64_t blocks,
                              float* out) {
      __m256 acc[Nt];
      for (int t = 0; t < Nt; ++t) acc[t] = _mm256_setzero_ps();
      const __m256i low_mask = _mm256_set1_epi8(0x0F);
      const __m256i high_mask = _mm256_set1_epi8(0x30);
      for (int64_t b = 0; b < blocks; ++b) {
        const uint8_t* wb = w + static_cast<size_t>(b) * 210;
        const size_t at = static_cast<size_t>(b) * kActQ8K;
        prefetch_ahead(wb, 210);
        const float d = f16(wb + 208);
        const __m256i scales = _mm256_cvtepi8_epi16(load128(wb + 192));
        __m256i sum_a[Nt];
        __m256i sum_b[Nt];
        for (int t = 0; t < Nt; ++t) sum_a[t] = sum_b[t] = _mm256_setzero_si256();
        for (int half = 0; half < 2; ++half) {
          const uint8_t* ql = wb + 64 * static_cast<size_t>(half);
          const __m256i l0 = load256(ql);
          const __m256i l1 = load256(ql + 32);
          const __m256i h = load256(wb + 128 + 32 * static_cast<size_t>(half));
          __m256i q[4];
          q[0] = _mm256_or_si256(_mm256_and_si256(l0, low_mask),
                                 _mm256_and_si256(_mm256_slli_epi16(h, 4), high_mask));
          q[1] = _mm256_or_si256(_mm256_and_si256(l1, low_mask),
                                 _mm256_and_si256(_mm256_slli_epi16(h, 2), high_mask));
          q[2] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l0, 4), low_mask),
                                 _mm256_and_si256(h, high_mask));
          q[3] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l1, 4), low_mask),
                                 _mm256_and_si256(_mm256_srli_epi16(h, 2), high_mask));
          for (int k = 0; k < 4; ++k) {
            const __m256i s = group_pair_scales(scales, 4 * half + k);
            for (int t = 0; t < Nt; ++t) {
              const uint8_t* qa = acts.rows[t] + at + kActQ8KQs + 128 * static_cast<size_t>(half) +
                                  32 * static_cast<size_t>(k);
              __m256i& sum = (k % 2 == 0) ? sum_a[t] : sum_b[t];
              sum = dot_i16(sum, _mm256_maddubs_epi16(q[k], load256(qa)), s);
            }
          }
        }
        for (int t = 0; t < Nt; ++t) {
          const uint8_t* ab = acts.rows[t] + at;
          const __m256i bias = _mm256_madd_epi16(scales, load256(ab + kActQ8KBsums));
          const __m256i sum =
              _mm256_sub_epi32(_mm256_add_epi32(sum_a[t], sum_b[t]), _mm256_slli_epi32(bias, 5));
          acc[t] = _mm256_fmadd_ps(_mm256_set1_ps(d * f32_at(ab)), _mm256_cvtepi32_ps(sum), acc[t]);
        }
      }
      for (int t = 0; t < Nt; ++t) out[t] = hsum(acc[t]);
    }
  };
};

// q2_k: 2-bit levels in 4 planes of 32 bytes per 128 elements; per group of 16 a 4-bit
// scale (low nibble) and 4-bit min (high nibble).
struct Q2K {
  template <int Nt>
  struct Tile {
    QD_TARGET static void run(const uint8_t* w, const ActTile& acts, int64_t blocks,
                              float* out) {
      __m256 acc[Nt];
      for (int t = 0; t < Nt; ++t) acc[t] = _mm256_setzero_ps();
      const __m256i three = _mm256_set1_epi8(3);
      const __m128i low_mask = _mm_set1_epi8(0x0F);
      for (int64_t b = 0; b < blocks; ++b) {
        const uint8_t* wb = w + static_cast<size_t>(b) * 84;
        const size_t at = static_cast<size_t>(b) * kActQ8K;
        prefetch_ahead(wb, 84);
        const float d = f16(wb + 80);
        const float dmin = f16(wb + 82);
        const __m128i packed = load128(wb);
        const __m256i scales = _mm256_cvtepu8_epi16(_mm_and_si128(packed, low_mask));
        const __m256i mins =
            _mm256_cvtepu8_epi16(_mm_and_si128(_mm_srli_epi16(packed, 4), low_mask));
        __m256i sum_a[Nt];
        __m256i sum_b[Nt];
        for (int t = 0; t < Nt; ++t) sum_a[t] = sum_b[t] = _mm256_setzero_si256();
        for (int chunk = 0; chunk < 2; ++chunk) {
          const __m256i raw = load256(wb + 16 + 32 * static_cast<size_t>(chunk));
          for (int j = 0; j < 4; ++j) {
            const __m256i q =
                _mm256_and_si256(_mm256_srl_epi16(raw, _mm_cvtsi32_si128(2 * j)), three);
            const __m256i s = group_pair_scales(scales, 4 * chunk + j);
            for (int t = 0; t < Nt; ++t) {
              const uint8_t* qa = acts.rows[t] + at + kActQ8KQs + 128 * static_cast<size_t>(chunk) +
                                  32 * static_cast<size_t>(j);
              __m256i& sum = (j % 2 == 0) ? sum_a[t] : sum_b[t];
              sum = dot_i16(sum, _mm256_maddubs_epi16(q, load256(qa)), s);
            }
          }
        }
        for (int t = 0; t < Nt; ++t) {
          const uint8_t* ab = acts.rows[t] + at;
          const float da = f32_at(ab);
          const __m256i msum = _mm256_madd_epi16(mins, load256(ab + kActQ8KBsums));
          const __m256i sum = _mm256_add_epi32(sum_a[t], sum_b[t]);
          acc[t] = _mm256_fmadd_ps(_mm256_set1_ps(d * da), _mm256_cvtepi32_ps(sum), acc[t]);
          acc[t] = _mm256_fnmadd_ps(_mm256_set1_ps(dmin * da), _mm256_cvtepi32_ps(msum), acc[t]);
        }
      }
      for (int t = 0; t < Nt; ++t) out[t] = hsum(acc[t]);
    }
  };
};

// q3_k: 2-bit planes as q2_k plus a high bit per element in hmask (bit 4c+j of byte l
// for element 128c + 32j + l); level = low + 4*high - 4; 16 signed 6-bit group scales.
struct Q3K {
  // The 16 six-bit scales minus 32 as i16. Of the 12 bytes s0 s1 s2 (u32 each), scales
  // 4i..4i+3 are byte-wise: low nibbles of s0 (i = 0) / s1 (i = 1), high nibbles of s0
  // (i = 2) / s1 (i = 3), each with bits 2i, 2i + 1 of s2's bytes on top; computed for all
  // four u32 lanes at once. The 16-byte load ends with the 12 bytes: it starts 4 bytes
  // before p, inside the block (its quants), never past the block's end (the last block
  // of a tensor ends 2 bytes after the scales).
  QD_INLINE static __m256i unpack_scales(const uint8_t* p) {
    const __m128i s = load128(p - 4);  // [-, s0, s1, s2]
    const __m128i low = _mm_and_si128(_mm_srlv_epi32(_mm_shuffle_epi32(s, _MM_SHUFFLE(2, 1, 2, 1)),
                                                     _mm_set_epi32(4, 4, 0, 0)),
                                      _mm_set1_epi8(0x0F));
    const __m128i high = _mm_slli_epi32(
        _mm_and_si128(_mm_srlv_epi32(_mm_shuffle_epi32(s, _MM_SHUFFLE(3, 3, 3, 3)), _mm_set_epi32(6, 4, 2, 0)),
                      _mm_set1_epi8(0x03)),
        4);
    return _mm256_cvtepi8_epi16(_mm_sub_epi8(_mm_or_si128(low, high), _mm_set1_epi8(32)));
  }

  template <int Nt>
  struct Tile {
    QD_TARGET static void run(const uint8_t* w, const ActTile& acts, int64_t blocks,
                              float* out) {
      __m256 acc[Nt];
      for (int t = 0; t < Nt; ++t) acc[t] = _mm256_setzero_ps();
      const __m256i three = _mm256_set1_epi8(3);
      const __m256i one = _mm256_set1_epi8(1);
      for (int64_t b = 0; b < blocks; ++b) {
        const uint8_t* wb = w + static_cast<size_t>(b) * 110;
        const size_t at = static_cast<size_t>(b) * kActQ8K;
        prefetch_ahead(wb, 110);
        const float d = f16(wb + 108);
        const __m256i scales = unpack_scales(wb + 96);
        const __m256i hmask = load256(wb);
        __m256i sum_a[Nt];
        __m256i sum_b[Nt];
        for (int t = 0; t < Nt; ++t) sum_a[t] = sum_b[t] = _mm256_setzero_si256();
        for (int chunk = 0; chunk < 2; ++chunk) {
          const __m256i raw = load256(wb + 32 + 32 * static_cast<size_t>(chunk));
          for (int j = 0; j < 4; ++j) {
            const __m128i shift = _mm_cvtsi32_si128(2 * j);
            const __m128i hshift = _mm_cvtsi32_si128(4 * chunk + j);
            const __m256i low = _mm256_and_si256(_mm256_srl_epi16(raw, shift), three);
            const __m256i high = _mm256_and_si256(_mm256_srl_epi16(hmask, hshift), one);
            const __m256i q = _mm256_or_si256(low, _mm256_slli_epi16(high, 2));
            const __m256i s = group_pair_scales(scales, 4 * chunk + j);
            for (int t = 0; t < Nt; ++t) {
              const uint8_t* qa = acts.rows[t] + at + kActQ8KQs + 128 * static_cast<size_t>(chunk) +
                                  32 * static_cast<size_t>(j);
              __m256i& sum = (j % 2 == 0) ? sum_a[t] : sum_b[t];
              sum = dot_i16(sum, _mm256_maddubs_epi16(q, load256(qa)), s);
            }
          }
        }
        for (int t = 0; t < Nt; ++t) {
          const uint8_t* ab = acts.rows[t] + at;
          const __m256i bias = _mm256_madd_epi16(scales, load256(ab + kActQ8KBsums));
          const __m256i sum =
              _mm256_sub_epi32(_mm256_add_epi32(sum_a[t], sum_b[t]), _mm256_slli_epi32(bias, 2));
          acc[t] = _mm256_fmadd_ps(_mm256_set1_ps(d * f32_at(ab)), _mm256_cvtepi32_ps(sum), acc[t]);
        }
      }
      for (int t = 0; t < Nt; ++t) out[t] = hsum(acc[t]);
    }
  };
};

// ===================== activation quantizers =====================

// max |x| over 32 floats, and whether any of them is NaN or infinite.
QD_INLINE float absmax_32(const float* x, bool* finite) {
  const __m256 sign = _mm256_set1_ps(-0.0f);
  const __m256 inf = _mm256_set1_ps(INFINITY);
  __m256 m = _mm256_setzero_ps();
  int bad = 0;
  for (int k = 0; k < 4; ++k) {
    const __m256 a = _mm256_andnot_ps(sign, _mm256_loadu_ps(x + 8 * k));
    bad |= _mm256_movemask_ps(_mm256_cmp_ps(a, inf, _CMP_NLT_UQ));
    m = _mm256_max_ps(m, a);
  }
  __m128 s = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps(m, 1));
  s = _mm_max_ps(s, _mm_movehl_ps(s, s));
  s = _mm_max_ss(s, _mm_movehdup_ps(s));
  *finite = bad == 0;
  return _mm_cvtss_f32(s);
}

// Rounds 32 floats * scale to nearest-even int8 (values already within [-127, 127])
// and stores them in order.
QD_INLINE void round_store_32(const float* x, float scale, int8_t* q) {
  const __m256 mul = _mm256_set1_ps(scale);
  const __m256i i0 = _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_loadu_ps(x), mul));
  const __m256i i1 = _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_loadu_ps(x + 8), mul));
  const __m256i i2 = _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_loadu_ps(x + 16), mul));
  const __m256i i3 = _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_loadu_ps(x + 24), mul));
  // packs works within 128-bit lanes; the permute restores element order.
  const __m256i p = _mm256_packs_epi16(_mm256_packs_epi32(i0, i1), _mm256_packs_epi32(i2, i3));
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(q),
                      _mm256_permutevar8x32_epi32(p, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7)));
}

QD_TARGET void quantize_act_q8_0(const float* x, uint8_t* dst, int64_t n) {
  for (int64_t b = 0; b < n / 32; ++b, x += 32, dst += kActQ8_0) {
    bool finite = true;
    const float amax = absmax_32(x, &finite);
    if (!finite) {
      write_poisoned_q8_0(dst);
      continue;
    }
    const uint16_t d = _cvtss_sh(amax / 127.0f, _MM_FROUND_TO_NEAREST_INT);
    std::memcpy(dst, &d, sizeof d);
    round_store_32(x, amax != 0.0f ? 127.0f / amax : 0.0f, reinterpret_cast<int8_t*>(dst + 2));
  }
}

// The sixteen sums of 16 quants of a q8_k block (fill_q8_k_bsums, vectorized): each 32
// bytes as unsigned (q ^ 0x80 = q + 128) through VPSADBW against zero, four sums of 8,
// added in pairs, less 16 * 128. Exact integers, the scalar loop's values. The scalar
// loop was 3% of a packed q6_k prefill's samples at 2 threads.
QD_INLINE void fill_q8_k_bsums_x86(uint8_t* block) {
  const __m256i flip = _mm256_set1_epi8(static_cast<char>(0x80));
  for (int k = 0; k < 8; ++k) {
    const __m256i s = _mm256_sad_epu8(_mm256_xor_si256(load256(block + kActQ8KQs + 32 * k), flip),
                                      _mm256_setzero_si256());
    const __m256i pairs = _mm256_add_epi64(s, _mm256_shuffle_epi32(s, 0x4E));  // sums in lanes 0 and 2
    const auto even = static_cast<int16_t>(_mm256_extract_epi64(pairs, 0) - 16 * 128);
    const auto odd = static_cast<int16_t>(_mm256_extract_epi64(pairs, 2) - 16 * 128);
    std::memcpy(block + kActQ8KBsums + 4 * k, &even, 2);
    std::memcpy(block + kActQ8KBsums + 4 * k + 2, &odd, 2);
  }
}

QD_TARGET void quantize_act_q8_k(const float* x, uint8_t* dst, int64_t n) {
  for (int64_t b = 0; b < n / 256; ++b, x += 256, dst += kActQ8K) {
    bool finite = true;
    float amax = 0.0f;
    for (int k = 0; k < 8; ++k) {
      bool f = true;
      amax = std::max(amax, absmax_32(x + 32 * k, &f));
      finite = finite && f;
    }
    if (!finite) {
      write_poisoned_q8_k(dst);
      continue;
    }
    if (amax == 0.0f) {
      std::memset(dst, 0, kActQ8K);
      continue;
    }
    // The first element of largest magnitude sets the sign, as in ggml.
    int first = 0;
    while (std::fabs(x[first]) != amax) ++first;
    const float iscale = -127.f / x[first];
    for (int k = 0; k < 8; ++k) {
      round_store_32(x + 32 * k, iscale, reinterpret_cast<int8_t*>(dst + kActQ8KQs + 32 * k));
    }
    const float d = 1 / iscale;
    std::memcpy(dst, &d, sizeof d);
    fill_q8_k_bsums_x86(dst);
  }
}

// The kernels both x86 families share; each family's make_set() adds its own q8_0,
// q4_0 and q6_k kernels (the AVX-512 family has faster ones for those).
void register_shared_kernels(KernelSet& set) {
  register_tiles<Legacy<WQ4_1>::Tile>(set, DType::q4_1);
  register_tiles<Legacy<WQ5_0>::Tile>(set, DType::q5_0);
  register_tiles<Legacy<WQ5_1>::Tile>(set, DType::q5_1);
  register_tiles<Q2K::Tile>(set, DType::q2_k);
  register_tiles<Q3K::Tile>(set, DType::q3_k);
  register_tiles<KWithMin<false>::Tile>(set, DType::q4_k);
  register_tiles<KWithMin<true>::Tile>(set, DType::q5_k);
  register_tiles<AtMostTwo<Grouped<WGq8<32>>::Tile>::Tile>(set, DType::gq8_32);
  register_tiles<AtMostTwo<Grouped<WGq8<64>>::Tile>::Tile>(set, DType::gq8_64);
  register_tiles<AtMostTwo<Grouped<WGq8<128>>::Tile>::Tile>(set, DType::gq8_128);
  register_tiles<AtMostTwo<GroupedU4<32>::Tile>::Tile>(set, DType::gq4_32);
  set.prepare[static_cast<size_t>(DType::gq4_32)] = {gq4_act_sums_bytes<32>, gq4_act_sums<32>};
  register_tiles<AtMostTwo<GroupedU4<64>::Tile>::Tile>(set, DType::gq4_64);
  set.prepare[static_cast<size_t>(DType::gq4_64)] = {gq4_act_sums_bytes<64>, gq4_act_sums<64>};
  register_tiles<AtMostTwo<GroupedU4<128>::Tile>::Tile>(set, DType::gq4_128);
  set.prepare[static_cast<size_t>(DType::gq4_128)] = {gq4_act_sums_bytes<128>, gq4_act_sums<128>};
  set.quantize_q8_0 = quantize_act_q8_0;
  set.quantize_q8_k = quantize_act_q8_k;
}

}  // namespace

#undef QD_INLINE
