#include "tensor/packing.hpp"

#include <array>
#include <cstring>

#include "loom/cpu.hpp"
#include "loom/error.hpp"
#include "loom/thread_pool.hpp"
#include "tensor/packing_kernels.hpp"
#include "tensor/quant/blocks.hpp"

namespace loom {

namespace {

using packed_layout::lane_byte;
constexpr int64_t kRows = 16;  // panel_rows of every quantized packing

// Each packing's byte moves for one row-block (PackingInfo): `block` row r's block in
// the rows, `g` the panel's group for that block.

// Every layout keeps a row's bytes 4i..4i+3 of a run side by side in a vector lane
// (lane_byte), so runs move a 4-byte word at a time: n bytes (a multiple of 4) of `src`
// to g + at(i), i = 0, 4, 8, ... (and back), with `flip` XORed into each byte (q8_0's
// q + 128). A byte at a time, packing spent most of a repacking load's CPU time.
template <class At>
void words_to_panel(const uint8_t* src, int64_t n, uint8_t* g, At at, uint32_t flip = 0) {
  for (int64_t i = 0; i < n; i += 4) {
    uint32_t w;
    std::memcpy(&w, src + i, 4);
    w ^= flip;
    std::memcpy(g + at(i), &w, 4);
  }
}
template <class At>
void words_from_panel(const uint8_t* g, int64_t n, uint8_t* dst, At at, uint32_t flip = 0) {
  for (int64_t i = 0; i < n; i += 4) {
    uint32_t w;
    std::memcpy(&w, g + at(i), 4);
    w ^= flip;
    std::memcpy(dst + i, &w, 4);
  }
}

// q8_0_x16 (packed_layout::Q8_0): scales, then the quants as q + 128.
void pack_q8_0(const uint8_t* block, int64_t r, uint8_t* g) {
  using L = packed_layout::Q8_0;
  std::memcpy(g + L::scales + 2 * r, block, 2);
  words_to_panel(block + 2, 32, g, [r](int64_t k) { return L::quants + lane_byte(r, k); }, 0x80808080u);
}
void unpack_q8_0(const uint8_t* g, int64_t r, uint8_t* block) {
  using L = packed_layout::Q8_0;
  std::memcpy(block, g + L::scales + 2 * r, 2);
  words_from_panel(g, 32, block + 2, [r](int64_t k) { return L::quants + lane_byte(r, k); }, 0x80808080u);
}
void pad_q8_0(int64_t r, uint8_t* g) {  // scale 0, quants 0 (stored 128)
  for (int64_t k = 0; k < 32; ++k) g[packed_layout::Q8_0::quants + lane_byte(r, k)] = 128;
}

// q4_0_x16 (packed_layout::Q4_0): scales, then the nibble bytes as they are.
void pack_q4_0(const uint8_t* block, int64_t r, uint8_t* g) {
  using L = packed_layout::Q4_0;
  std::memcpy(g + L::scales + 2 * r, block, 2);
  words_to_panel(block + 2, 16, g, [r](int64_t i) { return L::quants + lane_byte(r, i); });
}
void unpack_q4_0(const uint8_t* g, int64_t r, uint8_t* block) {
  using L = packed_layout::Q4_0;
  std::memcpy(block, g + L::scales + 2 * r, 2);
  words_from_panel(g, 16, block + 2, [r](int64_t i) { return L::quants + lane_byte(r, i); });
}
void pad_q4_0(int64_t r, uint8_t* g) {  // scale 0, nibbles 8 (the value 0)
  for (int64_t i = 0; i < 16; ++i) g[packed_layout::Q4_0::quants + lane_byte(r, i)] = 0x88;
}

// The head q4_k and q5_k blocks share (d, dmin, the 12 bytes of 6-bit scales and mins)
// between a row block and a packed group (q4_k_x16's and q5_k_x16's layouts put d, dmin,
// the scale bytes [s][r] and the min bytes [s/2][r][s%2] at the same offsets).
template <class L>
void pack_k_head(const uint8_t* block, int64_t r, uint8_t* g) {
  std::memcpy(g + L::d + 2 * r, block, 2);
  std::memcpy(g + L::dmin + 2 * r, block + 2, 2);
  for (int s = 0; s < 8; ++s) {
    uint8_t sc = 0;
    uint8_t m = 0;
    quant::k4_scale_min(block + 4, s, &sc, &m);
    g[L::scales + s * 16 + r] = sc;
    g[L::mins + (s / 2) * 32 + r * 2 + s % 2] = m;
  }
}
template <class L>
void unpack_k_head(const uint8_t* g, int64_t r, uint8_t* block) {
  std::memcpy(block, g + L::d + 2 * r, 2);
  std::memcpy(block + 2, g + L::dmin + 2 * r, 2);
  uint8_t sc[8], m[8];
  for (int s = 0; s < 8; ++s) {
    sc[s] = g[L::scales + s * 16 + r];
    m[s] = g[L::mins + (s / 2) * 32 + r * 2 + s % 2];
  }
  quant::k4_store_scales_mins(sc, m, block + 4);
}

// q4_k_x16 (packed_layout::Q4K): the head, then the 128 nibble bytes (row block: d,
// dmin, 12 scale bytes, qs[128]).
void pack_q4_k(const uint8_t* block, int64_t r, uint8_t* g) {
  using L = packed_layout::Q4K;
  pack_k_head<L>(block, r, g);
  words_to_panel(block + 16, 128, g, [r](int64_t c) { return L::quant_at(r, c); });
}
void unpack_q4_k(const uint8_t* g, int64_t r, uint8_t* block) {
  using L = packed_layout::Q4K;
  unpack_k_head<L>(g, r, block);
  words_from_panel(g, 128, block + 16, [r](int64_t c) { return L::quant_at(r, c); });
}

// q5_k_x16 (packed_layout::Q5K): q4_k_x16's parts, and the fifth bits as masks (row
// block: d, dmin, 12 scale bytes, qh[32], qs[128]). Row byte c (0..127) of qs holds the
// values at column l = c % 32 of sub-blocks 2g (low nibble) and 2g + 1 (high), g = c / 32;
// their fifth bits are bits 2g and 2g + 1 of qh[l]. In the packed form byte c of row r
// is byte l % 4 of lane r in vector l / 4 of pair g, so its mask bit is lane_bit(r, l % 4).
void pack_q5_k(const uint8_t* block, int64_t r, uint8_t* g) {
  using L = packed_layout::Q5K;
  pack_k_head<L>(block, r, g);
  const uint8_t* qh = block + 16;
  for (int64_t c = 0; c < 128; ++c) {
    g[L::quant_at(r, c)] = block[48 + c];
    const int64_t pair = c / 32, l = c % 32, bit = packed_layout::lane_bit(r, l % 4);
    uint8_t* masks = g + L::mask_at(pair, l / 4);
    masks[bit / 8] |= static_cast<uint8_t>(((qh[l] >> (2 * pair)) & 1) << (bit % 8));
    masks[8 + bit / 8] |= static_cast<uint8_t>(((qh[l] >> (2 * pair + 1)) & 1) << (bit % 8));
  }
}
void unpack_q5_k(const uint8_t* g, int64_t r, uint8_t* block) {
  using L = packed_layout::Q5K;
  unpack_k_head<L>(g, r, block);
  uint8_t* qh = block + 16;
  std::memset(qh, 0, 32);
  for (int64_t c = 0; c < 128; ++c) {
    block[48 + c] = g[L::quant_at(r, c)];
    const int64_t pair = c / 32, l = c % 32, bit = packed_layout::lane_bit(r, l % 4);
    const uint8_t* masks = g + L::mask_at(pair, l / 4);
    qh[l] |= static_cast<uint8_t>(((masks[bit / 8] >> (bit % 8)) & 1) << (2 * pair));
    qh[l] |= static_cast<uint8_t>(((masks[8 + bit / 8] >> (bit % 8)) & 1) << (2 * pair + 1));
  }
}

// q6_k_x16 (packed_layout::Q6K): d, int8 scales, then per half and chunk three vectors
// (row block: ql[128], qh[64], scales[16], d). Where byte i of a row's ql (0..127) and
// qh (0..63) go, lane r:
constexpr int64_t q6k_low_at(int64_t r, int64_t i) {
  return packed_layout::Q6K::chunk_at(i / 64, i % 32 / 4) + (i % 64 / 32) * 64 + r * 4 + i % 4;
}
constexpr int64_t q6k_high_at(int64_t r, int64_t i) {
  return packed_layout::Q6K::chunk_at(i / 32, i % 32 / 4) + 128 + r * 4 + i % 4;
}
void pack_q6_k(const uint8_t* block, int64_t r, uint8_t* g) {
  using L = packed_layout::Q6K;
  std::memcpy(g + L::d + 2 * r, block + 208, 2);
  for (int64_t s = 0; s < 16; ++s) g[L::scales + s * 16 + r] = block[192 + s];
  words_to_panel(block, 128, g, [r](int64_t i) { return q6k_low_at(r, i); });
  words_to_panel(block + 128, 64, g, [r](int64_t i) { return q6k_high_at(r, i); });
}
void unpack_q6_k(const uint8_t* g, int64_t r, uint8_t* block) {
  using L = packed_layout::Q6K;
  std::memcpy(block + 208, g + L::d + 2 * r, 2);
  for (int64_t s = 0; s < 16; ++s) block[192 + s] = g[L::scales + s * 16 + r];
  words_from_panel(g, 128, block, [r](int64_t i) { return q6k_low_at(r, i); });
  words_from_panel(g, 64, block + 128, [r](int64_t i) { return q6k_high_at(r, i); });
}

// q2_k_x16 (packed_layout::Q2K): the row block's bytes reordered.
void pack_q2_k(const uint8_t* block, int64_t r, uint8_t* g) {
  using L = packed_layout::Q2K;
  namespace off = quant::off;
  std::memcpy(g + L::d + 2 * r, block + off::q2_k_d, 2);
  std::memcpy(g + L::dmin + 2 * r, block + off::q2_k_dmin, 2);
  for (int64_t s = 0; s < 16; ++s) g[L::scales + s * 16 + r] = block[off::q2_k_scales + s];
  words_to_panel(block + off::q2_k_qs, 64, g, [r](int64_t i) { return L::quant_at(r, i); });
}
void unpack_q2_k(const uint8_t* g, int64_t r, uint8_t* block) {
  using L = packed_layout::Q2K;
  namespace off = quant::off;
  std::memcpy(block + off::q2_k_d, g + L::d + 2 * r, 2);
  std::memcpy(block + off::q2_k_dmin, g + L::dmin + 2 * r, 2);
  for (int64_t s = 0; s < 16; ++s) block[off::q2_k_scales + s] = g[L::scales + s * 16 + r];
  words_from_panel(g, 64, block + off::q2_k_qs, [r](int64_t i) { return L::quant_at(r, i); });
}

// q3_k_x16 (packed_layout::Q3K): d, the scales decoded to int8 (quant::q3k_scale: value
// - 32), the hmask and qs bytes reordered.
void pack_q3_k(const uint8_t* block, int64_t r, uint8_t* g) {
  using L = packed_layout::Q3K;
  namespace off = quant::off;
  std::memcpy(g + L::d + 2 * r, block + off::q3_k_d, 2);
  for (int s = 0; s < 16; ++s) {
    g[L::scales + s * 16 + r] = static_cast<uint8_t>(quant::q3k_scale(block + off::q3_k_scales, s));
  }
  words_to_panel(block + off::q3_k_hmask, 32, g, [r](int64_t l) { return L::hmask_at(r, l); });
  words_to_panel(block + off::q3_k_qs, 64, g, [r](int64_t i) { return L::quant_at(r, i); });
}
void unpack_q3_k(const uint8_t* g, int64_t r, uint8_t* block) {
  using L = packed_layout::Q3K;
  namespace off = quant::off;
  std::memcpy(block + off::q3_k_d, g + L::d + 2 * r, 2);
  uint8_t biased[16];
  for (int s = 0; s < 16; ++s) biased[s] = static_cast<uint8_t>(static_cast<int8_t>(g[L::scales + s * 16 + r]) + 32);
  quant::q3k_store_scales(biased, block + off::q3_k_scales);
  words_from_panel(g, 32, block + off::q3_k_hmask, [r](int64_t l) { return L::hmask_at(r, l); });
  words_from_panel(g, 64, block + off::q3_k_qs, [r](int64_t i) { return L::quant_at(r, i); });
}

// q4_1_x16, q5_0_x16, q5_1_x16 (packed_layout::Q4_1, Q5_0, Q5_1): d, m, the nibble
// bytes as they are, the fifth bits as masks. `L` the layout; the row block: d at 0,
// m at kMin (< 0: none), the 32 fifth bits at kQh (< 0: none, little-endian, bit e for
// column e), the 16 nibble bytes at kQs.
template <class L, int64_t kMin, int64_t kQh, int64_t kQs>
struct LegacyBlocks {
  // Mask byte and bit of column e (0..31) of row r: vector e % 16 / 4, low (e < 16) or
  // high nibbles, lane_bit(r, e % 4).
  static constexpr int64_t mask_byte(int64_t r, int64_t e) {
    return L::mask_at(e % 16 / 4, e >= 16) + packed_layout::lane_bit(r, e % 4) / 8;
  }
  static int mask_bit(int64_t r, int64_t e) { return static_cast<int>(packed_layout::lane_bit(r, e % 4) % 8); }

