#include <catch2/catch.hpp>

#include <map>
#include <string>

#include "loom/dtype.hpp"
#include "loom/error.hpp"

using loom::DType;

TEST_CASE("dtype table: names round-trip and sizes match ggml's block structs") {
  // Expected (block elements, block bytes) for every type, from ggml-common.h, the
  // safetensors dtype list and loom's group layouts (docs/quantization.md).
  const std::map<std::string, std::pair<int, int>> expected{
      {"f32", {1, 4}},      {"f16", {1, 2}},     {"bf16", {1, 2}},    {"f64", {1, 8}},
      {"i8", {1, 1}},       {"u8", {1, 1}},      {"i16", {1, 2}},     {"i32", {1, 4}},
      {"i64", {1, 8}},      {"bool", {1, 1}},    {"f8_e4m3", {1, 1}}, {"f8_e5m2", {1, 1}},
      {"q8_0", {32, 34}},   {"q4_0", {32, 18}},  {"q4_1", {32, 20}},  {"q5_0", {32, 22}},
      {"q5_1", {32, 24}},   {"q2_k", {256, 84}}, {"q3_k", {256, 110}}, {"q4_k", {256, 144}},
      {"q5_k", {256, 176}}, {"q6_k", {256, 210}}, {"q8_k", {256, 292}}, {"q8_1", {32, 36}},
      {"gq8_32", {32, 34}}, {"gq8_64", {64, 66}}, {"gq8_128", {128, 130}},
      {"gq4_32", {32, 20}}, {"gq4_64", {64, 36}}, {"gq4_128", {128, 68}},
  };
  REQUIRE(loom::all_dtypes().size() == expected.size());
  for (const auto& t : loom::all_dtypes()) {
    INFO(t.name);
    auto it = expected.find(std::string(t.name));
    REQUIRE(it != expected.end());
    CHECK(t.block_elems == it->second.first);
    CHECK(t.block_bytes == it->second.second);
    CHECK(loom::dtype_from_name(t.name) == t.dtype);
    CHECK(loom::dtype_name(t.dtype) == t.name);
    CHECK(loom::is_quantized(t.dtype) == (t.block_elems > 1));
  }
  CHECK_FALSE(loom::dtype_from_name("f128").has_value());
}

TEST_CASE("dtype byte counts for every type") {
  for (const auto& t : loom::all_dtypes()) {
    INFO(t.name);
    const int64_t rows = 3;
    const int64_t row = t.block_elems * 4;
    CHECK(loom::dtype_bytes(t.dtype, rows * row, row) == rows * 4 * t.block_bytes);
  }
  CHECK(loom::dtype_bytes(DType::q4_k, 4096 * 11008, 4096) == 4096 / 256 * 144 * 11008);
  CHECK(loom::dtype_size(DType::bf16) == 2);
  CHECK_THROWS_AS(loom::dtype_size(DType::q4_0), loom::Error);
}

TEST_CASE("dtype byte counts reject partial blocks and overflow") {
  CHECK_THROWS_AS(loom::dtype_bytes(DType::q4_0, 48, 48), loom::Error);
  CHECK_THROWS_AS(loom::dtype_bytes(DType::q6_k, 128, 128), loom::Error);
  CHECK_THROWS_AS(loom::dtype_bytes(DType::f64, int64_t{1} << 61, 1), loom::Error);
  CHECK_THROWS_AS(loom::dtype_bytes(DType::f32, -1, 1), loom::Error);
  CHECK(loom::dtype_bytes(DType::q8_0, 0, 0) == 0);
}
