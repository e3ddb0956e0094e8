// Weight-product kernels in isolation: decode (matrix-vector, GB/s of weight bytes) and
// prefill (the batch-invariant matrix-matrix kernel, GFLOP/s; 128 and 64 tokens, 8 as in
// a small continuous batch, 4 and 2 as in a speculative verification pass) for f32, f16
// and bf16 weights, on 1 and 2 threads, as rows (packed 0) and in the panels --repack
// auto gives them (packed 1: f32_x64, f16_x64, bf16_x64 under AVX-512). Shapes: 4096 x
// 4096, 2816 x 1024, 1024 x 2816 and 2048 x 8192 (streamed from memory or L3; the last
// two the small and 1B shapes' down projections), 256 x 1024 (in L2: the kernel's compute
// rate without the memory stream).
// BM_quant: the quantized types q8_0, q4_0, q4_k and q6_k, row-major (packed 0) and in
// the kernel layout --repack auto would give them on this CPU (packed 1), at 1, 8, 16
// and 128 tokens; GOP/s counts a multiply and an add per weight and token, as the int8
// dot peak of loom_tokens_per_second / loom_batched_decode does. "of peak" is that rate
// over the same program's own probe at the same thread count (FMA peak for the float
// types, int8 dot-product peak for the quantized ones; measured once per count), so a
// share is read off one run of one binary, never against a figure from another minute.
// BM_joined: q, k and v (or gate and up) as a product each or as one (below).
//   build/bench/loom_linear_bench [--benchmark_filter=...]
#include <benchmark/benchmark.h>

#include <chrono>
#include <initializer_list>
#include <map>
#include <utility>
#include <vector>

#include "loom/convert.hpp"
#include "loom/tensor.hpp"
#include "loom/thread_pool.hpp"
#include "machine_ceilings.hpp"
#include "runtime/kernels/linear.hpp"
#include "tensor/gather.hpp"
#include "tensor/packing.hpp"
#include "tensor/quant/quant.hpp"

