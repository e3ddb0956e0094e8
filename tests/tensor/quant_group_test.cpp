// loom's group-quantized types gq8_G / gq4_G: hand-made blocks, the quantizer's grid, and
// the fused kernels against "dequantize to f32, then an f32 product" on every kernel
// family this CPU runs (decode: one activation; prefill: tiles of four and a remainder).
// The type-generic tests (independent decoder, round-trip RMSE, embedding rows, family
// agreement) also cover these types through their type lists.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstring>
#include <vector>

#include "loom/convert.hpp"
#include "loom/cpu.hpp"
#include "runtime/kernels/quant_dot.hpp"
#include "tensor/quant_test_support.hpp"

using loom::DType;
namespace tq = loom::test::quant;

namespace {

void put_f16(std::vector<uint8_t>& b, size_t at, float v) {
  const uint16_t h = loom::f32_to_f16_scalar(v);
  std::memcpy(b.data() + at, &h, 2);
}

std::vector<float> decode(DType dtype, const std::vector<uint8_t>& blocks) {
  const auto& t = loom::dtype_traits(dtype);
  const size_t n = blocks.size() / static_cast<size_t>(t.block_bytes) * static_cast<size_t>(t.block_elems);
  std::vector<float> out(n);
  REQUIRE(loom::quant::dequantize(dtype, blocks.data(), out.data(), n));
  return out;
}

constexpr DType kGroupTypes[] = {DType::gq8_32, DType::gq8_64, DType::gq8_128,
                                 DType::gq4_32, DType::gq4_64, DType::gq4_128};

}  // namespace

TEST_CASE("group types: the table names every bits and group size pair") {
  CHECK(loom::quant::group_types().size() == 6);
  CHECK(loom::quant::group_dtype(8, 64) == DType::gq8_64);
  CHECK(loom::quant::group_dtype(4, 128) == DType::gq4_128);
  CHECK_FALSE(loom::quant::group_dtype(4, 16).has_value());
  CHECK_FALSE(loom::quant::group_dtype(2, 32).has_value());
  for (const auto& g : loom::quant::group_types()) {
    INFO(loom::dtype_name(g.dtype));
    const auto& t = loom::dtype_traits(g.dtype);
    CHECK(t.block_elems == g.group);
    CHECK(t.block_bytes == (g.bits == 8 ? 2 + g.group : 4 + g.group / 2));
    CHECK(loom::quant::has_kernels(g.dtype));
    CHECK(loom::quant::activation_dtype(g.dtype) == DType::q8_0);
  }
}

TEST_CASE("group types: hand-made blocks dequantize exactly") {
  SECTION("gq8_64: x = d * q") {
    std::vector<uint8_t> b(66, 0);
    put_f16(b, 0, 0.25f);
    b[2 + 0] = 4;
    b[2 + 33] = static_cast<uint8_t>(-127);
    b[2 + 63] = 0x80;  // -128 decodes even though the quantizer never writes it
    const auto v = decode(DType::gq8_64, b);
    CHECK(v[0] == 1.0f);
    CHECK(v[1] == 0.0f);
    CHECK(v[33] == -31.75f);
    CHECK(v[63] == -32.0f);
  }
  SECTION("gq4_32: x = d * (q - z), q4_0's nibble order") {
    std::vector<uint8_t> b(20, 0);
    put_f16(b, 0, 0.5f);
    b[2] = 0xA3;  // zero point 3; the high bits are ignored
    b[4 + 0] = 0x7F;  // element 0 = 15, element 16 = 7
    b[4 + 15] = 0x30;  // element 15 = 0, element 31 = 3
    const auto v = decode(DType::gq4_32, b);
    CHECK(v[0] == 6.0f);    // 0.5 * (15 - 3)
    CHECK(v[16] == 2.0f);   // 0.5 * (7 - 3)
    CHECK(v[15] == -1.5f);  // 0.5 * (0 - 3)
    CHECK(v[31] == 0.0f);
    CHECK(v[1] == -1.5f);
  }
  SECTION("gq4_128: each run of 32 has its own 16 bytes, one scale and zero for the group") {
    std::vector<uint8_t> b(68, 0);
    put_f16(b, 0, 2.0f);
    b[2] = 8;
    for (int run = 0; run < 4; ++run) b[4 + 16 * static_cast<size_t>(run) + 1] = static_cast<uint8_t>(0x10 * run + 9);
    const auto v = decode(DType::gq4_128, b);
    for (int run = 0; run < 4; ++run) {
      INFO(run);
      CHECK(v[static_cast<size_t>(32 * run + 1)] == 2.0f);                // 2 * (9 - 8)
      CHECK(v[static_cast<size_t>(32 * run + 17)] == 2.0f * (run - 8));  // high nibble = run
      CHECK(v[static_cast<size_t>(32 * run + 2)] == -16.0f);             // 2 * (0 - 8)
    }
  }
}

