// Load-time and memory benchmark on a generated ~1.2 GiB f32 model (safetensors):
//   zero-copy load; converting loads (f32 -> f16) through the bounded pipeline in mmap
//   and stream mode; a naive read-everything-then-convert baseline; and the pack of the
//   same model (convert once, then load, as stored and repacked at load). Each scenario
//   runs in its own process so its peak RSS (VmHWM) is its own; memory is reported over
//   the final weight bytes.
//
//   build/bench/loom_load_bench [--dir DIR]     (DIR: where to write the model, default /tmp)
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "loom/convert.hpp"
#include "loom/demo.hpp"
#include "loom/exporter.hpp"
#include "loom/format.hpp"
#include "loom/loader.hpp"
#include "loom/pack.hpp"

extern char** environ;
namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

namespace {

int64_t status_kb(const char* key) {
  std::ifstream in("/proc/self/status");
  for (std::string line; std::getline(in, line);) {
    if (line.rfind(key, 0) == 0) return std::strtoll(line.c_str() + std::strlen(key), nullptr, 10);
  }
  return 0;
}

loom::ModelConfig bench_config() {
  loom::ModelConfig c;
  c.architecture = "llama";
  c.vocab_size = 32000;
  c.hidden_size = 2048;
  c.intermediate_size = 5632;
  c.n_layers = 4;
  c.n_heads = 16;
  c.n_kv_heads = 4;
  c.head_dim = 128;
  c.rope_dims = 128;
  c.max_positions = 4096;
  c.norm_eps = 1e-5;
  c.rope_theta = 10000.0;
  c.bos_token_id = 1;
  c.eos_token_ids = {2};
  return c;
}

// Runs one scenario in this (fresh) process and prints "seconds bytes_in_weights hwm_kb".
int run_scenario(const std::string& name, const fs::path& dir) {
  const int64_t base_kb = status_kb("VmRSS:");
  const auto t0 = Clock::now();
  int64_t weight_bytes = 0;
  if (name == "naive") {
    // Read every byte into memory, then convert each tensor into its own buffer.
    auto source = loom::open_weights(dir / "st", {.io_mode = loom::IoMode::stream});
    std::vector<std::vector<std::byte>> raw;
    for (const auto& r : source->tensors()) {
      raw.emplace_back(r.nbytes);
      source->read(r, 0, raw.back());
    }
    std::vector<loom::Tensor> converted;
    size_t i = 0;
    for (const auto& r : source->tensors()) {
      loom::Tensor t = loom::Tensor::empty(r.shape, r.shape.rank() == 1 ? loom::DType::f32 : loom::DType::f16);
      loom::convert(r.dtype, raw[i++].data(), t.dtype(), t.mutable_raw_data(), static_cast<size_t>(r.shape.numel()));
      weight_bytes += t.nbytes();
      converted.push_back(std::move(t));
    }
  } else {
    loom::LoadOptions o;
    o.logger = loom::Logger::silent();
    o.load_tokenizer = false;
    fs::path path = dir / "st";
    if (name == "convert-mmap" || name == "convert-stream") o.target_dtype = loom::DType::f16;
    if (name == "convert-stream") o.io_mode = loom::IoMode::stream;
    if (name == "pack" || name == "pack-repack") path = dir / "pack";
    // Repacked into the f16 kernels' panels: one copy of the weights held, the mapped
    // rows handed back as each matrix is packed (load_repack.cpp, MappedRows).
    if (name == "pack-repack") o.repack = loom::RepackMode::automatic;
    auto model = loom::load_model(path, o);
    weight_bytes = model->weight_bytes();
  }
  const double seconds = std::chrono::duration<double>(Clock::now() - t0).count();
  std::printf("%.6f %lld %lld %lld\n", seconds, static_cast<long long>(weight_bytes),
              static_cast<long long>(status_kb("VmHWM:")), static_cast<long long>(base_kb));
  return 0;
}

struct Result {
  double seconds = 0;
  double weight_bytes = 0;
  double hwm = 0;
  double base = 0;
};

Result spawn_scenario(const char* self, const std::string& name, const fs::path& dir) {
  int fds[2];
  if (::pipe(fds) != 0) std::exit(1);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, fds[1], STDOUT_FILENO);
  posix_spawn_file_actions_addclose(&actions, fds[0]);
  const std::string d = dir.string();
  const char* argv[] = {self, "--scenario", name.c_str(), "--dir", d.c_str(), nullptr};
  pid_t pid = 0;
  if (posix_spawn(&pid, self, &actions, nullptr, const_cast<char* const*>(argv), environ) != 0) std::exit(1);
  ::close(fds[1]);
  char buf[256] = {};
  const ssize_t n = ::read(fds[0], buf, sizeof buf - 1);
  ::close(fds[0]);
  int status = 0;
  ::waitpid(pid, &status, 0);
  Result r;
  long long wb = 0, hwm = 0, base = 0;
  if (n <= 0 || std::sscanf(buf, "%lf %lld %lld %lld", &r.seconds, &wb, &hwm, &base) != 4) {
    std::fprintf(stderr, "scenario %s failed\n", name.c_str());
    std::exit(1);
  }
  r.weight_bytes = static_cast<double>(wb);
  r.hwm = static_cast<double>(hwm) * 1024.0;
  r.base = static_cast<double>(base) * 1024.0;
  return r;
}

}  // namespace

