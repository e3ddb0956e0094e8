// Quantized packs end to end: `write_pack` with a quantization recipe (plain block
// types, loom's group types gq8 / gq4, named presets), loaded and run by a Session in
// prefill (the matrix-matrix kernels) and decode (matrix-vector), compared with the
// unquantized model's logits. Also the recipe resolver (names, presets, group sizes).
//
// The models here have random Gaussian weights. Quantization noise then does not average
// out the way it does in trained models, and logits differ more than the usual "q4_k is
// within a few percent" lore suggests: llama.cpp's own files in the reference folder
// (small-quant, `llama-quantize --pure`) differ from its f32 logits by 3.1% (q8_0), 8.3%
// (q6_k) and 30% (q4_k) relative L2. The bounds below are what loom measured (printed
// by the tests) with margin.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include "loom/error.hpp"
#include "loom/exporter.hpp"
#include "loom/loader.hpp"
#include "loom/pack.hpp"
#include "loom/session.hpp"
#include "model/quant_recipe.hpp"
#include "support/reference_data.hpp"
#include "support/test_support.hpp"
#include "support/tiny_model.hpp"

namespace fs = std::filesystem;
namespace t = loom::test;
namespace recipe = loom::quant_recipe;
using loom::DType;

namespace {

loom::PackOptions quantized(const std::string& name, int group = 0) {
  loom::PackOptions o;
  o.load.logger = loom::Logger::silent();
  o.quantize = name;
  o.group_size = group;
  return o;
}

// Logits of every position: one prefill over the prompt (prefill kernels), and token by
// token (decode kernels), concatenated.
struct Logits {
  std::vector<float> prefill;
  std::vector<float> decode;
};

Logits logits_of(const std::shared_ptr<const loom::Model>& model, const std::vector<int32_t>& prompt) {
  loom::SessionOptions o;
  o.all_logits = true;
  o.context_length = 64;
  o.n_threads = 1;
  Logits out;
  loom::Session s(model, o);
  s.prefill(prompt);
  for (size_t i = 0; i < prompt.size(); ++i) {
    const auto row = s.logits_at(static_cast<int64_t>(i));
    out.prefill.insert(out.prefill.end(), row.begin(), row.end());
  }
  loom::Session d(model, o);
  for (int32_t token : prompt) {
    d.step(token);
    const auto row = d.logits();
    out.decode.insert(out.decode.end(), row.begin(), row.end());
  }
  return out;
}

std::vector<float> flattened(const std::vector<std::vector<float>>& rows) {
  std::vector<float> out;
  for (const auto& r : rows) out.insert(out.end(), r.begin(), r.end());
  return out;
}

const std::vector<int32_t> kPrompt{1, 4, 9, 16, 25, 36, 49, 64, 81, 100, 3, 7};

}  // namespace

TEST_CASE("recipes: names are case-insensitive, presets are tables, bad names list the valid ones") {
  const auto m = recipe::resolve("Q4_K_M", 0);
  CHECK(m.name == "q4_k_m");
  CHECK(m.base == DType::q4_k);
  CHECK(m.group_size == 0);
  CHECK(m.dtype_for("blk.0.attn_q") == DType::q4_k);
  CHECK(m.dtype_for("blk.11.ffn_down") == DType::q6_k);
  CHECK(m.dtype_for("blk.3.attn_v") == DType::q6_k);
  CHECK(m.dtype_for("output") == DType::q6_k);
  CHECK(m.dtype_for("token_embd") == DType::q4_k);
  CHECK(recipe::resolve("q4_k", 0).dtype_for("output") == DType::q4_k);  // plain = pure
  CHECK(recipe::resolve("q8_0", 0).overrides.empty());
  CHECK(recipe::resolve("q5_k_m", 0).dtype_for("blk.0.ffn_up") == DType::q5_k);

  const auto g = recipe::resolve("GQ4", 64);
  CHECK(g.base == DType::gq4_64);
  CHECK(g.name == "gq4_64");
  CHECK(g.group_size == 64);
  CHECK(recipe::resolve("gq8", 0).base == DType::gq8_32);  // default group 32
  CHECK(recipe::resolve("gq8_128", 0).base == DType::gq8_128);
  CHECK(recipe::resolve("gq8_128", 128).base == DType::gq8_128);
  const auto gm = recipe::resolve("gq4_m", 128);
  CHECK(gm.base == DType::gq4_128);
  CHECK(gm.dtype_for("output") == DType::gq8_128);
  CHECK(gm.dtype_for("blk.1.ffn_down") == DType::gq8_128);

  try {
    recipe::resolve("q4_k_xl", 0);
    FAIL("no error");
  } catch (const loom::Error& e) {
    const std::string what = e.what();
    CHECK(what.find("unknown quantization 'q4_k_xl'") != std::string::npos);
    for (const char* name : {"q8_0", "q4_k", "gq8", "gq4", "gq4_128", "q4_k_m", "q5_k_m"}) {
      INFO(name);
      CHECK(what.find(name) != std::string::npos);
    }
  }
  CHECK_THROWS_AS(recipe::resolve("q8_k", 0), loom::Error);  // an activation type
  CHECK_THROWS_AS(recipe::resolve("f16", 0), loom::Error);
  CHECK_THROWS_WITH(recipe::resolve("gq4", 48), Catch::Contains("group size 48 is not one of 32, 64, 128"));
  CHECK_THROWS_WITH(recipe::resolve("q4_k", 64), Catch::Contains("--group applies to the group types"));
  CHECK_THROWS_WITH(recipe::resolve("gq8_64", 32), Catch::Contains("has groups of 64, not 32"));
}

