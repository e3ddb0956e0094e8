#include <catch2/catch.hpp>

#include <bit>
#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "loom/convert.hpp"
#include "loom/cpu.hpp"
#include "loom/error.hpp"
#include "support/test_support.hpp"

namespace {

// An ISA cap for the scope of one check, restored afterwards (tests/support).
using loom::test::IsaScope;

// Independent reference for f16 -> f32 using ldexp on the decoded fields.
float f16_reference(uint16_t h) {
  const int sign = (h >> 15) & 1;
  const int exp = (h >> 10) & 0x1F;
  const int mant = h & 0x3FF;
  if (exp == 31) {
    if (mant == 0) return sign ? -INFINITY : INFINITY;
    uint32_t bits = (static_cast<uint32_t>(sign) << 31) | 0x7F800000u | 0x400000u |
                    (static_cast<uint32_t>(mant) << 13);
    return std::bit_cast<float>(bits);
  }
  const double v = exp == 0 ? std::ldexp(mant, -24) : std::ldexp(1024 + mant, exp - 25);
  return static_cast<float>(sign ? -v : v);
}

uint32_t bits(float f) { return std::bit_cast<uint32_t>(f); }

}  // namespace

TEST_CASE("f16 -> f32 is exact on all 65536 bit patterns, for every ISA") {
  std::vector<uint16_t> all(65536);
  for (uint32_t i = 0; i < 65536; ++i) all[i] = static_cast<uint16_t>(i);
  for (auto isa : loom::supported_isas()) {
    IsaScope scope(isa);
    INFO("isa " << loom::isa_name(isa));
    std::vector<float> out(65536);
    loom::f16_to_f32(all.data(), out.data(), all.size());
    size_t mismatches = 0;
    for (uint32_t i = 0; i < 65536; ++i) {
      if (bits(out[i]) != bits(f16_reference(static_cast<uint16_t>(i)))) ++mismatches;
      if (bits(out[i]) != bits(loom::f16_to_f32_scalar(static_cast<uint16_t>(i)))) ++mismatches;
    }
    CHECK(mismatches == 0);
  }
}

TEST_CASE("bf16 -> f32 is exact on all 65536 bit patterns, for every ISA") {
  std::vector<uint16_t> all(65536);
  for (uint32_t i = 0; i < 65536; ++i) all[i] = static_cast<uint16_t>(i);
  for (auto isa : loom::supported_isas()) {
    IsaScope scope(isa);
    INFO("isa " << loom::isa_name(isa));
    std::vector<float> out(65536);
    loom::bf16_to_f32(all.data(), out.data(), all.size());
    size_t mismatches = 0;
    for (uint32_t i = 0; i < 65536; ++i) {
      if (bits(out[i]) != (i << 16)) ++mismatches;
    }
    CHECK(mismatches == 0);
  }
}

TEST_CASE("f32 -> f16 -> f32 round-trips every finite f16 value, for every ISA") {
  std::vector<float> values;
  std::vector<uint16_t> expected;
  for (uint32_t i = 0; i < 65536; ++i) {
    const auto h = static_cast<uint16_t>(i);
    if (((h >> 10) & 0x1F) == 31) continue;  // Inf/NaN handled separately
    values.push_back(loom::f16_to_f32_scalar(h));
    expected.push_back(h);
  }
  for (auto isa : loom::supported_isas()) {
    IsaScope scope(isa);
    INFO("isa " << loom::isa_name(isa));
    std::vector<uint16_t> out(values.size());
    auto stats = loom::f32_to_f16(values.data(), out.data(), values.size());
    CHECK(out == expected);
    CHECK(stats.clamped_count == 0);
    CHECK(stats.nan_count == 0);
    CHECK(stats.inf_count == 0);
  }
}

