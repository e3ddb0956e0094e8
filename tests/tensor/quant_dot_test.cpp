// Quantized dot-product kernels (src/runtime/kernels/quant_dot.hpp): every weight type,
// every kernel family, decode (one activation) and prefill (tiles and remainders).
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "loom/cpu.hpp"
#include "loom/error.hpp"
#include "runtime/kernels/quant_dot.hpp"
#include "tensor/quant_test_support.hpp"

using loom::DType;
using loom::quant::DotFamily;
namespace tq = loom::test::quant;

namespace {

constexpr DType kWeightTypes[] = {DType::q8_0, DType::q4_0, DType::q4_1, DType::q5_0, DType::q5_1,
                                  DType::q2_k, DType::q3_k, DType::q4_k, DType::q5_k, DType::q6_k,
                                  DType::gq8_32, DType::gq8_64, DType::gq8_128,
                                  DType::gq4_32, DType::gq4_64, DType::gq4_128};

struct IsaScope {
  explicit IsaScope(loom::Isa isa) { loom::set_isa_cap(isa); }
  ~IsaScope() { loom::set_isa_cap(loom::Isa::avx512); }
};

// A weight matrix and a batch of activations, with every reference the tests need.
struct Problem {
  DType weight;
  DType act;
  int64_t rows;
  int64_t cols;
  int64_t n_act;
  size_t row_bytes;
  size_t act_row_bytes;
  std::vector<uint8_t> w;    // quantized weights
  std::vector<float> x;      // f32 activations
  std::vector<uint8_t> a;    // quantized activations
  std::vector<float> w_deq;  // dequantized weights
  std::vector<float> a_deq;  // dequantized activations

  Problem(DType weight_type, int64_t rows_, int64_t cols_, int64_t n_act_, bool random_bits,
          uint32_t seed)
      : weight(weight_type),
        act(loom::quant::activation_dtype(weight_type)),
        rows(rows_),
        cols(cols_),
        n_act(n_act_) {
    const auto& t = loom::dtype_traits(weight);
    row_bytes = static_cast<size_t>(cols / t.block_elems * t.block_bytes);
    act_row_bytes = loom::quant::activation_row_bytes(act, cols);
    const auto n = static_cast<size_t>(rows * cols);
    if (random_bits) {
      w = tq::random_blocks(weight, n / static_cast<size_t>(t.block_elems), seed);
    } else {
      const auto values = tq::gaussian(n, seed, 0.05f);
      w.resize(static_cast<size_t>(rows) * row_bytes);
      loom::quant::quantize(weight, values.data(), w.data(), n);
    }
    w_deq = tq::dequantized(weight, w, n);
    x = tq::gaussian(static_cast<size_t>(n_act * cols), seed + 1);
    a.resize(static_cast<size_t>(n_act) * act_row_bytes);
    loom::quant::quantize_activations(act, x.data(), a.data(), n_act * cols);
    a_deq = tq::dequantized(act, a, x.size());
  }

  std::vector<float> run(DotFamily family) const {
    std::vector<float> out(static_cast<size_t>(rows * n_act), NAN);
    loom::quant::dot_rows_on(family, weight, w.data(), row_bytes, rows, cols, a.data(),
                             act_row_bytes, n_act, out.data(), n_act);
    return out;
  }