TEST_CASE("recipes: tensor name patterns") {
  CHECK(recipe::matches("blk.*.ffn_down", "blk.0.ffn_down"));
  CHECK(recipe::matches("blk.*.ffn_down", "blk.127.ffn_down"));
  CHECK_FALSE(recipe::matches("blk.*.ffn_down", "blk.0.ffn_down_exps"));
  CHECK_FALSE(recipe::matches("blk.*.ffn_down", "blk.0.ffn_up"));
  CHECK(recipe::matches("output", "output"));
  CHECK_FALSE(recipe::matches("output", "output_norm"));
  CHECK(recipe::matches("*", "token_embd"));
  CHECK(recipe::matches("*norm*", "blk.1.attn_norm"));
}

TEST_CASE("gq8 and gq4 packs of the tiny model run end to end close to f32") {
  auto config = t::tiny_llama_config();  // rows of 64 and 96: groups of 32 (and 64 for most)
  t::TempDir dir;
  const auto weights = t::random_weights(config, 61);
  loom::export_model(config, weights, dir / "src", loom::ExportFormat::safetensors);
  const auto reference = logits_of(loom::load_model(dir / "src", loom::test::quiet_load_options()), kPrompt);
  struct Case {
    std::string quantize;
    int group;
    DType attn_q;   // the dtype the recipe gives a 64-column matrix
    double bound;   // relative L2 vs f32, measured (printed below) with margin
  };
  // Measured (printed): gq8 0.026 (groups of 32 and 64), q8_0 0.024, gq4 0.27 (32) and
  // 0.31 (64); each error of each of the 15 matrices reaches the logits undamped in a
  // random model. Bounds ~1.5x.
  const std::vector<Case> cases{
      {"gq8", 32, DType::gq8_32, 0.04},   {"gq8", 64, DType::gq8_64, 0.04},
      {"gq4", 32, DType::gq4_32, 0.40},   {"gq4", 64, DType::gq4_64, 0.45},
      {"q8_0", 0, DType::q8_0, 0.04},
  };
  std::printf("\ntiny model (hidden 64, 2 layers): logits relative L2 vs f32 (prefill / decode)\n");
  for (const auto& c : cases) {
    INFO(c.quantize << " group " << c.group);
    const fs::path pack = dir / (c.quantize + "-" + std::to_string(c.group));
    loom::write_pack(dir / "src", pack, quantized(c.quantize, c.group));
    auto model = loom::load_model(pack, loom::test::quiet_load_options());
    CHECK(model->weights().layers[0].attn_q.dtype() == c.attn_q);
    CHECK(model->weights().output.dtype() == c.attn_q);
    CHECK(model->weights().token_embd.dtype() == c.attn_q);
    CHECK(model->weights().layers[0].attn_norm.dtype() == DType::f32);
    const auto got = logits_of(model, kPrompt);
    const double prefill = t::relative_l2(got.prefill, reference.prefill);
    const double decode = t::relative_l2(got.decode, reference.decode);
    std::printf("  %-5s group %-3d %.4f / %.4f\n", c.quantize.c_str(), c.group, prefill, decode);
    CHECK(prefill < c.bound);
    CHECK(decode < c.bound);
    CHECK(prefill > 1e-5);  // it really was quantized
    CHECK(loom::verify_pack(pack).empty());
  }
}