namespace {

loom::Tensor weight(loom::DType dtype, int64_t rows, int64_t cols) {
  std::vector<float> values(static_cast<size_t>(rows * cols));
  uint32_t state = 1;
  for (auto& v : values) {
    state = state * 1664525u + 1013904223u;
    v = static_cast<float>(state >> 8) / 16777216.0f - 0.5f;
  }
  loom::Tensor t = loom::Tensor::empty(loom::Shape{rows, cols}, dtype);
  if (loom::is_quantized(dtype)) {
    loom::quant::quantize(dtype, values.data(), t.mutable_raw_data(), values.size());
  } else {
    loom::convert(loom::DType::f32, values.data(), dtype, t.mutable_raw_data(), values.size());
  }
  return t;
}

// The probe's peak in operations per second (FMA or int8 dot), per thread count.
double peak_ops(bool int8, int threads) {
  static std::map<std::pair<bool, int>, double> measured;
  auto [it, fresh] = measured.try_emplace({int8, threads}, 0.0);
  if (fresh) {
    it->second = 1e9 * (int8 ? loom::bench::measure_int8_dot_peak_gops(threads)
                              : loom::bench::measure_fma_peak_gflops(threads));
  }
  return it->second;
}

// Runs the product in the benchmark loop and reports its rate as a share of the peak
// (the loop is timed here as well: Google Benchmark's rate counters are computed after
// the function returns, where no other counter can be derived from them).
template <class Product>
void run_product(benchmark::State& state, double ops, bool int8, int threads, Product product) {
  const double peak = peak_ops(int8, threads);  // before the clock: the probe takes a second
  const auto start = std::chrono::steady_clock::now();
  for (auto _ : state) {
    product();
    benchmark::ClobberMemory();
  }
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  if (peak > 0.0 && seconds > 0.0) {
    state.counters["of peak"] = ops * static_cast<double>(state.iterations()) / seconds / peak;
  }
}

// The weight of `dtype` as rows (packed == 0) or in the layout --repack auto gives it on
// this CPU (packed != 0; false, with the benchmark skipped, when there is none); the
// label says which.
bool weight_in_layout(benchmark::State& state, loom::DType dtype, int64_t rows, int64_t cols, int64_t packed,
                      loom::Tensor& w) {
  w = weight(dtype, rows, cols);
  const loom::Packing packing = loom::kernels::preferred_packing(dtype);
  if (packed != 0) {
    if (packing == loom::Packing::none) {
      state.SkipWithError("no packing for this dtype on this CPU");
      return false;
    }
    w = loom::pack(w, packing);
  }
  state.SetLabel(std::string(loom::dtype_name(dtype)) +
                 (packed != 0 ? " " + std::string(loom::packing_info(packing).name) : " rows"));
  return true;
}

// {dtype, rows, cols, threads, packed}
void BM_decode(benchmark::State& state) {
  const auto dtype = static_cast<loom::DType>(state.range(0));
  const int64_t rows = state.range(1), cols = state.range(2);
  loom::Tensor w;
  if (!weight_in_layout(state, dtype, rows, cols, state.range(4), w)) return;
  std::vector<float> x(static_cast<size_t>(cols), 0.01f), y(static_cast<size_t>(rows));
  loom::ThreadPool pool(static_cast<int>(state.range(3)));
  for (auto _ : state) {
    loom::kernels::linear(w, nullptr, x.data(), cols, 1, y.data(), rows, pool);
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(state.iterations() * w.nbytes());
}

// {dtype, rows, cols, threads, tokens, packed}
void BM_prefill(benchmark::State& state) {
  const auto dtype = static_cast<loom::DType>(state.range(0));
  const int64_t rows = state.range(1), cols = state.range(2), tokens = state.range(4);
  loom::Tensor w;
  if (!weight_in_layout(state, dtype, rows, cols, state.range(5), w)) return;
  std::vector<float> x(static_cast<size_t>(cols * tokens), 0.01f), y(static_cast<size_t>(rows * tokens));
  const int threads = static_cast<int>(state.range(3));
  loom::ThreadPool pool(threads);
  run_product(state, static_cast<double>(2 * rows * cols * tokens), false, threads,
              [&] { loom::kernels::linear(w, nullptr, x.data(), cols, tokens, y.data(), rows, pool); });
  state.counters["GFLOP/s"] = benchmark::Counter(
      static_cast<double>(2 * rows * cols * tokens), benchmark::Counter::kIsIterationInvariantRate);
}

// {dtype, rows, cols, threads, tokens, packed}
void BM_quant(benchmark::State& state) {
  const auto dtype = static_cast<loom::DType>(state.range(0));
  const int64_t rows = state.range(1), cols = state.range(2), tokens = state.range(4);
  loom::Tensor w;
  if (!weight_in_layout(state, dtype, rows, cols, state.range(5), w)) return;
  std::vector<float> x(static_cast<size_t>(cols * tokens)), y(static_cast<size_t>(rows * tokens));
  for (size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>(i % 7) * 0.01f - 0.03f;
  const int threads = static_cast<int>(state.range(3));
  loom::ThreadPool pool(threads);
  run_product(state, static_cast<double>(2 * rows * cols * tokens), true, threads,
              [&] { loom::kernels::linear(w, nullptr, x.data(), cols, tokens, y.data(), rows, pool); });
  state.counters["GOP/s"] = benchmark::Counter(static_cast<double>(2 * rows * cols * tokens),
                                               benchmark::Counter::kIsIterationInvariantRate);
}

// {dtype, tokens, stacked, group}: the small shape's q, k and v (group 0: 1024, 256 and
// 256 rows of 1024) or gate and up (group 1: 2816 rows of 1024 each) of 8 layers, packed
// as --repack auto packs them, multiplied as a product per part (stacked 0) or as one
// over the parts back to back (stacked 1, what the forward pass does with a repacking
// load's weights: model/joined_products.hpp), 2 threads. The 8 layers' weights are
// several times L2 and stream as in a pass. Compare the pairs with
// --benchmark_enable_random_interleaving=true --benchmark_repetitions=N: this machine's
// bandwidth drifts between runs.
void BM_joined(benchmark::State& state) {
  const auto dtype = static_cast<loom::DType>(state.range(0));
  const int64_t tokens = state.range(1), cols = 1024;
  const bool stacked = state.range(2) != 0;
  const bool gate_up = state.range(3) != 0;
  const std::vector<int64_t> part_rows =
      gate_up ? std::vector<int64_t>{2816, 2816} : std::vector<int64_t>{1024, 256, 256};
  int64_t n = 0;
  for (const int64_t r : part_rows) n += r;
  const loom::Packing packing = loom::kernels::preferred_packing(dtype);
  if (packing == loom::Packing::none) {
    state.SkipWithError("no packing for this dtype on this CPU");
    return;
  }
  struct Layer {
    std::vector<loom::Tensor> parts;
    loom::Tensor whole;
  };
  std::vector<Layer> layers(8);
  int64_t bytes = 0;
  for (Layer& l : layers) {
    std::vector<loom::Tensor*> pointers;
    std::vector<const loom::Tensor*> views;
    l.parts.reserve(part_rows.size());
    for (const int64_t r : part_rows) {
      l.parts.push_back(loom::pack(weight(dtype, r, cols), packing));
      pointers.push_back(&l.parts.back());
      views.push_back(&l.parts.back());
    }
    loom::gather_into_one_buffer(pointers, /*align=*/1);
    l.whole = loom::stacked_rows_view(views);
    bytes += l.whole.nbytes();
  }
  std::vector<float> x(static_cast<size_t>(cols * tokens), 0.01f), y(static_cast<size_t>(n * tokens));
  loom::ThreadPool pool(2);
  for (auto _ : state) {
    for (const Layer& l : layers) {
      if (stacked) {
        loom::kernels::linear(l.whole, nullptr, x.data(), cols, tokens, y.data(), n, pool);
      } else {
        int64_t offset = 0;
        for (size_t i = 0; i < l.parts.size(); ++i) {
          loom::kernels::linear(l.parts[i], nullptr, x.data(), cols, tokens, y.data() + offset, n, pool);
          offset += part_rows[i];
        }
      }
    }
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(state.iterations() * bytes);
  const char* parts = gate_up ? (stacked ? " gate|up" : " gate, up") : (stacked ? " q|k|v" : " q, k, v");
  state.SetLabel(std::string(loom::packing_info(packing).name) + parts);
}

void joined_args(benchmark::internal::Benchmark* b) {
  for (int64_t group : {0, 1}) {
    for (auto dt : {loom::DType::f16, loom::DType::f32, loom::DType::q8_0, loom::DType::q4_k}) {
      for (int64_t n : {1, 8, 16}) {
        for (int64_t stacked : {0, 1}) b->Args({static_cast<int64_t>(dt), n, stacked, group});
      }
    }
  }
  b->UseRealTime()->Unit(benchmark::kMicrosecond);
}

void quant_args(benchmark::internal::Benchmark* b) {
  for (auto dt : {loom::DType::q8_0, loom::DType::q4_0, loom::DType::q4_k, loom::DType::q6_k}) {
    for (int threads : {1, 2}) {
      for (auto [rows, cols] : {std::pair<int64_t, int64_t>{2816, 1024}, {256, 1024}}) {
        for (int64_t n : {1, 8, 16, 128}) {
          for (int64_t packed : {0, 1}) b->Args({static_cast<int64_t>(dt), rows, cols, threads, n, packed});
        }
      }
    }
  }
  b->UseRealTime()->Unit(benchmark::kMicrosecond);
}

// {dtype, rows, cols, threads[, tokens], packed}. A large square matrix, the small shape's
// gate/up and its down projection (2816 columns: an f32 panel of 704 KiB, wider than
// Zen 1's L2), the 1B shape's down projection (8192 columns: panels of 1 MiB in f16 and
// bf16, 2 MiB in f32, which prefill takes by runs of columns), and a matrix that fits L2.
void shapes(benchmark::internal::Benchmark* b, std::initializer_list<int64_t> tokens) {
  for (auto dt : {loom::DType::f32, loom::DType::f16, loom::DType::bf16}) {
    for (int threads : {1, 2}) {
      for (auto [rows, cols] :
           {std::pair<int64_t, int64_t>{4096, 4096}, {2816, 1024}, {1024, 2816}, {2048, 8192}, {256, 1024}}) {
        for (int64_t packed : {0, 1}) {
          if (tokens.size() == 0) b->Args({static_cast<int64_t>(dt), rows, cols, threads, packed});
          for (int64_t n : tokens) b->Args({static_cast<int64_t>(dt), rows, cols, threads, n, packed});
        }
      }
    }
  }
  b->UseRealTime()->Unit(benchmark::kMicrosecond);
}
void decode_args(benchmark::internal::Benchmark* b) { shapes(b, {}); }
void prefill_args(benchmark::internal::Benchmark* b) { shapes(b, {128, 64, 8, 4, 2}); }

}  // namespace

BENCHMARK(BM_decode)->Apply(decode_args);
BENCHMARK(BM_prefill)->Apply(prefill_args);
BENCHMARK(BM_quant)->Apply(quant_args);
BENCHMARK(BM_joined)->Apply(joined_args);
BENCHMARK_MAIN();