  // sum_i w_i * v_i in double for row r against row t of `v`, and sum_i |w_i v_i|.
  double dot(const std::vector<float>& v, int64_t r, int64_t t, double* magnitude) const {
    double s = 0;
    double m = 0;
    for (int64_t i = 0; i < cols; ++i) {
      const double p = static_cast<double>(w_deq[static_cast<size_t>(r * cols + i)]) *
                       v[static_cast<size_t>(t * cols + i)];
      s += p;
      m += std::fabs(p);
    }
    if (magnitude) *magnitude = m;
    return s;
  }
};

// Largest |got - want| / sum|w a| over the outputs: the error relative to the scale at
// which f32 summation rounding happens (immune to cancellation in the result).
double worst_rounding_error(const Problem& p, const std::vector<float>& got,
                            const std::vector<float>& reference_act) {
  double worst = 0;
  for (int64_t r = 0; r < p.rows; ++r) {
    for (int64_t t = 0; t < p.n_act; ++t) {
      double magnitude = 0;
      const double want = p.dot(reference_act, r, t, &magnitude);
      const double err = std::fabs(got[static_cast<size_t>(r * p.n_act + t)] - want);
      worst = std::max(worst, magnitude > 0 ? err / magnitude : err);
    }
  }
  return worst;
}

double relative_l2(const Problem& p, const std::vector<float>& got,
                   const std::vector<float>& reference_act) {
  double err = 0;
  double norm = 0;
  for (int64_t r = 0; r < p.rows; ++r) {
    for (int64_t t = 0; t < p.n_act; ++t) {
      const double want = p.dot(reference_act, r, t, nullptr);
      const double d = got[static_cast<size_t>(r * p.n_act + t)] - want;
      err += d * d;
      norm += want * want;
    }
  }
  return std::sqrt(err / norm);
}

}  // namespace

TEST_CASE("quantized dot: exact against dequantized weights and dequantized activations") {
  // Every family, tiles of 1..4 plus a remainder (n_act = 7), quantizer-made and
  // random-bit weights (every quant pattern and sub-scale, including -128 and 63).
  // 544 columns = 17 blocks: the odd tail of the two-blocks-at-a-time kernels.
  for (DType type : kWeightTypes) {
    for (int64_t cols : {512, 544}) {
      if (cols % loom::dtype_traits(type).block_elems != 0) continue;
      for (bool random_bits : {false, true}) {
        const Problem p(type, 9, cols, 7, random_bits, 11);
        for (auto family : loom::quant::supported_dot_families()) {
          INFO(loom::dtype_name(type)
               << " cols " << cols << (random_bits ? " random bits" : " quantized") << " on "
               << loom::quant::dot_family_name(family));
          const auto got = p.run(family);
          CHECK(worst_rounding_error(p, got, p.a_deq) < 1e-6);
        }
      }
    }
  }
}

TEST_CASE("quantized dot: every family agrees with the scalar kernels") {
  for (DType type : kWeightTypes) {
    const Problem p(type, 6, 2048, 5, true, 21);
    const auto scalar = p.run(DotFamily::scalar);
    for (auto family : loom::quant::supported_dot_families()) {
      INFO(loom::dtype_name(type) << " on " << loom::quant::dot_family_name(family));
      const auto got = p.run(family);
      double worst = 0;
      for (int64_t r = 0; r < p.rows; ++r) {
        for (int64_t t = 0; t < p.n_act; ++t) {
          double magnitude = 0;
          p.dot(p.a_deq, r, t, &magnitude);
          const auto i = static_cast<size_t>(r * p.n_act + t);
          worst = std::max(worst, std::fabs(static_cast<double>(got[i]) - scalar[i]) / magnitude);
        }
      }
      CHECK(worst < 1e-6);
    }
  }
}

TEST_CASE("quantized dot: error of the 8-bit activations against f32 activations") {
  // Reference: dequantized weights times the original f32 activations, in double. The
  // only difference is the activation rounding: with per-block max-abs scaling of
  // Gaussian data the rounding noise is ~0.6% of the activation RMS (d/sqrt(12) with
  // d = max/127), so a dot product of unrelated vectors carries ~0.5-0.7% relative
  // error — the same as llama.cpp's q8_0/q8_K activations.
  std::printf("\nrelative L2 of dot_rows vs f32 activations (64 rows x 2048, 4 activations)\n");
  for (DType type : kWeightTypes) {
    const Problem p(type, 64, 2048, 4, false, 31);
    const double rel = relative_l2(p, p.run(loom::quant::active_dot_family()), p.x);
    std::printf("  %-7s %.2e\n", std::string(loom::dtype_name(type)).c_str(), rel);
    INFO(loom::dtype_name(type));
    CHECK(rel < 1e-2);
    CHECK(rel > 1e-4);  // the activations really were quantized
  }
}

