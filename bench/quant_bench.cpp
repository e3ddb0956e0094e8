// Quantized matrix-vector throughput, single thread: GB/s of weight bytes read by
// loom::quant::dot_rows for 2048x8192 and 8192x2048 weights in q8_0, q4_0, q4_k, q6_k and
// loom's group types gq8 / gq4 (groups of 32 and 128),
// next to this core's streaming read bandwidth, measured first by the same program with
// the probe the other benchmarks share (bench/machine_ceilings: a plain f32 sum over
// 2 GiB, best of 5), so each result is also given as a fraction of it ("of_stream").
// BM_stream_read_1GiB repeats the measurement as a benchmark (an integer sum over 1 GiB).
//
//   cold: the kernel cycles through copies of the matrix totalling >= 1 GiB, so every
//         weight byte comes from DRAM, as in decode of a real model;
//   hot:  the same matrix every time (it stays in L3);
//   l2:   96 rows x 8192 (a few hundred KiB, L2-resident), timed in CPU time: the kernel's
//         compute throughput, as if memory were free (and robust to a busy machine).
// Also: prefill (32 activations per weight row), reported as GB/s of weights and as
// billions of multiply-adds per second.
//
//   build/bench/loom_quant_bench [--benchmark_filter=...]
#include <benchmark/benchmark.h>

#include <cstdio>
#include <cstring>
#include <iterator>
#include <map>
#include <memory>
#include <random>
#include <vector>

#include "loom/cpu.hpp"
#include "loom/dtype.hpp"
#include "loom/tensor.hpp"
#include "machine_ceilings.hpp"
#include "runtime/kernels/quant_dot.hpp"
#include "tensor/quant/quant.hpp"

namespace {

using loom::DType;
using loom::quant::DotFamily;

constexpr size_t kStreamBytes = size_t{1} << 30;
double g_stream_gbps = 0;

// An owned, 64-byte aligned buffer (loom's Storage allocator).
struct Buffer {
  loom::Tensor tensor;
  explicit Buffer(size_t bytes)
      : tensor(loom::Tensor::empty(loom::Shape{static_cast<int64_t>(bytes)}, DType::u8)) {}
  uint8_t* data() { return tensor.mutable_data<uint8_t>(); }
};

uint64_t sum_words(const uint64_t* p, size_t n) {
  uint64_t s = 0;
  for (size_t i = 0; i < n; ++i) s += p[i];
  return s;
}

void BM_stream_read_1GiB(benchmark::State& state) {
  Buffer buf(kStreamBytes);
  std::memset(buf.data(), 1, kStreamBytes);
  const auto* words = reinterpret_cast<const uint64_t*>(buf.data());
  for (auto _ : state) benchmark::DoNotOptimize(sum_words(words, kStreamBytes / 8));
  // Times are wall-clock (UseRealTime): a memory-bound loop is judged by elapsed time.
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * kStreamBytes));
}

// One quantized weight matrix (from Gaussian values) and its activations.
struct Weights {
  DType type;
  int64_t rows;
  int64_t cols;
  size_t row_bytes;
  size_t bytes;
  std::vector<uint8_t> matrix;
};

Weights make_weights(DType type, int64_t rows, int64_t cols) {
  const auto& t = loom::dtype_traits(type);
  Weights w{type, rows, cols, static_cast<size_t>(cols / t.block_elems * t.block_bytes), 0, {}};
  w.bytes = w.row_bytes * static_cast<size_t>(rows);
  w.matrix.resize(w.bytes);
  // Quantize one block-row band of Gaussian values and repeat it: quantizing 2^24
  // values with the k-quant search takes seconds, and the kernels' speed does not
  // depend on the values.
  const int64_t band = 16;
  std::mt19937 rng(7);
  std::normal_distribution<float> dist(0.0f, 0.02f);
  std::vector<float> values(static_cast<size_t>(band * cols));
  for (auto& v : values) v = dist(rng);
  loom::quant::quantize(type, values.data(), w.matrix.data(), values.size());
  for (int64_t r = band; r < rows; r += band) {
    std::memcpy(w.matrix.data() + static_cast<size_t>(r) * w.row_bytes, w.matrix.data(),
                static_cast<size_t>(std::min(band, rows - r)) * w.row_bytes);
  }
  return w;
}

std::vector<uint8_t> make_activations(DType weight, int64_t cols, int64_t n) {
  const DType act = loom::quant::activation_dtype(weight);
  std::mt19937 rng(9);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::vector<float> x(static_cast<size_t>(cols * n));
  for (auto& v : x) v = dist(rng);
  std::vector<uint8_t> out(loom::quant::activation_row_bytes(act, cols) * static_cast<size_t>(n));
  loom::quant::quantize_activations(act, x.data(), out.data(), cols * n);
  return out;
}

constexpr DType kTypes[] = {DType::q8_0,   DType::q4_0,   DType::q4_k,   DType::q6_k,
                            DType::gq8_32, DType::gq8_128, DType::gq4_32, DType::gq4_128};
constexpr int64_t kTypeCount = static_cast<int64_t>(std::size(kTypes));

