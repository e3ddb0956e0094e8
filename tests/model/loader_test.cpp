#include <catch2/catch.hpp>

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "loom/error.hpp"
#include "loom/exporter.hpp"
#include "loom/loader.hpp"
#include "loom/manifest.hpp"
#include "loom/session.hpp"
#include "model/rope_order.hpp"
#include "model/weight_slots.hpp"
#include "support/test_support.hpp"
#include "support/tiny_model.hpp"

namespace fs = std::filesystem;
namespace t = loom::test;
using loom::DType;
using loom::ExportFormat;

namespace {

// The internal tensor a source should produce for `slot`, in the order the loaded model
// keeps it (GGUF llama q/k stay interleaved).
loom::Tensor expected_tensor(const loom::ModelConfig& c, const loom::ModelWeights& w,
                             const loom::slots::WeightSlot& slot, int64_t layer, bool interleaved) {
  loom::Tensor t = loom::slots::tensor_of(w, slot, layer);
  if (interleaved && (slot.name == "attn_q" || slot.name == "attn_k")) {
    const int64_t heads = slot.name == "attn_q" ? c.n_heads : c.n_kv_heads;
    t = loom::rope_order::half_to_interleaved(t, heads, c.head_dim);
  }
  return t;
}

void check_same_weights(const loom::ModelConfig& c, const loom::ModelWeights& want, const loom::Model& got) {
  const bool interleaved = got.weights().rope_interleaved;
  for (const auto& slot : loom::slots::all_slots()) {
    if (!slot.needed(c)) continue;
    const int64_t layers = slot.per_layer ? c.n_layers : 1;
    for (int64_t l = 0; l < layers; ++l) {
      INFO(loom::slots::full_name(slot, l));
      const loom::Tensor a = expected_tensor(c, want, slot, l, interleaved);
      const loom::Tensor& b = loom::slots::tensor_of(got.weights(), slot, l);
      REQUIRE(b.defined());
      CHECK(a.shape() == b.shape());
      REQUIRE(a.dtype() == b.dtype());
      CHECK(std::memcmp(a.raw_data(), b.raw_data(), static_cast<size_t>(a.nbytes())) == 0);
    }
  }
}

struct Fixture {
  loom::ModelConfig config = t::tiny_llama_config();
  loom::ModelWeights weights;
  t::TempDir dir;
  Fixture() { weights = t::random_weights(config, 21); }
};

}  // namespace

TEST_CASE("the same tiny llama loads identically from every format") {
  Fixture f;
  const std::vector<std::pair<ExportFormat, std::string>> formats{
      {ExportFormat::safetensors, "st"}, {ExportFormat::safetensors_sharded, "sharded"},
      {ExportFormat::torch, "bin"},      {ExportFormat::npy, "npy"},
      {ExportFormat::gguf, "model.gguf"}};
  const std::vector<int32_t> prompt{1, 5, 9, 77, 3, 3, 100};
  const auto ref = t::reference_logits(f.config, f.weights, prompt);
  for (const auto& [format, name] : formats) {
    INFO(name);
    const fs::path out = f.dir / name;
    loom::export_model(f.config, f.weights, out, format);
    auto model = loom::load_model(out, loom::test::quiet_load_options());
    check_same_weights(f.config, f.weights, *model);
    const auto& report = *model->load_report();
    CHECK(report.expected_tensors == report.loaded_tensors);
    CHECK(report.converted_tensors == 0);  // every dtype and layout already fits
    CHECK(model->weights().rope_interleaved == (format == ExportFormat::gguf));
    if (format == ExportFormat::safetensors_sharded) CHECK(report.files.size() == 3);
    loom::SessionOptions o;
    o.all_logits = true;
    loom::Session s(model, o);
    s.prefill(prompt);
    for (size_t i = 0; i < prompt.size(); ++i) CHECK(t::max_abs_diff(s.logits_at(static_cast<int64_t>(i)), ref[i]) < 1e-4);
  }
}

TEST_CASE("zero-copy loads point into the mapping, stream mode copies the same bytes") {
  Fixture f;
  loom::export_model(f.config, f.weights, f.dir / "m", ExportFormat::safetensors);
  auto mapped = loom::load_model(f.dir / "m", loom::test::quiet_load_options());
  const auto& q = mapped->weights().layers[0].attn_q;
  REQUIRE(q.is_mapped());
  CHECK(q.storage()->file()->contains(q.raw_data(), static_cast<size_t>(q.nbytes())));
  CHECK(mapped->load_report()->zero_copy_tensors == mapped->load_report()->loaded_tensors);
  CHECK(mapped->load_report()->memory.owned_weight_bytes == 0);

  auto options = loom::test::quiet_load_options();
  options.io_mode = loom::IoMode::stream;
  auto streamed = loom::load_model(f.dir / "m", options);
  CHECK_FALSE(streamed->weights().layers[0].attn_q.is_mapped());
  check_same_weights(f.config, f.weights, *streamed);
  CHECK(streamed->load_report()->memory.mapped_weight_bytes == 0);
}

