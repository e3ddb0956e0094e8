// The loader's byte-order suspicion: a safetensors model with one tensor's values
// byte-swapped in the file loads, and its report warns naming that tensor (text, JSON
// and the warnings list); the untouched model gets no such warning.
#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>
#include <vector>

#include "loom/convert.hpp"
#include "loom/exporter.hpp"
#include "loom/format.hpp"
#include "loom/load_report.hpp"
#include "loom/loader.hpp"
#include "loom/manifest.hpp"
#include "support/test_support.hpp"
#include "support/tiny_model.hpp"

namespace fs = std::filesystem;
namespace t = loom::test;

namespace {

// Reverses the bytes of each value of tensor `name` in the safetensors file, in place.
void byteswap_tensor_in_file(const fs::path& file, const std::string& name) {
  uint64_t offset = 0, nbytes = 0;
  size_t element = 0;
  {
    const auto source = loom::open_weights(file);
    const loom::TensorRecord* r = source->find(name);
    REQUIRE(r != nullptr);
    offset = r->offset;
    nbytes = r->nbytes;
    element = static_cast<size_t>(loom::dtype_size(r->dtype));
  }
  auto bytes = t::read_file_bytes(file);
  REQUIRE(offset + nbytes <= bytes.size());
  loom::byteswap_inplace(bytes.data() + offset, static_cast<size_t>(nbytes) / element, element);
  t::write_file_bytes(file, bytes);
}

std::vector<loom::ManifestProblem> suspicious(const loom::LoadReport& r) {
  std::vector<loom::ManifestProblem> out;
  for (const auto& w : r.warnings) {
    if (w.kind == loom::ProblemKind::suspicious_data) out.push_back(w);
  }
  return out;
}

}  // namespace

TEST_CASE("a byte-swapped safetensors tensor loads with a warning naming it") {
  const auto config = t::tiny_llama_config();
  const auto weights = t::random_weights(config, 31);
  for (const loom::DType dtype : {loom::DType::f32, loom::DType::bf16, loom::DType::f16}) {
    INFO(loom::dtype_name(dtype));
    t::TempDir dir;
    const fs::path model = dir / "m";
    loom::ExportOptions eo;
    eo.dtype = dtype;
    loom::export_model(config, weights, model, loom::ExportFormat::safetensors, eo);

    // Untouched: no suspicion anywhere.
    auto clean = loom::load_model(model, t::quiet_load_options());
    CHECK(suspicious(*clean->load_report()).empty());
    clean.reset();

    const std::string name = "model.layers.1.mlp.down_proj.weight";
    byteswap_tensor_in_file(model / "model.safetensors", name);
    auto loaded = loom::load_model(model, t::quiet_load_options());  // a warning, not an error
    const auto& report = *loaded->load_report();
    const auto found = suspicious(report);
    REQUIRE(found.size() == 1);
    CHECK(found[0].external_name == name);
    CHECK(found[0].internal_name == "blk.1.ffn_down");
    CHECK_FALSE(found[0].fatal);
    CHECK(found[0].found == loom::Shape{config.hidden_size, config.intermediate_size});
    CHECK(found[0].detail.find("'" + name + "'") != std::string::npos);
    CHECK(found[0].detail.find("byte-swapped") != std::string::npos);
    CHECK(found[0].detail.find("model.safetensors") != std::string::npos);
    CHECK(report.to_text().find("warning    suspicious_data: tensor '" + name + "'") != std::string::npos);
    const std::string json = report.to_json();
    CHECK(json.find("\"kind\": \"suspicious_data\"") != std::string::npos);
    CHECK(json.find("\"external\": \"" + name + "\"") != std::string::npos);
  }
}

TEST_CASE("the byte-order warning reaches the logger") {
  const auto config = t::tiny_llama_config();
  t::TempDir dir;
  const fs::path model = dir / "m";
  loom::export_model(config, t::random_weights(config, 32), model, loom::ExportFormat::safetensors);
  byteswap_tensor_in_file(model / "model.safetensors", "model.embed_tokens.weight");
  std::vector<std::string> warnings;
  loom::LoadOptions o = t::quiet_load_options();
  o.logger = loom::Logger::to_sink([&](loom::LogLevel, std::string_view m) { warnings.emplace_back(m); },
                                   loom::LogLevel::warn);
  auto loaded = loom::load_model(model, o);
  REQUIRE(warnings.size() == 1);
  CHECK(warnings[0].find("'model.embed_tokens.weight'") != std::string::npos);
  CHECK(warnings[0].find("byte-swapped") != std::string::npos);
}
