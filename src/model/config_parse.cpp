#include "model/config_parse.hpp"

#include <simdjson.h>

#include <algorithm>
#include <cmath>
#include <optional>

#include "format/lenient_json.hpp"
#include "loom/convert.hpp"
#include "loom/error.hpp"
#include "model/architectures.hpp"
#include "model/config_fields.hpp"
#include "tokenizer/gguf_vocab.hpp"

namespace loom::config_parse {

namespace {

using simdjson::dom::element;
using simdjson::dom::element_type;

[[noreturn]] void fail(const std::string& path, const std::string& message) {
  throw Error(ErrorCode::format, message, {.file = path});
}

// A config.json object with typed, null-aware lookups that name the key in errors.
class JsonConfig {
 public:
  JsonConfig(element root, std::string path) : root_(root), path_(std::move(path)) {}

  std::optional<element> get(std::string_view key) const {
    element value;
    if (root_[key].get(value) != simdjson::SUCCESS) return std::nullopt;
    if (value.type() == element_type::NULL_VALUE) return std::nullopt;
    return value;
  }

  std::optional<int64_t> integer(std::string_view key) const {
    auto v = get(key);
    if (!v) return std::nullopt;
    int64_t i = 0;
    if (v->get(i) == simdjson::SUCCESS) return i;
    uint64_t u = 0;
    if (v->get(u) == simdjson::SUCCESS && u <= static_cast<uint64_t>(INT64_MAX)) return static_cast<int64_t>(u);
    double d = 0;
    if (v->get(d) == simdjson::SUCCESS && std::floor(d) == d && std::abs(d) < 1e15) return static_cast<int64_t>(d);
    fail(path_, "config field '" + std::string(key) + "' must be an integer");
  }

  std::optional<double> number(std::string_view key) const {
    auto v = get(key);
    if (!v) return std::nullopt;
    double d = 0;
    if (v->get(d) == simdjson::SUCCESS) return d;
    int64_t i = 0;
    if (v->get(i) == simdjson::SUCCESS) return static_cast<double>(i);
    uint64_t u = 0;
    if (v->get(u) == simdjson::SUCCESS) return static_cast<double>(u);
    fail(path_, "config field '" + std::string(key) + "' must be a number");
  }

  std::optional<bool> boolean(std::string_view key) const {
    auto v = get(key);
    if (!v) return std::nullopt;
    bool b = false;
    if (v->get(b) == simdjson::SUCCESS) return b;
    fail(path_, "config field '" + std::string(key) + "' must be true or false");
  }

  std::optional<std::string> string(std::string_view key) const {
    auto v = get(key);
    if (!v) return std::nullopt;
    std::string_view s;
    if (v->get(s) == simdjson::SUCCESS) return std::string(s);
    fail(path_, "config field '" + std::string(key) + "' must be a string");
  }

  // An int or a list of ints (eos_token_id may be either).
  std::vector<int32_t> int_list(std::string_view key) const {
    auto v = get(key);
    if (!v) return {};
    std::vector<int32_t> out;
    simdjson::dom::array arr;
    if (v->get(arr) == simdjson::SUCCESS) {
      for (element e : arr) {
        int64_t i = 0;
        if (e.get(i) != simdjson::SUCCESS) fail(path_, "config field '" + std::string(key) + "' must hold integers");
        out.push_back(static_cast<int32_t>(i));
      }
      return out;
    }
    out.push_back(static_cast<int32_t>(*integer(key)));
    return out;
  }

  template <size_t N>
  std::optional<int64_t> first_integer(const std::array<std::string_view, N>& keys) const {
    for (auto k : keys) {
      if (k.empty()) continue;
      if (auto v = integer(k)) return v;
    }
    return std::nullopt;
  }

  template <size_t N>
  std::optional<double> first_number(const std::array<std::string_view, N>& keys) const {
    for (auto k : keys) {
      if (k.empty()) continue;
      if (auto v = number(k)) return v;
    }
    return std::nullopt;
  }

  template <size_t N>
  int64_t required_integer(const std::array<std::string_view, N>& keys) const {
    if (auto v = first_integer(keys)) return *v;
    fail(path_, "config field '" + std::string(keys[0]) + "' is missing");
  }

  const std::string& path() const { return path_; }
  element root() const { return root_; }

