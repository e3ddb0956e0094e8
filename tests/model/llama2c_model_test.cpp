// llama2.c checkpoints through the normal loader: the config from the header, Meta's
// names mapped onto loom's slots zero-copy, the tokenizer found beside the checkpoint,
// and the real stories260K reproducing llama2.c's greedy output and the HF copy's logits.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>

#include "format/byte_source.hpp"
#include "loom/demo.hpp"
#include "loom/error.hpp"
#include "loom/generate.hpp"
#include "loom/loader.hpp"
#include "loom/sampler.hpp"
#include "loom/session.hpp"
#include "loom/tokenizer.hpp"
#include "support/format_fixtures.hpp"
#include "support/llama2c_writer.hpp"
#include "support/reference_data.hpp"
#include "support/test_support.hpp"

namespace fs = std::filesystem;
namespace t = loom::test;
using loom::test::Llama2cSpec;

namespace {

// A model with the small llama2.c vocabulary beside it (so vocab_size matches).
Llama2cSpec spec_with_vocab() {
  Llama2cSpec s;
  s.vocab_size = static_cast<int32_t>(t::llama2c_small_vocab().size());
  return s;
}

fs::path write_model(const t::TempDir& dir, const Llama2cSpec& s, const std::string& name = "model.bin") {
  const fs::path p = dir / name;
  t::write_file_bytes(p, t::llama2c_checkpoint(s));
  return p;
}

std::vector<float> all_logits(const std::shared_ptr<const loom::Model>& model, const std::vector<int32_t>& ids) {
  loom::SessionOptions o;
  o.all_logits = true;
  o.context_length = std::min<int64_t>(64, model->config().max_positions);
  loom::Session s(model, o);
  s.prefill(ids);
  std::vector<float> out;
  for (size_t i = 0; i < ids.size(); ++i) {
    const auto l = s.logits_at(static_cast<int64_t>(i));
    out.insert(out.end(), l.begin(), l.end());
  }
  return out;
}

bool contains(const std::vector<std::string>& v, std::string_view needle) {
  return std::any_of(v.begin(), v.end(), [&](const std::string& s) { return s.find(needle) != std::string::npos; });
}

}  // namespace

TEST_CASE("llama2c model: the header becomes the config, tensors load zero-copy, tokenizer.bin beside it") {
  t::TempDir dir;
  const auto spec = spec_with_vocab();
  const fs::path path = write_model(dir, spec);
  t::write_file_bytes(dir / "tokenizer.bin", t::llama2c_tokenizer_file(t::llama2c_small_vocab()));
  const auto model = loom::load_model(path, t::quiet_load_options());
  const auto& c = model->config();
  CHECK(c.architecture == "llama");
  CHECK(c.hidden_size == 8);
  CHECK(c.intermediate_size == 12);
  CHECK(c.n_layers == 2);
  CHECK(c.n_heads == 2);
  CHECK(c.n_kv_heads == 1);
  CHECK(c.head_dim == 4);
  CHECK(c.vocab_size == spec.vocab_size);
  CHECK(c.max_positions == 8);
  CHECK(c.norm_eps == 1e-5);
  CHECK(c.rope_theta == 10000.0);
  CHECK(c.tie_word_embeddings);
  CHECK(c.bos_token_id == 1);

  const auto& r = *model->load_report();
  CHECK(r.format == "llama2c");
  CHECK(r.expected_tensors == 1 + 9 * 2 + 2);
  CHECK(r.zero_copy_tensors == 1 + 9 * 2 + 1);  // all but the tied output
  CHECK(r.converted_tensors == 0);
  CHECK(r.tied == std::vector<std::string>{"output -> token_embd"});
  CHECK(r.ignored == std::vector<std::string>{"freq_cis_real", "freq_cis_imag"});
  CHECK(contains(r.notes, "Meta's (llama2.c) interleaved-RoPE order"));
  CHECK(r.tokenizer == (dir / "tokenizer.bin").string());
  CHECK(model->weights().rope_interleaved);
  const std::string text = r.to_text(true);
  CHECK(text.find("layers.1.feed_forward.w2.weight") != std::string::npos);

  // The slots are the file's bytes, in place: layer 1's w2 is ffn_down.
  const auto tensors = t::llama2c_tensors(spec);
  const auto w2 = std::find_if(tensors.begin(), tensors.end(), [](const auto& p) { return p.first == "layers.1.feed_forward.w2.weight"; });
  const loom::Tensor& down = model->weights().layers[1].ffn_down;
  CHECK(down.is_mapped());
  CHECK(down.shape() == loom::Shape{8, 12});
  CHECK(std::memcmp(down.raw_data(), w2->second.data(), w2->second.size() * 4) == 0);
  REQUIRE(model->tokenizer());
  CHECK(model->tokenizer()->encode("the and", true) == std::vector<int32_t>{1, 262, 266});
}

