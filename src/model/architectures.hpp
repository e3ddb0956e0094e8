// Internal: the architecture table. Each model family is one ArchitectureSpec, written
// with named fields: how to recognise it, the forward-pass variant it runs, the config
// keys it reads, and how its external tensor names (Hugging Face and GGUF) map onto
// loom's weight slots (model/weight_slots.hpp) — fused tensors and how to split them,
// Conv1D weights stored transposed, values stored differently (Gemma's 1+w norms) —
// plus the names a llama2.c checkpoint's reader gives. The manifest, the config parser,
// the exporter and the pack writer walk these rows; adding a family is adding a row
// (docs/adding-a-model-family.md says when it also needs forward-pass code).
#pragma once

#include <array>
#include <optional>
#include <span>
#include <string>
#include <string_view>

#include "common/json_writer.hpp"
#include "loom/config.hpp"
#include "loom/format.hpp"
#include "model/weight_slots.hpp"

namespace loom::arch {

using slots::Slot;

// How a fused external tensor's rows are divided between its slots.
enum class Split : uint8_t {
  concat,        // [all of slot 1 | all of slot 2 | ...] (q|k|v, gate|up)
  per_head,      // per head h: [q_h | k_h | v_h] (GPT-NeoX's query_key_value)
  per_kv_group,  // per KV group g: [q of its heads | k_g | v_g] (Falcon's query_key_value)
};

// How the stored values relate to the slot's.
enum class Transform : uint8_t {
  none,
  transpose,  // stored [in, out] (GPT-2's Conv1D); the loader transposes it
  add_one,    // stored w where the model scales by 1 + w (Hugging Face Gemma norms)
};

// One external tensor name (pattern) and where its rows go.
//   pattern: the name after a known prefix is stripped; "{N}" stands for the layer.
//   slots:   the slot it holds; more than one means a fusion of them along rows,
//            divided as `split` says, each part as many rows as the config gives it.
//   at_root: the name has no prefix in Hugging Face files (lm_head, GPT-NeoX's embed_out),
//            so the exporter writes it without one.
//   when:    the rule applies only to configs for which it returns true (null: all),
//            e.g. Falcon's GGUF attn_norm, which is the FFN's norm only in the
//            40B-style layout.
struct NameRule {
  std::string_view pattern;
  std::array<Slot, 3> slots{};
  Split split = Split::concat;
  Transform transform = Transform::none;
  bool at_root = false;
  bool (*when)(const ModelConfig&) = nullptr;
};

// The number of slots a rule fills.
constexpr size_t slot_count(const NameRule& rule) noexcept {
  size_t n = 0;
  for (Slot s : rule.slots) n += s != Slot::none ? 1 : 0;
  return n;
}

// Hugging Face config.json keys, first match wins (every list may name aliases).
struct ConfigKeys {
  std::array<std::string_view, 3> vocab_size{"vocab_size"};
  std::array<std::string_view, 3> hidden_size{"hidden_size"};
  std::array<std::string_view, 3> intermediate_size{"intermediate_size"};
  std::array<std::string_view, 3> n_layers{"num_hidden_layers"};
  std::array<std::string_view, 3> n_heads{"num_attention_heads"};
  std::array<std::string_view, 3> n_kv_heads{"num_key_value_heads"};
  std::array<std::string_view, 3> max_positions{"max_position_embeddings"};
  std::array<std::string_view, 3> norm_eps{"rms_norm_eps"};
  std::array<std::string_view, 3> rope_theta{"rope_theta"};
  std::array<std::string_view, 3> partial_rotary{"partial_rotary_factor"};
  std::array<std::string_view, 3> activation{"hidden_act"};
  std::array<std::string_view, 3> parallel_residual{};
  std::array<std::string_view, 3> head_dim{"head_dim"};
  std::array<std::string_view, 3> attn_logit_softcap{"attn_logit_softcapping"};
  std::array<std::string_view, 3> final_logit_softcap{"final_logit_softcapping"};
};

// Reads the keys a family's config hook needs, from config.json or GGUF metadata
// (where `key` is the part after "<arch>.").
class ConfigReader {
 public:
  virtual ~ConfigReader() = default;
  virtual std::optional<int64_t> integer(std::string_view key) const = 0;
  virtual std::optional<double> number(std::string_view key) const = 0;
  virtual std::optional<bool> boolean(std::string_view key) const = 0;
  // Whether the source holds a tensor of this name (GGUF; false for config.json).
  virtual bool has_tensor(std::string_view name) const = 0;
  // Throws loom::Error(format) naming the source.
  [[noreturn]] virtual void fail(const std::string& message) const = 0;
};

// How token embeddings are scaled before the first layer.
enum class EmbeddingScale : uint8_t { none, sqrt_hidden };

struct ArchitectureSpec {
  std::string_view name;                          // loom's key, ModelConfig::architecture
  std::array<std::string_view, 3> hf_classes{};   // config.json "architectures"
  std::array<std::string_view, 3> hf_model_types{};  // config.json "model_type"
  std::array<std::string_view, 2> gguf_names{};   // general.architecture

