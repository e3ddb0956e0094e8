// Dequantization of every block type: hand-computed blocks, an independent per-element
// decoder on random blocks (bit-exact), and the convert() / quantize() entry points.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "loom/convert.hpp"
#include "loom/cpu.hpp"
#include "loom/error.hpp"
#include "loom/thread_pool.hpp"
#include "support/test_support.hpp"
#include "tensor/quant_test_support.hpp"

using loom::DType;
namespace tq = loom::test::quant;

namespace {

constexpr DType kAllQuantized[] = {DType::q8_0, DType::q4_0, DType::q4_1, DType::q5_0,
                                   DType::q5_1, DType::q8_1, DType::q2_k, DType::q3_k,
                                   DType::q4_k, DType::q5_k, DType::q6_k, DType::q8_k,
                                   DType::gq8_32, DType::gq8_64, DType::gq8_128,
                                   DType::gq4_32, DType::gq4_64, DType::gq4_128};

void put_f16(std::vector<uint8_t>& b, size_t at, float v) {
  const uint16_t h = loom::f32_to_f16_scalar(v);
  std::memcpy(b.data() + at, &h, 2);
}

std::vector<float> decode(DType dtype, const std::vector<uint8_t>& block) {
  std::vector<float> out(static_cast<size_t>(loom::dtype_traits(dtype).block_elems));
  REQUIRE(loom::quant::dequantize(dtype, block.data(), out.data(), out.size()));
  return out;
}

std::vector<uint8_t> zero_block(DType dtype) {
  return std::vector<uint8_t>(static_cast<size_t>(loom::dtype_traits(dtype).block_bytes), 0);
}

// ---- an independent decoder: one element at a time, straight from the layout
// descriptions in ggml-common.h, in double (every value is one rounding away) ----

double f16_at(const uint8_t* b, size_t at) {
  uint16_t h;
  std::memcpy(&h, b + at, 2);
  return loom::f16_to_f32_scalar(h);
}

int bit(const uint8_t* bytes, int index) { return (bytes[index / 8] >> (index % 8)) & 1; }

int nibble32(const uint8_t* qs, int e) { return e < 16 ? qs[e] & 15 : qs[e - 16] >> 4; }

// 2-bit plane layout of q2_k / q3_k: element e lives in byte 32*(e/128) + e%32 at bit
// 2*((e%128)/32).
int plane2(const uint8_t* qs, int e) {
  return (qs[32 * (e / 128) + e % 32] >> (2 * ((e % 128) / 32))) & 3;
}

void k4(const uint8_t* s, int g, int* sc, int* m) {
  if (g < 4) {
    *sc = s[g] & 63;
    *m = s[g + 4] & 63;
  } else {
    *sc = (s[g + 4] & 15) | ((s[g - 4] >> 6) << 4);
    *m = (s[g + 4] >> 4) | ((s[g] >> 6) << 4);
  }
}

double element(DType dtype, const uint8_t* b, int e) {
  switch (dtype) {
    case DType::q8_0: return f16_at(b, 0) * static_cast<int8_t>(b[2 + e]);
    case DType::q8_1: return f16_at(b, 0) * static_cast<int8_t>(b[4 + e]);
    case DType::q4_0: return f16_at(b, 0) * (nibble32(b + 2, e) - 8);
    case DType::q4_1: return f16_at(b, 0) * nibble32(b + 4, e) + f16_at(b, 2);
    case DType::q5_0: return f16_at(b, 0) * ((nibble32(b + 6, e) | (bit(b + 2, e) << 4)) - 16);
    case DType::q5_1:
      return f16_at(b, 0) * (nibble32(b + 8, e) | (bit(b + 4, e) << 4)) + f16_at(b, 2);
    case DType::q2_k: {
      const int g = e / 16;
      return f16_at(b, 80) * (b[g] & 15) * plane2(b + 16, e) - f16_at(b, 82) * (b[g] >> 4);
    }
    case DType::q3_k: {
      const int g = e / 16;
      const uint8_t* s = b + 96;
      const int low = g < 8 ? s[g] & 15 : s[g - 8] >> 4;
      const int scale = (low | (((s[8 + g % 4] >> (2 * (g / 4))) & 3) << 4)) - 32;
      const int high = (b[e % 32] >> (e / 32)) & 1;  // hmask: bit e/32 of byte e%32
      return f16_at(b, 108) * scale * (plane2(b + 32, e) + 4 * high - 4);
    }
    case DType::q4_k:
    case DType::q5_k: {
      const bool five = dtype == DType::q5_k;
      const int g = e / 32;
      int sc = 0;
      int m = 0;
      k4(b + 4, g, &sc, &m);
      const uint8_t* qs = b + (five ? 48 : 16);
      int level = (qs[32 * (g / 2) + e % 32] >> (4 * (g % 2))) & 15;
      if (five) level |= ((b[16 + e % 32] >> g) & 1) << 4;
      return f16_at(b, 0) * sc * level - f16_at(b, 2) * m;
    }
    case DType::q6_k: {
      const int chunk = e / 128;
      const int quarter = (e % 128) / 32;
      const int l = e % 32;
      const uint8_t low_byte = b[64 * chunk + l + 32 * (quarter % 2)];
      const int low = quarter < 2 ? low_byte & 15 : low_byte >> 4;
      const int high = (b[128 + 32 * chunk + l] >> (2 * quarter)) & 3;
      return f16_at(b, 208) * static_cast<int8_t>(b[192 + e / 16]) * ((low | (high << 4)) - 32);
    }
    case DType::gq8_32:
    case DType::gq8_64:
    case DType::gq8_128: return f16_at(b, 0) * static_cast<int8_t>(b[2 + e]);
    case DType::gq4_32:
    case DType::gq4_64:
    case DType::gq4_128:  // q4_0's nibble order per run of 32; zero point in b[2]'s low nibble
      return f16_at(b, 0) * (nibble32(b + 4 + 16 * (e / 32), e % 32) - (b[2] & 15));
    case DType::q8_k: {
      float d;
      std::memcpy(&d, b, 4);
      return static_cast<double>(d) * static_cast<int8_t>(b[4 + e]);
    }
    default: FAIL("not a quantized type"); return 0;
  }
}

}  // namespace

