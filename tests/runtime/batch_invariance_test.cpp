// Batch invariance: a token's outputs are the same bits whatever it is batched with.
//
// kernels::linear: for every weight dtype it accepts, every ISA level this CPU runs and
// 1-3 threads, row t of a product over M tokens equals, bit for bit (memcmp), the
// product of that token alone (n_tokens = 1), for M in {1,2,3,5,7,8,17,33} and every
// position, bias included; the products also stay within the accuracy bounds of the
// other kernel tests. Then end to end: a Session's logits after prefill (in one pass or
// in chunks) equal those of a session fed the same tokens one at a time with step().
#include <catch2/catch.hpp>

#include <cmath>
#include <cstring>
#include <random>
#include <span>
#include <utility>
#include <vector>

#include "loom/convert.hpp"
#include "loom/cpu.hpp"
#include "loom/session.hpp"
#include "runtime/kernels/linear.hpp"
#include "runtime/kernels/quant_dot.hpp"
#include "support/tiny_model.hpp"
#include "tensor/quant/quant.hpp"
#include "tensor/quant_test_support.hpp"

namespace {

namespace tq = loom::test::quant;
using loom::DType;

struct IsaScope {
  explicit IsaScope(loom::Isa isa) { loom::set_isa_cap(isa); }
  ~IsaScope() { loom::set_isa_cap(loom::Isa::avx512); }
};

// Every weight dtype linear() accepts.
std::vector<DType> linear_dtypes() {
  std::vector<DType> out;
  for (int i = 0; i <= static_cast<int>(DType::gq4_128); ++i) {
    const auto dt = static_cast<DType>(i);
    if (loom::kernels::linear_supports(dt)) out.push_back(dt);
  }
  return out;
}

// A weight of `rows` x `cols` in `dtype` (quantized: random blocks with sane scales) and
// its exact f32 values.
struct Weight {
  loom::Tensor tensor;
  std::vector<float> values;
};

Weight make_weight(DType dtype, int64_t rows, int64_t cols, uint32_t seed) {
  Weight w;
  const auto n = static_cast<size_t>(rows * cols);
  w.tensor = loom::Tensor::empty(loom::Shape{rows, cols}, dtype);
  if (loom::is_quantized(dtype)) {
    const auto blocks = tq::random_blocks(
        dtype, n / static_cast<size_t>(loom::dtype_traits(dtype).block_elems), seed);
    std::memcpy(w.tensor.mutable_raw_data(), blocks.data(), blocks.size());
    w.values = tq::dequantized(dtype, blocks, n);
  } else {
    const auto v = tq::gaussian(n, seed);
    loom::convert(DType::f32, v.data(), dtype, w.tensor.mutable_raw_data(), n);
    w.values.resize(n);
    loom::convert(dtype, w.tensor.raw_data(), DType::f32, w.values.data(), n);
  }
  return w;
}

// Columns: not a multiple of the SIMD widths for plain dtypes (a 16-wide step, an 8-wide
// one and a 3-element tail on AVX2; a masked tail on AVX-512), and an odd number of
// blocks for quantized ones (7 blocks of 32: one 4-block group and a tail of 3).
int64_t test_cols(DType dtype) {
  if (!loom::is_quantized(dtype)) return 83;
  const int64_t block = loom::dtype_traits(dtype).block_elems;
  return block == 32 ? 7 * block : 3 * block;
}

// The values the kernel multiplies: quantized weights see 8-bit activations.
std::vector<float> effective_activations(DType dtype, const float* x, int64_t cols) {
  std::vector<float> out(x, x + cols);
  if (!loom::is_quantized(dtype)) return out;
  const DType act = loom::quant::activation_dtype(dtype);
  const auto& t = loom::dtype_traits(act);
  std::vector<uint8_t> q(static_cast<size_t>(cols / t.block_elems * t.block_bytes));
  loom::quant::quantize_activations(act, x, q.data(), cols);
  loom::quant::dequantize(act, q.data(), out.data(), static_cast<size_t>(cols));
  return out;
}

bool same_bits(const float* a, const float* b, int64_t n) {
  return std::memcmp(a, b, static_cast<size_t>(n) * sizeof(float)) == 0;
}

}  // namespace

