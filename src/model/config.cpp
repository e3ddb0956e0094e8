#include "loom/config.hpp"

#include <string>
#include <tuple>

#include "loom/error.hpp"

namespace loom {

namespace {
constexpr int64_t kMaxWidth = int64_t{1} << 20;
constexpr int64_t kMaxLayers = int64_t{1} << 16;
constexpr int64_t kMaxVocab = int64_t{1} << 24;  // token ids are below 2^24 (tokenizer limit)
constexpr int64_t kMaxPositions = int64_t{1} << 32;

void require(bool ok, std::string_view field, const std::string& why) {
  if (!ok) {
    throw Error(ErrorCode::invalid_argument, "config field '" + std::string(field) + "' " + why);
  }
}
}  // namespace

void ModelConfig::validate() const {
  require(!architecture.empty(), "architecture", "is missing");
  require(vocab_size > 0, "vocab_size", "must be positive, got " + std::to_string(vocab_size));
  require(hidden_size > 0, "hidden_size", "must be positive, got " + std::to_string(hidden_size));
  require(intermediate_size > 0, "intermediate_size",
          "must be positive, got " + std::to_string(intermediate_size));
  require(n_layers > 0, "num_hidden_layers", "must be positive, got " + std::to_string(n_layers));
  require(n_heads > 0, "num_attention_heads", "must be positive, got " + std::to_string(n_heads));
  require(n_kv_heads > 0, "num_key_value_heads",
          "must be positive, got " + std::to_string(n_kv_heads));
  require(n_heads % n_kv_heads == 0, "num_key_value_heads",
          "(" + std::to_string(n_kv_heads) + ") must divide num_attention_heads (" +
              std::to_string(n_heads) + ")");
  require(head_dim > 0, "head_dim", "must be positive, got " + std::to_string(head_dim));
  require(max_positions > 0, "max_position_embeddings",
          "must be positive, got " + std::to_string(max_positions));
  require(norm_eps > 0.0, "rms_norm_eps", "must be positive");
  // Upper bounds far above any real model, so that sizes derived from a config (matrix
  // bytes, KV cache bytes) cannot overflow 64 bits whatever a config.json claims.
  for (const auto& [value, field, limit] : {std::tuple{hidden_size, "hidden_size", kMaxWidth},
                                            std::tuple{intermediate_size, "intermediate_size", kMaxWidth},
                                            std::tuple{head_dim, "head_dim", kMaxWidth},
                                            std::tuple{n_heads, "num_attention_heads", kMaxWidth},
                                            std::tuple{n_layers, "num_hidden_layers", kMaxLayers},
                                            std::tuple{vocab_size, "vocab_size", kMaxVocab},
                                            std::tuple{max_positions, "max_position_embeddings", kMaxPositions}}) {
    require(value <= limit, field, "is " + std::to_string(value) + ", over loom's limit of " + std::to_string(limit));
  }
  if (position == PositionKind::rope) {
    require(rope_theta > 0.0, "rope_theta", "must be positive");
    require(rope_dims > 0 && rope_dims <= head_dim && rope_dims % 2 == 0, "partial_rotary_factor",
            "gives " + std::to_string(rope_dims) + " rotary dimensions; need an even number in 2.." +
                std::to_string(head_dim));
    const auto& rs = rope_scaling;
    if (rs.kind == RopeScalingKind::linear || rs.kind == RopeScalingKind::llama3) {
      require(rs.factor > 0.0, "rope_scaling.factor", "must be positive");
    }
    if (rs.kind == RopeScalingKind::llama3) {
      require(rs.original_max_positions > 0, "rope_scaling.original_max_position_embeddings",
              "must be positive");
      require(rs.high_freq_factor > rs.low_freq_factor, "rope_scaling.high_freq_factor",
              "must exceed low_freq_factor");
    }
    if (rs.kind == RopeScalingKind::longrope) {
      const auto half = static_cast<size_t>(rope_dims / 2);
      require(rs.short_factor.size() == half, "rope_scaling.short_factor",
              "must have " + std::to_string(half) + " entries, has " +
                  std::to_string(rs.short_factor.size()));
      require(rs.long_factor.size() == half, "rope_scaling.long_factor",
              "must have " + std::to_string(half) + " entries, has " +
                  std::to_string(rs.long_factor.size()));
      require(rs.original_max_positions > 0, "original_max_position_embeddings", "must be positive");
    }
  }
  require(sliding_window >= 0, "sliding_window", "must not be negative");
  require(sliding_window_period >= 1, "sliding_window_pattern", "must be at least 1");
  require(!shared_attn_ffn_norm || parallel_residual, "parallel_attn",
          "must be set when attention and the FFN share one norm");
  require(embedding_scale > 0.0, "embedding_scale", "must be positive");
  require(query_pre_attn_scalar >= 0.0, "query_pre_attn_scalar", "must not be negative");
  require(attn_logit_softcap >= 0.0, "attn_logit_softcapping", "must not be negative");
  require(final_logit_softcap >= 0.0, "final_logit_softcapping", "must not be negative");
  if (bos_token_id) {
    require(*bos_token_id >= 0 && *bos_token_id < vocab_size, "bos_token_id",
            "(" + std::to_string(*bos_token_id) + ") is outside the vocabulary");
  }
  for (int32_t id : eos_token_ids) {
    require(id >= 0 && id < vocab_size, "eos_token_id",
            "(" + std::to_string(id) + ") is outside the vocabulary");
  }
}

}  // namespace loom