 private:
  element root_;
  std::string path_;
};

std::vector<double> number_list(element e, const std::string& path, std::string_view key) {
  simdjson::dom::array arr;
  if (e.get(arr) != simdjson::SUCCESS) fail(path, "config field '" + std::string(key) + "' must be a list of numbers");
  std::vector<double> out;
  for (element v : arr) {
    double d = 0;
    int64_t i = 0;
    if (v.get(d) == simdjson::SUCCESS) {
      out.push_back(d);
    } else if (v.get(i) == simdjson::SUCCESS) {
      out.push_back(static_cast<double>(i));
    } else {
      fail(path, "config field '" + std::string(key) + "' must be a list of numbers");
    }
  }
  return out;
}

void parse_rope_scaling(const JsonConfig& json, ModelConfig& c) {
  auto scaling = json.get("rope_scaling");
  if (!scaling) return;
  if (scaling->type() != element_type::OBJECT) fail(json.path(), "config field 'rope_scaling' must be an object or null");
  JsonConfig rs(*scaling, json.path());
  auto type = rs.string("rope_type");
  if (!type) type = rs.string("type");
  if (!type) fail(json.path(), "config field 'rope_scaling.rope_type' is missing");
  auto& out = c.rope_scaling;
  if (*type == "default") return;
  if (*type == "linear") {
    out.kind = RopeScalingKind::linear;
    out.factor = rs.number("factor").value_or(1.0);
  } else if (*type == "llama3") {
    out.kind = RopeScalingKind::llama3;
    out.factor = rs.number("factor").value_or(8.0);
    out.low_freq_factor = rs.number("low_freq_factor").value_or(1.0);
    out.high_freq_factor = rs.number("high_freq_factor").value_or(4.0);
    out.original_max_positions = rs.integer("original_max_position_embeddings").value_or(8192);
  } else if (*type == "longrope" || *type == "su") {
    out.kind = RopeScalingKind::longrope;
    if (auto v = rs.get("short_factor")) out.short_factor = number_list(*v, json.path(), "rope_scaling.short_factor");
    if (auto v = rs.get("long_factor")) out.long_factor = number_list(*v, json.path(), "rope_scaling.long_factor");
    out.original_max_positions = json.integer("original_max_position_embeddings")
                                     .value_or(rs.integer("original_max_position_embeddings").value_or(0));
  } else {
    throw Error(ErrorCode::unsupported,
                "config field 'rope_scaling' type '" + *type +
                    "' is not supported (supported: linear, llama3, longrope)",
                {.file = json.path()});
  }
}

// config.json behind the architecture table's family hooks.
class JsonReader final : public arch::ConfigReader {
 public:
  explicit JsonReader(const JsonConfig& json) : json_(json) {}
  std::optional<int64_t> integer(std::string_view key) const override { return json_.integer(key); }
  std::optional<double> number(std::string_view key) const override { return json_.number(key); }
  std::optional<bool> boolean(std::string_view key) const override { return json_.boolean(key); }
  bool has_tensor(std::string_view) const override { return false; }
  [[noreturn]] void fail(const std::string& message) const override {
    throw Error(ErrorCode::unsupported, message, {.file = json_.path()});
  }