TEST_CASE("a tied embedding is quantized once and serves lookup and output projection") {
  auto config = t::tiny_llama_config();
  config.tie_word_embeddings = true;
  t::TempDir dir;
  loom::export_model(config, t::random_weights(config, 62), dir / "src", loom::ExportFormat::safetensors);
  const auto reference = logits_of(loom::load_model(dir / "src", loom::test::quiet_load_options()), kPrompt);
  // gq4_m: gq4 matrices, but the output projection in gq8 — and with tied embeddings the
  // shared storage is the output projection, so it is gq8 too.
  loom::write_pack(dir / "src", dir / "p", quantized("GQ4_M", 32));
  auto model = loom::load_model(dir / "p", loom::test::quiet_load_options());
  const auto& w = model->weights();
  CHECK(w.token_embd.dtype() == DType::gq8_32);
  CHECK(w.output.raw_data() == w.token_embd.raw_data());
  CHECK(w.layers[0].attn_q.dtype() == DType::gq4_32);
  CHECK(w.layers[1].ffn_down.dtype() == DType::gq8_32);
  CHECK(w.layers[1].attn_v.dtype() == DType::gq8_32);
  const std::string index = t::read_file_text(dir / "p" / "index.json");
  CHECK(index.find("\"tied_to\": \"token_embd\"") != std::string::npos);
  CHECK(index.find("\"recipe\": \"gq4_m\"") != std::string::npos);
  CHECK(index.find("\"blk.0.attn_q\": \"gq4_32\"") != std::string::npos);
  CHECK(index.find("\"token_embd\": \"gq8_32\"") != std::string::npos);
  const std::string report = model->load_report()->to_text();
  CHECK(report.find("gq8_32 x 5, gq4_32 x 10") != std::string::npos);
  const auto got = logits_of(model, kPrompt);
  const double rel = t::relative_l2(got.decode, reference.decode);
  std::printf("\ntied tiny model, gq4_m (group 32): logits relative L2 vs f32 %.4f\n", rel);
  CHECK(rel < 0.23);  // measured 0.155
}

TEST_CASE("a recipe leaves what the slot table keeps unquantized: norms, biases, learned positions") {
  // GPT-2's learned position embeddings stay in their stored dtype (as llama.cpp's
  // quantizer keeps them); its matrices and token embedding take the recipe's type.
  const auto config = t::tiny_gpt2_config();
  t::TempDir dir;
  loom::export_model(config, t::random_weights(config, 63), dir / "src", loom::ExportFormat::safetensors);
  loom::write_pack(dir / "src", dir / "p", quantized("q8_0"));
  auto model = loom::load_model(dir / "p", loom::test::quiet_load_options());
  const auto& w = model->weights();
  CHECK(w.position_embd.dtype() == DType::f32);
  CHECK(w.token_embd.dtype() == DType::q8_0);
  CHECK(w.layers[0].attn_q.dtype() == DType::q8_0);
  CHECK(w.layers[0].attn_q_bias.dtype() == DType::f32);
  CHECK(w.layers[1].ffn_norm.dtype() == DType::f32);
}

TEST_CASE("bad quantization options fail before any work, naming the problem") {
  auto config = t::tiny_llama_config();
  t::TempDir dir;
  loom::export_model(config, t::random_weights(config, 63), dir / "src", loom::ExportFormat::safetensors);
  CHECK_THROWS_WITH(loom::write_pack(dir / "src", dir / "a", quantized("gq4", 100)),
                    Catch::Contains("group size 100"));
  CHECK_THROWS_WITH(loom::write_pack(dir / "src", dir / "b", quantized("q9_k")),
                    Catch::Contains("valid: q8_0"));
  CHECK_THROWS_WITH(loom::write_pack(dir / "src", dir / "c", quantized("", 64)),
                    Catch::Contains("--group needs --quantize"));
  for (const char* p : {"a", "b", "c"}) {
    CHECK_FALSE(fs::exists(dir / p));
    CHECK_FALSE(fs::exists(dir / (std::string(p) + ".partial")));
  }
  // A row that is not a whole number of groups keeps its dtype, with a note.
  loom::write_pack(dir / "src", dir / "d", quantized("gq8", 128));
  auto model = loom::load_model(dir / "d", loom::test::quiet_load_options());
  CHECK(model->weights().layers[0].attn_q.dtype() == DType::f32);  // 64 columns
  const std::string index = t::read_file_text(dir / "d" / "index.json");
  CHECK(index.find("not whole gq8_128 blocks of 128; kept f32") != std::string::npos);
}