TEST_CASE("linear: each token of a batch gives the bits of that token alone") {
  constexpr int64_t kRows = 37;  // not a multiple of any tile, and > one 16-row thread chunk
  constexpr int64_t kPool = 33;  // distinct tokens the batches are drawn from
  // f32, f16, bf16 and the 16 quantized types with kernels (legacy, k-quants, gq8, gq4).
  REQUIRE(linear_dtypes().size() >= 19);
  for (DType dtype : linear_dtypes()) {
    const int64_t cols = test_cols(dtype);
    const auto w = make_weight(dtype, kRows, cols, 100 + static_cast<uint32_t>(dtype));
    const auto bias_values = tq::gaussian(kRows, 7, 0.5f);
    auto bias = loom::Tensor::empty(loom::Shape{kRows}, DType::f32);
    std::copy(bias_values.begin(), bias_values.end(), bias.mutable_data<float>());
    const auto tokens = tq::gaussian(static_cast<size_t>(kPool * cols), 9);

    for (auto isa : loom::supported_isas()) {
      IsaScope scope(isa);
      INFO(loom::dtype_name(dtype) << " " << kRows << "x" << cols << " isa " << loom::isa_name(isa));
      // Each token alone, on one thread.
      std::vector<float> alone(static_cast<size_t>(kPool * kRows));
      {
        loom::ThreadPool one(1);
        for (int64_t j = 0; j < kPool; ++j) {
          loom::kernels::linear(w.tensor, &bias, tokens.data() + j * cols, cols, 1,
                                alone.data() + j * kRows, kRows, one);
        }
      }
      // Accuracy of the single-token products (hence of every batched one).
      double worst = 0.0;
      for (int64_t j = 0; j < kPool; ++j) {
        const auto a = effective_activations(dtype, tokens.data() + j * cols, cols);
        for (int64_t r = 0; r < kRows; ++r) {
          double want = bias_values[static_cast<size_t>(r)];
          double magnitude = std::fabs(want);
          for (int64_t c = 0; c < cols; ++c) {
            const double p = static_cast<double>(w.values[static_cast<size_t>(r * cols + c)]) *
                             a[static_cast<size_t>(c)];
            want += p;
            magnitude += std::fabs(p);
          }
          const double err = std::fabs(alone[static_cast<size_t>(j * kRows + r)] - want);
          worst = std::max(worst, err / magnitude);
        }
      }
      // Plain dtypes: the f32 summation bound (cols + 1 roundings of 2^-24). Quantized:
      // the bound of the quantized-dot tests (scale products add a few roundings).
      const double bound = loom::is_quantized(dtype) ? 1e-6 : static_cast<double>(cols + 1) * 6e-8;
      CHECK(worst < bound);

      for (int64_t m : {1, 2, 3, 5, 7, 8, 9, 17, 33}) {
        // Token i of the batch is pool token (5i + m) mod 33: each M puts the tokens at
        // other positions and next to other neighbours.
        std::vector<int64_t> pick(static_cast<size_t>(m));
        std::vector<float> x(static_cast<size_t>(m * cols));
        for (int64_t i = 0; i < m; ++i) {
          pick[static_cast<size_t>(i)] = (5 * i + m) % kPool;
          std::copy_n(tokens.data() + pick[static_cast<size_t>(i)] * cols, cols, x.data() + i * cols);
        }
        for (int threads : {1, 2, 3}) {
          loom::ThreadPool pool(threads);
          std::vector<float> y(static_cast<size_t>(m * kRows), -1.0f);
          loom::kernels::linear(w.tensor, &bias, x.data(), cols, m, y.data(), kRows, pool);
          int mismatched = 0;
          for (int64_t i = 0; i < m; ++i) {
            if (!same_bits(y.data() + i * kRows, alone.data() + pick[static_cast<size_t>(i)] * kRows, kRows)) {
              ++mismatched;
            }
          }
          INFO("M " << m << " threads " << threads);
          CHECK(mismatched == 0);
        }
      }
    }
  }
}