 private:
  const JsonConfig& json_;
};

// The fields every family shares, from the architecture row.
void apply_spec(const arch::ArchitectureSpec& spec, ModelConfig& c) {
  c.architecture = std::string(spec.name);
  c.norm = spec.norm;
  c.ffn = spec.ffn;
  c.activation = spec.activation;
  c.position = spec.position;
  c.qkv_bias = spec.qkv_bias;
  c.attn_out_bias = spec.attn_out_bias;
  c.ffn_bias = spec.ffn_bias;
  c.norm_bias = spec.norm_bias;
  c.parallel_residual = spec.parallel_residual;
  c.post_norms = spec.post_norms;
  c.sliding_window_period = spec.sliding_window_period;
}

// Embedding scale and other values derived from the final shape.
void apply_derived(const arch::ArchitectureSpec& spec, ModelConfig& c) {
  if (spec.embedding_scale == arch::EmbeddingScale::sqrt_hidden) {
    // As transformers' Gemma: the normalizer is sqrt(hidden) rounded to the activations' f32.
    c.embedding_scale = static_cast<double>(static_cast<float>(std::sqrt(static_cast<double>(c.hidden_size))));
  }
}

}  // namespace

ModelConfig from_hf_json(std::string_view text, const std::string& path, std::vector<std::string>* warnings) {
  simdjson::dom::parser parser;
  simdjson::padded_string padded;
  const element root = format::parse_lenient_json(parser, padded, text, path, warnings);
  if (root.type() != element_type::OBJECT) fail(path, "config.json must hold a JSON object");
  JsonConfig json(root, path);

  std::string hf_class;
  if (auto archs = json.get("architectures")) {
    simdjson::dom::array arr;
    std::string_view first;
    if (archs->get(arr) == simdjson::SUCCESS && arr.size() > 0 && arr.at(0).get(first) == simdjson::SUCCESS) {
      hf_class = std::string(first);
    }
  }
  const std::string model_type = json.string("model_type").value_or("");
  const arch::ArchitectureSpec* spec = arch::find_by_hf(hf_class, model_type);
  if (spec == nullptr) {
    throw Error(ErrorCode::unsupported,
                "architecture '" + (hf_class.empty() ? model_type : hf_class) +
                    "' is not supported (supported: " + arch::supported_names() + ")",
                {.file = path});
  }
  const auto& keys = spec->hf_keys;
  ModelConfig c;
  apply_spec(*spec, c);

  // The numeric fields, from the config-field table (model/config_fields.cpp).
  try {
    config_fields::read_all(
        *spec, true, c, [&](std::string_view key) { return json.integer(key); },
        [&](std::string_view key) { return json.number(key); },
        [&](std::string_view key) { fail(path, "config field '" + std::string(key) + "' is missing"); });
  } catch (const Error& e) {
    throw e.with_context({.file = path});
  }
  // config.json states the rotated share of each head; RoPE needs the dimensions.
  const double partial = json.first_number(keys.partial_rotary).value_or(1.0);
  c.rope_dims = static_cast<int64_t>(std::llround(static_cast<double>(c.head_dim) * partial));
  parse_rope_scaling(json, c);
  c.tie_word_embeddings = json.boolean("tie_word_embeddings").value_or(spec->default_tied);
  if (auto bias = json.boolean("attention_bias")) c.qkv_bias = c.attn_out_bias = *bias || spec->qkv_bias;
  if (auto bias = json.boolean("mlp_bias")) c.ffn_bias = *bias || spec->ffn_bias;
  if (spec->honours_sliding_window && json.boolean("use_sliding_window").value_or(true)) {
    c.sliding_window = json.integer("sliding_window").value_or(0);
  }
  // The activation: each name maps to the function it really names (model/architectures.cpp).
  for (auto key : keys.activation) {
    if (key.empty()) continue;
    if (auto act = json.string(key)) {
      try {
        c.activation = arch::activation_from_name(*act, path);
      } catch (const Error& e) {
        throw Error(e.code(), "config field '" + std::string(key) + "': " + e.detail(), {.file = path});
      }
      break;
    }
  }
  for (auto key : keys.parallel_residual) {
    if (key.empty()) continue;
    if (auto parallel = json.boolean(key)) {
      c.parallel_residual = *parallel;
      break;
    }
  }
  if (spec->hf_config != nullptr) spec->hf_config(JsonReader(json), c);
  apply_derived(*spec, c);
  if (auto bos = json.integer("bos_token_id")) c.bos_token_id = static_cast<int32_t>(*bos);
  c.eos_token_ids = json.int_list("eos_token_id");
  c.torch_dtype = json.string("torch_dtype").value_or("");
  try {
    c.validate();
  } catch (const Error& e) {
    throw e.with_context({.file = path});
  }
  return c;
}

namespace {

class GgufConfig {
 public:
  GgufConfig(const WeightSource& source, std::string arch) : md_(source.metadata()), arch_(std::move(arch)), path_(source.root()) {}

  const MetaValue* find(std::string_view key) const {
    return md_.find(arch_ + "." + std::string(key));
  }
  std::optional<int64_t> integer(std::string_view key) const {
    const MetaValue* v = find(key);
    if (v == nullptr) return std::nullopt;
    try {
      return v->as_int();
    } catch (const Error&) {
      fail(path_, "GGUF key '" + arch_ + "." + std::string(key) + "' must be an integer");
    }
  }
  std::optional<double> number(std::string_view key) const {
    const MetaValue* v = find(key);
    if (v == nullptr) return std::nullopt;
    try {
      return v->as_double();
    } catch (const Error&) {
      fail(path_, "GGUF key '" + arch_ + "." + std::string(key) + "' must be a number");
    }
  }
  int64_t required(std::string_view key) const {
    if (auto v = integer(key)) return *v;
    fail(path_, "GGUF key '" + arch_ + "." + std::string(key) + "' is missing");
  }
  std::optional<int64_t> global_integer(std::string_view key) const {
    const MetaValue* v = md_.find(key);
    if (v == nullptr) return std::nullopt;
    return v->as_int();
  }