TEST_CASE("hand-computed blocks dequantize exactly") {
  SECTION("q8_0") {
    auto b = zero_block(DType::q8_0);
    put_f16(b, 0, 0.5f);
    b[2 + 0] = 3;
    b[2 + 1] = 0x80;  // -128
    b[2 + 31] = 127;
    const auto v = decode(DType::q8_0, b);
    CHECK(v[0] == 1.5f);
    CHECK(v[1] == -64.0f);
    CHECK(v[31] == 63.5f);
    CHECK(v[2] == 0.0f);
  }
  SECTION("q4_0") {
    auto b = zero_block(DType::q4_0);
    put_f16(b, 0, 0.25f);
    for (int j = 0; j < 16; ++j) b[2 + j] = 0x88;
    b[2 + 0] = 0x9F;
    b[2 + 15] = 0x08;
    const auto v = decode(DType::q4_0, b);
    CHECK(v[0] == 1.75f);   // (15 - 8) * 0.25
    CHECK(v[16] == 0.25f);  // (9 - 8) * 0.25
    CHECK(v[15] == 0.0f);
    CHECK(v[31] == -2.0f);  // (0 - 8) * 0.25
    CHECK(v[7] == 0.0f);
  }
  SECTION("q4_1") {
    auto b = zero_block(DType::q4_1);
    put_f16(b, 0, 0.5f);
    put_f16(b, 2, -1.0f);
    b[4 + 3] = 0xF0;
    const auto v = decode(DType::q4_1, b);
    CHECK(v[3] == -1.0f);  // 0 * 0.5 - 1
    CHECK(v[19] == 6.5f);  // 15 * 0.5 - 1
    CHECK(v[0] == -1.0f);
  }
  SECTION("q5_0") {
    auto b = zero_block(DType::q5_0);
    put_f16(b, 0, 1.0f);
    const uint32_t qh = 0x80000001u;  // bit 4 of elements 0 and 31
    std::memcpy(b.data() + 2, &qh, 4);
    b[6 + 15] = 0xF0;
    const auto v = decode(DType::q5_0, b);
    CHECK(v[0] == 0.0f);     // (0 | 16) - 16
    CHECK(v[16] == -16.0f);  // 0 - 16
    CHECK(v[15] == -16.0f);
    CHECK(v[31] == 15.0f);  // (15 | 16) - 16
  }
  SECTION("q5_1") {
    auto b = zero_block(DType::q5_1);
    put_f16(b, 0, 0.5f);
    put_f16(b, 2, 2.0f);
    const uint32_t qh = 0x00010000u;  // bit 4 of element 16
    std::memcpy(b.data() + 4, &qh, 4);
    b[8 + 0] = 0x3A;
    const auto v = decode(DType::q5_1, b);
    CHECK(v[0] == 7.0f);    // 10 * 0.5 + 2
    CHECK(v[16] == 11.5f);  // 19 * 0.5 + 2
    CHECK(v[1] == 2.0f);
  }
  SECTION("q8_1") {
    auto b = zero_block(DType::q8_1);
    put_f16(b, 0, 2.0f);
    put_f16(b, 2, 99.0f);  // the stored sum does not enter dequantization
    b[4 + 5] = static_cast<uint8_t>(-3);
    const auto v = decode(DType::q8_1, b);
    CHECK(v[5] == -6.0f);
    CHECK(v[4] == 0.0f);
  }
  SECTION("q2_k") {
    auto b = zero_block(DType::q2_k);
    put_f16(b, 80, 0.5f);   // d
    put_f16(b, 82, 0.25f);  // dmin
    b[0] = 0x21;            // group 0: scale 1, min 2
    b[2] = 0x11;            // group 2: scale 1, min 1
    b[4] = 0x13;            // group 4: scale 3, min 1
    b[6] = 0x32;            // group 6: scale 2, min 3
    b[15] = 0xF3;           // group 15: scale 3, min 15
    b[16 + 0] = 0xE4;       // elements 0, 32, 64, 96 = levels 0, 1, 2, 3
    b[16 + 63] = 0xC0;      // element 255 = level 3
    const auto v = decode(DType::q2_k, b);
    CHECK(v[0] == -0.5f);    // 0.5*1*0 - 0.25*2
    CHECK(v[32] == 0.25f);   // 0.5*1*1 - 0.25*1
    CHECK(v[64] == 2.75f);   // 0.5*3*2 - 0.25*1
    CHECK(v[96] == 2.25f);   // 0.5*2*3 - 0.25*3
    CHECK(v[255] == 0.75f);  // 0.5*3*3 - 0.25*15
  }
  SECTION("q3_k") {
    auto b = zero_block(DType::q3_k);
    put_f16(b, 108, 1.0f);
    b[96 + 0] = 0x01;   // group 0: low nibble 1
    b[96 + 8] = 0x02;   // group 0: high bits 2 -> 0x21 - 32 = 1; groups 4, 8, 12 high bits 0
    b[96 + 7] = 0x50;   // group 15: low nibble 5 -> 5 - 32 = -27
    b[32 + 0] = 0x03;   // element 0: low bits 3
    b[0] = 0x01;        // element 0: high bit set -> level 3 + 4 - 4 = 3
    b[32 + 63] = 0x40;  // element 255: low bits 1, high bit clear -> level -3
    const auto v = decode(DType::q3_k, b);
    CHECK(v[0] == 3.0f);
    CHECK(v[1] == -4.0f);     // group 0, level -4
    CHECK(v[255] == 81.0f);   // -27 * -3
    CHECK(v[100] == 128.0f);  // group 6: scale -32, level -4
  }
  SECTION("q4_k and q5_k") {
    for (DType type : {DType::q4_k, DType::q5_k}) {
      INFO(loom::dtype_name(type));
      const bool five = type == DType::q5_k;
      const size_t qs = five ? 48 : 16;
      auto b = zero_block(type);
      put_f16(b, 0, 0.5f);  // d
      put_f16(b, 2, 1.0f);  // dmin
      b[4 + 0] = 0x05;      // group 0 scale 5
      b[4 + 4] = 0x03;      // group 0 min 3
      b[4 + 11] = 0x2A;     // group 7: scale low nibble 10, min low nibble 2
      b[4 + 3] = 0xC0;      // group 7 scale high bits 3 -> 58 (group 3 scale 0)
      b[4 + 7] = 0x40;      // group 7 min high bits 1 -> 18 (group 3 min 0)
      b[qs + 0] = 0x07;     // element 0 level 7
      b[qs + 127] = 0xF0;   // element 255 level 15
      if (five) {
        b[16 + 0] = 0x01;   // element 0: + 16
        b[16 + 31] = 0x80;  // element 255: + 16
      }
      const auto v = decode(type, b);
      CHECK(v[0] == (five ? 54.5f : 14.5f));      // 0.5*5*(7|23) - 1*3
      CHECK(v[255] == (five ? 881.0f : 417.0f));  // 0.5*58*(15|31) - 18
      CHECK(v[100] == 0.0f);                      // group 3: scale 0, min 0
    }
  }
  SECTION("q6_k") {
    auto b = zero_block(DType::q6_k);
    put_f16(b, 208, 0.25f);
    b[192 + 0] = static_cast<uint8_t>(-2);
    b[192 + 15] = 100;
    b[0] = 0x05;        // element 0 low nibble 5
    b[128 + 0] = 0x02;  // element 0 high bits 2 -> 37 - 32 = 5
    const auto v = decode(DType::q6_k, b);
    CHECK(v[0] == -2.5f);      // 0.25 * -2 * 5
    CHECK(v[255] == -800.0f);  // 0.25 * 100 * (0 - 32)
    CHECK(v[20] == 0.0f);      // group 1: scale 0
  }
  SECTION("q8_k") {
    auto b = zero_block(DType::q8_k);
    const float d = 0.125f;
    std::memcpy(b.data(), &d, 4);
    b[4 + 7] = static_cast<uint8_t>(-100);
    const auto v = decode(DType::q8_k, b);
    CHECK(v[7] == -12.5f);
    CHECK(v[8] == 0.0f);
  }
}

