// loom::Model — a loaded model: its config, its weights, its tokenizer (when one was
// found), its generation defaults (generation_config.json) and the report of how it was
// loaded.
//
// Immutable after construction and shared by std::shared_ptr: any number of Sessions
// on any number of threads may use one Model at once. Its tensors keep their mapped
// files alive, so a Model outlives the WeightSource it was loaded from.
#pragma once

#include <cstdint>
#include <memory>

#include "loom/config.hpp"
#include "loom/dtype.hpp"
#include "loom/generation_defaults.hpp"
#include "loom/weights.hpp"

namespace loom {

class Tokenizer;
struct LoadReport;

class Model {
 public:
  // Checks every weight's presence, shape and dtype against the config (throws
  // loom::Error(shape_mismatch / missing_tensor) naming the slot).
  Model(ModelConfig config, ModelWeights weights, std::shared_ptr<const Tokenizer> tokenizer = nullptr,
        std::shared_ptr<const LoadReport> report = nullptr, GenerationDefaults generation = {});

  const ModelConfig& config() const noexcept { return config_; }
  const ModelWeights& weights() const noexcept { return weights_; }
  // Null when the model came without a tokenizer.
  const std::shared_ptr<const Tokenizer>& tokenizer() const noexcept { return tokenizer_; }
  // Null for models built in memory.
  const std::shared_ptr<const LoadReport>& load_report() const noexcept { return report_; }
  // The model's sampling / length defaults and where each came from (loom's own when
  // the model has no generation_config.json or was built in memory).
  const GenerationDefaults& generation_defaults() const noexcept { return generation_; }
  // Bytes of weights (mapped and owned together; tied storage counted once).
  int64_t weight_bytes() const;
  // Bytes of weights one decode step (one token) reads: all of them, except that of an
  // embedding table (token or learned positions) it reads one row, unless the table is
  // also the output projection (tied), which reads it whole. Decode GB/s figures divide
  // this, not weight_bytes(), by the step's time.
  int64_t decode_weight_bytes() const;

 private:
  ModelConfig config_;
  ModelWeights weights_;
  std::shared_ptr<const Tokenizer> tokenizer_;
  std::shared_ptr<const LoadReport> report_;
  GenerationDefaults generation_;
};

// Positions per KV cache block: a Session's cache is blocks of this many positions, and
// a Batch's unless BatchOptions::block_tokens says otherwise. Within a block each key is
// stored dimension-major, so a block of 16 keys of one head is 16 x head_dim contiguous
// elements: storing a new key writes into a few KiB, where a block spanning the whole
// context scattered its head_dim elements a context apart (docs/batching.md).
inline constexpr int64_t kKvBlockTokens = 16;

// KV cache bytes a session of this model would allocate for `context_length` positions
// of `kv_dtype`: whole blocks of kKvBlockTokens positions, so the context rounded up to
// a multiple of 16 (a Session allocates exactly this; the load report states it). Throws
// Error(out_of_memory) when the product does not fit in 63 bits.
int64_t kv_cache_bytes_for(const ModelConfig& config, int64_t context_length, DType kv_dtype);

}  // namespace loom
