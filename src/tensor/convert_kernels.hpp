// Internal: per-ISA entry points of the conversion kernels (convert_x86.cpp).
#pragma once

#include <cstddef>
#include <cstdint>

#include "loom/convert.hpp"

namespace loom::kernels {

void f16_to_f32_avx2(const uint16_t* src, float* dst, size_t n) noexcept;
void bf16_to_f32_avx2(const uint16_t* src, float* dst, size_t n) noexcept;
ConvertStats f32_to_f16_avx2(const float* src, uint16_t* dst, size_t n) noexcept;
ConvertStats f32_to_bf16_avx2(const float* src, uint16_t* dst, size_t n) noexcept;

void f16_to_f32_avx512(const uint16_t* src, float* dst, size_t n) noexcept;
void bf16_to_f32_avx512(const uint16_t* src, float* dst, size_t n) noexcept;
ConvertStats f32_to_f16_avx512(const float* src, uint16_t* dst, size_t n) noexcept;
ConvertStats f32_to_bf16_avx512(const float* src, uint16_t* dst, size_t n) noexcept;

// Scalar loops (the portable fallback and the kernels' tails).
void f16_to_f32_scalar_n(const uint16_t* src, float* dst, size_t n) noexcept;
void bf16_to_f32_scalar_n(const uint16_t* src, float* dst, size_t n) noexcept;
ConvertStats f32_to_f16_scalar_n(const float* src, uint16_t* dst, size_t n) noexcept;
ConvertStats f32_to_bf16_scalar_n(const float* src, uint16_t* dst, size_t n) noexcept;

}  // namespace loom::kernels