TEST_CASE("dequantization matches an independent per-element decoder, bit for bit") {
  for (DType type : kAllQuantized) {
    INFO(loom::dtype_name(type));
    const auto& t = loom::dtype_traits(type);
    const size_t blocks = 64;
    auto data = tq::random_blocks(type, blocks, 5);
    if (type == DType::q8_k) {
      for (size_t b = 0; b < blocks; ++b) {
        const float d = 0.001f * static_cast<float>(b + 1);
        std::memcpy(data.data() + b * 292, &d, 4);
      }
    }
    const auto got = tq::dequantized(type, data, blocks * static_cast<size_t>(t.block_elems));
    size_t mismatches = 0;
    for (size_t b = 0; b < blocks; ++b) {
      const uint8_t* block = data.data() + b * static_cast<size_t>(t.block_bytes);
      for (int e = 0; e < t.block_elems; ++e) {
        const auto want = static_cast<float>(element(type, block, e));
        const float have = got[b * static_cast<size_t>(t.block_elems) + static_cast<size_t>(e)];
        if (std::memcmp(&want, &have, sizeof have) != 0) ++mismatches;
      }
    }
    CHECK(mismatches == 0);
  }
}

TEST_CASE("convert() dequantizes every quantized type to f32, f16 and bf16") {
  for (DType type : kAllQuantized) {
    INFO(loom::dtype_name(type));
    const auto& t = loom::dtype_traits(type);
    const size_t n = 3 * 4096;
    const auto data = tq::random_blocks(type, n / static_cast<size_t>(t.block_elems), 9);
    const auto f32 = tq::dequantized(type, data, n);
    CHECK(loom::can_convert(type, DType::f32));
    CHECK(loom::can_convert(type, DType::f16));
    std::vector<float> via_convert(n);
    loom::convert(type, data.data(), DType::f32, via_convert.data(), n);
    CHECK(std::memcmp(via_convert.data(), f32.data(), n * 4) == 0);
    std::vector<uint16_t> h(n);
    std::vector<uint16_t> h_expected(n);
    loom::convert(type, data.data(), DType::f16, h.data(), n);
    loom::f32_to_f16(f32.data(), h_expected.data(), n);
    CHECK(h == h_expected);
  }
  CHECK_FALSE(loom::can_convert(DType::q4_k, DType::q8_0));
}