TEST_CASE("a missing tensor is reported by full name with the names looked for and the files searched") {
  Fixture f;
  f.weights.layers[1].attn_k = loom::Tensor();  // exporter must not find it
  auto config = f.config;
  // Write with the full weights, then drop one tensor by rewriting the file.
  auto full = t::random_weights(config, 21);
  loom::export_model(config, full, f.dir / "m", ExportFormat::safetensors);
  auto source = loom::open_weights(f.dir / "m");
  std::vector<loom::NamedTensor> kept;
  for (const auto& r : source->tensors()) {
    if (r.name != "model.layers.1.self_attn.k_proj.weight") kept.push_back({r.name, source->load(r).copy()});
  }
  source.reset();
  loom::write_safetensors(f.dir / "m" / "model.safetensors", kept);
  try {
    loom::load_model(f.dir / "m", loom::test::quiet_load_options());
    FAIL("expected a manifest error");
  } catch (const loom::ManifestError& e) {
    CHECK(e.code() == loom::ErrorCode::missing_tensor);
    REQUIRE(e.problems().size() == 1);
    const auto& p = e.problems()[0];
    CHECK(p.kind == loom::ProblemKind::missing);
    CHECK(p.internal_name == "blk.1.attn_k");
    CHECK(p.detail.find("model.layers.1.self_attn.k_proj.weight") != std::string::npos);
    CHECK(p.detail.find("model.safetensors") != std::string::npos);
  }
}

TEST_CASE("an extra tensor fails a strict load and is a warning in a lenient one") {
  Fixture f;
  loom::export_model(f.config, f.weights, f.dir / "m", ExportFormat::safetensors);
  auto source = loom::open_weights(f.dir / "m");
  std::vector<loom::NamedTensor> all;
  for (const auto& r : source->tensors()) all.push_back({r.name, source->load(r).copy()});
  all.push_back({"model.layers.0.mystery.weight", loom::Tensor::zeros(loom::Shape{4}, DType::f32)});
  all.push_back({"model.layers.0.self_attn.rotary_emb.inv_freq", loom::Tensor::zeros(loom::Shape{8}, DType::f32)});
  source.reset();
  loom::write_safetensors(f.dir / "m" / "model.safetensors", all);

  auto lenient = loom::load_model(f.dir / "m", loom::test::quiet_load_options());
  const auto& report = *lenient->load_report();
  REQUIRE(report.warnings.size() == 1);
  CHECK(report.warnings[0].kind == loom::ProblemKind::unexpected);
  CHECK(report.warnings[0].external_name == "model.layers.0.mystery.weight");
  CHECK(report.ignored == std::vector<std::string>{"model.layers.0.self_attn.rotary_emb.inv_freq"});

  auto strict = loom::test::quiet_load_options();
  strict.strict = true;
  try {
    loom::load_model(f.dir / "m", strict);
    FAIL("expected a strict failure");
  } catch (const loom::ManifestError& e) {
    REQUIRE(e.problems().size() == 1);
    CHECK(e.problems()[0].external_name == "model.layers.0.mystery.weight");
  }
}

TEST_CASE("a wrong shape names both shapes and the config fields behind the expectation") {
  Fixture f;
  loom::export_model(f.config, f.weights, f.dir / "m", ExportFormat::safetensors);
  // Claim 4 kv heads in config.json while the weights have 2 (GQA).
  auto wrong = f.config;
  wrong.n_kv_heads = 4;
  std::ofstream(f.dir / "m" / "config.json") << loom::hf_config_json(wrong);
  try {
    loom::load_model(f.dir / "m", loom::test::quiet_load_options());
    FAIL("expected shape mismatches");
  } catch (const loom::ManifestError& e) {
    CHECK(e.code() == loom::ErrorCode::shape_mismatch);
    CHECK(e.problems().size() == 4);  // k and v of both layers
    const auto& p = e.problems()[0];
    CHECK(p.kind == loom::ProblemKind::shape_mismatch);
    CHECK(p.internal_name == "blk.0.attn_k");
    CHECK(p.expected == loom::Shape{64, 64});
    CHECK(p.found == loom::Shape{32, 64});
    CHECK(p.detail.find("num_key_value_heads") != std::string::npos);
  }
}