  // The forward pass.
  NormKind norm = NormKind::rms_norm;
  FfnKind ffn = FfnKind::gated;
  Activation activation = Activation::silu;  // when the config names none (and for GGUF)
  PositionKind position = PositionKind::rope;
  bool qkv_bias = false;
  bool attn_out_bias = false;
  bool ffn_bias = false;
  bool norm_bias = false;
  bool parallel_residual = false;  // x + attn(n1(x)) + ffn(n2(x)); a config key may override
  bool post_norms = false;         // norms on the attention and FFN outputs (Gemma 2)
  EmbeddingScale embedding_scale = EmbeddingScale::none;
  int64_t sliding_window_period = 1;  // layer l slides when l % period == 0

  // Config defaults and keys.
  bool default_tied = false;              // tie_word_embeddings when config.json is silent
  int64_t intermediate_multiple = 0;      // the FFN width is this * hidden when not given
  int64_t default_max_positions = 0;      // the context length when not given (0: required)
  bool honours_sliding_window = false;    // config "sliding_window" applies (Qwen2 only
                                          // with "use_sliding_window": true)
  bool gguf_rope_interleaved = false;     // GGUF q/k rows permuted for interleaved RoPE (llama)
  ConfigKeys hf_keys{};
  // Family-specific config fields (Falcon's multi_query and new_decoder_architecture,
  // Gemma 2's query scale in GGUF), run after the common keys.
  void (*hf_config)(const ConfigReader&, ModelConfig&) = nullptr;
  void (*gguf_config)(const ConfigReader&, ModelConfig&) = nullptr;
  // The same fields written into an exported config.json.
  void (*hf_config_write)(const ModelConfig&, JsonWriter&) = nullptr;
  bool hf_bias_keys = false;  // config.json carries attention_bias / mlp_bias (Llama, Mistral)

  // Tensor names.
  std::array<std::string_view, 3> prefixes{};   // stripped before matching HF names
  std::span<const NameRule> hf_names{};
  std::span<const NameRule> gguf_names_map{};
  std::span<const std::string_view> ignored{};  // non-weight buffers some files carry
  std::span<const NameRule> llama2c_names{};    // llama2.c checkpoints (Meta's names)
};

std::span<const ArchitectureSpec> all_architectures() noexcept;
const ArchitectureSpec* find_by_name(std::string_view name) noexcept;
const ArchitectureSpec* find_by_hf(std::string_view hf_class, std::string_view model_type) noexcept;
const ArchitectureSpec* find_by_gguf(std::string_view gguf_arch) noexcept;
// "llama, mistral, ..." (loom's names) or the GGUF / Hugging Face names, for messages.
std::string supported_names();
std::string supported_gguf_names();

// The name rules for tensors read from a file of `format` (GGUF, llama2.c, the
// identity rules for loom packs, or the Hugging Face names for everything else).
std::span<const NameRule> names_for(const ArchitectureSpec& spec, FormatKind format);
// Whether `rule` applies to `config`.
inline bool applies(const NameRule& rule, const ModelConfig& config) {
  return rule.when == nullptr || rule.when(config);
}

// Matches `name` (prefix already stripped) against `pattern`; on success sets `layer`
// (-1 when the pattern has no {N}).
bool match_pattern(std::string_view pattern, std::string_view name, int64_t& layer) noexcept;

// The activation names a config may give, each mapped to the function it names.
struct ActivationName {
  std::string_view name;
  Activation activation;
};
std::span<const ActivationName> activation_names() noexcept;
// The activation `name` names; throws loom::Error(unsupported) listing the known names.
Activation activation_from_name(std::string_view name, const std::string& file);
// The Hugging Face name written for `activation` on export.
std::string_view activation_name(Activation activation) noexcept;

// Rows of `slot` taken from a fused tensor of `rule` (for the loader and the exporter):
// `runs` runs of `run_rows` rows each, the first at `first_row`, `stride` rows apart.
struct RowRuns {
  int64_t first_row = 0;
  int64_t run_rows = 0;
  int64_t stride = 0;
  int64_t runs = 1;
};
// The row runs of the i-th slot of `rule` (rows are elements for 1-D tensors). Throws
// loom::Error(shape_mismatch) when the config's heads do not divide as the split needs.
RowRuns row_runs(const NameRule& rule, size_t index, const ModelConfig& config);

}  // namespace loom::arch