TEST_CASE("quantize: round trip error, zero blocks, bad input") {
  // Relative RMSE (RMSE / stddev) of quantize -> dequantize on Gaussian data; the bounds
  // are loose envelopes around the values this test prints.
  const std::map<DType, double> bound{
      {DType::q8_0, 0.006}, {DType::q8_1, 0.006}, {DType::q8_k, 0.008}, {DType::q6_k, 0.02},
      {DType::q5_0, 0.05},  {DType::q5_1, 0.04},  {DType::q5_k, 0.04},  {DType::q4_0, 0.1},
      {DType::q4_1, 0.09},  {DType::q4_k, 0.075}, {DType::q3_k, 0.2},   {DType::q2_k, 0.4},
      {DType::gq8_32, 0.006}, {DType::gq8_64, 0.007}, {DType::gq8_128, 0.008},
      {DType::gq4_32, 0.1},   {DType::gq4_64, 0.12},  {DType::gq4_128, 0.13}};
  const size_t n = 256 * 1024;
  const auto x = tq::gaussian(n, 3);
  std::printf("\nquantize -> dequantize on N(0,1), %zu values: RMSE / stddev\n", n);
  for (DType type : kAllQuantized) {
    INFO(loom::dtype_name(type));
    const auto& t = loom::dtype_traits(type);
    std::vector<uint8_t> q(n / static_cast<size_t>(t.block_elems) *
                           static_cast<size_t>(t.block_bytes));
    loom::quant::quantize(type, x.data(), q.data(), n);
    const auto y = tq::dequantized(type, q, n);
    double err = 0;
    for (size_t i = 0; i < n; ++i) err += (static_cast<double>(y[i]) - x[i]) * (y[i] - x[i]);
    const double rel = std::sqrt(err / static_cast<double>(n));
    std::printf("  %-7s %.5f\n", std::string(loom::dtype_name(type)).c_str(), rel);
    CHECK(rel < bound.at(type));

    // All-zero input stays exactly zero.
    std::vector<float> zeros(static_cast<size_t>(t.block_elems), 0.0f);
    std::vector<uint8_t> zq(static_cast<size_t>(t.block_bytes), 0xAB);
    loom::quant::quantize(type, zeros.data(), zq.data(), zeros.size());
    for (float v : decode(type, zq)) CHECK(v == 0.0f);

    // NaN / Inf inputs and partial blocks are refused.
    std::vector<float> bad(static_cast<size_t>(t.block_elems), 1.0f);
    bad[3] = NAN;
    CHECK_THROWS_AS(loom::quant::quantize(type, bad.data(), zq.data(), bad.size()), loom::Error);
    bad[3] = -INFINITY;
    CHECK_THROWS_AS(loom::quant::quantize(type, bad.data(), zq.data(), bad.size()), loom::Error);
    CHECK_THROWS_AS(loom::quant::quantize(type, bad.data(), zq.data(), 16), loom::Error);
  }
  CHECK_THROWS_AS(loom::quant::quantize(DType::bf16, x.data(), nullptr, 32), loom::Error);
}