TEST_CASE("llama2c model: legacy and version-1 files of the same weights give identical logits") {
  for (const bool shared : {true, false}) {
    INFO((shared ? "shared classifier" : "separate classifier"));
    t::TempDir dir;
    Llama2cSpec legacy = spec_with_vocab();
    legacy.shared_classifier = shared;
    Llama2cSpec v1 = legacy;
    v1.version = 1;
    const auto a = loom::load_model(write_model(dir, legacy, "a.bin"), t::quiet_load_options());
    const auto b = loom::load_model(write_model(dir, v1, "b.bin"), t::quiet_load_options());
    CHECK(a->config().tie_word_embeddings == shared);
    CHECK(a->load_report()->tied.empty() == !shared);
    const std::vector<int32_t> ids{1, 262, 5, 266, 270};
    const auto la = all_logits(a, ids);
    const auto lb = all_logits(b, ids);
    REQUIRE(la.size() == ids.size() * static_cast<size_t>(legacy.vocab_size));
    CHECK(la == lb);
    CHECK(std::all_of(la.begin(), la.end(), [](float f) { return std::isfinite(f); }));
  }
}

TEST_CASE("llama2c model: the tokenizer is tokenizer.bin, else the one tok*.bin, else none (noted)") {
  const auto spec = spec_with_vocab();
  const auto vocab = t::llama2c_tokenizer_file(t::llama2c_small_vocab());
  {
    t::TempDir dir;
    const auto path = write_model(dir, spec, "stories.bin");
    t::write_file_bytes(dir / "tok275.bin", vocab);
    const auto m = loom::load_model(path, t::quiet_load_options());
    CHECK(m->load_report()->tokenizer == (dir / "tok275.bin").string());
    t::write_file_bytes(dir / "tokenizer.bin", vocab);
    CHECK(loom::load_model(path, t::quiet_load_options())->load_report()->tokenizer == (dir / "tokenizer.bin").string());
    // The tokenizer alone, from the checkpoint's path.
    CHECK(loom::Tokenizer::load(path)->encode("the", false) == std::vector<int32_t>{262});
    CHECK(loom::Tokenizer::load(dir / "tok275.bin")->vocab_size() == spec.vocab_size);
  }
  {
    // Other weights named .bin (a torch zip) are not taken for a tokenizer: their
    // directory's tokenizer is loaded.
    t::TempDir dir;
    loom::write_demo_model(dir.path());
    loom::write_torch(dir / "pytorch_model.bin", t::tiny_format_model());
    const auto tok = loom::Tokenizer::load(dir / "pytorch_model.bin");
    CHECK(tok->vocab_size() == loom::Tokenizer::load(dir.path())->vocab_size());
    CHECK(tok->encode("the loom") == loom::Tokenizer::load(dir.path())->encode("the loom"));
  }
  {
    t::TempDir dir;
    const auto path = write_model(dir, spec);
    t::write_file_bytes(dir / "tok1.bin", vocab);
    t::write_file_bytes(dir / "tok2.bin", vocab);
    const auto m = loom::load_model(path, t::quiet_load_options());
    CHECK_FALSE(m->tokenizer());
    CHECK(contains(m->load_report()->notes, "several llama2.c tokenizers beside the checkpoint (tok1.bin, tok2.bin)"));
  }
  {
    t::TempDir dir;
    const auto m = loom::load_model(write_model(dir, spec), t::quiet_load_options());
    CHECK_FALSE(m->tokenizer());
    CHECK(contains(m->load_report()->notes, "no llama2.c tokenizer"));
    t::expect_error([&] { loom::Tokenizer::load(dir / "model.bin"); }, loom::ErrorCode::io, "no llama2.c tokenizer",
                    (dir / "model.bin").string());
  }
}

TEST_CASE("llama2c reference: stories260K.bin greedy from BOS reproduces llama2.c's 200 tokens and text") {
  LOOM_REQUIRE_REFERENCE(ref);
  const fs::path dir = ref / "models" / "stories260K";
  const auto expected_ids = t::read_ids(dir / "expected" / "greedy200.ids.txt");
  REQUIRE(expected_ids.size() == 200);
  auto model = loom::load_model(dir / "llama2c" / "stories260K.bin", t::quiet_load_options());
  REQUIRE(model->tokenizer());
  CHECK(model->load_report()->tokenizer == (dir / "llama2c" / "tok512.bin").string());
  CHECK(model->load_report()->zero_copy_tensors == 47);
  loom::Session s(model);
  loom::SamplerParams greedy;
  greedy.temperature = 0.0f;
  loom::Sampler sampler(greedy);
  loom::GenerateOptions g;
  g.max_tokens = 200;
  g.stop_at_eos = false;
  const auto r = loom::generate_from_tokens(s, sampler, *model->tokenizer(), std::vector<int32_t>{1}, g);
  CHECK(r.tokens == expected_ids);
  std::string text = t::read_file_text(dir / "expected" / "greedy200.txt");
  while (!text.empty() && text.back() == '\n') text.pop_back();
  std::string got = r.text;
  while (!got.empty() && got.back() == '\n') got.pop_back();
  CHECK(got == text);
}