 private:
  const Metadata& md_;
  std::string arch_;
  std::string path_;
};

class GgufReader final : public arch::ConfigReader {
 public:
  GgufReader(const GgufConfig& g, const WeightSource& source) : g_(g), source_(source) {}
  std::optional<int64_t> integer(std::string_view key) const override { return g_.integer(key); }
  std::optional<double> number(std::string_view key) const override { return g_.number(key); }
  std::optional<bool> boolean(std::string_view key) const override {
    const MetaValue* v = g_.find(key);
    if (v == nullptr) return std::nullopt;
    return v->as_bool();
  }
  bool has_tensor(std::string_view name) const override { return source_.find(name) != nullptr; }
  [[noreturn]] void fail(const std::string& message) const override {
    throw Error(ErrorCode::unsupported, message, {.file = source_.root()});
  }

 private:
  const GgufConfig& g_;
  const WeightSource& source_;
};

}  // namespace

ModelConfig from_gguf(const WeightSource& source) {
  const std::string& path = source.root();
  const MetaValue* arch_value = source.metadata().find("general.architecture");
  if (arch_value == nullptr || arch_value->type() != MetaValue::Type::string) {
    fail(path, "GGUF key 'general.architecture' is missing");
  }
  const std::string gguf_arch = arch_value->as_string();
  const arch::ArchitectureSpec* spec = arch::find_by_gguf(gguf_arch);
  if (spec == nullptr) {
    throw Error(ErrorCode::unsupported,
                "GGUF architecture '" + gguf_arch + "' is not supported (supported: " +
                    arch::supported_gguf_names() + ")",
                {.file = path});
  }
  GgufConfig g(source, gguf_arch);
  ModelConfig c;
  apply_spec(*spec, c);
  // The numeric fields, from the config-field table (model/config_fields.cpp). An
  // explicit window in a GGUF is honoured for every family (llama.cpp's converter writes
  // none for Mistral, so its Mistral GGUFs run with full attention, as there).
  try {
    config_fields::read_all(
        *spec, false, c, [&](std::string_view key) { return g.integer(key); },
        [&](std::string_view key) { return g.number(key); },
        [&](std::string_view key) { fail(path, "GGUF key '" + gguf_arch + "." + std::string(key) + "' is missing"); });
  } catch (const Error& e) {
    throw e.with_context({.file = path});
  }

  if (spec->gguf_config != nullptr) spec->gguf_config(GgufReader(g, source), c);
  // loom's own keys for what GGUF cannot say (written by the exporter, see there).
  if (const MetaValue* act = source.metadata().find("loom.activation");
      act != nullptr && act->type() == MetaValue::Type::string) {
    c.activation = arch::activation_from_name(act->as_string(), path);
  }
  if (const MetaValue* scalar = source.metadata().find("loom.query_pre_attn_scalar"); scalar != nullptr) {
    c.query_pre_attn_scalar = scalar->as_double();
  }

  if (const MetaValue* type = g.find("rope.scaling.type"); type != nullptr && type->type() == MetaValue::Type::string) {
    const std::string& t = type->as_string();
    if (t == "linear") {
      c.rope_scaling.kind = RopeScalingKind::linear;
      c.rope_scaling.factor = g.number("rope.scaling.factor").value_or(1.0);
    } else if (t != "none") {
      throw Error(ErrorCode::unsupported, "GGUF rope scaling type '" + t + "' is not supported", {.file = path});
    }
  }
  // Per-frequency RoPE divisors stored as tensors (Llama 3.1's rope_freqs, Phi-3's
  // LongRoPE factors) become longrope scaling.
  auto factors = [&](std::string_view name) -> std::vector<double> {
    const TensorRecord* r = source.find(name);
    if (r == nullptr) return {};
    Tensor t = source.load(*r);
    std::vector<float> f(static_cast<size_t>(t.numel()));
    convert(t.dtype(), t.raw_data(), DType::f32, f.data(), f.size());
    return {f.begin(), f.end()};
  };
  if (auto freqs = factors("rope_freqs.weight"); !freqs.empty()) {
    c.rope_scaling.kind = RopeScalingKind::longrope;
    c.rope_scaling.short_factor = freqs;
    c.rope_scaling.long_factor = freqs;
    c.rope_scaling.original_max_positions = c.max_positions;
  } else if (auto lf = factors("rope_factors_long.weight"); !lf.empty()) {
    c.rope_scaling.kind = RopeScalingKind::longrope;
    c.rope_scaling.long_factor = lf;
    c.rope_scaling.short_factor = factors("rope_factors_short.weight");
    c.rope_scaling.original_max_positions = g.integer("rope.scaling.original_context_length").value_or(c.max_positions);
  }

  // <arch>.vocab_size is optional (read with the table above): else the tokenizer's
  // size, else the embedding's rows.
  if (c.vocab_size <= 0) {
    if (const MetaValue* tokens = source.metadata().find("tokenizer.ggml.tokens");
        tokens != nullptr && tokens->type() == MetaValue::Type::array) {
      c.vocab_size = static_cast<int64_t>(tokens->array_size());
    } else if (const TensorRecord* embd = source.find("token_embd.weight"); embd != nullptr && embd->shape.rank() == 2) {
      c.vocab_size = embd->shape[0];
    } else {
      fail(path, "cannot tell the vocabulary size: no '" + gguf_arch +
                     ".vocab_size', no tokenizer.ggml.tokens and no token_embd.weight");
    }
  }
  // GGUF has no tie flag: a missing output.weight means the embedding is reused.
  c.tie_word_embeddings = source.find("output.weight") == nullptr;
  apply_derived(*spec, c);
  auto id = [&](std::string_view key) -> std::optional<int32_t> {
    auto v = g.global_integer(key);
    if (!v || *v < 0 || *v >= c.vocab_size) return std::nullopt;  // 0xFFFFFFFF means "none"
    return static_cast<int32_t>(*v);
  };
  c.bos_token_id = id("tokenizer.ggml.bos_token_id");
  if (auto eos = id("tokenizer.ggml.eos_token_id")) c.eos_token_ids.push_back(*eos);
  // End-of-turn ids end generation too, when they name special tokens (the rule and why
  // live with the GGUF vocabulary reader).
  for (int32_t eot : tok::gguf_end_of_turn_ids(source.metadata(), path)) {
    if (eot < c.vocab_size && std::find(c.eos_token_ids.begin(), c.eos_token_ids.end(), eot) == c.eos_token_ids.end()) {
      c.eos_token_ids.push_back(eot);
    }
  }
  try {
    c.validate();
  } catch (const Error& e) {
    throw e.with_context({.file = path});
  }
  return c;
}

ModelConfig from_llama2c(const WeightSource& source) {
  const std::string& path = source.root();
  auto field = [&](std::string_view key) -> int64_t {
    const MetaValue* v = source.metadata().find("llama2c." + std::string(key));
    if (v == nullptr || !v->is_integer()) fail(path, "llama2.c header field '" + std::string(key) + "' is missing");
    return v->as_int();
  };
  const arch::ArchitectureSpec* spec = arch::find_by_name("llama");
  ModelConfig c;
  apply_spec(*spec, c);
  c.hidden_size = field("dim");
  c.intermediate_size = field("hidden_dim");
  c.n_layers = field("n_layers");
  c.n_heads = field("n_heads");
  c.n_kv_heads = field("n_kv_heads");
  c.vocab_size = field("vocab_size");
  c.max_positions = field("seq_len");
  if (c.n_heads <= 0) fail(path, "llama2.c header field 'n_heads' must be positive");
  c.head_dim = c.hidden_size / c.n_heads;
  c.rope_dims = c.head_dim;
  // run.c hard-codes these; the file does not carry them.
  c.norm_eps = 1e-5;
  c.rope_theta = 10000.0;
  const MetaValue* shared = source.metadata().find("llama2c.shared_classifier");
  c.tie_word_embeddings = shared == nullptr || shared->as_bool();
  if (c.vocab_size > 2) {
    c.bos_token_id = 1;
    // run.c ends a sequence at BOS too: TinyStories are separated by it.
    c.eos_token_ids = {2, 1};
  }
  c.torch_dtype = "float32";
  try {
    c.validate();
  } catch (const Error& e) {
    throw e.with_context({.file = path});
  }
  return c;
}

}  // namespace loom::config_parse
