// Conversion kernel throughput on 1 GiB of output: f16->f32, bf16->f32, f32->f16,
// f32->bf16. Reports GB/s of bytes read + written (Google Benchmark's bytes_per_second).
//   build/bench/loom_convert_bench [--benchmark_filter=...]
#include <benchmark/benchmark.h>

#include <cstring>
#include <random>
#include <vector>

#include "loom/convert.hpp"
#include "loom/cpu.hpp"
#include "loom/tensor.hpp"

namespace {

constexpr size_t kElems = (size_t{1} << 30) / sizeof(float);  // 1 GiB of f32

struct Buffers {
  loom::Tensor f32 = loom::Tensor::empty(loom::Shape{static_cast<int64_t>(kElems)}, loom::DType::f32);
  loom::Tensor h16 = loom::Tensor::empty(loom::Shape{static_cast<int64_t>(kElems)}, loom::DType::f16);
  Buffers() {
    auto* f = f32.mutable_data<float>();
    std::mt19937 rng(1);
    std::normal_distribution<float> dist(0.0f, 1.0f);
    for (size_t i = 0; i < 4096; ++i) f[i] = dist(rng);
    for (size_t i = 4096; i < kElems; i += 4096) std::memcpy(f + i, f, 4096 * sizeof(float));
    loom::f32_to_f16(f, h16.mutable_data<uint16_t>(), kElems);
  }
};

Buffers& buffers() {
  static Buffers b;
  return b;
}

void set_isa(benchmark::State& state) {
  loom::set_isa_cap(static_cast<loom::Isa>(state.range(0)));
  state.SetLabel(std::string(loom::isa_name(loom::active_isa())));
}

void BM_f16_to_f32(benchmark::State& state) {
  auto& b = buffers();
  set_isa(state);
  for (auto _ : state) {
    loom::f16_to_f32(b.h16.data<uint16_t>(), b.f32.mutable_data<float>(), kElems);
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * kElems * 6));
}

void BM_bf16_to_f32(benchmark::State& state) {
  auto& b = buffers();
  set_isa(state);
  for (auto _ : state) {
    loom::bf16_to_f32(b.h16.data<uint16_t>(), b.f32.mutable_data<float>(), kElems);
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * kElems * 6));
}

void BM_f32_to_f16(benchmark::State& state) {
  auto& b = buffers();
  set_isa(state);
  for (auto _ : state) {
    auto stats = loom::f32_to_f16(b.f32.data<float>(), b.h16.mutable_data<uint16_t>(), kElems);
    benchmark::DoNotOptimize(stats);
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * kElems * 6));
}

void BM_f32_to_bf16(benchmark::State& state) {
  auto& b = buffers();
  set_isa(state);
  for (auto _ : state) {
    auto stats = loom::f32_to_bf16(b.f32.data<float>(), b.h16.mutable_data<uint16_t>(), kElems);
    benchmark::DoNotOptimize(stats);
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * kElems * 6));
}

// memcpy of the same 1 GiB: the machine's copy bandwidth, the ceiling for these kernels.
void BM_memcpy_reference(benchmark::State& state) {
  auto& b = buffers();
  std::vector<uint16_t> dst(kElems);
  for (auto _ : state) {
    std::memcpy(dst.data(), b.f32.data<float>(), kElems * sizeof(uint16_t));
    std::memcpy(b.f32.mutable_data<float>() + kElems / 2, b.h16.data<uint16_t>(),
                kElems * sizeof(uint16_t));
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * kElems * 4 * 2));
}

void isa_args(benchmark::internal::Benchmark* b) {
  for (auto isa : loom::supported_isas()) b->Arg(static_cast<int>(isa));
  b->Unit(benchmark::kMillisecond)->UseRealTime();
}

}  // namespace

BENCHMARK(BM_f16_to_f32)->Apply(isa_args);
BENCHMARK(BM_bf16_to_f32)->Apply(isa_args);
BENCHMARK(BM_f32_to_f16)->Apply(isa_args);
BENCHMARK(BM_f32_to_bf16)->Apply(isa_args);
BENCHMARK(BM_memcpy_reference)->Unit(benchmark::kMillisecond)->UseRealTime();

BENCHMARK_MAIN();