TEST_CASE("tied embeddings alias the embedding storage, from every format") {
  Fixture f;
  f.config.tie_word_embeddings = true;
  f.weights = t::random_weights(f.config, 22);
  for (auto format : {ExportFormat::safetensors, ExportFormat::torch, ExportFormat::gguf, ExportFormat::npy}) {
    const fs::path out = f.dir / ("tied" + std::to_string(static_cast<int>(format)) + (format == ExportFormat::gguf ? ".gguf" : ""));
    loom::export_model(f.config, f.weights, out, format);
    auto model = loom::load_model(out, loom::test::quiet_load_options());
    const auto& w = model->weights();
    CHECK(w.output.shares_storage_with(w.token_embd));
    CHECK(w.output.raw_data() == w.token_embd.raw_data());
    CHECK(model->config().tie_word_embeddings);
    CHECK(model->load_report()->tied == std::vector<std::string>{"output -> token_embd"});
  }
}

TEST_CASE("decode_weight_bytes counts one row of an embedding table, or all of it when tied") {
  for (const bool tied : {false, true}) {
    INFO("tied " << tied);
    Fixture f;
    f.config.tie_word_embeddings = tied;
    f.weights = t::random_weights(f.config, 23);
    const fs::path out = f.dir / (tied ? "tied.gguf" : "untied.gguf");
    loom::export_model(f.config, f.weights, out, ExportFormat::gguf);
    auto model = loom::load_model(out, loom::test::quiet_load_options());
    const loom::Tensor& table = model->weights().token_embd;
    const int64_t row = table.nbytes() / table.shape()[0];
    REQUIRE(row > 0);
    if (tied) {
      // The table is the output projection too: decode reads it whole, once.
      CHECK(model->decode_weight_bytes() == model->weight_bytes());
    } else {
      CHECK(model->decode_weight_bytes() == model->weight_bytes() - table.nbytes() + row);
    }
  }
}

TEST_CASE("conversions to f16 and bf16 and back, with clamp counts in the report") {
  Fixture f;
  // One weight too large for f16, one NaN-free; the model stays usable.
  f.weights.layers[0].ffn_up.mutable_data<float>()[3] = 1e6f;
  loom::export_model(f.config, f.weights, f.dir / "m", ExportFormat::safetensors);
  for (auto dtype : {DType::f16, DType::bf16}) {
    auto options = loom::test::quiet_load_options();
    options.target_dtype = dtype;
    auto model = loom::load_model(f.dir / "m", options);
    const auto& report = *model->load_report();
    CHECK(model->weights().layers[0].attn_q.dtype() == dtype);
    CHECK(model->weights().layers[0].attn_norm.dtype() == DType::f32);  // vectors stay f32
    CHECK(report.converted_tensors == 2 * 7 + 2);  // 7 matrices per layer, embedding, output
    CHECK(report.conversion_totals.clamped_count == (dtype == DType::f16 ? 1u : 0u));
    for (const auto& rec : report.tensors) {
      if (rec.internal_name == "blk.0.ffn_up") CHECK(rec.conversion.clamped_count == (dtype == DType::f16 ? 1u : 0u));
    }
    // Back to f32 through an f16/bf16 export: the converted values load unchanged.
    loom::export_model(model->config(), model->weights(), f.dir / ("back" + std::string(loom::dtype_name(dtype))),
                       ExportFormat::safetensors);
    auto to_f32 = loom::test::quiet_load_options();
    to_f32.target_dtype = DType::f32;
    auto back = loom::load_model(f.dir / ("back" + std::string(loom::dtype_name(dtype))), to_f32);
    const auto& a = model->weights().layers[1].ffn_down;
    const auto& b = back->weights().layers[1].ffn_down;
    std::vector<float> widened(static_cast<size_t>(a.numel()));
    loom::convert(dtype, a.raw_data(), DType::f32, widened.data(), widened.size());
    CHECK(std::memcmp(widened.data(), b.raw_data(), widened.size() * 4) == 0);
  }
}

TEST_CASE("cancelling from the progress callback frees everything, progress reaches 1.0") {
  Fixture f;
  loom::export_model(f.config, f.weights, f.dir / "m", ExportFormat::safetensors);
  const int64_t before = loom::Storage::owned_bytes_live();
  auto options = loom::test::quiet_load_options();
  options.target_dtype = DType::f16;  // force conversions so there is work to cancel
  options.chunk_bytes = 4096;
  int calls = 0;
  options.progress = [&](double, std::string_view) { return ++calls < 5; };
  try {
    loom::load_model(f.dir / "m", options);
    FAIL("expected cancellation");
  } catch (const loom::Error& e) {
    CHECK(e.code() == loom::ErrorCode::cancelled);
  }
  CHECK(calls == 5);
  CHECK(loom::Storage::owned_bytes_live() == before);

  std::vector<double> seen;
  options.progress = [&](double fraction, std::string_view) {
    seen.push_back(fraction);
    return true;
  };
  auto model = loom::load_model(f.dir / "m", options);
  REQUIRE(!seen.empty());
  CHECK(seen.back() == 1.0);
  CHECK(std::is_sorted(seen.begin(), seen.end()));
}