int main(int argc, char** argv) {
  fs::path dir = "/tmp";
  std::string scenario;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (std::string(argv[i]) == "--dir") dir = argv[i + 1];
    if (std::string(argv[i]) == "--scenario") scenario = argv[i + 1];
  }
  if (!scenario.empty()) return run_scenario(scenario, dir);

  dir /= "loom-load-bench";
  const auto config = bench_config();
  if (!fs::exists(dir / "st" / "config.json")) {
    fs::remove_all(dir);
    std::fprintf(stderr, "writing the benchmark model into %s ...\n", dir.c_str());
    loom::export_model(config, loom::make_random_weights(config, 1, loom::DType::f32), dir / "st",
                       loom::ExportFormat::safetensors);
  }
  const double source_bytes = static_cast<double>(fs::file_size(dir / "st" / "model.safetensors"));
  if (!fs::exists(dir / "pack")) {
    loom::PackOptions po;
    po.dtype = loom::DType::f16;
    po.hash_sources = false;
    po.load.logger = loom::Logger::silent();
    const auto t0 = Clock::now();
    loom::write_pack(dir / "st", dir / "pack", po);
    std::printf("one-time pack conversion (f32 -> f16, with sha256 of every tensor): %.2f s\n",
                std::chrono::duration<double>(Clock::now() - t0).count());
  }
  std::printf("model: %.2f GiB of f32 safetensors (%s)\n", source_bytes / (1 << 30), (dir / "st").c_str());
  std::printf("%-36s %10s %12s %14s %16s\n", "scenario", "time", "GB/s (src)", "peak RSS", "RSS / weights");
  const std::pair<const char*, const char*> scenarios[] = {
      {"zero-copy", "zero-copy safetensors (mmap)"},
      {"convert-mmap", "convert f32->f16, pipeline, mmap"},
      {"convert-stream", "convert f32->f16, pipeline, pread"},
      {"naive", "naive: read all, then convert"},
      {"pack", "f16 pack (zero-copy)"},
      {"pack-repack", "f16 pack, --repack auto"},
  };
  for (const auto& [name, label] : scenarios) {
    const Result r = spawn_scenario(argv[0], name, dir);
    const double grown = r.hwm - r.base;
    std::printf("%-36s %8.1f ms %12.2f %11.1f MiB %16.3f\n", label, r.seconds * 1e3,
                std::string(name).rfind("convert", 0) == 0 || std::string(name) == "naive" ? source_bytes / r.seconds / 1e9 : 0.0,
                grown / (1 << 20), grown / r.weight_bytes);
  }
  std::printf("(peak RSS is the process's high-water mark minus its RSS before loading; a zero-copy\n"
              " load maps the file and touches no page until the weights are used.)\n");
  return 0;
}
