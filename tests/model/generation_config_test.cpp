// generation_config.json into GenerationDefaults (each field, its source, bad values), and
// hand-edited side files through a real model load: the load report's warnings, the
// generation defaults and their sources, eos ids merged into the model's.
#include <catch2/catch.hpp>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <set>

#include "loom/demo.hpp"
#include "loom/error.hpp"
#include "loom/generate.hpp"
#include "loom/load_report.hpp"
#include "loom/loader.hpp"
#include "loom/pack.hpp"
#include "loom/tokenizer.hpp"
#include "model/config_parse.hpp"
#include "model/generation_config.hpp"
#include "support/format_fixtures.hpp"
#include "support/test_support.hpp"

namespace fs = std::filesystem;
namespace t = loom::test;
using loom::DefaultSource;
using loom::ErrorCode;

namespace {

loom::GenerationDefaults parse(std::string_view json) {
  return loom::generation_config::parse(json, "gen/generation_config.json");
}

void write(const fs::path& p, std::string_view text) {
  std::ofstream out(p, std::ios::binary | std::ios::trunc);
  out << text;
}

bool contains(const std::string& s, std::string_view part) { return s.find(part) != std::string::npos; }

// A small demo model (real tokenizer) in a fresh directory.
struct DemoDir {
  t::TempDir dir;
  fs::path path = dir / "demo";
  DemoDir() {
    loom::DemoOptions o;
    o.hidden_size = 64;
    o.n_layers = 1;
    o.merges = 100;
    loom::write_demo_model(path, o);
  }
};

}  // namespace

TEST_CASE("generation_config.json: every field, with its source") {
  const auto g = parse(R"({"temperature": 0.6, "top_k": 20, "top_p": 0.9, "repetition_penalty": 1.1,
                           "max_new_tokens": 64, "do_sample": true, "eos_token_id": [128001, 128009],
                           "bos_token_id": 128000, "pad_token_id": null, "num_beams": 1,
                           "transformers_version": "4.45.0"})");
  CHECK(g.has_file);
  CHECK(g.temperature.value == 0.6f);
  CHECK(g.temperature.source == DefaultSource::generation_config);
  CHECK(g.temperature.key == "temperature");
  CHECK(g.top_k.value == 20);
  CHECK(g.top_p.value == 0.9f);
  CHECK(g.repetition_penalty.value == 1.1f);
  CHECK(g.max_new_tokens.value == 64);
  CHECK(g.max_new_tokens.key == "max_new_tokens");
  CHECK(g.eos_token_ids == std::vector<int32_t>{128001, 128009});
  CHECK(loom::default_source_name(g.top_k.source) == "generation_config.json");

  loom::SamplerParams sp;
  sp.min_p = 0.25f;
  g.apply_to(sp);
  CHECK(sp.temperature == 0.6f);
  CHECK(sp.top_k == 20);
  CHECK(sp.top_p == 0.9f);
  CHECK(sp.repeat_penalty == 1.1f);
  CHECK(sp.min_p == 0.25f);  // not a generation_config.json key: the caller's value stays
  loom::GenerateOptions go;
  g.apply_to(go);
  CHECK(go.max_tokens == 64);
}

TEST_CASE("generation_config.json: absent keys keep loom's defaults, marked as such") {
  const auto g = parse(R"({"eos_token_id": 2, "temperature": null})");
  const loom::SamplerParams loom_defaults;
  CHECK(g.temperature.value == loom_defaults.temperature);
  CHECK(g.temperature.source == DefaultSource::loom);
  CHECK(g.top_k.source == DefaultSource::loom);
  CHECK(g.max_new_tokens.value == 128);
  CHECK(loom::default_source_name(g.max_new_tokens.source) == "loom default");
  CHECK(g.eos_token_ids == std::vector<int32_t>{2});  // a single number is a list of one
  loom::SamplerParams sp;
  sp.temperature = 0.1f;
  g.apply_to(sp);
  CHECK(sp.temperature == 0.1f);  // loom defaults never overwrite the caller's
  const auto lines = g.describe();
  CHECK(std::find(lines.begin(), lines.end(), "temperature 0.8 (loom default)") != lines.end());
  CHECK(std::find(lines.begin(), lines.end(), "eos_token_id 2 (generation_config.json)") != lines.end());
}

