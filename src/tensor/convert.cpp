#include "loom/convert.hpp"

#include <array>
#include <bit>
#include <cstring>
#include <vector>

#include "loom/cpu.hpp"
#include "loom/error.hpp"
#include "tensor/convert_kernels.hpp"
#include "tensor/quant/quant.hpp"

namespace loom {

namespace {
constexpr uint32_t kF32AbsMask = 0x7FFFFFFFu;
constexpr uint32_t kF32Inf = 0x7F800000u;
constexpr uint32_t kF16MaxAsF32 = 0x477FE000u;   // 65504.0f
constexpr uint16_t kF16Max = 0x7BFF;
constexpr uint32_t kBf16RoundsToInf = 0x7F7F8000u;  // smallest finite f32 that rounds to inf
constexpr uint16_t kBf16Max = 0x7F7F;

inline uint32_t bits_of(float f) { return std::bit_cast<uint32_t>(f); }
inline float float_of(uint32_t b) { return std::bit_cast<float>(b); }
}  // namespace

float f16_to_f32_scalar(uint16_t h) noexcept {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  uint32_t exp = (h >> 10) & 0x1Fu;
  uint32_t mant = h & 0x3FFu;
  if (exp == 0) {
    if (mant == 0) return float_of(sign);
    // Subnormal: shift the mantissa up until its leading one reaches the implicit bit.
    int e = 113;
    while ((mant & 0x400u) == 0) {
      mant <<= 1;
      --e;
    }
    mant &= 0x3FFu;
    return float_of(sign | (static_cast<uint32_t>(e) << 23) | (mant << 13));
  }
  if (exp == 31) {
    // Inf, or NaN with its payload kept and the quiet bit set (as F16C does).
    return float_of(sign | kF32Inf | (mant << 13) | (mant ? 0x400000u : 0u));
  }
  return float_of(sign | ((exp + 112) << 23) | (mant << 13));
}

float bf16_to_f32_scalar(uint16_t h) noexcept { return float_of(static_cast<uint32_t>(h) << 16); }

uint16_t f32_to_f16_scalar(float f) noexcept {
  const uint32_t bits = bits_of(f);
  const auto sign = static_cast<uint16_t>((bits >> 16) & 0x8000u);
  const uint32_t abs = bits & kF32AbsMask;
  if (abs > kF32Inf) {  // NaN: quiet it, keep the top payload bits
    return static_cast<uint16_t>(sign | 0x7E00u | ((abs >> 13) & 0x3FFu));
  }
  if (abs >= 0x477FF000u) return static_cast<uint16_t>(sign | 0x7C00u);  // rounds to Inf
  if (abs < 0x38800000u) {  // below the smallest normal f16: subnormal or zero
    const uint32_t e = abs >> 23;
    const uint32_t shift = 126 - e;
    if (shift > 24) return sign;  // below half the smallest subnormal (or a tie to zero)
    const uint32_t mant = (abs & 0x7FFFFFu) | 0x800000u;
    uint32_t r = mant >> shift;
    const uint32_t rem = mant & ((1u << shift) - 1);
    const uint32_t half = 1u << (shift - 1);
    if (rem > half || (rem == half && (r & 1u))) ++r;
    return static_cast<uint16_t>(sign | r);
  }
  uint32_t h = ((abs >> 13) - (112u << 10));
  const uint32_t rem = abs & 0x1FFFu;
  if (rem > 0x1000u || (rem == 0x1000u && (h & 1u))) ++h;
  return static_cast<uint16_t>(sign | h);
}

uint16_t f32_to_bf16_scalar(float f) noexcept {
  const uint32_t bits = bits_of(f);
  if ((bits & kF32AbsMask) > kF32Inf) return static_cast<uint16_t>((bits >> 16) | 0x40u);
  const uint32_t lsb = (bits >> 16) & 1u;
  return static_cast<uint16_t>((bits + 0x7FFFu + lsb) >> 16);
}

float f8_e4m3_to_f32_scalar(uint8_t v) noexcept {
  // OCP FP8 E4M3 "FN": bias 7, no infinities, S.1111.111 is NaN.
  const uint32_t sign = static_cast<uint32_t>(v & 0x80u) << 24;
  const uint32_t exp = (v >> 3) & 0xFu;
  const uint32_t mant = v & 0x7u;
  if (exp == 0xF && mant == 0x7) return float_of(sign | 0x7FC00000u);
  if (exp == 0) {
    const float value = static_cast<float>(mant) * 0x1p-9f;
    return sign ? -value : value;
  }
  return float_of(sign | ((exp + 120) << 23) | (mant << 20));
}

float f8_e5m2_to_f32_scalar(uint8_t v) noexcept {
  // E5M2 is the top byte of an IEEE f16.
  return f16_to_f32_scalar(static_cast<uint16_t>(v << 8));
}

namespace kernels {

void f16_to_f32_scalar_n(const uint16_t* src, float* dst, size_t n) noexcept {
  for (size_t i = 0; i < n; ++i) dst[i] = f16_to_f32_scalar(src[i]);
}

void bf16_to_f32_scalar_n(const uint16_t* src, float* dst, size_t n) noexcept {
  for (size_t i = 0; i < n; ++i) dst[i] = bf16_to_f32_scalar(src[i]);
}

ConvertStats f32_to_f16_scalar_n(const float* src, uint16_t* dst, size_t n) noexcept {
  ConvertStats stats;
  for (size_t i = 0; i < n; ++i) {
    const uint32_t bits = bits_of(src[i]);
    const uint32_t abs = bits & kF32AbsMask;
    if (abs > kF32Inf) {
      ++stats.nan_count;
    } else if (abs == kF32Inf) {
      ++stats.inf_count;
    } else if (abs > kF16MaxAsF32) {
      ++stats.clamped_count;
      dst[i] = static_cast<uint16_t>(((bits >> 16) & 0x8000u) | kF16Max);
      continue;
    }
    dst[i] = f32_to_f16_scalar(src[i]);
  }
  return stats;
}

ConvertStats f32_to_bf16_scalar_n(const float* src, uint16_t* dst, size_t n) noexcept {
  ConvertStats stats;
  for (size_t i = 0; i < n; ++i) {
    const uint32_t bits = bits_of(src[i]);
    const uint32_t abs = bits & kF32AbsMask;
    if (abs > kF32Inf) {
      ++stats.nan_count;
    } else if (abs == kF32Inf) {
      ++stats.inf_count;
    } else if (abs >= kBf16RoundsToInf) {
      ++stats.clamped_count;
      dst[i] = static_cast<uint16_t>(((bits >> 16) & 0x8000u) | kBf16Max);
      continue;
    }
    dst[i] = f32_to_bf16_scalar(src[i]);
  }
  return stats;
}

}  // namespace kernels

void f16_to_f32(const uint16_t* src, float* dst, size_t n) noexcept {
  switch (active_isa()) {
    case Isa::avx512: return kernels::f16_to_f32_avx512(src, dst, n);
    case Isa::avx2: return kernels::f16_to_f32_avx2(src, dst, n);
    case Isa::scalar: break;
  }
  kernels::f16_to_f32_scalar_n(src, dst, n);
}

void bf16_to_f32(const uint16_t* src, float* dst, size_t n) noexcept {
  switch (active_isa()) {
    case Isa::avx512: return kernels::bf16_to_f32_avx512(src, dst, n);
    case Isa::avx2: return kernels::bf16_to_f32_avx2(src, dst, n);
    case Isa::scalar: break;
  }
  kernels::bf16_to_f32_scalar_n(src, dst, n);
}

ConvertStats f32_to_f16(const float* src, uint16_t* dst, size_t n) noexcept {
  switch (active_isa()) {
    case Isa::avx512: return kernels::f32_to_f16_avx512(src, dst, n);
    case Isa::avx2: return kernels::f32_to_f16_avx2(src, dst, n);
    case Isa::scalar: break;
  }
  return kernels::f32_to_f16_scalar_n(src, dst, n);
}

ConvertStats f32_to_bf16(const float* src, uint16_t* dst, size_t n) noexcept {
  switch (active_isa()) {
    case Isa::avx512: return kernels::f32_to_bf16_avx512(src, dst, n);
    case Isa::avx2: return kernels::f32_to_bf16_avx2(src, dst, n);
    case Isa::scalar: break;
  }
  return kernels::f32_to_bf16_scalar_n(src, dst, n);
}

// ---- generic conversion through f32 ----

namespace {

// Widens n elements of a plain dtype to f32; returns false for dtypes it cannot read.
bool widen_to_f32(DType from, const void* src, float* dst, size_t n) {
  switch (from) {
    case DType::f32: std::memcpy(dst, src, n * sizeof(float)); return true;
    case DType::f16: f16_to_f32(static_cast<const uint16_t*>(src), dst, n); return true;
    case DType::bf16: bf16_to_f32(static_cast<const uint16_t*>(src), dst, n); return true;
    case DType::f64: {
      const auto* s = static_cast<const double*>(src);
      for (size_t i = 0; i < n; ++i) dst[i] = static_cast<float>(s[i]);
      return true;
    }
    case DType::f8_e4m3: {
      const auto* s = static_cast<const uint8_t*>(src);
      for (size_t i = 0; i < n; ++i) dst[i] = f8_e4m3_to_f32_scalar(s[i]);
      return true;
    }
    case DType::f8_e5m2: {
      const auto* s = static_cast<const uint8_t*>(src);
      for (size_t i = 0; i < n; ++i) dst[i] = f8_e5m2_to_f32_scalar(s[i]);
      return true;
    }
    default: break;
  }
  if (is_quantized(from)) return quant::dequantize(from, src, dst, n);
  return false;
}

bool is_float_target(DType to) {
  return to == DType::f32 || to == DType::f16 || to == DType::bf16 || to == DType::f64;
}

ConvertStats narrow_from_f32(const float* src, DType to, void* dst, size_t n) {
  switch (to) {
    case DType::f32: std::memcpy(dst, src, n * sizeof(float)); return {};
    case DType::f16: return f32_to_f16(src, static_cast<uint16_t*>(dst), n);
    case DType::bf16: return f32_to_bf16(src, static_cast<uint16_t*>(dst), n);
    case DType::f64: {
      auto* d = static_cast<double*>(dst);
      for (size_t i = 0; i < n; ++i) d[i] = src[i];
      return {};
    }
    default: break;
  }
  throw Error(ErrorCode::unsupported, "cannot convert to " + std::string(dtype_name(to)));
}

template <typename T>
void copy_integers(const void* src, DType to, void* dst, size_t n) {
  const auto* s = static_cast<const T*>(src);
  switch (to) {
    case DType::i64: {
      auto* d = static_cast<int64_t*>(dst);
      for (size_t i = 0; i < n; ++i) d[i] = static_cast<int64_t>(s[i]);
      return;
    }
    case DType::i32: {
      auto* d = static_cast<int32_t*>(dst);
      for (size_t i = 0; i < n; ++i) d[i] = static_cast<int32_t>(s[i]);
      return;
    }
    case DType::f32: {
      auto* d = static_cast<float*>(dst);
      for (size_t i = 0; i < n; ++i) d[i] = static_cast<float>(s[i]);
      return;
    }
    default: break;
  }
}

bool is_integer(DType d) { return dtype_traits(d).kind == DTypeKind::integer; }

template <typename F>
void with_integer_type(DType d, F&& f) {
  switch (d) {
    case DType::i8: f(int8_t{}); return;
    case DType::u8: f(uint8_t{}); return;
    case DType::i16: f(int16_t{}); return;
    case DType::i32: f(int32_t{}); return;
    case DType::i64: f(int64_t{}); return;
    default: return;
  }
}

}  // namespace

bool can_convert(DType from, DType to) noexcept {
  if (from == to) return true;
  if (is_integer(from)) return to == DType::i64 || to == DType::i32 || to == DType::f32;
  const bool readable = dtype_traits(from).kind == DTypeKind::floating ||
                        (is_quantized(from) && quant::can_dequantize(from));
  return readable && is_float_target(to);
}

ConvertStats convert(DType from, const void* src, DType to, void* dst, size_t n) {
  if (!can_convert(from, to)) {
    throw Error(ErrorCode::unsupported, "no conversion from " + std::string(dtype_name(from)) +
                                            " to " + std::string(dtype_name(to)));
  }
  if (from == to) {
    std::memcpy(dst, src, static_cast<size_t>(dtype_bytes(from, static_cast<int64_t>(n),
                                                          static_cast<int64_t>(n))));
    return {};
  }
  if (is_integer(from)) {
    with_integer_type(from, [&](auto tag) { copy_integers<decltype(tag)>(src, to, dst, n); });
    return {};
  }
  if (to == DType::f32) {
    widen_to_f32(from, src, static_cast<float*>(dst), n);
    return {};
  }
  // Through a bounded f32 buffer, one chunk at a time (chunks keep whole quant blocks).
  const auto& traits = dtype_traits(from);
  const size_t block = static_cast<size_t>(traits.block_elems);
  const size_t chunk = 4096 / block * block;  // 4096 is a multiple of every block size
  std::array<float, 4096> buffer{};
  ConvertStats stats;
  const size_t to_size = static_cast<size_t>(dtype_size(to));
  for (size_t done = 0; done < n; done += chunk) {
    const size_t count = std::min(chunk, n - done);
    const auto* chunk_src = static_cast<const std::byte*>(src) +
                            done / block * static_cast<size_t>(traits.block_bytes);
    widen_to_f32(from, chunk_src, buffer.data(), count);
    stats += narrow_from_f32(buffer.data(), to, static_cast<std::byte*>(dst) + done * to_size,
                             count);
  }
  return stats;
}

void byteswap_inplace(void* data, size_t n, size_t elem_size) noexcept {
  auto* p = static_cast<unsigned char*>(data);
  if (elem_size <= 1) return;
  for (size_t i = 0; i < n; ++i) {
    unsigned char* e = p + i * elem_size;
    for (size_t a = 0, b = elem_size - 1; a < b; ++a, --b) std::swap(e[a], e[b]);
  }
}

bool host_is_little_endian() noexcept { return std::endian::native == std::endian::little; }

}  // namespace loom