TEST_CASE("quantized dot: activations that correlate with the weights are reproduced to 1e-3") {
  // Typical of a trained layer: the output is dominated by rows the input aligns with.
  // x = w_row0 + small noise; the 8-bit error is then far below the signal.
  for (DType type : kWeightTypes) {
    Problem p(type, 16, 1024, 1, false, 41);
    const auto noise = tq::gaussian(static_cast<size_t>(p.cols), 42, 0.01f);
    for (int64_t i = 0; i < p.cols; ++i) {
      p.x[static_cast<size_t>(i)] =
          p.w_deq[static_cast<size_t>(i)] * 20.0f + noise[static_cast<size_t>(i)];
    }
    loom::quant::quantize_activations(p.act, p.x.data(), p.a.data(), p.cols);
    const auto got = p.run(loom::quant::active_dot_family());
    double magnitude = 0;
    const double want = p.dot(p.x, 0, 0, &magnitude);
    INFO(loom::dtype_name(type));
    CHECK(std::fabs(got[0] - want) / std::fabs(want) < 1e-3);
  }
}

TEST_CASE("quantized dot: the public entry follows the ISA cap") {
  const Problem p(DType::q4_k, 4, 512, 3, true, 51);
  for (auto isa : loom::supported_isas()) {
    IsaScope scope(isa);
    const auto family = loom::quant::active_dot_family();
    INFO(loom::isa_name(isa) << " -> " << loom::quant::dot_family_name(family));
    if (isa == loom::Isa::scalar) CHECK(family == DotFamily::scalar);
    if (isa == loom::Isa::avx2) CHECK(family == DotFamily::avx2);
    std::vector<float> out(12);
    loom::quant::dot_rows(p.weight, p.w.data(), p.row_bytes, p.rows, p.cols, p.a.data(),
                          p.act_row_bytes, p.n_act, out.data(), p.n_act);
    const auto expected = p.run(family);
    CHECK(std::memcmp(out.data(), expected.data(), out.size() * sizeof(float)) == 0);
  }
}

TEST_CASE("quantized dot: strides, row chunks and output layout") {
  // 130 rows of 4096 q8_0 elements (4352 bytes) span several 256 KiB row chunks; rows
  // and activations are padded; outputs land in a wider matrix.
  const int64_t rows = 130;
  const int64_t cols = 4096;
  const int64_t n_act = 6;
  const Problem p(DType::q8_0, rows, cols, n_act, true, 61);
  const size_t row_stride = p.row_bytes + 64;
  const size_t act_stride = p.act_row_bytes + 32;
  std::vector<uint8_t> w(static_cast<size_t>(rows) * row_stride, 0xCD);
  std::vector<uint8_t> a(static_cast<size_t>(n_act) * act_stride, 0xCD);
  for (int64_t r = 0; r < rows; ++r) {
    std::memcpy(w.data() + static_cast<size_t>(r) * row_stride,
                p.w.data() + static_cast<size_t>(r) * p.row_bytes, p.row_bytes);
  }
  for (int64_t t = 0; t < n_act; ++t) {
    std::memcpy(a.data() + static_cast<size_t>(t) * act_stride,
                p.a.data() + static_cast<size_t>(t) * p.act_row_bytes, p.act_row_bytes);
  }
  const int64_t out_stride = n_act + 3;
  std::vector<float> out(static_cast<size_t>(rows * out_stride), -7.0f);
  loom::quant::dot_rows(DType::q8_0, w.data(), row_stride, rows, cols, a.data(), act_stride, n_act,
                        out.data(), out_stride);
  const auto packed = p.run(loom::quant::active_dot_family());
  size_t mismatches = 0;
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t t = 0; t < out_stride; ++t) {
      const float v = out[static_cast<size_t>(r * out_stride + t)];
      const float want = t < n_act ? packed[static_cast<size_t>(r * n_act + t)] : -7.0f;
      if (std::memcmp(&v, &want, sizeof v) != 0) ++mismatches;
    }
  }
  CHECK(mismatches == 0);
}