TEST_CASE("generation_config.json: do_sample false is greedy, max_length stands in for max_new_tokens") {
  auto g = parse(R"({"do_sample": false, "temperature": 0.7, "max_length": 256})");
  CHECK(g.temperature.value == 0.0f);
  CHECK(g.temperature.key == "do_sample");
  CHECK(g.max_new_tokens.value == 256);
  CHECK(g.max_new_tokens.key == "max_length");
  const auto lines = g.describe();
  CHECK(std::find(lines.begin(), lines.end(), "temperature 0 (generation_config.json: do_sample)") != lines.end());
  CHECK(std::find(lines.begin(), lines.end(), "max_new_tokens 256 (generation_config.json: max_length)") !=
        lines.end());

  g = parse(R"({"max_length": 256, "max_new_tokens": 16, "do_sample": true, "temperature": 0.7})");
  CHECK(g.max_new_tokens.value == 16);  // max_new_tokens wins when both are there
  CHECK(g.max_new_tokens.key == "max_new_tokens");
  CHECK(g.temperature.value == 0.7f);
  CHECK(parse("{\"top_k\": 50.0}").top_k.value == 50);  // an integral number is an integer
}

TEST_CASE("generation_config.json: wrong types and values name the file and the field") {
  const std::string file = "gen/generation_config.json";
  const std::vector<std::pair<std::string, std::string>> cases = {
      {R"({"temperature": "hot"})", "field 'temperature' must be a number, found string"},
      {R"({"temperature": -1})", "field 'temperature' is -1; it must be at least 0"},
      {R"({"top_p": 1.5})", "field 'top_p' is 1.5; it must be between 0 and 1"},
      {R"({"repetition_penalty": 0})", "field 'repetition_penalty' is 0; it must be above 0"},
      {R"({"top_k": 2.5})", "field 'top_k' must be an integer, found number"},
      {R"({"top_k": true})", "field 'top_k' must be an integer, found bool"},
      {R"({"max_new_tokens": 0})", "field 'max_new_tokens' is 0; it must be between 1 and 2147483647"},
      {R"({"max_new_tokens": 99999999999})", "field 'max_new_tokens' is 99999999999; it must be between"},
      {R"({"max_length": [20]})", "field 'max_length' must be an integer, found array"},
      {R"({"do_sample": "no"})", "field 'do_sample' must be true or false, found string"},
      {R"({"eos_token_id": "</s>"})", "field 'eos_token_id' must be a token id or a list of token ids, found string"},
      {R"({"eos_token_id": [1, [2]]})", "field 'eos_token_id' must be a token id or a list of token ids, found array"},
      {R"({"eos_token_id": -3})", "field 'eos_token_id' is -3; it must be between 0 and"},
      {R"([1, 2])", "generation_config.json must hold a JSON object, found array"},
      {"{\"temperature\": 0.6\n\"top_k\": 3}", "malformed JSON at line 2, column 1: expected ',' or '}'"},
  };
  for (const auto& [json, needle] : cases) {
    INFO(json);
    t::expect_error([&] { parse(json); }, ErrorCode::format, needle, file);
  }
}

TEST_CASE("config.json: a byte-order mark, comments and trailing commas are forgiven") {
  // Before the lenient reader, a BOM made config.json "not valid JSON: improper structure".
  const std::string text =
      "\xEF\xBB\xBF{\n"
      "  // Llama-shaped\n"
      "  \"architectures\": [\"LlamaForCausalLM\",], \"hidden_size\": 64, \"intermediate_size\": 96,\n"
      "  /* two layers */ \"num_hidden_layers\": 2, \"num_attention_heads\": 4, \"vocab_size\": 128,\n"
      "  \"max_position_embeddings\": 256,\n"
      "}\n";
  std::vector<std::string> warnings;
  const auto c = loom::config_parse::from_hf_json(text, "m/config.json", &warnings);
  CHECK(c.architecture == "llama");
  CHECK(c.n_layers == 2);
  REQUIRE(warnings.size() == 1);
  CHECK(warnings[0] == "m/config.json: a UTF-8 byte-order mark, 2 comments and 2 trailing commas were ignored");
  t::expect_error([&] { loom::config_parse::from_hf_json("{\n \"hidden_size\": 64 64}", "m/config.json"); },
                  ErrorCode::format, "malformed JSON at line 2, column 20", "m/config.json");
}

