// Format layer benchmarks:
//  - time to open and index a file of 1,000 tensors (safetensors, GGUF, torch .bin);
//  - read throughput of one large tensor, mmap vs stream, through load() (a zero-copy
//    view whose bytes are then touched, vs a pread into an owned buffer) and through
//    read() in 4 MiB chunks (the bounded streaming-conversion path).
// Files live in a temporary directory and are written once by loom's writers; the page
// cache is warm after the first iteration, so throughput is memory-bound, not disk-bound.
#include <benchmark/benchmark.h>

#include <filesystem>
#include <unistd.h>

#include "loom/format.hpp"

namespace fs = std::filesystem;

namespace {

constexpr int kTensorCount = 1000;
constexpr int64_t kBigRows = 8192, kBigCols = 8192;  // 256 MiB of f32

class Files {
 public:
  static Files& get() {
    static Files files;
    return files;
  }
  fs::path dir;
  fs::path safetensors, gguf, torch, big;

 private:
  Files() {
    dir = fs::temp_directory_path() / ("loom-format-bench-" + std::to_string(::getpid()));
    fs::create_directories(dir);
    std::vector<loom::NamedTensor> many;
    for (int i = 0; i < kTensorCount; ++i) {
      many.push_back({"blk." + std::to_string(i / 10) + ".w" + std::to_string(i % 10),
                      loom::Tensor::zeros({16, 64}, i % 2 ? loom::DType::f16 : loom::DType::f32)});
    }
    safetensors = dir / "many.safetensors";
    gguf = dir / "many.gguf";
    torch = dir / "many.bin";
    loom::write_safetensors(safetensors, many);
    loom::write_gguf(gguf, {}, many);
    loom::write_torch(torch, many);
    big = dir / "big.safetensors";
    loom::Tensor t = loom::Tensor::empty({kBigRows, kBigCols}, loom::DType::f32);
    auto* p = t.mutable_data<float>();
    for (int64_t i = 0; i < t.numel(); ++i) p[i] = static_cast<float>(i & 1023);
    loom::write_safetensors(big, std::vector<loom::NamedTensor>{{"w", t}});
  }
  ~Files() {
    std::error_code ec;
    fs::remove_all(dir, ec);
  }
};

void open_and_index(benchmark::State& state, const fs::path& path) {
  size_t tensors = 0;
  for (auto _ : state) {
    auto src = loom::open_weights(path);
    tensors = src->tensors().size();
    benchmark::DoNotOptimize(src->find("blk.50.w5"));
  }
  state.counters["tensors"] = static_cast<double>(tensors);
}

void BM_OpenIndex_Safetensors(benchmark::State& state) { open_and_index(state, Files::get().safetensors); }
void BM_OpenIndex_Gguf(benchmark::State& state) { open_and_index(state, Files::get().gguf); }
void BM_OpenIndex_Torch(benchmark::State& state) { open_and_index(state, Files::get().torch); }

uint64_t touch(const void* data, size_t n) {
  const auto* p = static_cast<const uint64_t*>(data);
  uint64_t sum = 0;
  for (size_t i = 0; i < n / 8; ++i) sum += p[i];
  return sum;
}

void load_and_touch(benchmark::State& state, loom::IoMode mode) {
  auto src = loom::open_weights(Files::get().big, {.io_mode = mode});
  const auto& r = src->tensors()[0];
  for (auto _ : state) {
    const loom::Tensor t = src->load(r);
    benchmark::DoNotOptimize(touch(t.raw_data(), static_cast<size_t>(t.nbytes())));
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations()) * static_cast<int64_t>(r.nbytes));
}

void chunked_read(benchmark::State& state, loom::IoMode mode) {
  auto src = loom::open_weights(Files::get().big, {.io_mode = mode});
  const auto& r = src->tensors()[0];
  std::vector<std::byte> chunk(4 << 20);
  for (auto _ : state) {
    uint64_t sum = 0;
    for (uint64_t at = 0; at < r.nbytes; at += chunk.size()) {
      const auto n = static_cast<size_t>(std::min<uint64_t>(chunk.size(), r.nbytes - at));
      src->read(r, at, std::span(chunk).first(n));
      sum += touch(chunk.data(), n);
    }
    benchmark::DoNotOptimize(sum);
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations()) * static_cast<int64_t>(r.nbytes));
}

void BM_Load_Mmap(benchmark::State& state) { load_and_touch(state, loom::IoMode::mmap); }
void BM_Load_Stream(benchmark::State& state) { load_and_touch(state, loom::IoMode::stream); }
void BM_ChunkedRead_Mmap(benchmark::State& state) { chunked_read(state, loom::IoMode::mmap); }
void BM_ChunkedRead_Stream(benchmark::State& state) { chunked_read(state, loom::IoMode::stream); }

}  // namespace

BENCHMARK(BM_OpenIndex_Safetensors)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_OpenIndex_Gguf)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_OpenIndex_Torch)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_Load_Mmap)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_Load_Stream)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_ChunkedRead_Mmap)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_ChunkedRead_Stream)->Unit(benchmark::kMillisecond)->UseRealTime();

BENCHMARK_MAIN();