  static void pack(const uint8_t* block, int64_t r, uint8_t* g) {
    std::memcpy(g + L::scales + 2 * r, block, 2);
    if constexpr (kMin >= 0) std::memcpy(g + L::mins + 2 * r, block + kMin, 2);
    for (int64_t i = 0; i < 16; ++i) g[L::quants + lane_byte(r, i)] = block[kQs + i];
    if constexpr (kQh >= 0) {
      for (int64_t e = 0; e < 32; ++e) {
        const int bit = (block[kQh + e / 8] >> (e % 8)) & 1;
        g[mask_byte(r, e)] |= static_cast<uint8_t>(bit << mask_bit(r, e));
      }
    }
  }

  static void unpack(const uint8_t* g, int64_t r, uint8_t* block) {
    std::memcpy(block, g + L::scales + 2 * r, 2);
    if constexpr (kMin >= 0) std::memcpy(block + kMin, g + L::mins + 2 * r, 2);
    for (int64_t i = 0; i < 16; ++i) block[kQs + i] = g[L::quants + lane_byte(r, i)];
    if constexpr (kQh >= 0) {
      std::memset(block + kQh, 0, 4);
      for (int64_t e = 0; e < 32; ++e) {
        const int bit = (g[mask_byte(r, e)] >> mask_bit(r, e)) & 1;
        block[kQh + e / 8] |= static_cast<uint8_t>(bit << (e % 8));
      }
    }
  }
};
using Q4_1Blocks = LegacyBlocks<packed_layout::Q4_1, 2, -1, 4>;
using Q5_0Blocks = LegacyBlocks<packed_layout::Q5_0, -1, 2, 6>;
using Q5_1Blocks = LegacyBlocks<packed_layout::Q5_1, 2, 4, 8>;

// gq8_G_x16 (packed_layout::Gq8): scales, then each 32-column run's quants as q + 128
// (row block: d, q[G]). Quant k of a row sits in run k / 32 at lane_byte(r, k % 32).
template <int64_t G>
constexpr int64_t gq8_at(int64_t r, int64_t k) {
  using L = packed_layout::Gq8<G>;
  return L::quants + (k / 32) * L::run_bytes + lane_byte(r, k % 32);
}
template <int64_t G>
void pack_gq8(const uint8_t* block, int64_t r, uint8_t* g) {
  std::memcpy(g + packed_layout::Gq8<G>::scales + 2 * r, block, 2);
  for (int64_t k = 0; k < G; ++k) g[gq8_at<G>(r, k)] = static_cast<uint8_t>(block[2 + k] ^ 0x80);
}
template <int64_t G>
void unpack_gq8(const uint8_t* g, int64_t r, uint8_t* block) {
  std::memcpy(block, g + packed_layout::Gq8<G>::scales + 2 * r, 2);
  for (int64_t k = 0; k < G; ++k) block[2 + k] = static_cast<uint8_t>(g[gq8_at<G>(r, k)] ^ 0x80);
}
template <int64_t G>
void pad_gq8(int64_t r, uint8_t* g) {  // scale 0, quants 0 (stored 128)
  for (int64_t k = 0; k < G; ++k) g[gq8_at<G>(r, k)] = 128;
}

// gq4_G_x16 (packed_layout::Gq4): scales, zero points, reserved bytes, then each run's
// 16 nibble bytes as they are (row block: d, z, reserved, qs[G / 2]).
template <int64_t G>
constexpr int64_t gq4_at(int64_t r, int64_t i) {
  using L = packed_layout::Gq4<G>;
  return L::quants + (i / 16) * L::run_bytes + lane_byte(r, i % 16);
}
template <int64_t G>
void pack_gq4(const uint8_t* block, int64_t r, uint8_t* g) {
  using L = packed_layout::Gq4<G>;
  std::memcpy(g + L::scales + 2 * r, block, 2);
  g[L::zeros + r] = block[2];
  g[L::reserved + r] = block[3];
  for (int64_t i = 0; i < G / 2; ++i) g[gq4_at<G>(r, i)] = block[4 + i];
}
template <int64_t G>
void unpack_gq4(const uint8_t* g, int64_t r, uint8_t* block) {
  using L = packed_layout::Gq4<G>;
  std::memcpy(block, g + L::scales + 2 * r, 2);
  block[2] = g[L::zeros + r];
  block[3] = g[L::reserved + r];
  for (int64_t i = 0; i < G / 2; ++i) block[4 + i] = g[gq4_at<G>(r, i)];
}

// f32_x64, f16_x64, bf16_x64 (packed_layout::Plain): the 16 elements of a row-block go to
// columns 0..15 of the group, row r of each.
template <int64_t kBytes>
void pack_plain(const uint8_t* block, int64_t r, uint8_t* g) {
  using L = packed_layout::Plain;
  for (int64_t k = 0; k < L::block_cols; ++k) std::memcpy(g + L::at(r, k) * kBytes, block + k * kBytes, kBytes);
}
template <int64_t kBytes>
void unpack_plain(const uint8_t* g, int64_t r, uint8_t* block) {
  using L = packed_layout::Plain;
  for (int64_t k = 0; k < L::block_cols; ++k) std::memcpy(block + k * kBytes, g + L::at(r, k) * kBytes, kBytes);
}

// Each layout's group is its packing's block_bytes (the table below) for 16 rows, and the
// parts of the layouts with masks add up.
static_assert(packed_layout::Q8_0::group == 34 * kRows && packed_layout::Q4_0::group == 18 * kRows &&
              packed_layout::Q4_1::group == 20 * kRows && packed_layout::Q5_0::group == 22 * kRows &&
              packed_layout::Q5_1::group == 24 * kRows && packed_layout::Q4K::group == 148 * kRows &&
              packed_layout::Q5K::group == 180 * kRows && packed_layout::Q6K::group == 210 * kRows &&
              packed_layout::Gq8<32>::group == 34 * kRows && packed_layout::Gq8<64>::group == 66 * kRows &&
              packed_layout::Gq8<128>::group == 130 * kRows && packed_layout::Gq4<32>::group == 20 * kRows &&
              packed_layout::Gq4<64>::group == 36 * kRows && packed_layout::Gq4<128>::group == 68 * kRows);
static_assert(packed_layout::Q5K::pairs + 4 * packed_layout::Q5K::pair_bytes == packed_layout::Q5K::group &&
              packed_layout::Q5K::masks == 8 * 64 && packed_layout::Q5_0::masks + 64 == packed_layout::Q5_0::group &&
              packed_layout::Q5_1::masks + 64 == packed_layout::Q5_1::group);

// Padding rows of the packings without a pad_block are all zero bytes: scale 0 (and q4_k's,
// q6_k's, gq4's, q2_k's and q3_k's zero-initialized quants give 0 whatever they are; the
// plain packings' zeros are +0.0 in each dtype).
constexpr std::array<PackingInfo, 20> kPackings{{
    {Packing::none, "none", DType::f32, 1, 1, 0, nullptr, nullptr, nullptr, nullptr},
    {Packing::q8_0_x16, "q8_0_x16", DType::q8_0, 16, 32, 34, pack_q8_0, unpack_q8_0, pad_q8_0, nullptr},
    {Packing::q4_k_x16, "q4_k_x16", DType::q4_k, 16, 256, 148, pack_q4_k, unpack_q4_k, nullptr, nullptr},
    {Packing::q4_0_x16, "q4_0_x16", DType::q4_0, 16, 32, 18, pack_q4_0, unpack_q4_0, pad_q4_0, nullptr},
    {Packing::q6_k_x16, "q6_k_x16", DType::q6_k, 16, 256, 210, pack_q6_k, unpack_q6_k, nullptr, nullptr},
    {Packing::q5_k_x16, "q5_k_x16", DType::q5_k, 16, 256, 180, pack_q5_k, unpack_q5_k, nullptr, nullptr},
    {Packing::gq8_32_x16, "gq8_32_x16", DType::gq8_32, 16, 32, 34, pack_gq8<32>, unpack_gq8<32>, pad_gq8<32>, nullptr},
    {Packing::gq8_64_x16, "gq8_64_x16", DType::gq8_64, 16, 64, 66, pack_gq8<64>, unpack_gq8<64>, pad_gq8<64>, nullptr},
    {Packing::gq8_128_x16, "gq8_128_x16", DType::gq8_128, 16, 128, 130, pack_gq8<128>, unpack_gq8<128>, pad_gq8<128>, nullptr},
    {Packing::gq4_32_x16, "gq4_32_x16", DType::gq4_32, 16, 32, 20, pack_gq4<32>, unpack_gq4<32>, nullptr, nullptr},
    {Packing::gq4_64_x16, "gq4_64_x16", DType::gq4_64, 16, 64, 36, pack_gq4<64>, unpack_gq4<64>, nullptr, nullptr},
    {Packing::gq4_128_x16, "gq4_128_x16", DType::gq4_128, 16, 128, 68, pack_gq4<128>, unpack_gq4<128>, nullptr, nullptr},
    {Packing::q4_1_x16, "q4_1_x16", DType::q4_1, 16, 32, 20, Q4_1Blocks::pack, Q4_1Blocks::unpack, nullptr, nullptr},
    {Packing::q5_0_x16, "q5_0_x16", DType::q5_0, 16, 32, 22, Q5_0Blocks::pack, Q5_0Blocks::unpack, nullptr, nullptr},
    {Packing::q5_1_x16, "q5_1_x16", DType::q5_1, 16, 32, 24, Q5_1Blocks::pack, Q5_1Blocks::unpack, nullptr, nullptr},
    {Packing::q2_k_x16, "q2_k_x16", DType::q2_k, 16, 256, 84, pack_q2_k, unpack_q2_k, nullptr, nullptr},
    {Packing::q3_k_x16, "q3_k_x16", DType::q3_k, 16, 256, 114, pack_q3_k, unpack_q3_k, nullptr, nullptr},
    {Packing::f32_x64, "f32_x64", DType::f32, 64, 16, 64, pack_plain<4>, unpack_plain<4>, nullptr, kernels::pack_plain_rows32_avx2},
    {Packing::f16_x64, "f16_x64", DType::f16, 64, 16, 32, pack_plain<2>, unpack_plain<2>, nullptr, kernels::pack_plain_rows16_avx2},
    {Packing::bf16_x64, "bf16_x64", DType::bf16, 64, 16, 32, pack_plain<2>, unpack_plain<2>, nullptr, kernels::pack_plain_rows16_avx2},
}};

// Where a packed [rows, cols] matrix's panels lie.
struct Geometry {
  int64_t rows;
  int64_t nb;         // blocks per row
  int64_t panels;
  int64_t group;      // bytes of one block of a panel
  int64_t stride;     // bytes per panel
  int64_t row_block;  // bytes of one block of a row, as rows
};

Geometry geometry(const PackingInfo& info, const Shape& shape) {
  const int64_t nb = shape[1] / info.block_cols;
  const int64_t group = int64_t{info.block_bytes} * info.panel_rows;
  // A row's share of one group: the dtype's blocks in block_cols columns (one block for
  // the quantized packings, block_cols elements for the plain ones).
  const DTypeTraits& traits = dtype_traits(info.dtype);
  const int64_t row_block = int64_t{info.block_cols} / traits.block_elems * traits.block_bytes;
  return {shape[0], nb, (shape[0] + info.panel_rows - 1) / info.panel_rows, group, nb * group, row_block};
}

// Runs run(begin, end) over the panels [0, panels), on the pool when there is one.
template <class Run>
void over_panels(ThreadPool* pool, int64_t panels, Run&& run) {
  if (pool != nullptr) {
    pool->parallel_for(panels, 1, [&](int64_t begin, int64_t end, int) { run(begin, end); });
  } else {
    run(0, panels);
  }
}

}  // namespace

const PackingInfo& packing_info(Packing packing) noexcept {
  for (const auto& p : kPackings) {
    if (p.id == packing) return p;
  }
  return kPackings[0];
}

std::optional<Packing> packing_from_name(std::string_view name) noexcept {
  for (const auto& p : kPackings) {
    if (p.name == name) return p.id;
  }
  return std::nullopt;
}

int64_t packed_nbytes(Packing packing, const Shape& shape) {
  if (packing == Packing::none || shape.rank() != 2) return 0;
  const Geometry g = geometry(packing_info(packing), shape);
  return g.panels * g.stride;
}

bool packing_fits(Packing packing, DType dtype, const Shape& shape) noexcept {
  const PackingInfo& info = packing_info(packing);
  return packing != Packing::none && dtype == info.dtype && shape.rank() == 2 && shape[1] % info.block_cols == 0;
}

bool can_pack(const Tensor& t, Packing packing) noexcept {
  return t.defined() && packing_fits(packing, t.dtype(), t.shape()) && t.layout() == Layout::row_major &&
         t.is_contiguous() && t.shape()[0] > 0 && t.shape()[1] > 0;
}

Tensor pack(const Tensor& t, Packing packing, ThreadPool* pool) {
  if (!can_pack(t, packing)) {
    throw Error(ErrorCode::invalid_argument, "cannot pack " + t.describe() + " as " +
                                                 std::string(packing_info(packing).name));
  }
  return pack_into(t, packing, Storage::allocate(static_cast<size_t>(packed_nbytes(packing, t.shape()))), 0, pool);
}

Tensor pack_into(const Tensor& t, Packing packing, std::shared_ptr<Storage> storage, uint64_t byte_offset,
                 ThreadPool* pool) {
  if (!can_pack(t, packing)) {
    throw Error(ErrorCode::invalid_argument, "cannot pack " + t.describe() + " as " +
                                                 std::string(packing_info(packing).name));
  }
  const PackingInfo& info = packing_info(packing);
  const Geometry g = geometry(info, t.shape());
  const auto bytes = static_cast<uint64_t>(g.panels * g.stride);
  if (!storage || storage->size() < byte_offset || storage->size() - byte_offset < bytes) {
    throw Error(ErrorCode::internal, "no room to pack " + t.describe() + " as " + std::string(info.name) + ": " +
                                         std::to_string(bytes) + " bytes at offset " + std::to_string(byte_offset) +
                                         " of a " + std::to_string(storage ? storage->size() : 0) + "-byte buffer");
  }
  Tensor out = Tensor::packed(std::move(storage), byte_offset, t.shape(), t.dtype(), packing);
  const auto* src = static_cast<const uint8_t*>(t.raw_data());
  auto* dst = static_cast<uint8_t*>(out.mutable_raw_data());
  const auto eight_rows = active_isa() >= Isa::avx2 ? info.pack_eight_rows : nullptr;
  // Group by group, each zeroed and then filled from its panel's rows while it is in L1:
  // row by row over the whole panel, a panel wider than L2 (1B f16: 64 rows of 8192
  // columns, 1 MiB) was fetched again for every row it took 2 or 32 bytes of.
  over_panels(pool, g.panels, [&](int64_t begin, int64_t end) {
    for (int64_t p = begin; p < end; ++p) {
      for (int64_t b = 0; b < g.nb; ++b) {
        uint8_t* group = dst + p * g.stride + b * g.group;
        std::memset(group, 0, static_cast<size_t>(g.group));
        int64_t r = 0;
        if (eight_rows != nullptr) {
          for (; r + 8 <= info.panel_rows && p * info.panel_rows + r + 8 <= g.rows; r += 8) {
            eight_rows(src + ((p * info.panel_rows + r) * g.nb + b) * g.row_block, g.nb * g.row_block, r, group);
          }
        }
        for (; r < info.panel_rows; ++r) {
          const int64_t row = p * info.panel_rows + r;
          if (row < g.rows) {
            info.pack_block(src + (row * g.nb + b) * g.row_block, r, group);
          } else if (info.pad_block != nullptr) {
            info.pad_block(r, group);
          }
        }
      }
    }
  });
  return out;
}

Tensor unpack(const Tensor& t, ThreadPool* pool) {
  if (t.packing() == Packing::none) return t;
  const PackingInfo& info = packing_info(t.packing());
  const Geometry g = geometry(info, t.shape());
  Tensor out = Tensor::empty(t.shape(), t.dtype());
  const auto* src = static_cast<const uint8_t*>(t.raw_data());
  auto* dst = static_cast<uint8_t*>(out.mutable_raw_data());
  over_panels(pool, g.panels, [&](int64_t begin, int64_t end) {
    for (int64_t p = begin; p < end; ++p) {
      for (int64_t r = 0; r < info.panel_rows && p * info.panel_rows + r < g.rows; ++r) {
        const int64_t row = p * info.panel_rows + r;
        for (int64_t b = 0; b < g.nb; ++b) {
          info.unpack_block(src + p * g.stride + b * g.group, r, dst + (row * g.nb + b) * g.row_block);
        }
      }
    }
  });
  return out;
}

void unpack_row(const Tensor& t, int64_t row, void* out) {
  if (t.shape().rank() != 2 || row < 0 || row >= t.shape()[0]) {
    throw Error(ErrorCode::invalid_argument,
                "row " + std::to_string(row) + " is outside " + t.describe());
  }
  const auto* src = static_cast<const uint8_t*>(t.raw_data());
  auto* dst = static_cast<uint8_t*>(out);
  if (t.packing() == Packing::none) {
    if (t.layout() != Layout::row_major || !t.is_contiguous()) {
      throw Error(ErrorCode::invalid_argument, "cannot read a row of " + t.describe());
    }
    const int64_t row_bytes = static_cast<int64_t>(dtype_bytes(t.dtype(), t.shape()[1], t.shape()[1]));
    std::memcpy(dst, src + row * row_bytes, static_cast<size_t>(row_bytes));
    return;
  }
  const PackingInfo& info = packing_info(t.packing());
  const Geometry g = geometry(info, t.shape());
  const uint8_t* panel = src + (row / info.panel_rows) * g.stride;
  for (int64_t b = 0; b < g.nb; ++b) info.unpack_block(panel + b * g.group, row % info.panel_rows, dst + b * g.row_block);
}

}  // namespace loom