TEST_CASE("quantize_from f16 and bf16 equals quantizing the widened values") {
  const size_t n = 8192;
  const auto x = tq::gaussian(n, 13, 0.1f);
  for (DType from : {DType::f16, DType::bf16}) {
    std::vector<uint16_t> narrow(n);
    loom::convert(DType::f32, x.data(), from, narrow.data(), n);
    std::vector<float> widened(n);
    loom::convert(from, narrow.data(), DType::f32, widened.data(), n);
    for (DType to : {DType::q8_0, DType::q4_0, DType::q4_k, DType::q6_k, DType::gq8_64,
                     DType::gq4_32, DType::gq4_128}) {
      INFO(loom::dtype_name(from) << " -> " << loom::dtype_name(to));
      const auto& t = loom::dtype_traits(to);
      const size_t bytes =
          n / static_cast<size_t>(t.block_elems) * static_cast<size_t>(t.block_bytes);
      std::vector<uint8_t> direct(bytes);
      std::vector<uint8_t> via(bytes);
      loom::quant::quantize(to, widened.data(), direct.data(), n);
      loom::quant::quantize_from(from, narrow.data(), to, via.data(), n);
      CHECK(direct == via);
    }
  }
  CHECK_THROWS_AS(loom::quant::quantize_from(DType::q8_0, x.data(), DType::q4_0, nullptr, 32),
                  loom::Error);
}

