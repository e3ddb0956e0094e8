// Codecs of the 32-element block types: q8_0, q4_0, q4_1, q5_0, q5_1, q8_1.
//
// Dequantization uses ggml's f32 expressions in ggml's order (q*d, q*d + m), so the
// results are bit-identical to dequantize_row_*. The quantizers are the plain
// round-to-nearest ones ggml writes model files with (quantize_row_*_ref): the scale
// maps the largest-magnitude value of the block onto the end of the quant range.
// The quantizers must round exactly like ggml's reference C code, which evaluates every
// multiply and add separately; a compiler that fuses them into FMAs (GCC does by default
// for C++) moves some values across a rounding boundary and changes a few percent of the
// blocks. So contraction is off for this file, whatever the build flags.
#if defined(__clang__)
#pragma clang fp contract(off)
#elif defined(__GNUC__)
#pragma GCC optimize("fp-contract=off")
#endif

#include <algorithm>
#include <cmath>
#include <cstring>

#include "loom/cpu.hpp"
#include "tensor/quant/blocks.hpp"
#include "tensor/quant/quant_formats.hpp"

namespace loom::quant::codec {

namespace {

// Element j of a block whose 16 quant bytes hold elements j (low nibble) and j+16
// (high nibble), and whose optional u32 qh holds bit 4 of element j at bit j.
inline int nibble(const uint8_t* qs, int j) noexcept {
  return j < 16 ? (qs[j] & 0xF) : (qs[j - 16] >> 4);
}
inline int fifth_bit(uint32_t qh, int j) noexcept { return static_cast<int>((qh >> j) & 1u) << 4; }

// The value with the largest magnitude (the first one, on ties), sign kept.
float signed_absmax(const float* x, int n) noexcept {
  float amax = 0.0f;
  float max = 0.0f;
  for (int j = 0; j < n; ++j) {
    if (amax < std::fabs(x[j])) {
      amax = std::fabs(x[j]);
      max = x[j];
    }
  }
  return max;
}

void pack_nibbles(const uint8_t* q, uint8_t* qs) noexcept {
  for (int j = 0; j < 16; ++j) qs[j] = static_cast<uint8_t>(q[j] | (q[j + 16] << 4));
}

uint32_t pack_fifth_bits(const uint8_t* q) noexcept {
  uint32_t qh = 0;
  for (int j = 0; j < 32; ++j) qh |= static_cast<uint32_t>((q[j] >> 4) & 1) << j;
  return qh;
}

}  // namespace

// ---- dequantization ----

void dequantize_q8_0(const uint8_t* src, float* dst, size_t blocks) {
  for (size_t b = 0; b < blocks; ++b, src += sizeof(BlockQ8_0), dst += kBlock) {
    const float d = load_f16(src);
    const auto* qs = reinterpret_cast<const int8_t*>(src + off::q8_0_qs);
    for (int j = 0; j < kBlock; ++j) dst[j] = static_cast<float>(qs[j]) * d;
  }
}

void dequantize_q4_0(const uint8_t* src, float* dst, size_t blocks) {
  for (size_t b = 0; b < blocks; ++b, src += sizeof(BlockQ4_0), dst += kBlock) {
    const float d = load_f16(src);
    const uint8_t* qs = src + off::q4_0_qs;
    for (int j = 0; j < kBlock; ++j) dst[j] = static_cast<float>(nibble(qs, j) - 8) * d;
  }
}

void dequantize_q4_1(const uint8_t* src, float* dst, size_t blocks) {
  for (size_t b = 0; b < blocks; ++b, src += sizeof(BlockQ4_1), dst += kBlock) {
    const float d = load_f16(src);
    const float m = load_f16(src + off::q4_1_m);
    const uint8_t* qs = src + off::q4_1_qs;
    for (int j = 0; j < kBlock; ++j) dst[j] = static_cast<float>(nibble(qs, j)) * d + m;
  }
}

void dequantize_q5_0(const uint8_t* src, float* dst, size_t blocks) {
  for (size_t b = 0; b < blocks; ++b, src += sizeof(BlockQ5_0), dst += kBlock) {
    const float d = load_f16(src);
    const uint32_t qh = load_u32(src + off::q5_0_qh);
    const uint8_t* qs = src + off::q5_0_qs;
    for (int j = 0; j < kBlock; ++j) {
      dst[j] = static_cast<float>((nibble(qs, j) | fifth_bit(qh, j)) - 16) * d;
    }
  }
}

void dequantize_q5_1(const uint8_t* src, float* dst, size_t blocks) {
  for (size_t b = 0; b < blocks; ++b, src += sizeof(BlockQ5_1), dst += kBlock) {
    const float d = load_f16(src);
    const float m = load_f16(src + off::q5_1_m);
    const uint32_t qh = load_u32(src + off::q5_1_qh);
    const uint8_t* qs = src + off::q5_1_qs;
    for (int j = 0; j < kBlock; ++j) {
      dst[j] = static_cast<float>(nibble(qs, j) | fifth_bit(qh, j)) * d + m;
    }
  }
}

void dequantize_q8_1(const uint8_t* src, float* dst, size_t blocks) {
  for (size_t b = 0; b < blocks; ++b, src += sizeof(BlockQ8_1), dst += kBlock) {
    const float d = load_f16(src);
    const auto* qs = reinterpret_cast<const int8_t*>(src + off::q8_1_qs);
    for (int j = 0; j < kBlock; ++j) dst[j] = static_cast<float>(qs[j]) * d;
  }
}

// ---- quantization ----

void quantize_q8_0(const float* src, uint8_t* dst, size_t blocks) {
  switch (active_isa()) {
    case Isa::avx512: return quantize_q8_0_avx512(src, dst, blocks);
    case Isa::avx2: return quantize_q8_0_avx2(src, dst, blocks);
    case Isa::scalar: break;
  }
  for (size_t b = 0; b < blocks; ++b, src += kBlock, dst += sizeof(BlockQ8_0)) {
    float amax = 0.0f;
    for (int j = 0; j < kBlock; ++j) amax = std::max(amax, std::fabs(src[j]));
    const float d = amax / 127.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    store_f16(dst, d);
    auto* qs = reinterpret_cast<int8_t*>(dst + off::q8_0_qs);
    for (int j = 0; j < kBlock; ++j) qs[j] = static_cast<int8_t>(std::round(src[j] * id));
  }
}

void quantize_q8_1(const float* src, uint8_t* dst, size_t blocks) {
  for (size_t b = 0; b < blocks; ++b, src += kBlock, dst += sizeof(BlockQ8_1)) {
    float amax = 0.0f;
    for (int j = 0; j < kBlock; ++j) amax = std::max(amax, std::fabs(src[j]));
    const float d = amax / 127.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    auto* qs = reinterpret_cast<int8_t*>(dst + off::q8_1_qs);
    int sum = 0;
    for (int j = 0; j < kBlock; ++j) {
      qs[j] = static_cast<int8_t>(std::round(src[j] * id));
      sum += qs[j];
    }
    store_f16(dst, d);
    store_f16(dst + off::q8_1_s, static_cast<float>(sum) * d);
  }
}

void quantize_q4_0(const float* src, uint8_t* dst, size_t blocks) {
  uint8_t q[kBlock];
  for (size_t b = 0; b < blocks; ++b, src += kBlock, dst += sizeof(BlockQ4_0)) {
    // The largest-magnitude value maps to -8 exactly: the asymmetric range [-8, 7]
    // then spends its extra level on that value's side.
    const float d = signed_absmax(src, kBlock) / -8.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    store_f16(dst, d);
    for (int j = 0; j < kBlock; ++j) {
      q[j] = static_cast<uint8_t>(std::min(15, static_cast<int>(src[j] * id + 8.5f)));
    }
    pack_nibbles(q, dst + off::q4_0_qs);
  }
}

void quantize_q5_0(const float* src, uint8_t* dst, size_t blocks) {
  uint8_t q[kBlock];
  for (size_t b = 0; b < blocks; ++b, src += kBlock, dst += sizeof(BlockQ5_0)) {
    const float d = signed_absmax(src, kBlock) / -16.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    store_f16(dst, d);
    for (int j = 0; j < kBlock; ++j) {
      q[j] = static_cast<uint8_t>(std::min(31, static_cast<int>(src[j] * id + 16.5f)));
    }
    store_u32(dst + off::q5_0_qh, pack_fifth_bits(q));
    for (int j = 0; j < kBlock; ++j) q[j] &= 0xF;
    pack_nibbles(q, dst + off::q5_0_qs);
  }
}

namespace {
// q4_1 / q5_1: the block's range [min, max] split into 2^bits - 1 steps.
void quantize_with_min(const float* x, int levels, float* d_out, float* m_out, uint8_t* q) {
  float min = x[0];
  float max = x[0];
  for (int j = 1; j < kBlock; ++j) {
    min = std::min(min, x[j]);
    max = std::max(max, x[j]);
  }
  const float d = (max - min) / static_cast<float>(levels);
  const float id = d != 0.0f ? 1.0f / d : 0.0f;
  for (int j = 0; j < kBlock; ++j) {
    q[j] = static_cast<uint8_t>(std::min(levels, static_cast<int>((x[j] - min) * id + 0.5f)));
  }
  *d_out = d;
  *m_out = min;
}
}  // namespace

void quantize_q4_1(const float* src, uint8_t* dst, size_t blocks) {
  uint8_t q[kBlock];
  for (size_t b = 0; b < blocks; ++b, src += kBlock, dst += sizeof(BlockQ4_1)) {
    float d = 0.0f;
    float m = 0.0f;
    quantize_with_min(src, 15, &d, &m, q);
    store_f16(dst, d);
    store_f16(dst + off::q4_1_m, m);
    pack_nibbles(q, dst + off::q4_1_qs);
  }
}

void quantize_q5_1(const float* src, uint8_t* dst, size_t blocks) {
  uint8_t q[kBlock];
  for (size_t b = 0; b < blocks; ++b, src += kBlock, dst += sizeof(BlockQ5_1)) {
    float d = 0.0f;
    float m = 0.0f;
    quantize_with_min(src, 31, &d, &m, q);
    store_f16(dst, d);
    store_f16(dst + off::q5_1_m, m);
    store_u32(dst + off::q5_1_qh, pack_fifth_bits(q));
    for (int j = 0; j < kBlock; ++j) q[j] &= 0xF;
    pack_nibbles(q, dst + off::q5_1_qs);
  }
}

}  // namespace loom::quant::codec
