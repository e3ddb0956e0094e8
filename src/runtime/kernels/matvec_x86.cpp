// AVX2 and AVX-512 products of f32, f16 and bf16 weights with f32 activations: the
// decode matvec (one token) and the prefill / batched-decode GEMM (many tokens), built
// from ONE tile template per ISA (plain_tiles_x86.inl) so that every (row, token) output
// is summed in the same order whatever the batch: row t of a many-token product is
// bit-identical to the product of token t alone (batch invariance, docs/runtime.md).
//
// The order, per (row, token) output, with V lanes (8 AVX2, 16 AVX-512) and C chains
// (Isa::kChains: V-lane accumulators a0..a(C-1)):
//   for each whole step of C*V columns, chunk j (columns c + jV .. c + jV + V - 1) goes
//     into a_j, one FMA per lane, k ascending;
//   then each remaining whole V-chunk goes into a0 (in order);
//   then the last cols % V columns, zero-filled to V lanes, go into a1 (a0 when C = 1);
//   result = hsum of the chains added pairwise: a0 | a0 + a1 | (a0 + a1) + (a2 + a3).
// f16 / bf16 weights are widened exactly to f32 in registers (F16C / a shift), so the
// widening cannot change a bit.
//
// Each ISA level has its own C (and so its own bits); within a level every product
// follows it. AVX2: C = 4. AVX-512: C = 1, one 16-lane chain per output (since
// 2026-12-02; it was 4 as on AVX2, see docs/runtime.md for the measurements).
//
// A tile is R weight rows x T tokens with R*T*C accumulators; each weight vector is
// loaded (and widened) once for its T tokens, each token vector once for its R rows.
// R and T change nothing but speed, so each ISA picks them from measurements:
//   * the GEMM's tile wants few loads per FMA. AVX2 (C = 4, 16 ymm): 1 row x 3 tokens,
//     12 accumulators; tiles of more rows with fewer chains measured slower on Zen 3.
//     AVX-512 (C = 1, 32 zmm): 4 rows x 6 tokens, 24 accumulators + 6 token vectors
//     + 1 weight vector, 10 loads per 24 FMAs; with four chains it had been 1 x 6 x 4,
//     28 loads per 24 FMAs, at 26-47% of the FMA peak on one thread against 49-79% now
//     (loom_linear_bench BM_prefill, 128 tokens).
//   * decode streams every weight byte once per token (a memory-bandwidth problem): the
//     matvec needs enough independent FMA chains to hide the FMA latency at the bus
//     rate, in as few streams as the prefetchers follow. AVX2: one row, its four chains.
//     AVX-512: four rows, one from each quarter of the thread's rows (distant streams;
//     adjacent rows side by side ran at half the rate, see rows() in the .inl).
//
// The GEMM walks rows in blocks of about Isa::kBlockBytes of weights (kept in L2 while
// every token tile passes over them) and, for long rows, columns in blocks of balanced
// lengths whose token rows fit in Isa::kColumnBlockBytes (see rows() in the .inl).
#include <algorithm>
#include <cstring>
#include <utility>
#include <vector>

#include "common/simd.hpp"
#include "loom/cpu.hpp"
#include "runtime/kernels/matvec_kernels.hpp"