TEST_CASE("reference small-quant packs (q8_0, q4_k, q4_k_m, gq8, gq4) against llama.cpp's f32 logits") {
  LOOM_REQUIRE_REFERENCE(ref);
  const fs::path dir = ref / "models" / "small-quant";
  const auto ids = t::read_ids(dir / "logits" / "story.ids.txt");
  const auto expected = flattened(t::read_logits(dir / "logits" / "story.f32.logits.txt"));
  t::TempDir tmp;
  struct Case {
    std::string quantize;
    int group;
    double bound;  // ~1.4x what loom measured (printed); llama.cpp's own files: q8_0 0.031, q4_k 0.30
  };
  // Measured: q8_0 0.031, gq8 0.031 (32) 0.037 (128), q4_k 0.299, q4_k_m 0.259,
  // gq4 0.32 (32) 0.46 (128).
  const std::vector<Case> cases{{"q8_0", 0, 0.045}, {"gq8", 32, 0.045}, {"gq8", 128, 0.055},
                                {"q4_k", 0, 0.42},  {"q4_k_m", 0, 0.38}, {"gq4", 32, 0.45},
                                {"gq4", 128, 0.65}};
  std::printf("\nsmall-quant (hidden 256, 4 layers, random weights): relative L2 vs llama.cpp f32 "
              "logits, prefill / decode\n");
  for (const auto& c : cases) {
    INFO(c.quantize << " group " << c.group);
    const fs::path pack = tmp / (c.quantize + std::to_string(c.group));
    loom::write_pack(dir / "small-quant-f32.gguf", pack, quantized(c.quantize, c.group));
    auto model = loom::load_model(pack, loom::test::quiet_load_options());
    loom::SessionOptions o;
    o.all_logits = true;
    o.context_length = 64;
    loom::Session s(model, o);
    s.prefill(ids);
    std::vector<float> prefill;
    for (size_t i = 0; i < ids.size(); ++i) {
      const auto row = s.logits_at(static_cast<int64_t>(i));
      prefill.insert(prefill.end(), row.begin(), row.end());
    }
    loom::Session d(model, o);
    std::vector<float> decode;
    for (int32_t token : ids) {
      d.step(token);
      decode.insert(decode.end(), d.logits().begin(), d.logits().end());
    }
    const double p = t::relative_l2(prefill, expected);
    const double q = t::relative_l2(decode, expected);
    std::printf("  %-7s group %-3d %.4f / %.4f\n", c.quantize.c_str(), c.group, p, q);
    CHECK(p < c.bound);
    CHECK(q < c.bound);
  }
}

TEST_CASE("reference stories260K (trained, tied) quantized packs against its f32 logits") {
  // A real model: quantization noise is damped the way it is in large trained models,
  // unlike in the random-weight models above. Its ffn_down rows (172) are no whole
  // number of 32-element blocks, so they stay f32 (the pack notes it).
  LOOM_REQUIRE_REFERENCE(ref);
  const fs::path dir = ref / "models" / "stories260K";
  const auto ids = t::read_ids(dir / "logits" / "once_upon.ids.txt");
  const auto expected = flattened(t::read_logits(dir / "logits" / "once_upon.logits.txt"));
  t::TempDir tmp;
  struct Case {
    std::string quantize;
    int group;
    double bound;  // ~1.5x what loom measured (printed)
  };
  // Measured: q8_0 0.0093, gq8 0.013 (32) 0.0092 (64), q4_0 0.17, gq4 0.096 (32) 0.102 (64),
  // gq4_m 0.086. (One 5-token prompt: differences of ~40% between similar types are noise.)
  const std::vector<Case> cases{{"q8_0", 0, 0.015}, {"gq8", 32, 0.02}, {"gq8", 64, 0.02},
                                {"q4_0", 0, 0.25}, {"gq4", 32, 0.15}, {"gq4", 64, 0.15},
                                {"gq4_m", 32, 0.13}};
  std::printf("\nstories260K: relative L2 vs llama.cpp f32 logits, prefill / decode\n");
  for (const auto& c : cases) {
    INFO(c.quantize << " group " << c.group);
    const fs::path pack = tmp / (c.quantize + std::to_string(c.group));
    loom::write_pack(dir / "hf", pack, quantized(c.quantize, c.group));
    auto model = loom::load_model(pack, loom::test::quiet_load_options());
    CHECK(model->weights().output.raw_data() == model->weights().token_embd.raw_data());
    const auto got = logits_of(model, ids);
    const double p = t::relative_l2(got.prefill, expected);
    const double q = t::relative_l2(got.decode, expected);
    std::printf("  %-7s group %-3d %.4f / %.4f\n", c.quantize.c_str(), c.group, p, q);
    CHECK(p < c.bound);
    CHECK(q < c.bound);
  }
}
