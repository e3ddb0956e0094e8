#include <catch2/catch.hpp>

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "loom/error.hpp"
#include "loom/exporter.hpp"
#include "loom/loader.hpp"
#include "loom/pack.hpp"
#include "loom/session.hpp"
#include "model/weight_slots.hpp"
#include "support/test_support.hpp"
#include "support/tiny_model.hpp"

namespace fs = std::filesystem;
namespace t = loom::test;
using loom::ExportFormat;

namespace {

loom::PackOptions quiet_pack() {
  loom::PackOptions o;
  o.load.logger = loom::Logger::silent();
  return o;
}

std::vector<std::vector<float>> all_logits(const std::shared_ptr<const loom::Model>& model,
                                           const std::vector<int32_t>& prompt) {
  loom::SessionOptions o;
  o.all_logits = true;
  o.context_length = 64;
  loom::Session s(model, o);
  s.prefill(prompt);
  std::vector<std::vector<float>> out;
  for (size_t i = 0; i < prompt.size(); ++i) {
    const auto row = s.logits_at(static_cast<int64_t>(i));
    out.emplace_back(row.begin(), row.end());
  }
  return out;
}

void same_tensors(const loom::Model& a, const loom::Model& b) {
  const auto& c = a.config();
  for (const auto& slot : loom::slots::all_slots()) {
    if (!slot.needed(c)) continue;
    const int64_t layers = slot.per_layer ? c.n_layers : 1;
    for (int64_t l = 0; l < layers; ++l) {
      INFO(loom::slots::full_name(slot, l));
      const auto& x = loom::slots::tensor_of(a.weights(), slot, l);
      const auto& y = loom::slots::tensor_of(b.weights(), slot, l);
      REQUIRE(x.dtype() == y.dtype());
      REQUIRE(x.shape() == y.shape());
      CHECK(std::memcmp(x.raw_data(), y.raw_data(), static_cast<size_t>(x.nbytes())) == 0);
    }
  }
}

std::vector<uint8_t> bytes_of(const fs::path& p) { return t::read_file_bytes(p); }

}  // namespace

TEST_CASE("packs from every source format load zero-copy with the source's tensors and logits") {
  auto config = t::tiny_llama_config();
  const auto weights = t::random_weights(config, 41);
  t::TempDir dir;
  const std::vector<int32_t> prompt{1, 4, 9, 16, 25, 36};
  for (auto [format, name] : {std::pair{ExportFormat::safetensors, "st"}, {ExportFormat::safetensors_sharded, "sh"},
                              {ExportFormat::torch, "bin"}, {ExportFormat::npy, "npy"}, {ExportFormat::gguf, "m.gguf"}}) {
    INFO(name);
    const fs::path src = dir / name;
    loom::export_model(config, weights, src, format);
    auto source_model = loom::load_model(src, loom::test::quiet_load_options());
    const fs::path pack = dir / (std::string(name) + ".pack");
    const auto result = loom::write_pack(src, pack, quiet_pack());
    CHECK(result.tensors == static_cast<int64_t>(source_model->load_report()->expected_tensors));
    CHECK(loom::is_pack(pack));
    CHECK_FALSE(fs::exists(pack.string() + ".partial"));
    auto packed = loom::load_model(pack, loom::test::quiet_load_options());
    const auto& report = *packed->load_report();
    CHECK(report.format == "pack");
    CHECK(report.converted_tensors == 0);
    CHECK(report.zero_copy_tensors == report.loaded_tensors);
    CHECK(packed->weights().rope_interleaved == source_model->weights().rope_interleaved);
    same_tensors(*source_model, *packed);
    CHECK(all_logits(source_model, prompt) == all_logits(packed, prompt));
    CHECK(loom::verify_pack(pack).empty());
    for (const auto& rec : report.tensors) {
      if (!rec.external_name.empty() && !rec.tied) CHECK(rec.offset % 64 == 0);
    }
    // Pack -> safetensors: the same tensors again (GGUF-ordered q/k rows come back in
    // Hugging Face order, so for the GGUF source compare what they compute instead).
    const fs::path back = dir / (std::string(name) + "-back");
    loom::export_model(packed->config(), packed->weights(), back, ExportFormat::safetensors);
    auto back_model = loom::load_model(back, loom::test::quiet_load_options());
    if (!source_model->weights().rope_interleaved) {
      same_tensors(*source_model, *back_model);
    } else {
      const auto a = all_logits(source_model, prompt);
      const auto b = all_logits(back_model, prompt);
      for (size_t i = 0; i < a.size(); ++i) {
        for (size_t j = 0; j < a[i].size(); ++j) CHECK(std::abs(a[i][j] - b[i][j]) < 1e-5);
      }
    }
  }
}

TEST_CASE("a conversion hands back each source tensor's mapped pages once it is written") {
  // The rows are read once: without the release a conversion held its whole source
  // resident by the end (load_repack.cpp does the same for a repacking load).
  const auto c = t::mid_llama_config();
  t::TempDir dir;
  const fs::path src = dir / "m.gguf";
  loom::export_model(c, t::random_weights(c, 9, loom::DType::f16), src, ExportFormat::gguf);
  const int64_t source_bytes = static_cast<int64_t>(fs::file_size(src));
  auto o = quiet_pack();
  o.quantize = "q8_0";
  int64_t resident_at_end = -2;
  o.progress = [&](double fraction, std::string_view) {
    if (fraction >= 1.0) resident_at_end = t::mapped_resident_bytes(src);  // the source is still mapped
    return true;
  };
  loom::write_pack(src, dir / "m.pack", o);
  REQUIRE(resident_at_end != -2);
  if (resident_at_end < 0) {
    WARN("SKIPPED: /proc/self/smaps cannot be read here");
    return;
  }
  // Before: all of the 25 MB of matrices (they were read); now the header and whatever
  // the kernel keeps mapped around the pages read last.
  INFO("resident " << resident_at_end << " of " << source_bytes << " bytes of source");
  CHECK(resident_at_end < source_bytes / 8);
  // The pack holds what a conversion of the same file always held: loadable, verified.
  CHECK(loom::verify_pack(dir / "m.pack").empty());
}