// q8_0's quantizer has AVX2 and AVX-512 forms (tensor/quant/quant_x86.cpp); each must
// write what the definition gives: d = amax / 127 as f16, q = round(x * (1 / d)) half
// away from zero. Blocks of amax 127 (d = 1) put x * id exactly on the ties k + 0.5 and
// on 0.49999997, which adding a half before truncating would round up.
TEST_CASE("q8_0's quantizer writes the definition's bytes at every ISA level, ties included") {
  std::vector<float> x = tq::gaussian(32 * 64, 21);
  for (int b = 0; b < 8; ++b) {
    std::vector<float> block(32);
    block[0] = b % 2 == 0 ? 127.0f : -127.0f;
    for (int j = 1; j < 32; ++j) {
      const float k = static_cast<float>((j * 37 + b * 11) % 127);
      block[static_cast<size_t>(j)] = (j % 2 == 0 ? 1.0f : -1.0f) * (k + 0.5f);
    }
    block[5] = 0.49999997f;
    block[6] = -0.49999997f;
    block[7] = 126.5f;
    block[8] = -0.5f;
    x.insert(x.end(), block.begin(), block.end());
  }
  const size_t n = x.size(), blocks = n / 32;
  std::vector<uint8_t> expected(blocks * 34);
  for (size_t b = 0; b < blocks; ++b) {
    const float* v = x.data() + 32 * b;
    float amax = 0.0f;
    for (int j = 0; j < 32; ++j) amax = std::max(amax, std::fabs(v[j]));
    const float d = amax / 127.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    uint16_t h = 0;
    loom::f32_to_f16(&d, &h, 1);
    std::memcpy(expected.data() + 34 * b, &h, 2);
    for (int j = 0; j < 32; ++j) {
      const float product = v[j] * id;
      expected[34 * b + 2 + static_cast<size_t>(j)] = static_cast<uint8_t>(static_cast<int8_t>(std::round(product)));
    }
  }
  // The tie blocks' quants are the rounded values themselves (d = 1): spot-check one.
  const size_t tie_block = blocks - 8;
  CHECK(static_cast<int8_t>(expected[34 * tie_block + 2 + 5]) == 0);
  CHECK(static_cast<int8_t>(expected[34 * tie_block + 2 + 7]) == 127);
  CHECK(static_cast<int8_t>(expected[34 * tie_block + 2 + 8]) == -1);
  for (const loom::Isa isa : loom::supported_isas()) {
    INFO(loom::isa_name(isa));
    loom::test::IsaScope cap(isa);
    std::vector<uint8_t> q(expected.size(), 0xAB);
    loom::quant::quantize(DType::q8_0, x.data(), q.data(), n);
    CHECK(q == expected);
  }
}

