// Internal: the byte layouts of ggml's block-quantized types (ggml-common.h), as
// structs whose sizes and field offsets are checked at compile time against loom's
// DType table. Code reads blocks through byte pointers and the offsets below (with
// memcpy for multi-byte fields), never by casting to these structs: weights come from
// mapped files and activation buffers from callers, and neither promises alignment.
//
// Every multi-byte field is little-endian; f16 fields are IEEE binary16 bit patterns.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>

#include "loom/convert.hpp"
#include "loom/dtype.hpp"

namespace loom::quant {

inline constexpr int kBlock = 32;        // elements per block of the 32-element types
inline constexpr int kSuperBlock = 256;  // elements per k-quant super-block

// x = d * q, q in [-128, 127] (quantizers produce [-127, 127])
struct BlockQ8_0 {
  uint16_t d;
  int8_t qs[32];
};
// x = d * (q - 8); element j in the low nibble of qs[j], element j+16 in the high one
struct BlockQ4_0 {
  uint16_t d;
  uint8_t qs[16];
};
// x = d * q + m
struct BlockQ4_1 {
  uint16_t d;
  uint16_t m;
  uint8_t qs[16];
};
// x = d * (q - 16); bit 4 of element j is bit j of the little-endian u32 qh
struct BlockQ5_0 {
  uint16_t d;
  uint8_t qh[4];
  uint8_t qs[16];
};
// x = d * q + m
struct BlockQ5_1 {
  uint16_t d;
  uint16_t m;
  uint8_t qh[4];
  uint8_t qs[16];
};
// x = d * q; s = d * sum(q) (ggml's activation type for q4_1/q5_1)
struct BlockQ8_1 {
  uint16_t d;
  uint16_t s;
  int8_t qs[32];
};
// 16 groups of 16: x = d * (scales[g] & 15) * q - dmin * (scales[g] >> 4), q 2-bit
struct BlockQ2K {
  uint8_t scales[16];
  uint8_t qs[64];
  uint16_t d;
  uint16_t dmin;
};
// 16 groups of 16: x = d * (s6[g] - 32) * (q2 - (hmask bit ? 0 : 4))
struct BlockQ3K {
  uint8_t hmask[32];
  uint8_t qs[64];
  uint8_t scales[12];
  uint16_t d;
};
// 8 groups of 32: x = d * sc6[g] * q - dmin * m6[g], q 4-bit
struct BlockQ4K {
  uint16_t d;
  uint16_t dmin;
  uint8_t scales[12];
  uint8_t qs[128];
};
// as q4_k with a fifth bit per element in qh
struct BlockQ5K {
  uint16_t d;
  uint16_t dmin;
  uint8_t scales[12];
  uint8_t qh[32];
  uint8_t qs[128];
};
// 16 groups of 16: x = d * scales[g] * (q6 - 32)
struct BlockQ6K {
  uint8_t ql[128];
  uint8_t qh[64];
  int8_t scales[16];
  uint16_t d;
};
// x = d * q (f32 d); bsums[g] = sum of the 16 quants of group g (activation type)
struct BlockQ8K {
  float d;
  int8_t qs[256];
  int16_t bsums[16];
};

template <typename Block>
constexpr bool size_matches(DType dtype, int elems) {
  // Mirrors the DType table (src/tensor/dtype.cpp); dtype_test checks that table too.
  switch (dtype) {
    case DType::q8_0: return sizeof(Block) == 34 && elems == 32;
    case DType::q4_0: return sizeof(Block) == 18 && elems == 32;
    case DType::q4_1: return sizeof(Block) == 20 && elems == 32;
    case DType::q5_0: return sizeof(Block) == 22 && elems == 32;
    case DType::q5_1: return sizeof(Block) == 24 && elems == 32;
    case DType::q8_1: return sizeof(Block) == 36 && elems == 32;
    case DType::q2_k: return sizeof(Block) == 84 && elems == 256;
    case DType::q3_k: return sizeof(Block) == 110 && elems == 256;
    case DType::q4_k: return sizeof(Block) == 144 && elems == 256;
    case DType::q5_k: return sizeof(Block) == 176 && elems == 256;
    case DType::q6_k: return sizeof(Block) == 210 && elems == 256;
    case DType::q8_k: return sizeof(Block) == 292 && elems == 256;
    default: return false;
  }
}
static_assert(size_matches<BlockQ8_0>(DType::q8_0, kBlock));
static_assert(size_matches<BlockQ4_0>(DType::q4_0, kBlock));
static_assert(size_matches<BlockQ4_1>(DType::q4_1, kBlock));
static_assert(size_matches<BlockQ5_0>(DType::q5_0, kBlock));
static_assert(size_matches<BlockQ5_1>(DType::q5_1, kBlock));
static_assert(size_matches<BlockQ8_1>(DType::q8_1, kBlock));
static_assert(size_matches<BlockQ2K>(DType::q2_k, kSuperBlock));
static_assert(size_matches<BlockQ3K>(DType::q3_k, kSuperBlock));
static_assert(size_matches<BlockQ4K>(DType::q4_k, kSuperBlock));
static_assert(size_matches<BlockQ5K>(DType::q5_k, kSuperBlock));
static_assert(size_matches<BlockQ6K>(DType::q6_k, kSuperBlock));
static_assert(size_matches<BlockQ8K>(DType::q8_k, kSuperBlock));

// Field offsets, for reading blocks through byte pointers.
namespace off {
inline constexpr size_t q8_0_qs = offsetof(BlockQ8_0, qs);
inline constexpr size_t q4_1_m = offsetof(BlockQ4_1, m);
inline constexpr size_t q4_1_qs = offsetof(BlockQ4_1, qs);
inline constexpr size_t q4_0_qs = offsetof(BlockQ4_0, qs);
inline constexpr size_t q5_0_qh = offsetof(BlockQ5_0, qh);
inline constexpr size_t q5_0_qs = offsetof(BlockQ5_0, qs);
inline constexpr size_t q5_1_m = offsetof(BlockQ5_1, m);
inline constexpr size_t q5_1_qh = offsetof(BlockQ5_1, qh);
inline constexpr size_t q5_1_qs = offsetof(BlockQ5_1, qs);
inline constexpr size_t q8_1_s = offsetof(BlockQ8_1, s);
inline constexpr size_t q8_1_qs = offsetof(BlockQ8_1, qs);
inline constexpr size_t q2_k_scales = offsetof(BlockQ2K, scales);
inline constexpr size_t q2_k_qs = offsetof(BlockQ2K, qs);
inline constexpr size_t q2_k_d = offsetof(BlockQ2K, d);
inline constexpr size_t q2_k_dmin = offsetof(BlockQ2K, dmin);
inline constexpr size_t q3_k_hmask = offsetof(BlockQ3K, hmask);
inline constexpr size_t q3_k_qs = offsetof(BlockQ3K, qs);
inline constexpr size_t q3_k_scales = offsetof(BlockQ3K, scales);
inline constexpr size_t q3_k_d = offsetof(BlockQ3K, d);
inline constexpr size_t q4_k_d = offsetof(BlockQ4K, d);
inline constexpr size_t q4_k_dmin = offsetof(BlockQ4K, dmin);
inline constexpr size_t q4_k_scales = offsetof(BlockQ4K, scales);
inline constexpr size_t q4_k_qs = offsetof(BlockQ4K, qs);
inline constexpr size_t q5_k_d = offsetof(BlockQ5K, d);
inline constexpr size_t q5_k_dmin = offsetof(BlockQ5K, dmin);
inline constexpr size_t q5_k_scales = offsetof(BlockQ5K, scales);
inline constexpr size_t q5_k_qh = offsetof(BlockQ5K, qh);
inline constexpr size_t q5_k_qs = offsetof(BlockQ5K, qs);
inline constexpr size_t q6_k_ql = offsetof(BlockQ6K, ql);
inline constexpr size_t q6_k_qh = offsetof(BlockQ6K, qh);
inline constexpr size_t q6_k_scales = offsetof(BlockQ6K, scales);
inline constexpr size_t q6_k_d = offsetof(BlockQ6K, d);
inline constexpr size_t q8_k_d = offsetof(BlockQ8K, d);
inline constexpr size_t q8_k_qs = offsetof(BlockQ8K, qs);
inline constexpr size_t q8_k_bsums = offsetof(BlockQ8K, bsums);
}  // namespace off

// loom's group-quantized types (pack files; gq8_G and gq4_G for G = 32, 64, 128): one
// block per group of G consecutive elements of a row.
//   gq8_G: f16 d @0; i8 q[G] @2.                        x = d * q
//   gq4_G: f16 d @0; u8 z @2 (low 4 bits; the high ones are written 0 and ignored);
//          u8 reserved @3 (0); u8 qs[G/2] @4.            x = d * (q - z), q, z in 0..15
// gq4's quants come in runs of 32 elements: byte 16s + j holds element 32s + j in its
// low nibble and element 32s + 16 + j in its high one (q4_0's order, per 32 elements),
// so every kernel reads a group as G/32 q4_0-shaped halves.
namespace group {
inline constexpr size_t d = 0;
inline constexpr size_t gq8_qs = 2;
inline constexpr size_t gq4_z = 2;
inline constexpr size_t gq4_qs = 4;
constexpr size_t block_bytes(int bits, int group) {
  return bits == 8 ? gq8_qs + static_cast<size_t>(group) : gq4_qs + static_cast<size_t>(group) / 2;
}
}  // namespace group

inline uint16_t load_u16(const uint8_t* p) noexcept {
  uint16_t v;
  std::memcpy(&v, p, sizeof v);
  return v;
}
inline uint32_t load_u32(const uint8_t* p) noexcept {
  uint32_t v;
  std::memcpy(&v, p, sizeof v);
  return v;
}
inline int16_t load_i16(const uint8_t* p) noexcept {
  int16_t v;
  std::memcpy(&v, p, sizeof v);
  return v;
}
inline float load_f32(const uint8_t* p) noexcept {
  float v;
  std::memcpy(&v, p, sizeof v);
  return v;
}
inline float load_f16(const uint8_t* p) noexcept { return f16_to_f32_scalar(load_u16(p)); }

inline void store_u16(uint8_t* p, uint16_t v) noexcept { std::memcpy(p, &v, sizeof v); }
inline void store_u32(uint8_t* p, uint32_t v) noexcept { std::memcpy(p, &v, sizeof v); }
inline void store_i16(uint8_t* p, int16_t v) noexcept { std::memcpy(p, &v, sizeof v); }
inline void store_f32(uint8_t* p, float v) noexcept { std::memcpy(p, &v, sizeof v); }
inline void store_f16(uint8_t* p, float v) noexcept { store_u16(p, f32_to_f16_scalar(v)); }

// The 6-bit scale and min of group j (0..7) of a q4_k / q5_k block's 12 scale bytes:
// groups 0-3 keep theirs in the low 6 bits of bytes j and j+4; groups 4-7 split theirs
// into a low nibble (byte j+4) and two high bits (the top bits of bytes j-4 and j).
inline void k4_scale_min(const uint8_t* scales, int j, uint8_t* sc, uint8_t* m) noexcept {
  if (j < 4) {
    *sc = scales[j] & 63;
    *m = scales[j + 4] & 63;
  } else {
    *sc = static_cast<uint8_t>((scales[j + 4] & 0xF) | ((scales[j - 4] >> 6) << 4));
    *m = static_cast<uint8_t>((scales[j + 4] >> 4) | ((scales[j] >> 6) << 4));
  }
}

// The inverse for all eight groups: their scales and mins (0..63) into the 12 bytes
// (every bit of the 12 bytes belongs to one of the sixteen values, so this is exact).
inline void k4_store_scales_mins(const uint8_t* sc, const uint8_t* m, uint8_t* scales) noexcept {
  for (int j = 0; j < 4; ++j) {
    scales[j] = static_cast<uint8_t>((sc[j] & 63) | ((sc[j + 4] >> 4) << 6));
    scales[j + 4] = static_cast<uint8_t>((m[j] & 63) | ((m[j + 4] >> 4) << 6));
    scales[j + 8] = static_cast<uint8_t>((sc[j + 4] & 0xF) | ((m[j + 4] & 0xF) << 4));
  }
}

// The signed 6-bit scale of group j (0..15) of a q3_k block's 12 scale bytes: the low
// nibble lives in byte j (j < 8, low half) or byte j-8 (high half), the top two bits
// in byte 8 + j%4 at bit 2*(j/4); the stored value is biased by 32.
inline int q3k_scale(const uint8_t* scales, int j) noexcept {
  const int low = j < 8 ? (scales[j] & 0xF) : (scales[j - 8] >> 4);
  const int high = (scales[8 + j % 4] >> (2 * (j / 4))) & 3;
  return (low | (high << 4)) - 32;
}

// The inverse for all sixteen groups: their biased values (scale + 32, 0..63) into the
// 12 scale bytes (every bit of the 12 bytes belongs to one value, so this is exact).
inline void q3k_store_scales(const uint8_t* biased, uint8_t* scales) noexcept {
  std::memset(scales, 0, 12);
  for (int j = 0; j < 16; ++j) {
    const int v = biased[j];
    const int low_at = j < 8 ? j : j - 8;
    scales[low_at] = static_cast<uint8_t>(scales[low_at] | ((v & 0xF) << (j < 8 ? 0 : 4)));
    scales[8 + j % 4] = static_cast<uint8_t>(scales[8 + j % 4] | ((v >> 4) << (2 * (j / 4))));
  }
}

}  // namespace loom::quant