TEST_CASE("converting loads stay within the staging budget") {
  Fixture f;
  loom::export_model(f.config, f.weights, f.dir / "m", ExportFormat::safetensors);
  auto options = loom::test::quiet_load_options();
  options.target_dtype = DType::bf16;
  options.chunk_bytes = 8192;
  options.queue_depth = 2;
  auto model = loom::load_model(f.dir / "m", options);
  const auto& mem = model->load_report()->memory;
  CHECK(mem.transient_peak_bytes > 0);
  CHECK(mem.transient_peak_bytes <= 2 * 8192);
  CHECK(mem.owned_weight_bytes > 0);
  CHECK(mem.kv_cache_bytes == loom::kv_cache_bytes_for(f.config, 256, DType::f32));
}

TEST_CASE("file sizes and sha256 are verified before loading") {
  Fixture f;
  loom::export_model(f.config, f.weights, f.dir / "m", ExportFormat::safetensors);
  const std::string file = (f.dir / "m" / "model.safetensors").string();
  auto options = loom::test::quiet_load_options();
  options.expected_files[file] = {fs::file_size(file), loom::sha256_file(file)};
  CHECK_NOTHROW(loom::load_model(f.dir / "m", options));
  options.expected_files[file].sha256[0] = options.expected_files[file].sha256[0] == '0' ? '1' : '0';
  try {
    loom::load_model(f.dir / "m", options);
    FAIL("expected a hash mismatch");
  } catch (const loom::Error& e) {
    CHECK(e.context().file == file);
    CHECK(std::string(e.what()).find("sha256") != std::string::npos);
  }
  options.expected_files[file] = {123, ""};
  CHECK_THROWS_AS(loom::load_model(f.dir / "m", options), loom::Error);
  CHECK(loom::sha256_file(file).size() == 64);
}

TEST_CASE("the load report renders as text and JSON, with a per-tensor trace") {
  Fixture f;
  loom::export_model(f.config, f.weights, f.dir / "m.gguf", ExportFormat::gguf);
  auto model = loom::load_model(f.dir / "m.gguf", loom::test::quiet_load_options());
  const auto& r = *model->load_report();
  const std::string text = r.to_text(true);
  CHECK(text.find("arch       llama") != std::string::npos);
  CHECK(text.find("blk.1.ffn_down") != std::string::npos);
  CHECK(text.find("interleaved-RoPE") != std::string::npos);
  const std::string json = r.to_json(true);
  CHECK(json.find("\"format\": \"gguf\"") != std::string::npos);
  CHECK(json.find("\"external\": \"blk.0.attn_q.weight\"") != std::string::npos);
  CHECK(r.to_json(false).find("\"trace\"") == std::string::npos);
  // The phases are measured, in order, and fit inside the whole.
  CHECK(r.phases.open_seconds > 0.0);
  CHECK(r.phases.weights_seconds > 0.0);
  CHECK(r.phases.tokenizer_seconds >= 0.0);
  CHECK(r.phases.open_seconds + r.phases.weights_seconds + r.phases.tokenizer_seconds <= r.load_seconds);
  char phases[96];
  std::snprintf(phases, sizeof phases, "(open %.3f, weights %.3f, tokenizer %.3f)", r.phases.open_seconds,
                r.phases.weights_seconds, r.phases.tokenizer_seconds);
  CHECK(text.find(phases) != std::string::npos);
  CHECK(json.find("\"phases\"") != std::string::npos);
  CHECK(json.find("\"tokenizer_seconds\"") != std::string::npos);
}

TEST_CASE("config.json problems name the field and the file") {
  t::TempDir dir;
  std::ofstream(dir / "config.json") << R"({"architectures": ["LlamaForCausalLM"], "hidden_size": 64})";
  try {
    loom::test::write_file_bytes(dir / "model.safetensors", {8, 0, 0, 0, 0, 0, 0, 0, '{', '}', ' ', ' ', ' ', ' ', ' ', ' '});
    loom::load_model(dir.path(), loom::test::quiet_load_options());
    FAIL("expected an error");
  } catch (const loom::Error& e) {
    CHECK(std::string(e.what()).find("vocab_size") != std::string::npos);
    CHECK(e.context().file.find("config.json") != std::string::npos);
  }
  std::ofstream(dir / "config.json") << R"({"architectures": ["FancyNewModel"]})";
  try {
    loom::load_model(dir.path(), loom::test::quiet_load_options());
    FAIL("expected unsupported");
  } catch (const loom::Error& e) {
    CHECK(e.code() == loom::ErrorCode::unsupported);
    CHECK(std::string(e.what()).find("FancyNewModel") != std::string::npos);
  }
}
