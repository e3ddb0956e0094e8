#include "loom/dtype.hpp"

#include <array>

#include "common/checked.hpp"
#include "loom/error.hpp"

namespace loom {

namespace {
using K = DTypeKind;
// Block layouts follow ggml's block_* structs (ggml-common.h); sizes are checked against
// those definitions in tests/tensor/dtype_test.cpp.
constexpr std::array<DTypeTraits, 30> kTraits{{
    {DType::f32, "f32", K::floating, 1, 4},
    {DType::f16, "f16", K::floating, 1, 2},
    {DType::bf16, "bf16", K::floating, 1, 2},
    {DType::f64, "f64", K::floating, 1, 8},
    {DType::i8, "i8", K::integer, 1, 1},
    {DType::u8, "u8", K::integer, 1, 1},
    {DType::i16, "i16", K::integer, 1, 2},
    {DType::i32, "i32", K::integer, 1, 4},
    {DType::i64, "i64", K::integer, 1, 8},
    {DType::boolean, "bool", K::boolean, 1, 1},
    {DType::f8_e4m3, "f8_e4m3", K::floating, 1, 1},
    {DType::f8_e5m2, "f8_e5m2", K::floating, 1, 1},
    {DType::q8_0, "q8_0", K::quantized, 32, 34},    // f16 d; i8 qs[32]
    {DType::q4_0, "q4_0", K::quantized, 32, 18},    // f16 d; u8 qs[16]
    {DType::q4_1, "q4_1", K::quantized, 32, 20},    // f16 d, m; u8 qs[16]
    {DType::q5_0, "q5_0", K::quantized, 32, 22},    // f16 d; u8 qh[4]; u8 qs[16]
    {DType::q5_1, "q5_1", K::quantized, 32, 24},    // f16 d, m; u8 qh[4]; u8 qs[16]
    {DType::q2_k, "q2_k", K::quantized, 256, 84},   // u8 scales[16]; u8 qs[64]; f16 d, dmin
    {DType::q3_k, "q3_k", K::quantized, 256, 110},  // u8 hmask[32]; qs[64]; scales[12]; f16 d
    {DType::q4_k, "q4_k", K::quantized, 256, 144},  // f16 d, dmin; scales[12]; qs[128]
    {DType::q5_k, "q5_k", K::quantized, 256, 176},  // f16 d, dmin; scales[12]; qh[32]; qs[128]
    {DType::q6_k, "q6_k", K::quantized, 256, 210},  // ql[128]; qh[64]; i8 scales[16]; f16 d
    {DType::q8_k, "q8_k", K::quantized, 256, 292},  // f32 d; i8 qs[256]; i16 bsums[16]
    {DType::q8_1, "q8_1", K::quantized, 32, 36},    // f16 d, s; i8 qs[32]
    // loom's group quantization: one block per group (tensor/quant/blocks.hpp)
    {DType::gq8_32, "gq8_32", K::quantized, 32, 34},      // f16 d; i8 qs[32]
    {DType::gq8_64, "gq8_64", K::quantized, 64, 66},      // f16 d; i8 qs[64]
    {DType::gq8_128, "gq8_128", K::quantized, 128, 130},  // f16 d; i8 qs[128]
    {DType::gq4_32, "gq4_32", K::quantized, 32, 20},      // f16 d; u8 z, pad; u8 qs[16]
    {DType::gq4_64, "gq4_64", K::quantized, 64, 36},      // f16 d; u8 z, pad; u8 qs[32]
    {DType::gq4_128, "gq4_128", K::quantized, 128, 68},   // f16 d; u8 z, pad; u8 qs[64]
}};

constexpr bool table_in_enum_order() {
  for (size_t i = 0; i < kTraits.size(); ++i) {
    if (static_cast<size_t>(kTraits[i].dtype) != i) return false;
  }
  return true;
}
static_assert(table_in_enum_order(), "kTraits must list dtypes in enumerator order");
}  // namespace

std::span<const DTypeTraits> all_dtypes() noexcept { return kTraits; }

const DTypeTraits& dtype_traits(DType dtype) noexcept {
  return kTraits[static_cast<size_t>(dtype)];
}

std::string_view dtype_name(DType dtype) noexcept { return dtype_traits(dtype).name; }

std::optional<DType> dtype_from_name(std::string_view name) noexcept {
  for (const auto& t : kTraits) {
    if (t.name == name) return t.dtype;
  }
  return std::nullopt;
}

int64_t dtype_size(DType dtype) {
  const auto& t = dtype_traits(dtype);
  if (t.block_elems != 1) {
    throw Error(ErrorCode::invalid_argument,
                "dtype " + std::string(t.name) + " is block-quantized and has no element size");
  }
  return t.block_bytes;
}

int64_t dtype_bytes(DType dtype, int64_t elements, int64_t row_elems) {
  const auto& t = dtype_traits(dtype);
  if (elements < 0 || row_elems < 0) {
    throw Error(ErrorCode::invalid_argument, "negative element count");
  }
  if (t.block_elems == 1) return checked_mul(elements, int64_t{t.block_bytes});
  if (row_elems == 0) return 0;
  if (row_elems % t.block_elems != 0) {
    throw Error(ErrorCode::invalid_argument,
                "row of " + std::to_string(row_elems) + " elements is not a multiple of " +
                    std::string(t.name) + "'s block of " + std::to_string(t.block_elems));
  }
  // elements is a whole number of rows, so it is a whole number of blocks too.
  return checked_mul(elements / t.block_elems, int64_t{t.block_bytes});
}

}  // namespace loom