void report(benchmark::State& state, const Weights& w, int64_t n_act) {
  const double bytes = static_cast<double>(state.iterations()) * static_cast<double>(w.bytes);
  state.SetBytesProcessed(static_cast<int64_t>(bytes));
  state.counters["of_stream"] = benchmark::Counter(
      bytes / 1e9 / (g_stream_gbps > 0 ? g_stream_gbps : 1), benchmark::Counter::kIsRate);
  if (n_act > 1) {
    state.counters["GMAC/s"] =
        benchmark::Counter(static_cast<double>(state.iterations()) *
                               static_cast<double>(w.rows * w.cols * n_act) / 1e9,
                           benchmark::Counter::kIsRate);
  }
}

// Args: type index, rows, cols, cold (0/1), family (-1 = active), activations.
void BM_dot_rows(benchmark::State& state) {
  const DType type = kTypes[state.range(0)];
  const int64_t rows = state.range(1);
  const int64_t cols = state.range(2);
  const bool cold = state.range(3) != 0;
  const DotFamily family = state.range(4) < 0 ? loom::quant::active_dot_family()
                                              : static_cast<DotFamily>(state.range(4));
  const int64_t n_act = state.range(5);
  const auto families = loom::quant::supported_dot_families();
  if (std::find(families.begin(), families.end(), family) == families.end()) {
    state.SkipWithError("kernel family not supported on this CPU");
    return;
  }
  const Weights w = make_weights(type, rows, cols);
  const size_t copies = cold ? std::max<size_t>(2, kStreamBytes / w.bytes + 1) : 1;
  Buffer pool(copies * w.bytes);
  for (size_t c = 0; c < copies; ++c)
    std::memcpy(pool.data() + c * w.bytes, w.matrix.data(), w.bytes);
  const auto act = make_activations(type, cols, n_act);
  const size_t act_row = act.size() / static_cast<size_t>(n_act);
  std::vector<float> out(static_cast<size_t>(rows * n_act));
  size_t next = 0;
  for (auto _ : state) {
    loom::quant::dot_rows_on(family, type, pool.data() + next * w.bytes, w.row_bytes, rows, cols,
                             act.data(), act_row, n_act, out.data(), n_act);
    benchmark::DoNotOptimize(out.data());
    next = (next + 1) % copies;
  }
  state.SetLabel(std::string(loom::dtype_name(type)) + " " + std::to_string(rows) + "x" +
                 std::to_string(cols) + (cold ? " cold " : " hot ") +
                 std::string(loom::quant::dot_family_name(family)) +
                 (n_act > 1 ? " n_act=" + std::to_string(n_act) : ""));
  report(state, w, n_act);
}

void register_benchmarks() {
  benchmark::RegisterBenchmark("BM_stream_read_1GiB", BM_stream_read_1GiB)
      ->Unit(benchmark::kMillisecond)
      ->MinTime(1.0)
      ->UseRealTime();
  for (int64_t type = 0; type < kTypeCount; ++type) {
    for (auto [rows, cols] : {std::pair<int64_t, int64_t>{2048, 8192}, {8192, 2048}}) {
      for (int64_t cold : {1, 0}) {
        benchmark::RegisterBenchmark("BM_matvec", BM_dot_rows)
            ->Args({type, rows, cols, cold, -1, 1})
            ->Unit(benchmark::kMicrosecond)
            ->MinTime(0.5)
            ->UseRealTime();
      }
    }
  }
  for (int64_t type = 0; type < kTypeCount; ++type) {
    for (int64_t family : {1, 2}) {
      for (int64_t n_act : {1, 4}) {
        benchmark::RegisterBenchmark("BM_matvec_l2", BM_dot_rows)
            ->Args({type, 96, 8192, 0, family, n_act})
            ->Unit(benchmark::kMicrosecond)
            ->MinTime(0.3);
      }
    }
  }
  // Every family on the cold 2048x8192 matvec, for comparison.
  for (int64_t type = 0; type < kTypeCount; ++type) {
    for (int64_t family : {0, 1, 2}) {
      benchmark::RegisterBenchmark("BM_matvec_family", BM_dot_rows)
          ->Args({type, 2048, 8192, 1, family, 1})
          ->Unit(benchmark::kMicrosecond)
          ->MinTime(0.5)
          ->UseRealTime();
    }
  }
  // A small continuous batch (4 or 8 decode tokens in one pass) over weights from memory.
  for (int64_t type = 0; type < kTypeCount; ++type) {
    for (int64_t n_act : {4, 8}) {
      benchmark::RegisterBenchmark("BM_batch_cold", BM_dot_rows)
          ->Args({type, 2048, 8192, 1, -1, n_act})
          ->Unit(benchmark::kMicrosecond)
          ->MinTime(0.5)
          ->UseRealTime();
    }
  }
  for (int64_t type = 0; type < kTypeCount; ++type) {
    benchmark::RegisterBenchmark("BM_prefill", BM_dot_rows)
        ->Args({type, 2048, 8192, 0, -1, 32})
        ->Unit(benchmark::kMillisecond)
        ->MinTime(0.5)
        ->UseRealTime();
  }
}

}  // namespace

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  g_stream_gbps = loom::bench::measure_read_bandwidth_gbs(1);
  std::printf("single-core streaming read (best of 5 sums over 2 GiB): %.2f GB/s\n", g_stream_gbps);
  std::printf("kernel family: %s\n",
              std::string(loom::quant::dot_family_name(loom::quant::active_dot_family())).c_str());
  register_benchmarks();
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
