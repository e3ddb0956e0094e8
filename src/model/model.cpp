#include "loom/model.hpp"

#include <limits>
#include <map>
#include <utility>

#include "loom/error.hpp"
#include "model/weight_slots.hpp"

namespace loom {

namespace {

void check_weights(const ModelConfig& config, const ModelWeights& weights) {
  if (static_cast<int64_t>(weights.layers.size()) != config.n_layers) {
    throw Error(ErrorCode::shape_mismatch,
                "weights have " + std::to_string(weights.layers.size()) +
                    " layers, config num_hidden_layers is " + std::to_string(config.n_layers));
  }
  for (const auto& slot : slots::all_slots()) {
    const int64_t layers = slot.per_layer ? config.n_layers : 1;
    for (int64_t l = 0; l < layers; ++l) {
      const Tensor& t = slots::tensor_of(weights, slot, l);
      const std::string name = slots::full_name(slot, l);
      if (!slot.needed(config)) continue;
      if (!t.defined()) {
        throw Error(ErrorCode::missing_tensor, "weight is missing", {.tensor = name});
      }
      const Shape want = slot.shape(config);
      if (!(t.shape() == want)) {
        throw Error(ErrorCode::shape_mismatch,
                    "shape " + t.shape().to_string() + " but the config (" +
                        std::string(slot.shape_fields) + ") implies " + want.to_string(),
                    {.tensor = name});
      }
      if (slots::is_vector(slot.role) && t.dtype() != DType::f32) {
        throw Error(ErrorCode::dtype_mismatch,
                    "norm weights and biases must be f32 in memory, got " +
                        std::string(dtype_name(t.dtype())),
                    {.tensor = name});
      }
      if (!t.is_contiguous()) {
        throw Error(ErrorCode::invalid_argument, "weight is not contiguous", {.tensor = name});
      }
    }
  }
}

}  // namespace

Model::Model(ModelConfig config, ModelWeights weights, std::shared_ptr<const Tokenizer> tokenizer,
             std::shared_ptr<const LoadReport> report, GenerationDefaults generation)
    : config_(std::move(config)),
      weights_(std::move(weights)),
      tokenizer_(std::move(tokenizer)),
      report_(std::move(report)),
      generation_(std::move(generation)) {
  config_.validate();
  check_weights(config_, weights_);
}

namespace {

// Each distinct weight storage once (tied slots share one), with its bytes, the bytes of
// one of its rows, and whether a decode step reads it whole (any slot but an embedding
// table's uses it) or only a row per token (an embedding table's alone).
struct WeightStorage {
  int64_t bytes = 0;
  int64_t row_bytes = 0;
  bool read_whole = false;
};

std::map<std::pair<const void*, int64_t>, WeightStorage> weight_storages(const ModelConfig& config,
                                                                         const ModelWeights& weights) {
  std::map<std::pair<const void*, int64_t>, WeightStorage> storages;
  for (const auto& slot : slots::all_slots()) {
    const int64_t layers = slot.per_layer ? config.n_layers : 1;
    for (int64_t l = 0; l < layers; ++l) {
      const Tensor& t = slots::tensor_of(weights, slot, l);
      if (!t.defined()) continue;
      WeightStorage& s = storages[{t.raw_data(), t.nbytes()}];
      const int64_t rows = t.shape().rank() > 0 ? t.shape()[0] : 1;
      s.bytes = t.nbytes();
      s.row_bytes = rows > 0 ? t.nbytes() / rows : 0;
      s.read_whole = s.read_whole || slot.role != slots::Role::embedding;
    }
  }
  return storages;
}

}  // namespace

int64_t Model::weight_bytes() const {
  int64_t total = 0;
  for (const auto& [key, s] : weight_storages(config_, weights_)) total += s.bytes;
  return total;
}

int64_t Model::decode_weight_bytes() const {
  int64_t total = 0;
  for (const auto& [key, s] : weight_storages(config_, weights_)) total += s.read_whole ? s.bytes : s.row_bytes;
  return total;
}

int64_t kv_cache_bytes_for(const ModelConfig& config, int64_t context_length, DType kv_dtype) {
  // Checked: a config's sizes come from a file, and the product must not wrap into a
  // small (or negative) allocation.
  if (context_length < 0 || context_length > std::numeric_limits<int64_t>::max() - kKvBlockTokens) {
    throw Error(ErrorCode::out_of_memory,
                "a KV cache of " + std::to_string(context_length) + " positions for this model exceeds 2^63 bytes");
  }
  const int64_t positions = (context_length + kKvBlockTokens - 1) / kKvBlockTokens * kKvBlockTokens;
  int64_t bytes = 2;
  for (const int64_t factor : {config.n_layers, config.n_kv_heads, positions, config.head_dim,
                               static_cast<int64_t>(dtype_size(kv_dtype))}) {
    if (factor < 0 || __builtin_mul_overflow(bytes, factor, &bytes)) {
      throw Error(ErrorCode::out_of_memory,
                  "a KV cache of " + std::to_string(context_length) + " positions for this model exceeds 2^63 bytes");
    }
  }
  return bytes;
}

}  // namespace loom