TEST_CASE("f32 -> bf16 -> f32 round-trips every bf16 value, for every ISA") {
  std::vector<float> values(65536);
  for (uint32_t i = 0; i < 65536; ++i) values[i] = std::bit_cast<float>(i << 16);
  for (auto isa : loom::supported_isas()) {
    IsaScope scope(isa);
    INFO("isa " << loom::isa_name(isa));
    std::vector<uint16_t> out(values.size());
    auto stats = loom::f32_to_bf16(values.data(), out.data(), values.size());
    size_t mismatches = 0;
    for (uint32_t i = 0; i < 65536; ++i) {
      const bool nan = (i & 0x7FFF) > 0x7F80;
      // NaNs come back quieted (bit 6 of the bf16 mantissa set), all else unchanged.
      const uint16_t want = static_cast<uint16_t>(nan ? (i | 0x40) : i);
      if (out[i] != want) ++mismatches;
    }
    CHECK(mismatches == 0);
    CHECK(stats.nan_count == 2 * 127);
    CHECK(stats.inf_count == 2);
    CHECK(stats.clamped_count == 0);
  }
}

TEST_CASE("narrowing matches the scalar reference on random and edge inputs, for every ISA") {
  std::mt19937 rng(42);
  std::uniform_int_distribution<uint32_t> dist;
  std::vector<float> values(100003);
  for (auto& v : values) v = std::bit_cast<float>(dist(rng));
  for (float edge : {65504.0f, 65519.99f, 65520.0f, 6.1035156e-05f, 5.9604645e-08f,
                     2.9802322e-08f, 1e-10f, 0.0f, 3.3895314e38f, 3.4028235e38f}) {
    for (float v : {edge, -edge, std::nextafter(edge, 0.0f), std::nextafter(edge, INFINITY)}) {
      values.push_back(v);
    }
  }
  std::vector<uint16_t> ref16(values.size()), refbf(values.size());
  loom::ConvertStats ref_stats16, ref_statsbf;
  {
    IsaScope scope(loom::Isa::scalar);
    ref_stats16 = loom::f32_to_f16(values.data(), ref16.data(), values.size());
    ref_statsbf = loom::f32_to_bf16(values.data(), refbf.data(), values.size());
  }
  CHECK(ref_stats16.nan_count > 0);
  CHECK(ref_stats16.clamped_count > 0);
  for (auto isa : loom::supported_isas()) {
    IsaScope scope(isa);
    INFO("isa " << loom::isa_name(isa));
    std::vector<uint16_t> out16(values.size()), outbf(values.size());
    auto s16 = loom::f32_to_f16(values.data(), out16.data(), values.size());
    auto sbf = loom::f32_to_bf16(values.data(), outbf.data(), values.size());
    CHECK(out16 == ref16);
    CHECK(outbf == refbf);
    CHECK(s16.nan_count == ref_stats16.nan_count);
    CHECK(s16.inf_count == ref_stats16.inf_count);
    CHECK(s16.clamped_count == ref_stats16.clamped_count);
    CHECK(sbf.nan_count == ref_statsbf.nan_count);
    CHECK(sbf.clamped_count == ref_statsbf.clamped_count);
  }
}

TEST_CASE("rounding ties go to even, safe cast clamps and counts, NaN and Inf survive") {
  // 1 + 2^-11 is halfway between f16 1.0 and 1 + 2^-10: ties to the even 1.0.
  CHECK(loom::f32_to_f16_scalar(1.0f + 0x1p-11f) == 0x3C00);
  CHECK(loom::f32_to_f16_scalar(1.0f + 3 * 0x1p-11f) == 0x3C02);
  // Half the smallest subnormal ties to zero; just above rounds up to it.
  CHECK(loom::f32_to_f16_scalar(0x1p-25f) == 0x0000);
  CHECK(loom::f32_to_f16_scalar(std::nextafter(0x1p-25f, 1.0f)) == 0x0001);
  CHECK(loom::f32_to_bf16_scalar(1.0f + 0x1p-8f) == 0x3F80);
  CHECK(loom::f32_to_bf16_scalar(1.0f + 3 * 0x1p-8f) == 0x3F82);

  for (auto isa : loom::supported_isas()) {
    IsaScope scope(isa);
    INFO("isa " << loom::isa_name(isa));
    std::vector<float> in(37, 1.5f);
    in[0] = 70000.0f;
    in[1] = -1e30f;
    in[2] = INFINITY;
    in[3] = -INFINITY;
    in[4] = NAN;
    in[35] = 65504.0f;
    in[36] = 65505.0f;
    std::vector<uint16_t> out(in.size());
    auto stats = loom::f32_to_f16(in.data(), out.data(), in.size());
    CHECK(out[0] == 0x7BFF);
    CHECK(out[1] == 0xFBFF);
    CHECK(out[2] == 0x7C00);
    CHECK(out[3] == 0xFC00);
    CHECK((out[4] & 0x7C00) == 0x7C00);
    CHECK((out[4] & 0x3FF) != 0);
    CHECK(out[5] == 0x3E00);
    CHECK(out[35] == 0x7BFF);
    CHECK(out[36] == 0x7BFF);
    CHECK(stats.clamped_count == 3);
    CHECK(stats.inf_count == 2);
    CHECK(stats.nan_count == 1);

    std::vector<uint16_t> outbf(in.size());
    auto sbf = loom::f32_to_bf16(in.data(), outbf.data(), in.size());
    CHECK(outbf[0] == loom::f32_to_bf16_scalar(70000.0f));
    CHECK(outbf[2] == 0x7F80);
    CHECK(sbf.inf_count == 2);
    CHECK(sbf.nan_count == 1);
    CHECK(sbf.clamped_count == 0);
  }
}