TEST_CASE("quantized dot: bad arguments are rejected") {
  std::vector<uint8_t> w(1024);
  std::vector<uint8_t> a(1024);
  std::vector<float> out(16);
  using loom::quant::dot_rows;
  // cols not a whole number of q8_k super-blocks
  CHECK_THROWS_AS(dot_rows(DType::q4_k, w.data(), 144, 1, 128, a.data(), 292, 1, out.data(), 1),
                  loom::Error);
  // no kernel for f32 or q8_k weights
  CHECK_THROWS_AS(dot_rows(DType::f32, w.data(), 128, 1, 32, a.data(), 34, 1, out.data(), 1),
                  loom::Error);
  CHECK_THROWS_AS(dot_rows(DType::q8_k, w.data(), 292, 1, 256, a.data(), 292, 1, out.data(), 1),
                  loom::Error);
  // strides smaller than a row
  CHECK_THROWS_AS(dot_rows(DType::q8_0, w.data(), 33, 1, 32, a.data(), 34, 1, out.data(), 1),
                  loom::Error);
  CHECK_THROWS_AS(dot_rows(DType::q8_0, w.data(), 34, 1, 32, a.data(), 30, 1, out.data(), 1),
                  loom::Error);
  CHECK_THROWS_AS(dot_rows(DType::q8_0, w.data(), 34, 2, 32, a.data(), 34, 2, out.data(), 1),
                  loom::Error);
  CHECK_THROWS_AS(loom::quant::quantize_activations(DType::q4_0, nullptr, nullptr, 32),
                  loom::Error);
  CHECK_THROWS_AS(loom::quant::quantize_activations(DType::q8_k, nullptr, nullptr, 128),
                  loom::Error);
  CHECK(loom::quant::activation_dtype(DType::q6_k) == DType::q8_k);
  CHECK(loom::quant::activation_dtype(DType::q5_1) == DType::q8_0);
  CHECK_THROWS_AS(loom::quant::activation_dtype(DType::bf16), loom::Error);
  CHECK_THROWS_AS(loom::quant::activation_dtype(DType::q8_k), loom::Error);
  CHECK(loom::quant::has_kernels(DType::q3_k));
  CHECK_FALSE(loom::quant::has_kernels(DType::q8_1));
}

TEST_CASE("activation quantization: identical bytes on every family, NaN poisons its block") {
  for (DType act : {DType::q8_0, DType::q8_k}) {
    auto x = tq::gaussian(2048, 71, 3.0f);
    x[5] = 0.0f;
    std::fill(x.begin() + 256, x.begin() + 512, 0.0f);  // an all-zero block
    x[600] = -x[700] - 100.0f;                          // a clear max-abs element
    x[1500] = NAN;
    x[1800] = INFINITY;
    const size_t bytes = loom::quant::activation_row_bytes(act, 2048);
    std::vector<uint8_t> reference(bytes);
    loom::quant::quantize_activations_on(DotFamily::scalar, act, x.data(), reference.data(), 2048);
    for (auto family : loom::quant::supported_dot_families()) {
      INFO(loom::dtype_name(act) << " on " << loom::quant::dot_family_name(family));
      std::vector<uint8_t> got(bytes, 0xEE);
      loom::quant::quantize_activations_on(family, act, x.data(), got.data(), 2048);
      CHECK(got == reference);
    }
    const auto deq = tq::dequantized(act, reference, 2048);
    const int block = loom::dtype_traits(act).block_elems;
    for (int i = 0; i < 2048; ++i) {
      const bool poisoned = i / block == 1500 / block || i / block == 1800 / block;
      if (poisoned) {
        CHECK(std::isnan(deq[static_cast<size_t>(i)]));
      } else {
        // Finite blocks: within half a quantization step of the input.
        INFO(i);
        CHECK(std::isfinite(deq[static_cast<size_t>(i)]));
      }
    }
    if (act == DType::q8_k) {
      // Finite blocks are exactly ggml's quantize_row_q8_K.
      std::vector<uint8_t> ggml_style(bytes);
      loom::quant::quantize(DType::q8_k, x.data(), ggml_style.data(), 1024);
      CHECK(std::memcmp(ggml_style.data(), reference.data(), 4 * 292) == 0);
    }
  }
}