TEST_CASE("llama2c reference: stories260K.bin logits match the HF-layout copy and llama.cpp") {
  LOOM_REQUIRE_REFERENCE(ref);
  const fs::path dir = ref / "models" / "stories260K";
  const auto bin = loom::load_model(dir / "llama2c" / "stories260K.bin", t::quiet_load_options());
  const auto hf = loom::load_model(dir / "hf", t::quiet_load_options());
  for (const std::string prompt : {"once_upon", "zoo"}) {
    INFO(prompt);
    const auto ids = t::read_ids(dir / "logits" / (prompt + ".ids.txt"));
    const auto a = all_logits(bin, ids);
    const auto b = all_logits(hf, ids);
    REQUIRE(a.size() == b.size());
    float worst = 0.0f, largest = 0.0f;
    for (size_t i = 0; i < a.size(); ++i) {
      worst = std::max(worst, std::abs(a[i] - b[i]));
      largest = std::max(largest, std::abs(b[i]));
    }
    // Same weights, q/k rows in the other RoPE order: only rounding may differ.
    CHECK(worst <= 1e-5f * std::max(1.0f, largest));
    WARN(prompt << ": llama2c vs HF max |diff| " << worst << " (max |logit| " << largest << ")");
    const auto expected = t::read_logits(dir / "logits" / (prompt + ".logits.txt"));
    REQUIRE(expected.size() == ids.size());
    const size_t vocab = expected[0].size();
    for (size_t p = 0; p < ids.size(); ++p) {
      const std::span<const float> got(a.data() + p * vocab, vocab);
      CHECK(t::relative_l2(got, expected[p]) < 1e-4);
      CHECK(t::argmax(got) == t::argmax(expected[p]));
    }
  }
}

TEST_CASE("llama2c reference: stories260K rewritten as export.py version 1 gives the same logits") {
  LOOM_REQUIRE_REFERENCE(ref);
  const fs::path bin = ref / "models" / "stories260K" / "llama2c" / "stories260K.bin";
  const auto src = loom::open_weights(bin);
  Llama2cSpec spec;
  spec.dim = 64;
  spec.hidden_dim = 172;
  spec.n_layers = 5;
  spec.n_heads = 8;
  spec.n_kv_heads = 4;
  spec.vocab_size = 512;
  spec.seq_len = 512;
  spec.version = 1;
  // The writer's bytes for this header, with every tensor's numbers replaced by the
  // reference's (found by name).
  auto bytes = t::llama2c_checkpoint(spec);
  uint64_t at = 256;
  for (const auto& [name, values] : t::llama2c_tensors(spec)) {
    const auto* r = src->find(name);
    REQUIRE(r != nullptr);
    REQUIRE(r->nbytes == values.size() * 4);
    src->read(*r, 0, std::as_writable_bytes(std::span(reinterpret_cast<char*>(bytes.data() + at), r->nbytes)));
    at += r->nbytes;
  }
  REQUIRE(at == bytes.size());
  t::TempDir dir;
  t::write_file_bytes(dir / "stories260K-v1.bin", bytes);
  const auto v1 = loom::load_model(dir / "stories260K-v1.bin", t::quiet_load_options());
  const auto legacy = loom::load_model(bin, t::quiet_load_options());
  CHECK(v1->load_report()->zero_copy_tensors == 47);
  const std::vector<int32_t> ids{1, 403, 407, 261, 378};
  CHECK(all_logits(v1, ids) == all_logits(legacy, ids));
}

TEST_CASE("llama2c reference: a truncated stories260K.bin fails naming the file") {
  LOOM_REQUIRE_REFERENCE(ref);
  const fs::path bin = ref / "models" / "stories260K" / "llama2c" / "stories260K.bin";
  auto bytes = t::read_file_bytes(bin);
  REQUIRE(bytes.size() > 1000);
  bytes.erase(bytes.end() - 1000, bytes.end());
  t::TempDir dir;
  const fs::path cut = dir / "stories260K.bin";
  t::write_file_bytes(cut, bytes);
  const auto e = t::expect_error([&] { loom::load_model(cut, t::quiet_load_options()); }, loom::ErrorCode::format,
                                 "implies 1056540 bytes, but the file has 1055540 (truncated?)", cut.string(), {},
                                 bytes.size());
  CHECK(std::string(e.what()).find("dim 64, hidden_dim 172, n_layers 5") != std::string::npos);
}
