// Each model family as a generated tiny fixture, written in safetensors and GGUF by
// loom's own writers, loaded back and run against the naive reference forward.
#include <catch2/catch.hpp>

#include <string>
#include <vector>

#include "loom/exporter.hpp"
#include "loom/loader.hpp"
#include "loom/session.hpp"
#include "support/test_support.hpp"
#include "support/tiny_model.hpp"

namespace t = loom::test;
using loom::ExportFormat;

namespace {

loom::ModelConfig family_config(const std::string& family) {
  auto c = t::tiny_llama_config();
  c.architecture = family;
  if (family == "qwen2") {
    c.qkv_bias = true;
    c.tie_word_embeddings = true;
    c.rope_theta = 1e6;
    c.norm_eps = 1e-6;
  } else if (family == "mistral") {
    c.sliding_window = 6;
  } else if (family == "phi3") {
    c.n_kv_heads = c.n_heads;  // Phi-3 mini: MHA
    c.sliding_window = 2047;
  } else if (family == "gpt2") {
    c.norm = loom::NormKind::layer_norm;
    c.norm_bias = true;
    c.ffn = loom::FfnKind::gelu_mlp;
    c.activation = loom::Activation::gelu_tanh;
    c.position = loom::PositionKind::learned;
    c.qkv_bias = c.attn_out_bias = c.ffn_bias = true;
    c.n_kv_heads = c.n_heads;
    c.intermediate_size = 4 * c.hidden_size;
    c.tie_word_embeddings = true;
    c.max_positions = 64;
  }
  return c;
}

struct Layout {
  std::string tensor;  // internal name
  std::string change;  // expected substring of its layout change ("" = none)
};

void check_family(const std::string& family, const std::vector<Layout>& hf_layout,
                  const std::vector<Layout>& gguf_layout) {
  const auto config = family_config(family);
  const auto weights = t::random_weights(config, 31);
  std::vector<int32_t> prompt(20);
  for (size_t i = 0; i < prompt.size(); ++i) prompt[i] = static_cast<int32_t>((i * 13 + 5) % 128);
  const auto ref = t::reference_logits(config, weights, prompt);
  t::TempDir dir;
  for (auto [format, name, layout] : {std::tuple{ExportFormat::safetensors, std::string("hf"), &hf_layout},
                                      std::tuple{ExportFormat::gguf, std::string("m.gguf"), &gguf_layout}}) {
    INFO(family << " " << name);
    loom::export_model(config, weights, dir / name, format);
    loom::LoadOptions o;
    o.logger = loom::Logger::silent();
    o.strict = true;
    auto model = loom::load_model(dir / name, o);
    CHECK(model->config().architecture == (family == "mistral" && format == ExportFormat::gguf ? "llama" : family));
    loom::SessionOptions so;
    so.all_logits = true;
    so.context_length = 64;
    loom::Session s(model, so);
    s.prefill(prompt);
    for (size_t i = 0; i < prompt.size(); ++i) {
      INFO("position " << i);
      CHECK(t::max_abs_diff(s.logits_at(static_cast<int64_t>(i)), ref[i]) < 1e-4);
    }
    const auto& report = *model->load_report();
    for (const auto& want : *layout) {
      bool found = false;
      for (const auto& rec : report.tensors) {
        if (rec.internal_name != want.tensor) continue;
        found = true;
        INFO(rec.internal_name << ": '" << rec.layout_change << "'");
        if (want.change.empty()) {
          CHECK(rec.layout_change.empty());
        } else {
          CHECK(rec.layout_change.find(want.change) != std::string::npos);
        }
      }
      CHECK(found);
    }
  }
}

}  // namespace

TEST_CASE("family: qwen2 (q/k/v biases, tied embeddings) in safetensors and GGUF") {
  check_family("qwen2", {{"blk.0.attn_q_bias", ""}}, {{"blk.0.attn_q", ""}});
}

TEST_CASE("family: mistral (sliding window) in safetensors and GGUF") {
  // The GGUF is written as llama.cpp writes Mistral (arch "llama", q/k permuted) plus
  // llama.attention.sliding_window, which loom honours when a file states it.
  const auto config = family_config("mistral");
  CHECK(config.sliding_window == 6);
  check_family("mistral", {{"blk.1.attn_k", ""}}, {{"blk.1.attn_k", "interleaved-RoPE"}});
}

TEST_CASE("family: phi3 (fused qkv_proj and gate_up_proj) in safetensors and GGUF") {
  check_family("phi3",
               {{"blk.0.attn_q", "rows 0..63 of fused [192, 64]"},
                {"blk.0.attn_v", "rows 128..191 of fused [192, 64]"},
                {"blk.1.ffn_up", "rows 96..191 of fused [192, 64]"}},
               {{"blk.0.attn_k", "rows 64..127"}, {"blk.0.ffn_gate", "rows 0..95"}});
}

TEST_CASE("family: gpt2 (Conv1D transposed, fused c_attn, LayerNorm, GELU, learned positions)") {
  check_family("gpt2",
               {{"blk.0.attn_q", "transposed from [64, 192]"},
                {"blk.0.attn_q", "rows 0..63"},
                {"blk.0.attn_out", "transposed from [64, 64]"},
                {"blk.1.ffn_down", "transposed from [256, 64]"},
                {"blk.0.attn_k_bias", "rows 64..127"}},
               {{"blk.0.attn_v", "rows 128..191 of fused [192, 64]"}, {"blk.0.attn_out", ""}});
}