TEST_CASE("activation quantization: q8_0 rounds to nearest within half a step") {
  const auto x = tq::gaussian(4096, 81);
  std::vector<uint8_t> q(loom::quant::activation_row_bytes(DType::q8_0, 4096));
  loom::quant::quantize_activations(DType::q8_0, x.data(), q.data(), 4096);
  const auto deq = tq::dequantized(DType::q8_0, q, 4096);
  double worst = 0;
  for (size_t b = 0; b < 4096 / 32; ++b) {
    float amax = 0;
    for (size_t j = 0; j < 32; ++j) amax = std::max(amax, std::fabs(x[32 * b + j]));
    const float step = amax / 127.0f;
    for (size_t j = 0; j < 32; ++j) {
      worst =
          std::max(worst, static_cast<double>(std::fabs(deq[32 * b + j] - x[32 * b + j]) / step));
    }
  }
  // Half a step, plus the f16 rounding of the scale (2^-11 relative, times 127 steps).
  CHECK(worst < 0.5 + 127.0 / 2048.0);
}

TEST_CASE("embedding lookup dequantizes only the requested rows, exactly") {
  for (DType type : kWeightTypes) {
    INFO(loom::dtype_name(type));
    const auto& t = loom::dtype_traits(type);
    const int64_t rows = 10;
    const int64_t cols = 512;
    const auto row_bytes = static_cast<size_t>(cols / t.block_elems * t.block_bytes);
    const auto table =
        tq::random_blocks(type, static_cast<size_t>(rows * cols / t.block_elems), 91);
    const auto all = tq::dequantized(type, table, static_cast<size_t>(rows * cols));
    const std::vector<int64_t> ids{7, 0, 7, 9};
    std::vector<float> out(ids.size() * static_cast<size_t>(cols));
    loom::quant::dequantize_rows(type, table.data(), row_bytes, rows, ids.data(),
                                 static_cast<int64_t>(ids.size()), cols, out.data());
    for (size_t i = 0; i < ids.size(); ++i) {
      CHECK(std::memcmp(out.data() + i * static_cast<size_t>(cols),
                        all.data() + static_cast<size_t>(ids[i] * cols),
                        static_cast<size_t>(cols) * sizeof(float)) == 0);
    }
    const std::vector<int64_t> bad{3, 10};
    CHECK_THROWS_AS(loom::quant::dequantize_rows(type, table.data(), row_bytes, rows, bad.data(), 2,
                                                 cols, out.data()),
                    loom::Error);
  }
}

TEST_CASE("quantized dot: rows run in groups give each row's own bits") {
  // A family may run several distant rows at once (KernelSet::dot_group: AVX-512 q8_0 at
  // every tile width; q4_0, q2_k, q4_k, q6_k for one activation row):
  // every row's outputs must equal that row multiplied alone, for every tile width and
  // both an even and an odd block count (q8_0's two-block vectors), with -128 weights.
  for (DType type : kWeightTypes) {
    for (int64_t cols : {int64_t{256}, int64_t{800}, int64_t{1280}}) {
      if (cols % loom::dtype_traits(type).block_elems != 0) continue;
      for (int64_t n_act : {1, 2, 3, 4, 5}) {
        const Problem p(type, 11, cols, n_act, /*random_bits=*/true, 71);
        for (auto family : loom::quant::supported_dot_families()) {
          INFO(loom::dtype_name(type) << " cols " << cols << " n_act " << n_act << " on "
                                      << loom::quant::dot_family_name(family));
          const auto all = p.run(family);
          for (int64_t r = 0; r < p.rows; ++r) {
            std::vector<float> alone(static_cast<size_t>(p.n_act));
            loom::quant::dot_rows_on(family, p.weight, p.w.data() + static_cast<size_t>(r) * p.row_bytes,
                                     p.row_bytes, 1, p.cols, p.a.data(), p.act_row_bytes, p.n_act,
                                     alone.data(), p.n_act);
            REQUIRE(std::memcmp(alone.data(), all.data() + r * p.n_act, alone.size() * sizeof(float)) == 0);
          }
        }
      }
    }
  }
}