TEST_CASE("generic convert covers floating, f8 and integer dtypes") {
  const std::vector<float> src{1.0f, -2.5f, 0.125f, 1000.0f};
  std::vector<uint16_t> h(src.size());
  loom::convert(loom::DType::f32, src.data(), loom::DType::f16, h.data(), src.size());
  std::vector<uint16_t> b(src.size());
  loom::convert(loom::DType::f16, h.data(), loom::DType::bf16, b.data(), src.size());
  std::vector<double> d(src.size());
  loom::convert(loom::DType::bf16, b.data(), loom::DType::f64, d.data(), src.size());
  CHECK(d == std::vector<double>{1.0, -2.5, 0.125, 1000.0});

  // f8: 0x38 is 1.0 in E4M3 (exp 7 = bias), 0x3C is 1.0 in E5M2; 0x7F is E4M3's NaN.
  const std::vector<uint8_t> e4{0x38, 0xB8, 0x01, 0x7E, 0x7F};
  std::vector<float> f(e4.size());
  loom::convert(loom::DType::f8_e4m3, e4.data(), loom::DType::f32, f.data(), e4.size());
  CHECK(f[0] == 1.0f);
  CHECK(f[1] == -1.0f);
  CHECK(f[2] == 0x1p-9f);
  CHECK(f[3] == 448.0f);
  CHECK(std::isnan(f[4]));
  const std::vector<uint8_t> e5{0x3C, 0x7C};
  loom::convert(loom::DType::f8_e5m2, e5.data(), loom::DType::f32, f.data(), e5.size());
  CHECK(f[0] == 1.0f);
  CHECK(std::isinf(f[1]));

  const std::vector<int32_t> ints{-3, 7};
  std::vector<int64_t> wide(2);
  loom::convert(loom::DType::i32, ints.data(), loom::DType::i64, wide.data(), 2);
  CHECK(wide == std::vector<int64_t>{-3, 7});
  CHECK_FALSE(loom::can_convert(loom::DType::f32, loom::DType::i8));
  CHECK_THROWS_AS(loom::convert(loom::DType::boolean, ints.data(), loom::DType::f16, h.data(), 1),
                  loom::Error);
}

TEST_CASE("byteswap reverses each element's bytes") {
  uint32_t words[2] = {0x11223344u, 0xA1B2C3D4u};
  loom::byteswap_inplace(words, 2, 4);
  CHECK(words[0] == 0x44332211u);
  CHECK(words[1] == 0xD4C3B2A1u);
  uint16_t halves[1] = {0xABCD};
  loom::byteswap_inplace(halves, 1, 2);
  CHECK(halves[0] == 0xCDAB);
  uint8_t bytes[2] = {1, 2};
  loom::byteswap_inplace(bytes, 2, 1);
  CHECK(bytes[0] == 1);
  CHECK(loom::host_is_little_endian());
}