TEST_CASE("group types: the quantizer's grid keeps zeros and uses all 16 levels of one-signed groups") {
  std::vector<float> x(64);
  for (size_t i = 0; i < x.size(); ++i) x[i] = 0.01f * static_cast<float>(i);  // 0 .. 0.63
  std::vector<uint8_t> q(36);
  loom::quant::quantize(DType::gq4_64, x.data(), q.data(), x.size());
  CHECK((q[2] & 0xF) == 0);  // min 0 -> zero point 0
  CHECK(q[3] == 0);
  const auto y = decode(DType::gq4_64, q);
  CHECK(y[0] == 0.0f);
  // Round to nearest on 15 steps of 0.042, then a least-squares scale (a little smaller
  // here): every value within 0.55 of a step, the squared error below plain rounding's.
  CHECK(y[63] == Approx(0.63f).epsilon(1e-2));
  double err = 0;
  double err_plain = 0;
  const float step = 0.63f / 15.0f;
  for (size_t i = 0; i < x.size(); ++i) {
    CHECK(std::fabs(y[i] - x[i]) <= 0.55f * step);
    err += (y[i] - x[i]) * (y[i] - x[i]);
    const float plain = step * std::nearbyint(x[i] / step);
    err_plain += (plain - x[i]) * (plain - x[i]);
  }
  CHECK(err < err_plain);

  // Mixed signs: zero stays exactly zero, extremes within half a step.
  x.assign(64, 0.0f);
  x[5] = -1.0f;
  x[40] = 2.0f;
  loom::quant::quantize(DType::gq4_64, x.data(), q.data(), x.size());
  const auto z = decode(DType::gq4_64, q);
  CHECK(z[0] == 0.0f);
  CHECK(std::fabs(z[5] + 1.0f) <= 0.1f);
  CHECK(std::fabs(z[40] - 2.0f) <= 0.1f);

  // gq8: symmetric, the largest magnitude maps to +-127.
  std::vector<uint8_t> q8(130);
  std::vector<float> w(128, 0.5f);
  w[7] = -3.0f;
  loom::quant::quantize(DType::gq8_128, w.data(), q8.data(), w.size());
  CHECK(static_cast<int8_t>(q8[2 + 7]) == -127);
  const auto back = decode(DType::gq8_128, q8);
  CHECK(back[7] == Approx(-3.0f).epsilon(1e-3));
  CHECK(back[0] == Approx(0.5f).epsilon(1e-2));
}

TEST_CASE("group kernels: decode and prefill match dequantize-then-f32 product on every family") {
  // Reference: dequantized weights times the dequantized 8-bit activations, in double —
  // what "dequantize the matrix, then multiply in f32" computes on the same inputs.
  const int64_t rows = 24;
  const int64_t cols = 1024;
  for (DType type : kGroupTypes) {
    for (int64_t n_act : {1, 7}) {
      const auto& t = loom::dtype_traits(type);
      const size_t row_bytes = static_cast<size_t>(cols / t.block_elems * t.block_bytes);
      const auto values = tq::gaussian(static_cast<size_t>(rows * cols), 3, 0.05f);
      std::vector<uint8_t> w(static_cast<size_t>(rows) * row_bytes);
      loom::quant::quantize(type, values.data(), w.data(), values.size());
      const auto w_deq = tq::dequantized(type, w, values.size());
      const auto x = tq::gaussian(static_cast<size_t>(n_act * cols), 4);
      const size_t act_bytes = loom::quant::activation_row_bytes(DType::q8_0, cols);
      for (auto family : loom::quant::supported_dot_families()) {
        INFO(loom::dtype_name(type) << " n_act " << n_act << " on "
                                    << loom::quant::dot_family_name(family));
        std::vector<uint8_t> a(static_cast<size_t>(n_act) * act_bytes);
        loom::quant::quantize_activations_on(family, DType::q8_0, x.data(), a.data(), n_act * cols);
        const auto a_deq = tq::dequantized(DType::q8_0, a, x.size());
        std::vector<float> out(static_cast<size_t>(rows * n_act));
        loom::quant::dot_rows_on(family, type, w.data(), row_bytes, rows, cols, a.data(), act_bytes,
                                 n_act, out.data(), n_act);
        double err = 0;
        double norm = 0;
        for (int64_t r = 0; r < rows; ++r) {
          for (int64_t k = 0; k < n_act; ++k) {
            double want = 0;
            for (int64_t c = 0; c < cols; ++c) {
              want += static_cast<double>(w_deq[static_cast<size_t>(r * cols + c)]) *
                      a_deq[static_cast<size_t>(k * cols + c)];
            }
            const double d = out[static_cast<size_t>(r * n_act + k)] - want;
            err += d * d;
            norm += want * want;
          }
        }
        CHECK(std::sqrt(err / norm) < 1e-3);
        CHECK(std::sqrt(err / norm) < 1e-5);  // in fact only f32 summation order differs
      }
    }
  }
}
