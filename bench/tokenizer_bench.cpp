// Load time of each reference vocabulary, and encode throughput (MB/s) of the tokenizer
// on a few MB of mixed English / Chinese / code text, generated deterministically here. Uses the reference vocabularies
// ($LOOM_REFERENCE_DIR or ../shared/reference next to the source tree); a vocabulary
// that is absent is skipped with a message.
//
//   build/bench/loom_tokenizer_bench [--benchmark_filter=...]
#include <benchmark/benchmark.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <iterator>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "loom/tokenizer.hpp"

namespace fs = std::filesystem;

namespace {

fs::path reference_dir() {
  if (const char* env = std::getenv("LOOM_REFERENCE_DIR"); env && *env) return env;
  // The source tree's sibling folder (Ninja/Make compile with absolute source paths).
  return fs::path(__FILE__).parent_path().parent_path() / ".." / "shared" / "reference";
}

// ~3 MB: paragraphs of English prose, Chinese prose and C++/Python code, mixed by a
// fixed-seed generator so every run tokenizes the same bytes.
const std::string& mixed_text() {
  static const std::string text = [] {
    static const char* english[] = {
        "The quick brown fox jumps over the lazy dog. ", "It's a truth universally acknowledged, ",
        "that a single model in possession of good weights must be in want of a tokenizer. ",
        "We'll see whether 3.14159 or 2,718 matters here; ", "\"Quoted text\" (with brackets) and don't forget ",
        "e-mail: someone@example.com, URL https://example.org/path?q=1. ", "\n\n"};
    static const char* chinese[] = {
        "中国的首都是北京。", "我想在苹果公司工作。", "今天天气很好，我们去公园散步吧！", "机器学习模型需要大量的数据。",
        "这是一个用于测试分词器速度的句子。", "\n"};
    static const char* code[] = {
        "def add(a, b):\n    return a + b\n\n", "for (int i = 0; i < n; ++i) {\n    sum += x[i] * w[i];\n}\n",
        "#include <vector>\nstd::vector<int32_t> ids;\n", "if x is not None and len(x) > 0:\n        print(f\"{x!r}\")\n",
        "    // TODO: handle the error\n", "const auto it = map.find(key);\n"};
    std::mt19937 rng(20240601);
    std::string s;
    s.reserve(3 << 20);
    while (s.size() < (3u << 20)) {
      const unsigned kind = rng() % 3;
      const unsigned n = 3 + rng() % 8;
      for (unsigned i = 0; i < n; ++i) {
        if (kind == 0) s += english[rng() % std::size(english)];
        if (kind == 1) s += chinese[rng() % std::size(chinese)];
        if (kind == 2) s += code[rng() % std::size(code)];
      }
    }
    return s;
  }();
  return text;
}

std::shared_ptr<const loom::Tokenizer> load(const std::string& rel) {
  const fs::path p = reference_dir() / rel;
  if (!fs::exists(p)) return nullptr;
  // A tokenizer.json through its directory, as a model directory's load reads it (the
  // file and tokenizer_config.json beside it, read by the library).
  return loom::Tokenizer::load(p.filename() == "tokenizer.json" ? p.parent_path() : p);
}

void encode_bench(benchmark::State& state, const std::string& rel) {
  const auto tok = load(rel);
  if (!tok) {
    state.SkipWithError(("reference vocabulary not found: " + rel).c_str());
    return;
  }
  const std::string& text = mixed_text();
  size_t n_ids = 0;
  for (auto _ : state) {
    const auto ids = tok->encode(text);
    n_ids = ids.size();
    benchmark::DoNotOptimize(ids.data());
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations()) * static_cast<int64_t>(text.size()));
  state.counters["MB/s"] = benchmark::Counter(static_cast<double>(text.size()) / 1e6,
                                              benchmark::Counter::kIsIterationInvariantRate);
  state.counters["ids"] = static_cast<double>(n_ids);
  state.counters["text_MB"] = static_cast<double>(text.size()) / 1e6;
}

void decode_bench(benchmark::State& state, const std::string& rel) {
  const auto tok = load(rel);
  if (!tok) {
    state.SkipWithError(("reference vocabulary not found: " + rel).c_str());
    return;
  }
  const auto ids = tok->encode(mixed_text());
  for (auto _ : state) {
    const auto text = tok->decode(ids);
    benchmark::DoNotOptimize(text.data());
  }
  state.counters["MB/s"] = benchmark::Counter(static_cast<double>(mixed_text().size()) / 1e6,
                                              benchmark::Counter::kIsIterationInvariantRate);
}

// Building the tokenizer from its file: what a model load spends on the vocabulary.
void load_bench(benchmark::State& state, const std::string& rel) {
  if (!load(rel)) {
    state.SkipWithError(("reference vocabulary not found: " + rel).c_str());
    return;
  }
  int32_t vocab = 0;
  for (auto _ : state) {
    const auto tok = load(rel);
    vocab = tok->vocab_size();
    benchmark::DoNotOptimize(tok.get());
  }
  state.counters["tokens"] = vocab;
}

}  // namespace

int main(int argc, char** argv) {
  struct Vocab {
    const char* name;
    const char* path;
  };
  const Vocab vocabs[] = {
      {"llama3_json", "tokenizers/llama3/tokenizer.json"},
      {"llama2_json", "tokenizers/llama2/tokenizer.json"},
      {"qwen2_json", "models/qwen2-tiny/hf/tokenizer.json"},
      {"gpt2_gguf", "tokenizers/ggml-vocab-gpt-2.gguf"},
      {"llama_spm_gguf", "tokenizers/ggml-vocab-llama-spm.gguf"},
  };
  for (const auto& v : vocabs) {
    benchmark::RegisterBenchmark((std::string("encode/") + v.name).c_str(), encode_bench, std::string(v.path))
        ->Unit(benchmark::kMillisecond)
        ->MinTime(2.0);
  }
  for (const auto& v : vocabs) {
    benchmark::RegisterBenchmark((std::string("load/") + v.name).c_str(), load_bench, std::string(v.path))
        ->Unit(benchmark::kMillisecond);
  }
  benchmark::RegisterBenchmark("decode/llama3_json", decode_bench, std::string(vocabs[0].path))
      ->Unit(benchmark::kMillisecond);
  benchmark::Initialize(&argc, argv);
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
