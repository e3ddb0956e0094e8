#include "format/ggml_types.hpp"

#include <array>

namespace loom::format {

namespace {
// ids 4 and 5 (Q4_2, Q4_3) were removed from ggml and are unknown; the later removed
// repacked types (31..33, 36..38) are named so that an old file gets a clear message.
constexpr std::array<GgmlType, 38> kGgmlTypes{{
    {0, "f32", DType::f32},
    {1, "f16", DType::f16},
    {2, "q4_0", DType::q4_0},
    {3, "q4_1", DType::q4_1},
    {6, "q5_0", DType::q5_0},
    {7, "q5_1", DType::q5_1},
    {8, "q8_0", DType::q8_0},
    {9, "q8_1", DType::q8_1},
    {10, "q2_K", DType::q2_k},
    {11, "q3_K", DType::q3_k},
    {12, "q4_K", DType::q4_k},
    {13, "q5_K", DType::q5_k},
    {14, "q6_K", DType::q6_k},
    {15, "q8_K", DType::q8_k},
    {16, "iq2_xxs", std::nullopt},
    {17, "iq2_xs", std::nullopt},
    {18, "iq3_xxs", std::nullopt},
    {19, "iq1_s", std::nullopt},
    {20, "iq4_nl", std::nullopt},
    {21, "iq3_s", std::nullopt},
    {22, "iq2_s", std::nullopt},
    {23, "iq4_xs", std::nullopt},
    {24, "i8", DType::i8},
    {25, "i16", DType::i16},
    {26, "i32", DType::i32},
    {27, "i64", DType::i64},
    {28, "f64", DType::f64},
    {29, "iq1_m", std::nullopt},
    {30, "bf16", DType::bf16},
    {31, "q4_0_4_4 (removed)", std::nullopt},
    {32, "q4_0_4_8 (removed)", std::nullopt},
    {33, "q4_0_8_8 (removed)", std::nullopt},
    {34, "tq1_0", std::nullopt},
    {35, "tq2_0", std::nullopt},
    {36, "iq4_nl_4_4 (removed)", std::nullopt},
    {37, "iq4_nl_4_8 (removed)", std::nullopt},
    {38, "iq4_nl_8_8 (removed)", std::nullopt},
    {39, "mxfp4", std::nullopt},
}};
}  // namespace

const GgmlType* ggml_type_by_id(uint32_t id) noexcept {
  for (const auto& t : kGgmlTypes) {
    if (t.id == id) return &t;
  }
  return nullptr;
}

std::optional<uint32_t> ggml_id_for(DType dtype) noexcept {
  for (const auto& t : kGgmlTypes) {
    if (t.dtype == dtype) return t.id;
  }
  return std::nullopt;
}

}  // namespace loom::format
