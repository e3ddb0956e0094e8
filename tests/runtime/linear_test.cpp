#include <catch2/catch.hpp>

#include <cmath>
#include <random>
#include <vector>

#include "loom/convert.hpp"
#include "loom/cpu.hpp"
#include "runtime/kernels/gemm_kernels.hpp"
#include "runtime/kernels/linear.hpp"
#include "support/test_support.hpp"

namespace {

using loom::test::IsaScope;

loom::Tensor random_weight(loom::DType dtype, int64_t rows, int64_t cols, std::mt19937& rng) {
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::vector<float> v(static_cast<size_t>(rows * cols));
  for (auto& f : v) f = dist(rng);
  auto t = loom::Tensor::empty(loom::Shape{rows, cols}, dtype);
  loom::convert(loom::DType::f32, v.data(), dtype, t.mutable_raw_data(), v.size());
  return t;
}

// Naive double-precision Y = X W^T + b on the weight's exact (widened) values.
std::vector<double> naive(const loom::Tensor& w, const std::vector<float>& x, int64_t n,
                          const std::vector<float>* bias) {
  const int64_t rows = w.shape()[0], cols = w.shape()[1];
  std::vector<float> wf(static_cast<size_t>(rows * cols));
  loom::convert(w.dtype(), w.raw_data(), loom::DType::f32, wf.data(), wf.size());
  std::vector<double> y(static_cast<size_t>(n * rows));
  for (int64_t t = 0; t < n; ++t) {
    for (int64_t r = 0; r < rows; ++r) {
      double acc = bias ? (*bias)[static_cast<size_t>(r)] : 0.0;
      for (int64_t c = 0; c < cols; ++c) acc += static_cast<double>(wf[r * cols + c]) * x[t * cols + c];
      y[static_cast<size_t>(t * rows + r)] = acc;
    }
  }
  return y;
}

}  // namespace

TEST_CASE("linear matches a naive product for every dtype, batch size, ISA and thread count") {
  std::mt19937 rng(5);
  for (auto dtype : {loom::DType::f32, loom::DType::f16, loom::DType::bf16}) {
    for (auto [rows, cols] : {std::pair<int64_t, int64_t>{37, 19}, {64, 128}, {131, 70}}) {
      auto w = random_weight(dtype, rows, cols, rng);
      std::vector<float> bias(static_cast<size_t>(rows));
      for (auto& b : bias) b = static_cast<float>(rng() % 100) / 100.0f;
      auto bias_t = loom::Tensor::empty(loom::Shape{rows}, loom::DType::f32);
      std::copy(bias.begin(), bias.end(), bias_t.mutable_data<float>());
      for (int64_t n : {1, 2, 7, 8, 9, 13, 33, 70}) {
        std::vector<float> x(static_cast<size_t>(n * cols));
        for (auto& f : x) f = static_cast<float>(static_cast<int>(rng() % 2001) - 1000) / 1000.0f;
        const auto want = naive(w, x, n, &bias);
        for (auto isa : loom::supported_isas()) {
          IsaScope scope(isa);
          for (int threads : {1, 2, 3}) {
            loom::ThreadPool pool(threads);
            std::vector<float> y(static_cast<size_t>(n * rows), -7.0f);
            loom::kernels::linear(w, &bias_t, x.data(), cols, n, y.data(), rows, pool);
            double worst = 0.0;
            for (size_t i = 0; i < y.size(); ++i) worst = std::max(worst, std::abs(y[i] - want[i]));
            INFO(loom::dtype_name(dtype) << " " << rows << "x" << cols << " n=" << n << " isa "
                                         << loom::isa_name(isa) << " threads " << threads);
            CHECK(worst < 1e-3);
          }
        }
      }
    }
  }
}

TEST_CASE("linear writes into strided outputs without touching the gaps") {
  std::mt19937 rng(6);
  auto w = random_weight(loom::DType::f32, 20, 16, rng);
  const int64_t n = 5, y_stride = 25, x_stride = 18;
  std::vector<float> x(static_cast<size_t>(n * x_stride), 0.5f);
  std::vector<float> y(static_cast<size_t>(n * y_stride), -1.0f);
  loom::ThreadPool pool(2);
  loom::kernels::linear(w, nullptr, x.data(), x_stride, n, y.data(), y_stride, pool);
  for (int64_t t = 0; t < n; ++t) {
    for (int64_t c = 20; c < y_stride; ++c) CHECK(y[static_cast<size_t>(t * y_stride + c)] == -1.0f);
  }
}

TEST_CASE("bf16 prefill with bf16 activations matches a naive product of the rounded values") {
  std::mt19937 rng(7);
  for (auto [rows, cols] : {std::pair<int64_t, int64_t>{37, 64}, {131, 256}}) {
    auto w = random_weight(loom::DType::bf16, rows, cols, rng);
    for (int64_t n : {2, 17, 40}) {
      std::vector<float> x(static_cast<size_t>(n * cols));
      for (auto& f : x) f = static_cast<float>(static_cast<int>(rng() % 2001) - 1000) / 997.0f;
      // The kernel rounds activations to bf16 (nearest even): do the same for the reference.
      std::vector<float> rounded(x.size());
      std::vector<uint16_t> tmp(x.size());
      loom::f32_to_bf16(x.data(), tmp.data(), x.size());
      loom::bf16_to_f32(tmp.data(), rounded.data(), x.size());
      const auto want = naive(w, rounded, n, nullptr);
      const auto exact = naive(w, x, n, nullptr);
      // Only the AVX512-BF16 kernel rounds; elsewhere the product stays exact to the weights.
      const bool rounds = loom::kernels::gemm_bf16_dot_supported(cols);
      const auto& reference = rounds ? want : exact;
      for (int threads : {1, 2}) {
        loom::ThreadPool pool(threads);
        std::vector<float> y(static_cast<size_t>(n * rows));
        loom::kernels::linear(w, nullptr, x.data(), cols, n, y.data(), rows, pool, true);
        double worst = 0.0, drift = 0.0;
        for (size_t i = 0; i < y.size(); ++i) {
          worst = std::max(worst, std::abs(y[i] - reference[i]));
          drift = std::max(drift, std::abs(y[i] - exact[i]));
        }
        INFO(rows << "x" << cols << " n=" << n << " threads " << threads << " rounds " << rounds);
        CHECK(worst < 1e-3);
        if (rounds) CHECK(drift > 0.0);  // it really did round
      }
    }
  }
}