TEST_CASE("a pack converts dtypes and keeps tied embeddings once") {
  auto config = t::tiny_llama_config();
  config.tie_word_embeddings = true;
  t::TempDir dir;
  loom::export_model(config, t::random_weights(config, 42), dir / "src", ExportFormat::safetensors);
  auto o = quiet_pack();
  o.dtype = loom::DType::bf16;
  loom::write_pack(dir / "src", dir / "p", o);
  auto model = loom::load_model(dir / "p", loom::test::quiet_load_options());
  CHECK(model->weights().layers[0].attn_q.dtype() == loom::DType::bf16);
  CHECK(model->weights().layers[0].attn_norm.dtype() == loom::DType::f32);
  CHECK(model->weights().output.raw_data() == model->weights().token_embd.raw_data());
  const std::string index = t::read_file_text(dir / "p" / "index.json");
  CHECK(index.find("\"tied_to\": \"token_embd\"") != std::string::npos);
  CHECK(index.find("\"provenance\"") != std::string::npos);
  CHECK(index.find("\"sha256\"") != std::string::npos);
  CHECK(index.find("\"converter\": \"loom ") != std::string::npos);
  CHECK_THROWS_AS(loom::write_pack(dir / "src", dir / "p", o), loom::Error);  // exists already
}

TEST_CASE("provenance records the source revision of a Hugging Face cache snapshot") {
  auto config = t::tiny_llama_config();
  t::TempDir dir;
  const fs::path snapshot = dir / "models--org--m" / "snapshots" / "0123456789abcdef";
  loom::export_model(config, t::random_weights(config, 43), snapshot, ExportFormat::safetensors);
  loom::write_pack(snapshot, dir / "p", quiet_pack());
  const std::string index = t::read_file_text(dir / "p" / "index.json");
  CHECK(index.find("\"revision\": \"hf-snapshot:0123456789abcdef\"") != std::string::npos);
}

TEST_CASE("an interrupted conversion resumes and produces a byte-identical pack") {
  auto config = t::tiny_llama_config();
  t::TempDir dir;
  loom::export_model(config, t::random_weights(config, 44), dir / "src", ExportFormat::safetensors);
  ::setenv("SOURCE_DATE_EPOCH", "1700000000", 1);
  loom::write_pack(dir / "src", dir / "whole", quiet_pack());

  // Stop after 7 tensors (the progress callback plays the crash), then resume.
  auto o = quiet_pack();
  int seen = 0;
  o.progress = [&](double, std::string_view) { return ++seen < 7; };
  CHECK_THROWS_AS(loom::write_pack(dir / "src", dir / "resumed", o), loom::Error);
  CHECK(fs::exists(dir / "resumed.partial" / "checkpoint.json"));
  CHECK_FALSE(fs::exists(dir / "resumed"));
  // Damage the last written tensor's bytes: the resume must re-verify and rewrite them.
  const fs::path data = dir / "resumed.partial" / "data-00000.bin";
  auto bytes = bytes_of(data);
  bytes.back() ^= 0xFF;
  t::write_file_bytes(data, bytes);
  const auto r = loom::write_pack(dir / "src", dir / "resumed", quiet_pack());
  ::unsetenv("SOURCE_DATE_EPOCH");
  CHECK(r.resumed_tensors > 0);
  CHECK(r.resumed_tensors < 7);
  for (const auto& e : fs::directory_iterator(dir / "whole")) {
    INFO(e.path().filename());
    CHECK(bytes_of(e.path()) == bytes_of(dir / "resumed" / e.path().filename()));
  }
  CHECK_FALSE(fs::exists(dir / "resumed.partial"));
}

TEST_CASE("verify names the tensor for a flipped byte, a truncated file and a missing file") {
  auto config = t::tiny_llama_config();
  t::TempDir dir;
  loom::export_model(config, t::random_weights(config, 45), dir / "src", ExportFormat::safetensors);
  loom::write_pack(dir / "src", dir / "p", quiet_pack());
  REQUIRE(loom::verify_pack(dir / "p").empty());
  const fs::path data = dir / "p" / "data-00000.bin";
  const auto original = bytes_of(data);

  auto flipped = original;
  flipped[200] ^= 0x01;  // inside the first tensor (token_embd starts at 0)
  t::write_file_bytes(data, flipped);
  auto problems = loom::verify_pack(dir / "p");
  REQUIRE(problems.size() == 1);
  CHECK(problems[0].tensor == "token_embd");
  CHECK(problems[0].detail.find("sha256") != std::string::npos);

  auto truncated = original;
  truncated.resize(truncated.size() - 100);
  t::write_file_bytes(data, truncated);
  problems = loom::verify_pack(dir / "p");
  REQUIRE(problems.size() >= 2);
  CHECK(problems[0].tensor.empty());  // the file size
  CHECK(problems.back().tensor == "output");
  // A truncated pack also refuses to load, naming the tensor.
  try {
    loom::load_model(dir / "p", loom::test::quiet_load_options());
    FAIL("expected an error");
  } catch (const loom::Error& e) {
    CHECK(e.context().tensor == "output");
  }

  fs::remove(data);
  problems = loom::verify_pack(dir / "p");
  REQUIRE_FALSE(problems.empty());
  CHECK(problems[0].detail.find("missing") != std::string::npos);
}
