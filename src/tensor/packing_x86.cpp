// AVX2 transposes for the plain panels' packing (tensor/packing.cpp): eight rows of a
// group's 16 columns at a time, turned into the group's column-major order
// (packed_layout::Plain: column k's 64 rows side by side) in registers, so a row's
// element is neither loaded nor stored on its own. Byte moves only: the packed bytes are
// the per-row path's (pack_block), which the tests compare under every ISA level.
#include "common/simd.hpp"
#include "tensor/packing.hpp"
#include "tensor/packing_kernels.hpp"

namespace loom::kernels {

namespace {
constexpr int64_t kPanelRows = packed_layout::Plain::rows;
}

// 8 rows of 16 two-byte elements (f16, bf16): per 128-bit lane an 8 x 8 transpose of
// 16-bit words (unpacks of 16, 32 and 64 bits), lane 0 giving columns 0..7, lane 1
// columns 8..15, each column's 8 rows one 16-byte store.
LOOM_TARGET_AVX2 void pack_plain_rows16_avx2(const uint8_t* row0, int64_t row_stride, int64_t r0, uint8_t* group) {
  __m256i r[8];
  for (int i = 0; i < 8; ++i) r[i] = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(row0 + i * row_stride));
  __m256i t[8], u[8];
  for (int i = 0; i < 4; ++i) {
    t[2 * i] = _mm256_unpacklo_epi16(r[2 * i], r[2 * i + 1]);      // columns 0-3 of rows 2i, 2i + 1
    t[2 * i + 1] = _mm256_unpackhi_epi16(r[2 * i], r[2 * i + 1]);  // columns 4-7
  }
  for (int i = 0; i < 2; ++i) {  // rows 4i..4i + 3
    u[4 * i] = _mm256_unpacklo_epi32(t[4 * i], t[4 * i + 2]);          // columns 0, 1
    u[4 * i + 1] = _mm256_unpackhi_epi32(t[4 * i], t[4 * i + 2]);      // 2, 3
    u[4 * i + 2] = _mm256_unpacklo_epi32(t[4 * i + 1], t[4 * i + 3]);  // 4, 5
    u[4 * i + 3] = _mm256_unpackhi_epi32(t[4 * i + 1], t[4 * i + 3]);  // 6, 7
  }
  for (int i = 0; i < 4; ++i) {  // columns 2i and 2i + 1 (and 8 more) of rows 0..7
    const __m256i even = _mm256_unpacklo_epi64(u[i], u[4 + i]);
    const __m256i odd = _mm256_unpackhi_epi64(u[i], u[4 + i]);
    const int64_t k = 2 * i;
    const auto at = [&](int64_t col) { return reinterpret_cast<__m128i*>(group + (col * kPanelRows + r0) * 2); };
    _mm_storeu_si128(at(k), _mm256_castsi256_si128(even));
    _mm_storeu_si128(at(k + 8), _mm256_extracti128_si256(even, 1));
    _mm_storeu_si128(at(k + 1), _mm256_castsi256_si128(odd));
    _mm_storeu_si128(at(k + 9), _mm256_extracti128_si256(odd, 1));
  }
}

// 8 rows of 16 four-byte elements (f32): two 8 x 8 transposes (columns 0..7, 8..15),
// each column's 8 rows one 32-byte store.
LOOM_TARGET_AVX2 void pack_plain_rows32_avx2(const uint8_t* row0, int64_t row_stride, int64_t r0, uint8_t* group) {
  for (int half = 0; half < 2; ++half) {
    __m256 r[8];
    for (int i = 0; i < 8; ++i) r[i] = _mm256_loadu_ps(reinterpret_cast<const float*>(row0 + i * row_stride) + 8 * half);
    __m256 t[8], u[8];
    for (int i = 0; i < 4; ++i) {
      t[2 * i] = _mm256_unpacklo_ps(r[2 * i], r[2 * i + 1]);      // columns 0, 1 (4, 5) of rows 2i, 2i + 1
      t[2 * i + 1] = _mm256_unpackhi_ps(r[2 * i], r[2 * i + 1]);  // 2, 3 (6, 7)
    }
    for (int i = 0; i < 2; ++i) {  // rows 4i..4i + 3: columns 0..3 in lane 0, 4..7 in lane 1
      u[4 * i] = _mm256_shuffle_ps(t[4 * i], t[4 * i + 2], 0x44);
      u[4 * i + 1] = _mm256_shuffle_ps(t[4 * i], t[4 * i + 2], 0xEE);
      u[4 * i + 2] = _mm256_shuffle_ps(t[4 * i + 1], t[4 * i + 3], 0x44);
      u[4 * i + 3] = _mm256_shuffle_ps(t[4 * i + 1], t[4 * i + 3], 0xEE);
    }
    for (int k = 0; k < 4; ++k) {
      float* low = reinterpret_cast<float*>(group) + (8 * half + k) * kPanelRows + r0;
      float* high = reinterpret_cast<float*>(group) + (8 * half + k + 4) * kPanelRows + r0;
      _mm256_storeu_ps(low, _mm256_permute2f128_ps(u[k], u[4 + k], 0x20));
      _mm256_storeu_ps(high, _mm256_permute2f128_ps(u[k], u[4 + k], 0x31));
    }
  }
}

}  // namespace loom::kernels