namespace loom::kernels {

namespace {

// Rows of a block: about block_bytes of weights, a whole number of `tile_rows` (a
// block's leftover rows run one at a time, at a fraction of the tile's rate).
int64_t block_rows(int64_t block_bytes, int64_t cols, int64_t elem_bytes, int64_t tile_rows) {
  const int64_t rows = block_bytes / std::max<int64_t>(1, cols * elem_bytes);
  return std::max<int64_t>(tile_rows, rows / tile_rows * tile_rows);
}

// n < V elements copied into a zeroed V-lane buffer (zero bits are 0.0 in all three
// dtypes), so an AVX2 tail never reads past the row.
template <typename E>
struct Tail8 {
  E v[8] = {};
  Tail8(const E* p, int64_t n) { std::memcpy(v, p, static_cast<size_t>(n) * sizeof(E)); }
};

// ---- weight loaders: widen 8 (AVX2) or 16 (AVX-512) weights to f32; load_tail reads
// the first n < V of them and zero-fills the rest ----
struct F32x8 {
  using T = float;
  LOOM_TARGET_AVX2 static inline __m256 load(const float* p) { return _mm256_loadu_ps(p); }
  LOOM_TARGET_AVX2 static inline __m256 load_tail(const float* p, int64_t n) {
    const Tail8<float> t(p, n);
    return _mm256_loadu_ps(t.v);
  }
};
struct F16x8 {
  using T = uint16_t;
  LOOM_TARGET_AVX2 static inline __m256 load(const uint16_t* p) {
    return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  }
  LOOM_TARGET_AVX2 static inline __m256 load_tail(const uint16_t* p, int64_t n) {
    const Tail8<uint16_t> t(p, n);
    return load(t.v);
  }
};
struct Bf16x8 {
  using T = uint16_t;
  LOOM_TARGET_AVX2 static inline __m256 load(const uint16_t* p) {
    const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
  }
  LOOM_TARGET_AVX2 static inline __m256 load_tail(const uint16_t* p, int64_t n) {
    const Tail8<uint16_t> t(p, n);
    return load(t.v);
  }
};

inline __mmask16 tail_mask(int64_t n) { return static_cast<__mmask16>((1u << n) - 1); }

// AMD family 0x19 with AVX-512: Zen 4 (Zen 3, the same family, has no AVX-512), whose
// 512-bit units are double-pumped.
bool amd_family_19h() {
  const CpuFeatures& f = cpu_features();
  return f.amd && f.family == 0x19;
}

struct F32x16 {
  using T = float;
  LOOM_TARGET_AVX512 static inline __m512 load(const float* p) { return _mm512_loadu_ps(p); }
  LOOM_TARGET_AVX512 static inline __m512 load_tail(const float* p, int64_t n) {
    return _mm512_maskz_loadu_ps(tail_mask(n), p);
  }
};
struct F16x16 {
  using T = uint16_t;
  LOOM_TARGET_AVX512 static inline __m512 load(const uint16_t* p) {
    return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
  }
  LOOM_TARGET_AVX512 static inline __m512 load_tail(const uint16_t* p, int64_t n) {
    return _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(tail_mask(n), p));
  }
};
struct Bf16x16 {
  using T = uint16_t;
  LOOM_TARGET_AVX512 static inline __m512 widen(__m256i h) {
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
  }
  LOOM_TARGET_AVX512 static inline __m512 load(const uint16_t* p) {
    return widen(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
  }
  LOOM_TARGET_AVX512 static inline __m512 load_tail(const uint16_t* p, int64_t n) {
    return widen(_mm256_maskz_loadu_epi16(tail_mask(n), p));
  }
};

// ---- the vector operations and tile sizes of each ISA level ----

struct Avx2Isa {
  using V = __m256;
  static constexpr int64_t kLanes = 8;
  static constexpr int kChains = 4;
  static constexpr int kMatvecRows = 1;
  static constexpr int kRegisters = 16;
  static constexpr int kGemmTokens = 3;
  static constexpr int kOneTileTokens = 3;
  static constexpr int gemm_rows(int /*tokens*/) { return 1; }
  static constexpr int64_t kColumnBlockBytes = 16 * 1024;  // token rows of a column block (L1)
  static constexpr int64_t kBlockBytes = 128 * 1024;        // weights of a row block (L2)
  static constexpr bool kPrefetchNextBlock = true;
  static constexpr int64_t kGemmAheadBytes = 0;  // see Avx512Isa
  static constexpr bool kOneTileWhole = false;
  static int64_t matvec_ahead(int64_t /*elem_bytes*/) { return 0; }  // hardware prefetchers only
  LOOM_TARGET_AVX2 static inline V zero() { return _mm256_setzero_ps(); }
  LOOM_TARGET_AVX2 static inline V load(const float* p) { return _mm256_loadu_ps(p); }
  LOOM_TARGET_AVX2 static inline V load_tail(const float* p, int64_t n) { return F32x8::load_tail(p, n); }
  LOOM_TARGET_AVX2 static inline void store(float* p, V v) { _mm256_storeu_ps(p, v); }
  LOOM_TARGET_AVX2 static inline V fma(V a, V b, V c) { return _mm256_fmadd_ps(a, b, c); }
  LOOM_TARGET_AVX2 static inline V add(V a, V b) { return _mm256_add_ps(a, b); }
  LOOM_TARGET_AVX2 static inline float hsum(V v) { return simd::hsum256(v); }
};

struct Avx512Isa {
  using V = __m512;
  static constexpr int64_t kLanes = 16;
  static constexpr int kChains = 1;
  static constexpr int kMatvecRows = 4;
  static constexpr int kRegisters = 32;
  static constexpr int kGemmTokens = 6;
  static constexpr int kOneTileTokens = 9;  // f32 only: see gemm()
  static constexpr int gemm_rows(int tokens) { return tokens <= 6 ? 4 : 3; }
  // Token rows of a column block: more than L1 (48 KiB on Zen 5). Blocks of L1's size
  // cost more in accumulator round trips and short blocks than the L2 reads they saved:
  // 1B-shape f16 layer products (128 tokens, 2 threads) ran 8-10% faster at 128 KiB.
  static constexpr int64_t kColumnBlockBytes = 128 * 1024;
  static constexpr int64_t kBlockBytes = 256 * 1024;
  static constexpr bool kPrefetchNextBlock = false;  // measured no gain (Zen 5), it stalled on full fill buffers
  // Instead each weight row stream prefetches this far ahead of its loads: in the GEMM's
  // first token tile of a block (which reads the block from memory; the later tiles find
  // it in L2) and in the matvec. loom bench, small f16, 2 threads, alternating (Zen 5):
  // batch-8 decode 494/592 -> 717/652 tokens/s (512 and 4096 bytes ahead: less), decode
  // 130-172 -> 153-189 with 1 KiB ahead. The GEMM's prefetches go to L2 (_MM_HINT_T1):
  // into L1 each line held one of L1's few miss buffers from the prefetch until memory
  // answered, which capped the lines in flight; the tile's loads then find the block in
  // L2 as the later tiles do. loom_batched_decode --dtype f16 --batch 8, Zen 4, 3 rounds
  // alternating: products alone 154/155/159 against 136/137/124 GFLOP/s, decode 486/501/505
  // against 349/466/443 tokens/s. The matvec keeps L1 (its B = 1 decode measured no
  // better with L2 at 512 B, 1 KiB or 2 KiB ahead).
  static constexpr int64_t kGemmAheadBytes = 2048;
  static constexpr bool kOneTileWhole = true;  // a product of one token tile: see gemm()
  // The matvec's distance, in elements of the weight dtype: 1 KiB elsewhere; on Zen 4,
  // 256 elements (512 bytes of f16 / bf16, 1 KiB of f32 as before). loom bench --gen-tokens
  // 32..64 on the f16 GGUFs, 2 threads, three rounds alternating with 1 KiB (2026-12-03):
  // small shape 156/123/135 against 117/120/99 tokens/s, 1B shape 11.9/13.2/12.7 against
  // 8.9/11.3/10.2; 2 KiB ahead was slower than 1 KiB (f16 105/95/97 against 113/107/111,
  // loom_batched_decode --batch 1).
  static int64_t matvec_ahead(int64_t elem_bytes) { return amd_family_19h() ? 256 : 1024 / elem_bytes; }
  LOOM_TARGET_AVX512 static inline V zero() { return _mm512_setzero_ps(); }
  LOOM_TARGET_AVX512 static inline V load(const float* p) { return _mm512_loadu_ps(p); }
  LOOM_TARGET_AVX512 static inline V load_tail(const float* p, int64_t n) { return F32x16::load_tail(p, n); }
  LOOM_TARGET_AVX512 static inline void store(float* p, V v) { _mm512_storeu_ps(p, v); }
  LOOM_TARGET_AVX512 static inline V fma(V a, V b, V c) { return _mm512_fmadd_ps(a, b, c); }
  LOOM_TARGET_AVX512 static inline V add(V a, V b) { return _mm512_add_ps(a, b); }
  LOOM_TARGET_AVX512 static inline float hsum(V v) { return simd::hsum512(v); }
};

#define LOOM_TILE_NS avx2_tiles
#define LOOM_TILE_TARGET LOOM_TARGET_AVX2
#define LOOM_TILE_ISA Avx2Isa
#include "runtime/kernels/plain_tiles_x86.inl"
#undef LOOM_TILE_NS
#undef LOOM_TILE_TARGET
#undef LOOM_TILE_ISA

#define LOOM_TILE_NS avx512_tiles
#define LOOM_TILE_TARGET LOOM_TARGET_AVX512
#define LOOM_TILE_ISA Avx512Isa
#include "runtime/kernels/plain_tiles_x86.inl"
#undef LOOM_TILE_NS
#undef LOOM_TILE_TARGET
#undef LOOM_TILE_ISA
}  // namespace

void matvec_f32_avx512(const float* w, int64_t s, const float* x, float* y, int64_t n, int64_t c) {
  avx512_tiles::matvec<F32x16>(w, s, x, y, n, c);
}
void matvec_f16_avx512(const uint16_t* w, int64_t s, const float* x, float* y, int64_t n, int64_t c) {
  avx512_tiles::matvec<F16x16>(w, s, x, y, n, c);
}
void matvec_bf16_avx512(const uint16_t* w, int64_t s, const float* x, float* y, int64_t n, int64_t c) {
  avx512_tiles::matvec<Bf16x16>(w, s, x, y, n, c);
}
void matvec_f32_avx2(const float* w, int64_t s, const float* x, float* y, int64_t n, int64_t c) {
  avx2_tiles::matvec<F32x8>(w, s, x, y, n, c);
}
void matvec_f16_avx2(const uint16_t* w, int64_t s, const float* x, float* y, int64_t n, int64_t c) {
  avx2_tiles::matvec<F16x8>(w, s, x, y, n, c);
}
void matvec_bf16_avx2(const uint16_t* w, int64_t s, const float* x, float* y, int64_t n, int64_t c) {
  avx2_tiles::matvec<Bf16x8>(w, s, x, y, n, c);
}

void gemm_f32_avx512(const float* w, int64_t s, const float* x, int64_t xs, int64_t nt, float* y,
                     int64_t ys, int64_t n, int64_t c) {
  avx512_tiles::gemm<F32x16>(w, s, x, xs, nt, y, ys, n, c);
}
void gemm_f16_avx512(const uint16_t* w, int64_t s, const float* x, int64_t xs, int64_t nt, float* y,
                     int64_t ys, int64_t n, int64_t c) {
  avx512_tiles::gemm<F16x16>(w, s, x, xs, nt, y, ys, n, c);
}
void gemm_bf16_avx512(const uint16_t* w, int64_t s, const float* x, int64_t xs, int64_t nt,
                      float* y, int64_t ys, int64_t n, int64_t c) {
  avx512_tiles::gemm<Bf16x16>(w, s, x, xs, nt, y, ys, n, c);
}
void gemm_f32_avx2(const float* w, int64_t s, const float* x, int64_t xs, int64_t nt, float* y,
                   int64_t ys, int64_t n, int64_t c) {
  avx2_tiles::gemm<F32x8>(w, s, x, xs, nt, y, ys, n, c);
}
void gemm_f16_avx2(const uint16_t* w, int64_t s, const float* x, int64_t xs, int64_t nt, float* y,
                   int64_t ys, int64_t n, int64_t c) {
  avx2_tiles::gemm<F16x8>(w, s, x, xs, nt, y, ys, n, c);
}
void gemm_bf16_avx2(const uint16_t* w, int64_t s, const float* x, int64_t xs, int64_t nt, float* y,
                    int64_t ys, int64_t n, int64_t c) {
  avx2_tiles::gemm<Bf16x8>(w, s, x, xs, nt, y, ys, n, c);
}

}  // namespace loom::kernels