// quantize_from on a pool: chunks of whole blocks on every thread, the same bytes as one
// thread for every quantizer kind (the k-quants' super-blocks, the group types), and a
// non-finite value named by its index in the whole input.
TEST_CASE("quantize_from on a thread pool writes the single-threaded bytes") {
  const size_t n = 4096 * 5 + 1024;  // five whole chunks and a part
  const auto x = tq::gaussian(n, 31, 0.05f);
  std::vector<uint16_t> h(n);
  loom::convert(DType::f32, x.data(), DType::f16, h.data(), n);
  loom::ThreadPool two(2), three(3);
  for (DType to : {DType::q8_0, DType::q4_0, DType::q4_k, DType::q6_k, DType::gq4_32}) {
    INFO(loom::dtype_name(to));
    const auto& t = loom::dtype_traits(to);
    const size_t bytes = n / static_cast<size_t>(t.block_elems) * static_cast<size_t>(t.block_bytes);
    std::vector<uint8_t> alone(bytes), on_two(bytes, 0xAB), on_three(bytes, 0xCD), from_f32(bytes, 0xEF);
    loom::quant::quantize_from(DType::f16, h.data(), to, alone.data(), n);
    loom::quant::quantize_from(DType::f16, h.data(), to, on_two.data(), n, &two);
    loom::quant::quantize_from(DType::f16, h.data(), to, on_three.data(), n, &three);
    CHECK(on_two == alone);
    CHECK(on_three == alone);
    std::vector<float> widened(n);
    loom::convert(DType::f16, h.data(), DType::f32, widened.data(), n);
    loom::quant::quantize_from(DType::f32, widened.data(), to, from_f32.data(), n, &two);
    CHECK(from_f32 == alone);
  }
  std::vector<float> bad(x);
  bad[4096 * 3 + 7] = NAN;
  std::vector<uint8_t> q(n / 32 * 34);
  try {
    loom::quant::quantize_from(DType::f32, bad.data(), DType::q8_0, q.data(), n, &two);
    FAIL("a NaN was quantized");
  } catch (const loom::Error& e) {
    CHECK(e.code() == loom::ErrorCode::numeric);
    CHECK(std::string(e.what()).find("element 12295") != std::string::npos);
  }
}

// The k-quants with a min (q2_k, q4_k, q5_k) sweep their candidate scales a candidate a
// lane on AVX-512 (quant_x86.cpp); the bytes must be the scalar sweep's, whose min moves
// with every better step. Blocks of several kinds: Gaussian at three scales, one sign
// only, a constant group, a spike among small values, sparse zeros, uniform.
TEST_CASE("k-quant quantizers write the same bytes at every ISA level") {
  std::vector<float> x;
  std::mt19937 rng(41);
  for (const float stddev : {1.0f, 1e-3f, 40.0f}) {
    const auto g = tq::gaussian(256 * 96, static_cast<uint32_t>(stddev * 1000) + 7, stddev);
    x.insert(x.end(), g.begin(), g.end());
  }
  std::uniform_real_distribution<float> uni(-1.0f, 1.0f);
  for (int b = 0; b < 96; ++b) {
    for (int i = 0; i < 256; ++i) {
      float v = uni(rng);
      switch (b % 6) {
        case 0: v = std::fabs(v) + 0.25f; break;     // one sign, away from zero
        case 1: v = -std::fabs(v); break;            // one sign, down to zero
        case 2: v = i < 32 ? 0.5f : v; break;        // a constant group
        case 3: v = i % 37 == 0 ? 30.0f * v : 0.01f * v; break;  // spikes
        case 4: v = i % 3 == 0 ? 0.0f : v; break;    // sparse zeros
        default: break;
      }
      x.push_back(v);
    }
  }
  const size_t n = x.size();
  for (DType type : {DType::q2_k, DType::q4_k, DType::q5_k, DType::q3_k, DType::q6_k}) {
    INFO(loom::dtype_name(type));
    const auto& t = loom::dtype_traits(type);
    const size_t bytes = n / static_cast<size_t>(t.block_elems) * static_cast<size_t>(t.block_bytes);
    std::vector<uint8_t> scalar(bytes);
    {
      loom::test::IsaScope cap(loom::Isa::scalar);
      loom::quant::quantize(type, x.data(), scalar.data(), n);
    }
    for (const loom::Isa isa : loom::supported_isas()) {
      INFO(loom::isa_name(isa));
      loom::test::IsaScope cap(isa);
      std::vector<uint8_t> q(bytes, 0xAB);
      loom::quant::quantize(type, x.data(), q.data(), n);
      size_t differing = 0;
      for (size_t i = 0; i < bytes; ++i) differing += q[i] != scalar[i];
      CHECK(differing == 0);
    }
  }
}