TEST_CASE("a model with hand-edited side files and a generation_config.json loads, and the report says so") {
  DemoDir d;
  const fs::path dir = d.path;
  // config.json with a BOM and comments, tokenizer_config.json with a trailing comma.
  std::string config = t::read_file_text(dir / "config.json");
  const size_t brace = config.rfind('}');
  REQUIRE(brace != std::string::npos);
  config = "\xEF\xBB\xBF// edited by hand\n" + config.substr(0, brace) + ", /* end */ }\n";
  write(dir / "config.json", config);
  std::string tok_config = t::read_file_text(dir / "tokenizer_config.json");
  tok_config.insert(tok_config.rfind('}'), ",");
  write(dir / "tokenizer_config.json", tok_config);
  write(dir / "generation_config.json",
        "{\n  \"do_sample\": false, // greedy\n  \"max_new_tokens\": 5,\n  \"top_k\": 7,\n"
        "  \"eos_token_id\": [3, 4, 100000],\n}");

  const auto model = loom::load_model(dir, t::quiet_load_options());
  const auto& report = *model->load_report();
  const std::vector<std::string> want = {
      (dir / "config.json").string() + ": a UTF-8 byte-order mark, 2 comments and 1 trailing comma were ignored",
      (dir / "generation_config.json").string() + ": 1 comment and 1 trailing comma were ignored",
      (dir / "generation_config.json").string() +
          ": eos_token_id 100000 is outside the vocabulary (" + std::to_string(model->config().vocab_size) +
          " tokens) and was ignored",
      (dir / "tokenizer_config.json").string() + ": 1 trailing comma was ignored",
  };
  CHECK(report.file_warnings == want);
  CHECK(model->tokenizer()->load_warnings() == std::vector<std::string>{want[3]});

  const auto& g = model->generation_defaults();
  CHECK(g.has_file);
  CHECK(g.temperature.value == 0.0f);
  CHECK(g.temperature.key == "do_sample");
  CHECK(g.max_new_tokens.value == 5);
  CHECK(g.top_k.value == 7);
  CHECK(g.top_p.source == DefaultSource::loom);
  CHECK(report.generation.max_new_tokens.value == 5);

  // eos ids: config.json's first, then generation_config.json's (in the vocabulary), then the tokenizer's.
  const auto& eos = model->config().eos_token_ids;
  CHECK(std::find(eos.begin(), eos.end(), 3) != eos.end());
  CHECK(std::find(eos.begin(), eos.end(), 4) != eos.end());
  CHECK(std::find(eos.begin(), eos.end(), 100000) == eos.end());
  CHECK(std::set<int32_t>(eos.begin(), eos.end()).size() == eos.size());

  const std::string text = report.to_text();
  CHECK(contains(text, "warning    " + want[0]));
  CHECK(contains(text, "generation temperature 0 (generation_config.json: do_sample)"));
  CHECK(contains(text, "generation max_new_tokens 5 (generation_config.json)"));
  CHECK(contains(text, "generation top_p 0.95 (loom default)"));
  const std::string json = report.to_json();
  CHECK(contains(json, "\"file_warnings\""));
  CHECK(contains(json, "2 comments and 1 trailing comma were ignored"));
  CHECK(contains(json, "\"source\": \"generation_config.json\""));
  CHECK(contains(json, "\"key\": \"do_sample\""));

  // A pack made from it carries the generation defaults along.
  const fs::path pack = d.dir / "pack";
  loom::PackOptions po;
  po.load = t::quiet_load_options();
  loom::write_pack(dir, pack, po);
  const auto packed = loom::load_model(pack, t::quiet_load_options());
  CHECK(packed->generation_defaults().max_new_tokens.value == 5);
  CHECK(packed->generation_defaults().temperature.key == "do_sample");
}

TEST_CASE("a model without generation_config.json has loom's defaults, and broken side files name line:column") {
  DemoDir d;
  const auto model = loom::load_model(d.path, t::quiet_load_options());
  CHECK_FALSE(model->generation_defaults().has_file);
  CHECK(model->generation_defaults().temperature.source == DefaultSource::loom);
  CHECK(model->load_report()->file_warnings.empty());
  CHECK(contains(model->load_report()->to_text(), "generation max_new_tokens 128 (loom default)"));

  write(d.path / "generation_config.json", "{\"top_k\": 5,\n \"top_p\": }");
  t::expect_error([&] { loom::load_model(d.path, t::quiet_load_options()); }, ErrorCode::format,
                  "malformed JSON at line 2, column 11: expected a value, found '}'",
                  (d.path / "generation_config.json").string());
  write(d.path / "generation_config.json", "{\"top_k\": \"many\"}");
  t::expect_error([&] { loom::load_model(d.path, t::quiet_load_options()); }, ErrorCode::format,
                  "field 'top_k' must be an integer, found string", (d.path / "generation_config.json").string());
  fs::remove(d.path / "generation_config.json");
  write(d.path / "tokenizer_config.json", "{\"eos_token\": \"</s>\" /* unterminated");
  t::expect_error([&] { loom::load_model(d.path, t::quiet_load_options()); }, ErrorCode::format,
                  "malformed JSON at line 1, column 22: a /* comment is never closed",
                  (d.path / "tokenizer_config.json").string());
}
