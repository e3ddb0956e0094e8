// Shared helpers of the quantization tests: Gaussian data, random blocks with sane
// scales, and dequantized views.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "loom/convert.hpp"
#include "loom/dtype.hpp"
#include "tensor/quant/quant.hpp"

namespace loom::test::quant {

inline std::vector<float> gaussian(size_t n, uint32_t seed, float stddev = 1.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, stddev);
  std::vector<float> out(n);
  for (auto& v : out) v = dist(rng);
  return out;
}

// Byte offsets of the f16 scale fields of each weight block type (ggml-common.h, and
// loom's group layouts in tensor/quant/blocks.hpp).
inline std::vector<size_t> f16_fields(DType dtype) {
  switch (dtype) {
    case DType::q8_0:
    case DType::q4_0:
    case DType::q5_0:
    case DType::gq8_32:
    case DType::gq8_64:
    case DType::gq8_128:
    case DType::gq4_32:
    case DType::gq4_64:
    case DType::gq4_128: return {0};
    case DType::q4_1:
    case DType::q5_1:
    case DType::q8_1:
    case DType::q4_k:
    case DType::q5_k: return {0, 2};
    case DType::q2_k: return {80, 82};
    case DType::q3_k: return {108};
    case DType::q6_k: return {208};
    default: return {};
  }
}

// `blocks` blocks of random bytes (every quant bit pattern, every sub-scale) whose f16
// scales are replaced by random values of magnitude 2^-8 .. 2^-1, so every value is
// finite and dot products stay in a comfortable range.
inline std::vector<uint8_t> random_blocks(DType dtype, size_t blocks, uint32_t seed) {
  const auto& t = dtype_traits(dtype);
  std::mt19937 rng(seed);
  std::vector<uint8_t> out(blocks * static_cast<size_t>(t.block_bytes));
  for (auto& b : out) b = static_cast<uint8_t>(rng());
  std::uniform_real_distribution<float> mag(-8.0f, -1.0f);
  for (size_t b = 0; b < blocks; ++b) {
    for (size_t at : f16_fields(dtype)) {
      const float v = std::exp2(mag(rng)) * ((rng() & 1) ? 1.0f : -1.0f);
      const uint16_t h = f32_to_f16_scalar(v);
      std::memcpy(out.data() + b * static_cast<size_t>(t.block_bytes) + at, &h, 2);
    }
  }
  return out;
}

inline std::vector<float> dequantized(DType dtype, const std::vector<uint8_t>& blocks,
                                      size_t elems) {
  std::vector<float> out(elems);
  loom::quant::dequantize(dtype, blocks.data(), out.data(), elems);
  return out;
}

}  // namespace loom::test::quant