TEST_CASE("linear: long rows, summed in column blocks, keep the bits of single tokens") {
  // The GEMM splits a row's whole steps into column blocks of balanced lengths (at most
  // 1344 columns for AVX2 tiles of 3 tokens: 3003 columns; at most 5456 for AVX-512 tiles
  // of 6: 12003 columns, three blocks) while decode runs them whole. (Products of at most
  // one tile, M <= 6 on AVX-512, do not block.)
  for (const auto& [dtype, cols] : {std::pair{DType::f32, int64_t{3003}}, std::pair{DType::f16, int64_t{3003}},
                                    std::pair{DType::bf16, int64_t{3003}}, std::pair{DType::f32, int64_t{12003}},
                                    std::pair{DType::f16, int64_t{12003}}}) {
    const int64_t rows = 19;
    const auto w = make_weight(dtype, rows, cols, 5);
    const auto x = tq::gaussian(static_cast<size_t>(13 * cols), 6);
    for (auto isa : loom::supported_isas()) {
      IsaScope scope(isa);
      loom::ThreadPool one(1);
      std::vector<float> alone(static_cast<size_t>(13 * rows));
      for (int64_t i = 0; i < 13; ++i) {
        loom::kernels::linear(w.tensor, nullptr, x.data() + i * cols, cols, 1,
                              alone.data() + i * rows, rows, one);
      }
      for (int64_t m : {2, 3, 4, 7, 13}) {
        for (int threads : {1, 2}) {
          loom::ThreadPool pool(threads);
          std::vector<float> y(static_cast<size_t>(m * rows));
          loom::kernels::linear(w.tensor, nullptr, x.data(), cols, m, y.data(), rows, pool);
          INFO(loom::dtype_name(dtype) << " isa " << loom::isa_name(isa) << " M " << m
                                       << " threads " << threads);
          CHECK(same_bits(y.data(), alone.data(), m * rows));
        }
      }
    }
  }
}

TEST_CASE("linear: strided batches keep the bits of single tokens") {
  // x and y rows with padding between them, as the forward pass's buffers may have.
  for (DType dtype : {DType::f32, DType::f16, DType::bf16, DType::q8_0, DType::q4_k}) {
    const int64_t cols = test_cols(dtype), rows = 21, m = 7;
    const int64_t xs = cols + 5, ys = rows + 3;
    const auto w = make_weight(dtype, rows, cols, 3);
    const auto x = tq::gaussian(static_cast<size_t>(m * xs), 4);
    for (auto isa : loom::supported_isas()) {
      IsaScope scope(isa);
      loom::ThreadPool pool(2);
      std::vector<float> y(static_cast<size_t>(m * ys), -1.0f);
      loom::kernels::linear(w.tensor, nullptr, x.data(), xs, m, y.data(), ys, pool);
      for (int64_t i = 0; i < m; ++i) {
        std::vector<float> one(static_cast<size_t>(rows));
        loom::kernels::linear(w.tensor, nullptr, x.data() + i * xs, xs, 1, one.data(), rows, pool);
        INFO(loom::dtype_name(dtype) << " isa " << loom::isa_name(isa) << " token " << i);
        CHECK(same_bits(y.data() + i * ys, one.data(), rows));
        for (int64_t c = rows; c < ys; ++c) CHECK(y[static_cast<size_t>(i * ys + c)] == -1.0f);
      }
    }
  }
}

namespace {

// Hidden 256 and ffn 512: whole q4_k super-blocks and gq4 groups in every matrix.
loom::ModelConfig invariance_config() {
  auto c = loom::test::tiny_llama_config();
  c.hidden_size = 256;
  c.intermediate_size = 512;
  c.n_heads = 4;
  c.n_kv_heads = 2;
  c.head_dim = 64;
  c.rope_dims = 64;
  return c;
}

loom::Tensor quantized_copy(const loom::Tensor& t, DType dtype) {
  std::vector<float> f(static_cast<size_t>(t.numel()));
  loom::convert(t.dtype(), t.raw_data(), DType::f32, f.data(), f.size());
  auto q = loom::Tensor::empty(t.shape(), dtype);
  loom::quant::quantize(dtype, f.data(), q.mutable_raw_data(), f.size());
  return q;
}

std::shared_ptr<const loom::Model> model_of(DType dtype) {
  const auto config = invariance_config();
  const bool quantized = loom::is_quantized(dtype);
  auto w = loom::test::random_weights(config, 17, quantized ? DType::f32 : dtype);
  if (quantized) {
    for (auto& L : w.layers) {
      for (loom::Tensor* m : {&L.attn_q, &L.attn_k, &L.attn_v, &L.attn_out, &L.ffn_gate,
                              &L.ffn_up, &L.ffn_down}) {
        *m = quantized_copy(*m, dtype);
      }
    }
    w.output = quantized_copy(w.output, dtype);
  }
  return loom::test::make_model(config, std::move(w));
}

// Every position's logits of `prompt` fed one token a step (o.all_logits set).
std::vector<float> stepped_logits(const std::shared_ptr<const loom::Model>& model, const loom::SessionOptions& o,
                                  std::span<const int32_t> prompt) {
  std::vector<float> stepped;
  loom::Session d(model, o);
  for (int32_t token : prompt) {
    d.step(token);
    const auto row = d.logits();
    stepped.insert(stepped.end(), row.begin(), row.end());
  }
  return stepped;
}

// How many of the session's n kept logit rows differ in any bit from rows of `want`.
int mismatched_rows(const loom::Session& s, const float* want, int64_t n, int64_t vocab) {
  int mismatched = 0;
  for (int64_t i = 0; i < n; ++i) {
    if (!same_bits(s.logits_at(i).data(), want + i * vocab, vocab)) ++mismatched;
  }
  return mismatched;
}

}  // namespace

