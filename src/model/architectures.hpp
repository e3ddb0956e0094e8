// Internal: the architecture table. Each model family is one ArchitectureSpec: how to
// recognise it, the forward-pass choices it makes, the config keys it reads, and how its
// external tensor names (Hugging Face and GGUF) map onto loom's internal weight slots
// (model/weight_slots.hpp), including fused tensors that must be split and Conv1D
// weights stored transposed, and the names a llama2.c checkpoint's reader gives. Adding a family means adding a table entry here; see
// docs/adding-a-model-family.md.
#pragma once

#include <array>
#include <span>
#include <string_view>

#include "loom/config.hpp"
#include "loom/format.hpp"

namespace loom::arch {

// One external tensor name (pattern) and where its rows go.
//   pattern: the name after a known prefix is stripped; "{N}" stands for the layer.
//   targets: internal slot names (see weight_slots.cpp); more than one means the
//            external tensor is a fusion of them along rows (q|k|v, gate|up), split in
//            order by each target's row count from the config.
//   transposed: stored [in, out] (GPT-2's Conv1D); the loader transposes it.
struct NameRule {
  std::string_view pattern;
  std::array<std::string_view, 3> targets;
  bool transposed = false;
};

struct ConfigKeys {
  // Hugging Face config.json keys, first match wins.
  std::array<std::string_view, 3> vocab_size{"vocab_size"};
  std::array<std::string_view, 3> hidden_size{"hidden_size"};
  std::array<std::string_view, 3> intermediate_size{"intermediate_size"};
  std::array<std::string_view, 3> n_layers{"num_hidden_layers"};
  std::array<std::string_view, 3> n_heads{"num_attention_heads"};
  std::array<std::string_view, 3> n_kv_heads{"num_key_value_heads"};
  std::array<std::string_view, 3> max_positions{"max_position_embeddings"};
  std::array<std::string_view, 3> norm_eps{"rms_norm_eps"};
};

struct ArchitectureSpec {
  std::string_view name;                          // loom's key, ModelConfig::architecture
  std::array<std::string_view, 3> hf_classes;     // config.json "architectures"
  std::array<std::string_view, 3> hf_model_types; // config.json "model_type"
  std::array<std::string_view, 2> gguf_names;     // general.architecture
  NormKind norm;
  FfnKind ffn;
  PositionKind position;
  bool qkv_bias;
  bool attn_out_bias;
  bool ffn_bias;
  bool norm_bias;
  bool default_tied;              // tie_word_embeddings when config.json is silent
  int64_t intermediate_multiple;  // GPT-2: n_inner defaults to 4 * hidden
  bool honours_sliding_window;    // config "sliding_window" applies (Mistral, Phi-3; Qwen2
                                  // only with "use_sliding_window": true)
  bool gguf_rope_interleaved;     // GGUF q/k rows permuted for interleaved RoPE (llama)
  ConfigKeys hf_keys;
  std::array<std::string_view, 3> prefixes;       // stripped before matching HF names
  std::span<const NameRule> hf_names;
  std::span<const NameRule> gguf_names_map;
  std::span<const std::string_view> ignored;      // non-weight buffers some files carry
  std::span<const NameRule> llama2c_names;        // llama2.c checkpoints (Meta's names)
};

std::span<const ArchitectureSpec> all_architectures() noexcept;
const ArchitectureSpec* find_by_name(std::string_view name) noexcept;
const ArchitectureSpec* find_by_hf(std::string_view hf_class, std::string_view model_type) noexcept;
const ArchitectureSpec* find_by_gguf(std::string_view gguf_arch) noexcept;

// The name rules for tensors read from a file of `format` (GGUF, llama2.c, or the
// Hugging Face names for everything else).
std::span<const NameRule> names_for(const ArchitectureSpec& spec, FormatKind format) noexcept;

// Matches `name` (prefix already stripped) against `pattern`; on success sets `layer`
// (-1 when the pattern has no {N}).
bool match_pattern(std::string_view pattern, std::string_view name, int64_t& layer) noexcept;

}  // namespace loom::arch
