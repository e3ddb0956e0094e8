#include "loom/exporter.hpp"

#include <cmath>
#include <cstring>
#include <numbers>
#include <set>

#include "common/json_writer.hpp"
#include "format/atomic_file.hpp"
#include "loom/convert.hpp"
#include "loom/error.hpp"
#include "loom/format.hpp"
#include "loom/tokenizer.hpp"
#include "model/architectures.hpp"
#include "model/weight_slots.hpp"
#include "model/config_fields.hpp"
#include "model/rope_frequencies.hpp"
#include "model/rope_order.hpp"
#include "tensor/packing.hpp"

namespace loom {

namespace {

const arch::ArchitectureSpec& spec_of(const ModelConfig& config) {
  const auto* spec = arch::find_by_name(config.architecture);
  if (spec == nullptr) throw Error(ErrorCode::unsupported, "no architecture table for '" + config.architecture + "'");
  return *spec;
}

Tensor with_dtype(const Tensor& t, DType dtype) {
  if (t.dtype() == dtype) return t;
  if (!can_convert(t.dtype(), dtype)) {
    throw Error(ErrorCode::unsupported, "cannot convert " + std::string(dtype_name(t.dtype())) + " to " +
                                            std::string(dtype_name(dtype)));
  }
  Tensor out = Tensor::empty(t.shape(), dtype);
  convert(t.dtype(), t.raw_data(), dtype, out.mutable_raw_data(), static_cast<size_t>(t.numel()));
  return out;
}

// The fused external tensor of `rule` from its slots' tensors, rows placed as the
// rule's split says (the loader's row runs, in reverse).
Tensor fuse_rows(const arch::NameRule& rule, const std::vector<Tensor>& parts, const ModelConfig& config) {
  if (parts.size() == 1) return parts[0];
  const DType dtype = parts[0].dtype();
  int64_t rows = 0;
  for (const auto& p : parts) {
    if (p.dtype() != dtype) throw Error(ErrorCode::internal, "fused parts differ in dtype");
    rows += p.shape()[0];
  }
  const Shape shape = parts[0].shape().rank() == 1 ? Shape{rows} : Shape{rows, parts[0].shape()[1]};
  Tensor out = Tensor::empty(shape, dtype);
  auto* dst = static_cast<std::byte*>(out.mutable_raw_data());
  const int64_t row_bytes = out.nbytes() / rows;
  for (size_t i = 0; i < parts.size(); ++i) {
    const arch::RowRuns runs = arch::row_runs(rule, i, config);
    const auto* src = static_cast<const std::byte*>(parts[i].raw_data());
    for (int64_t r = 0; r < runs.runs; ++r) {
      std::memcpy(dst + (runs.first_row + r * runs.stride) * row_bytes, src + r * runs.run_rows * row_bytes,
                  static_cast<size_t>(runs.run_rows * row_bytes));
    }
  }
  return out;
}

// A norm held as 1 + w, written as the w a Hugging Face Gemma checkpoint stores.
Tensor minus_one(const Tensor& t) {
  Tensor out = with_dtype(t, DType::f32).copy();
  float* v = out.mutable_data<float>();
  for (int64_t i = 0; i < out.numel(); ++i) v[i] -= 1.0f;
  return out;
}

// The external tensors of `format`'s naming (HF or GGUF), fused and laid out as the
// architecture table says.
std::vector<NamedTensor> external_tensors(const ModelConfig& config, const ModelWeights& w,
                                          bool gguf, const ExportOptions& options) {
  const auto& spec = spec_of(config);
  const auto rules = gguf ? spec.gguf_names_map : spec.hf_names;
  const std::string prefix = gguf ? "" : std::string(spec.prefixes[0]);
  const bool want_interleaved = gguf && spec.gguf_rope_interleaved;
  std::vector<NamedTensor> out;
  std::set<std::string> done;
  for (const auto& slot : slots::all_slots()) {
    if (slots::tied_in(config, slot) && slots::shares_tied_storage(w, slot)) done.insert(std::string(slot.name));
  }

  auto slot_tensor = [&](const slots::WeightSlot& slot, int64_t layer) -> std::optional<Tensor> {
    if (!slot.needed(config)) return std::nullopt;
    if (slot.per_layer != (layer >= 0)) return std::nullopt;
    // A matrix loaded in a kernel-native layout is exported as rows.
    Tensor t = unpack(slots::tensor_of(w, slot, layer < 0 ? 0 : layer));
    if (!t.defined()) return std::nullopt;
    if (slots::is_vector(slot.role)) {
      t = with_dtype(t, DType::f32);
    } else if (options.dtype) {
      t = with_dtype(t, *options.dtype);
    }
    if (slot.rope_rows != slots::RopeRows::none && want_interleaved != w.rope_interleaved) {
      const int64_t heads = slot.rope_rows == slots::RopeRows::query_heads ? config.n_heads : config.n_kv_heads;
      t = want_interleaved ? rope_order::half_to_interleaved(t, heads, config.head_dim)
                           : rope_order::interleaved_to_half(t, heads, config.head_dim);
    }
    return t;
  };

  for (const auto& rule : rules) {
    if (!arch::applies(rule, config)) continue;
    const bool per_layer = rule.pattern.find("{N}") != std::string_view::npos;
    const int64_t layers = per_layer ? config.n_layers : 1;
    for (int64_t l = 0; l < layers; ++l) {
      const int64_t layer = per_layer ? l : -1;
      std::vector<Tensor> parts;
      std::vector<std::string> names;
      bool usable = true;
      for (size_t i = 0; i < arch::slot_count(rule); ++i) {
        const slots::WeightSlot& slot = slots::slot(rule.slots[i]);
        const std::string full = slots::full_name(slot, layer);
        auto t = slot_tensor(slot, layer);
        if (!t || done.count(full)) {
          usable = false;
          break;
        }
        parts.push_back(*t);
        names.push_back(full);
      }
      if (!usable || parts.empty()) continue;
      Tensor t = fuse_rows(rule, parts, config);
      if (rule.transform == arch::Transform::transpose && t.shape().rank() == 2) t = t.transpose2d().copy();
      if (rule.transform == arch::Transform::add_one) t = minus_one(t);
      std::string name(rule.pattern);
      if (auto at = name.find("{N}"); at != std::string::npos) name.replace(at, 3, std::to_string(l));
      out.push_back({(rule.at_root ? std::string() : prefix) + name, t});
      done.insert(names.begin(), names.end());
    }
  }
  // Every slot the config needs must have found a name in this format.
  for (const auto& slot : slots::all_slots()) {
    if (!slot.needed(config)) continue;
    const int64_t layers = slot.per_layer ? config.n_layers : 1;
    for (int64_t l = 0; l < layers; ++l) {
      const std::string full = slots::full_name(slot, l);
      if (!done.count(full)) {
        throw Error(ErrorCode::unsupported, "no " + std::string(gguf ? "GGUF" : "Hugging Face") +
                                                " name for " + full + " in the " + config.architecture + " table");
      }
    }
  }
  return out;
}

// ---- GGUF metadata ----

Tensor f32_vector(const std::vector<double>& v) {
  Tensor t = Tensor::empty(Shape{static_cast<int64_t>(v.size())}, DType::f32);
  for (size_t i = 0; i < v.size(); ++i) t.mutable_data<float>()[i] = static_cast<float>(v[i]);
  return t;
}

Metadata gguf_metadata(const ModelConfig& c, const arch::ArchitectureSpec& spec,
                       std::vector<NamedTensor>& extra_tensors, const std::shared_ptr<const Tokenizer>& tok) {
  using T = MetaValue::Type;
  const std::string a(spec.gguf_names[0].empty() ? std::string_view("llama") : spec.gguf_names[0]);
  Metadata md;
  auto u32 = [&](const std::string& k, int64_t v) { md.set(a + "." + k, MetaValue::of_uint(static_cast<uint64_t>(v), T::u32)); };
  auto f32 = [&](const std::string& k, double v) { md.set(a + "." + k, MetaValue::of_float(v, T::f32)); };
  md.set("general.architecture", MetaValue::of_string(a));
  md.set("general.name", MetaValue::of_string(c.architecture));
  md.set("general.file_type", MetaValue::of_uint(0, T::u32));
  // The numeric fields, from the config-field table, under llama.cpp's keys.
  for (const auto& f : config_fields::all()) {
    if (f.gguf_keys[0].empty() || (f.gguf_write != nullptr && !f.gguf_write(c))) continue;
    const std::string key(f.gguf_key_by_norm && c.norm == NormKind::layer_norm ? f.gguf_keys[1] : f.gguf_keys[0]);
    if (f.integer != nullptr) {
      u32(key, c.*f.integer);
    } else {
      f32(key, c.*f.number);
    }
  }
  if (c.head_dim * c.n_heads != c.hidden_size) u32("attention.value_length", c.head_dim);
  if (c.parallel_residual) md.set(a + ".use_parallel_residual", MetaValue::of_bool(true));
  // What GGUF has no key for and llama.cpp derives from the family, loom states under
  // its own keys when the model differs from that derivation (config_parse reads them):
  // an activation other than the family's (GPT-2 with the exact GELU), Gemma 2's query
  // scale.
  if (c.activation != spec.activation) {
    md.set("loom.activation", MetaValue::of_string(std::string(arch::activation_name(c.activation))));
  }
  if (c.query_pre_attn_scalar > 0) md.set("loom.query_pre_attn_scalar", MetaValue::of_float(c.query_pre_attn_scalar, T::f32));
  switch (c.rope_scaling.kind) {
    case RopeScalingKind::none: break;
    case RopeScalingKind::linear:
      md.set(a + ".rope.scaling.type", MetaValue::of_string("linear"));
      f32("rope.scaling.factor", c.rope_scaling.factor);
      break;
    case RopeScalingKind::llama3: {
      extra_tensors.push_back({"rope_freqs.weight", f32_vector(rope::scaling_divisors(c))});
      break;
    }
    case RopeScalingKind::longrope:
      extra_tensors.push_back({"rope_factors_long.weight", f32_vector(c.rope_scaling.long_factor)});
      extra_tensors.push_back({"rope_factors_short.weight", f32_vector(c.rope_scaling.short_factor)});
      u32("rope.scaling.original_context_length", c.rope_scaling.original_max_positions);
      break;
  }
  if (tok && tok->has_gguf_metadata()) {
    const Metadata tokenizer_md = tok->to_gguf_metadata();
    for (const auto& [key, value] : tokenizer_md.entries()) md.set(key, value);
  } else {
    if (c.bos_token_id) md.set("tokenizer.ggml.bos_token_id", MetaValue::of_uint(static_cast<uint64_t>(*c.bos_token_id), T::u32));
    if (!c.eos_token_ids.empty()) {
      md.set("tokenizer.ggml.eos_token_id", MetaValue::of_uint(static_cast<uint64_t>(c.eos_token_ids[0]), T::u32));
    }
  }
  return md;
}

}  // namespace

std::string hf_config_json(const ModelConfig& c) {
  const auto& spec = spec_of(c);
  const auto& k = spec.hf_keys;
  JsonWriter w;
  w.begin_object();
  w.key("architectures").begin_array().value(spec.hf_classes[0]).end_array();
  w.field("model_type", spec.hf_model_types[0]);
  // The numeric fields, from the config-field table, each under the family's first key.
  for (const auto& f : config_fields::all()) {
    if (f.hf_keys == nullptr || (f.hf_write != nullptr && !f.hf_write(c))) continue;
    const std::string_view key = (k.*f.hf_keys)[0];
    if (f.integer != nullptr) {
      w.field(key, c.*f.integer);
    } else {
      w.field(key, c.*f.number);
    }
  }
  if (c.position == PositionKind::rope) {
    if (c.rope_dims != c.head_dim) w.field(k.partial_rotary[0], static_cast<double>(c.rope_dims) / static_cast<double>(c.head_dim));
    w.key("rope_scaling");
    const auto& rs = c.rope_scaling;
    switch (rs.kind) {
      case RopeScalingKind::none: w.null(); break;
      case RopeScalingKind::linear:
        w.begin_object().field("rope_type", "linear").field("factor", rs.factor).end_object();
        break;
      case RopeScalingKind::llama3:
        w.begin_object().field("rope_type", "llama3").field("factor", rs.factor);
        w.field("low_freq_factor", rs.low_freq_factor).field("high_freq_factor", rs.high_freq_factor);
        w.field("original_max_position_embeddings", rs.original_max_positions).end_object();
        break;
      case RopeScalingKind::longrope:
        w.begin_object().field("rope_type", "longrope");
        w.key("short_factor").begin_array();
        for (double f : rs.short_factor) w.value(f);
        w.end_array().key("long_factor").begin_array();
        for (double f : rs.long_factor) w.value(f);
        w.end_array().end_object();
        w.field("original_max_position_embeddings", rs.original_max_positions);
        break;
    }
  }
  w.field(k.activation[0], arch::activation_name(c.activation));
  if (spec.hf_bias_keys) w.field("attention_bias", c.qkv_bias).field("mlp_bias", c.ffn_bias);
  if (!k.parallel_residual[0].empty()) w.field(k.parallel_residual[0], c.parallel_residual);
  if (spec.honours_sliding_window) {
    w.key("sliding_window");
    if (c.sliding_window > 0) {
      w.value(c.sliding_window);
    } else {
      w.null();
    }
  } else if (c.sliding_window > 0) {
    w.field("sliding_window", c.sliding_window);
  }
  if (c.query_pre_attn_scalar > 0) w.field("query_pre_attn_scalar", c.query_pre_attn_scalar);
  if (spec.hf_config_write != nullptr) spec.hf_config_write(c, w);
  w.field("tie_word_embeddings", c.tie_word_embeddings);
  if (c.bos_token_id) w.field("bos_token_id", static_cast<int64_t>(*c.bos_token_id));
  if (c.eos_token_ids.size() == 1) {
    w.field("eos_token_id", static_cast<int64_t>(c.eos_token_ids[0]));
  } else if (!c.eos_token_ids.empty()) {
    w.key("eos_token_id").begin_array();
    for (int32_t id : c.eos_token_ids) w.value(static_cast<int64_t>(id));
    w.end_array();
  }
  w.field("torch_dtype", c.torch_dtype.empty() ? std::string("float32") : c.torch_dtype);
  w.end_object();
  return w.str() + "\n";
}

void export_model(const ModelConfig& config, const ModelWeights& weights, const std::filesystem::path& out,
                  ExportFormat format, const ExportOptions& options) {
  config.validate();
  if (format == ExportFormat::gguf) {
    auto tensors = external_tensors(config, weights, true, options);
    std::vector<NamedTensor> extra;
    const Metadata md = gguf_metadata(config, spec_of(config), extra, options.tokenizer);
    tensors.insert(tensors.end(), extra.begin(), extra.end());
    write_gguf(out, md, tensors);
    return;
  }
  std::filesystem::create_directories(out);
  const auto tensors = external_tensors(config, weights, false, options);
  switch (format) {
    case ExportFormat::safetensors:
      write_safetensors(out / "model.safetensors", tensors, {{"format", "pt"}});
      break;
    case ExportFormat::safetensors_sharded:
      write_safetensors_sharded(out, "model", tensors, options.shards, {{"format", "pt"}});
      break;
    case ExportFormat::torch:
      write_torch(out / "pytorch_model.bin", tensors);
      break;
    case ExportFormat::npy:
      for (const auto& t : tensors) write_npy(out / (t.name + ".npy"), t.tensor);
      break;
    case ExportFormat::gguf: break;
  }
  format::write_file_atomically(out / "config.json", hf_config_json(config));
}

}  // namespace loom