TEST_CASE("session: prefilled logits equal token-by-token logits bit for bit") {
  const std::vector<int32_t> prompt{1, 4, 9, 16, 25, 36, 49, 64, 81, 100, 3, 7, 120};
  const auto n = static_cast<int64_t>(prompt.size());
  for (DType dtype : {DType::f32, DType::f16, DType::bf16, DType::q8_0, DType::q4_k, DType::gq4_32}) {
    const auto model = model_of(dtype);
    const int64_t vocab = model->config().vocab_size;
    std::vector<float> first_threads;
    for (int threads : {1, 2}) {
      INFO(loom::dtype_name(dtype) << " threads " << threads);
      loom::SessionOptions o;
      o.all_logits = true;
      o.context_length = 64;
      o.n_threads = threads;

      const std::vector<float> stepped = stepped_logits(model, o, prompt);

      loom::Session s(model, o);
      s.prefill(prompt);
      REQUIRE(s.logit_rows() == n);
      CHECK(mismatched_rows(s, stepped.data(), n, vocab) == 0);

      // The same prompt in chunks of 5, 1 and 7 tokens.
      loom::Session chunks(model, o);
      int chunk_mismatched = 0;
      int64_t at = 0;
      for (int64_t len : {5, 1, 7}) {
        chunks.prefill(std::span<const int32_t>(prompt).subspan(static_cast<size_t>(at), static_cast<size_t>(len)));
        for (int64_t i = 0; i < len; ++i) {
          if (!same_bits(chunks.logits_at(i).data(), stepped.data() + (at + i) * vocab, vocab)) {
            ++chunk_mismatched;
          }
        }
        at += len;
      }
      CHECK(chunk_mismatched == 0);

      if (first_threads.empty()) {
        first_threads = stepped;
      } else {
        CHECK(same_bits(first_threads.data(), stepped.data(), n * vocab));  // thread count
      }
    }
  }
}

TEST_CASE("session: a prompt long enough for the pool's share of norms and activations keeps the token-by-token bits") {
  // 160 tokens x hidden 256 and x ffn 512 pass forward.cpp's over_rows thresholds (32768
  // and 8192 elements), so the norms, RoPE, residual adds, q/k/v split and SwiGLU run on
  // the pool in whole rows a thread; decode (one token) runs them on the caller. Each row
  // must come out the same either way, at 1 and 2 threads.
  std::vector<int32_t> prompt(160);
  for (size_t i = 0; i < prompt.size(); ++i) prompt[i] = static_cast<int32_t>((i * 37 + 11) % 128);
  const auto n = static_cast<int64_t>(prompt.size());
  for (DType dtype : {DType::f32, DType::q8_0}) {
    const auto model = model_of(dtype);
    const int64_t vocab = model->config().vocab_size;
    std::vector<float> stepped;
    for (int threads : {1, 2}) {
      INFO(loom::dtype_name(dtype) << " threads " << threads);
      loom::SessionOptions o;
      o.all_logits = true;
      o.context_length = n;
      o.n_threads = threads;
      if (stepped.empty()) stepped = stepped_logits(model, o, prompt);
      loom::Session s(model, o);
      s.prefill(prompt);
      REQUIRE(s.logit_rows() == n);
      CHECK(mismatched_rows(s, stepped.data(), n, vocab) == 0);
    }
  }
}
