// loom::export_model — writes a model's weights back out in the formats loom reads,
// with the external names, fusions and layouts the architecture table gives each one:
// Hugging Face layouts (config.json + safetensors, sharded safetensors, PyTorch .bin,
// a folder of .npy) and GGUF (llama.cpp names and metadata, llama q/k rows permuted for
// interleaved RoPE, tokenizer metadata when a tokenizer is given).
//
// The converter (`loom convert`) and the test fixtures use it; a written model loads
// back into identical internal tensors. Every file is written to a temporary name and
// renamed, so a failed export leaves no file that looks complete.
#pragma once

#include <filesystem>
#include <memory>
#include <optional>

#include "loom/config.hpp"
#include "loom/weights.hpp"

namespace loom {

class Tokenizer;

enum class ExportFormat : uint8_t { safetensors, safetensors_sharded, torch, npy, gguf };

struct ExportOptions {
  // Dtype of matrices and embeddings (norm weights and biases stay f32); nullopt keeps
  // each tensor's dtype.
  std::optional<DType> dtype;
  int shards = 3;  // safetensors_sharded
  // For GGUF: its tokenizer.ggml.* metadata; for HF layouts nothing is written for it.
  std::shared_ptr<const Tokenizer> tokenizer;
};

// HF layouts write into the directory `out` (created if needed); GGUF writes the file
// `out`.
void export_model(const ModelConfig& config, const ModelWeights& weights,
                  const std::filesystem::path& out, ExportFormat format,
                  const ExportOptions& options = {});

// The config.json text loom writes for `config` (Hugging Face keys of its family).
std::string hf_config_json(const ModelConfig& config);

}  // namespace loom
