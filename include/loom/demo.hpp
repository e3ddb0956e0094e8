// loom's generated demo model: a deterministic Llama-shaped model with random weights and
// a real byte-level BPE tokenizer (trained at creation on a short built-in English text),
// written by loom's own writers as a Hugging Face layout (config.json, model.safetensors,
// tokenizer.json, tokenizer_config.json). Tests, examples and benchmarks use it when they
// need a model of a chosen size with a byte-level BPE tokenizer and no download. Its
// output is gibberish: the weights are random. (`loom run` without --model runs the real
// stories260K model vendored in examples/models instead.)
#pragma once

#include <cstdint>
#include <filesystem>

#include "loom/config.hpp"
#include "loom/weights.hpp"

namespace loom {

struct DemoOptions {
  int64_t hidden_size = 256;
  int64_t n_layers = 4;
  int64_t n_heads = 8;
  int64_t n_kv_heads = 2;
  int64_t intermediate_size = 768;
  int64_t context_length = 1024;
  int32_t merges = 700;   // BPE merges to learn (vocabulary = 256 bytes + merges + 2 specials)
  uint64_t seed = 20261129;
};

// Writes the demo model into `dir` (created if needed). Deterministic: the same options
// give byte-identical files.
void write_demo_model(const std::filesystem::path& dir, const DemoOptions& options = {});

// Deterministic random weights for `config` (uniform, std ~`scale`; norms around 1), the
// building block of the demo and of benchmarks.
ModelWeights make_random_weights(const ModelConfig& config, uint64_t seed, DType matrix_dtype,
                                 float scale = 0.02f);

}  // namespace loom
