// Shared by the tokenizer and pack harnesses, by loom_fuzz_seeds and by the tokenizer
// tests: fixed tokenizers and a scratch pack, all made by loom itself (the demo's trained
// byte-level BPE, a small SentencePiece vocabulary with byte fallback as GGUF metadata and
// as a tokenizer.model, a pack written by write_pack), so that harness and seeds agree.
#pragma once

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "loom/demo.hpp"
#include "loom/exporter.hpp"
#include "loom/format.hpp"
#include "loom/pack.hpp"
#include "loom/tokenizer.hpp"

namespace loom::fuzz {

// A fresh directory under /tmp, removed when the process exits.
inline std::filesystem::path scratch_dir(const char* tag) {
  std::string templ = std::string("/tmp/loom-fuzz-") + tag + "-XXXXXX";
  if (::mkdtemp(templ.data()) == nullptr) std::abort();
  static std::vector<std::filesystem::path> to_remove;
  if (to_remove.empty()) {
    std::atexit([] {
      std::error_code ec;
      for (const auto& p : to_remove) std::filesystem::remove_all(p, ec);
    });
  }
  to_remove.emplace_back(templ);
  return templ;
}

inline DemoOptions small_demo() {
  DemoOptions o;
  o.hidden_size = 32;
  o.n_layers = 1;
  o.n_heads = 2;
  o.n_kv_heads = 1;
  o.intermediate_size = 64;
  o.context_length = 64;
  o.merges = 120;
  return o;
}

// The demo model (config.json, model.safetensors, tokenizer.json, ...) in a scratch dir.
inline std::filesystem::path demo_model() {
  static const std::filesystem::path dir = [] {
    const auto d = scratch_dir("demo") / "demo";
    write_demo_model(d, small_demo());
    return d;
  }();
  return dir;
}

inline std::string read_text(const std::filesystem::path& p) {
  std::ifstream in(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

// A SentencePiece-style ("llama") vocabulary as GGUF metadata: control tokens, one
// token per byte (<0xNN>), and a few pieces whose scores decide the merges.
inline Metadata spm_gguf_metadata() {
  using T = MetaValue::Type;
  const std::string S = "\xE2\x96\x81";
  std::vector<MetaValue> tokens, scores, types;
  auto add = [&](const std::string& text, double score, int64_t type) {
    tokens.push_back(MetaValue::of_string(text));
    scores.push_back(MetaValue::of_float(score, T::f32));
    types.push_back(MetaValue::of_int(type, T::i32));
  };
  add("<unk>", 0, 2);
  add("<s>", 0, 3);
  add("</s>", 0, 3);
  for (int b = 0; b < 256; ++b) {
    char name[8];
    std::snprintf(name, sizeof name, "<0x%02X>", b);
    add(name, 0, 6);
  }
  const std::vector<std::pair<std::string, double>> pieces = {
      {S, -1}, {"a", -2}, {"b", -2}, {"e", -2}, {"t", -2}, {S + "a", -3}, {"ab", -4}, {"th", -1.5},
      {S + "th", -2.5}, {"the", -2}, {S + "the", -1}, {"<tool>", 0}};
  for (const auto& [p, s] : pieces) add(p, s, p == "<tool>" ? 4 : 1);
  Metadata md;
  md.set("tokenizer.ggml.model", MetaValue::of_string("llama"));
  md.set("tokenizer.ggml.tokens", MetaValue::of_array(std::move(tokens), T::string));
  md.set("tokenizer.ggml.scores", MetaValue::of_array(std::move(scores), T::f32));
  md.set("tokenizer.ggml.token_type", MetaValue::of_array(std::move(types), T::i32));
  md.set("tokenizer.ggml.bos_token_id", MetaValue::of_uint(1, T::u32));
  md.set("tokenizer.ggml.eos_token_id", MetaValue::of_uint(2, T::u32));
  md.set("tokenizer.ggml.unknown_token_id", MetaValue::of_uint(0, T::u32));
  md.set("tokenizer.ggml.add_bos_token", MetaValue::of_bool(true));
  return md;
}

// SentencePiece tokenizer.model settings (ModelProto's TrainerSpec / NormalizerSpec).
struct SpmProtoSettings {
  int64_t model_type = 2;  // BPE
  bool add_dummy_prefix = true;
  bool remove_extra_whitespaces = false;  // written explicitly: the proto default is true
  bool escape_whitespaces = true;
  std::string normalizer_name = "identity";
  std::string charsmap;  // precompiled_charsmap; empty = identity
  bool treat_whitespace_as_suffix = false;
};

// The vocabulary of spm_gguf_metadata() as a SentencePiece tokenizer.model (a protobuf
// ModelProto written field by field, as protobuf serializes it).
inline std::string spm_model_proto(const SpmProtoSettings& s = {}) {
  auto varint = [](std::string& out, uint64_t v) {
    for (; v >= 0x80; v >>= 7) out += static_cast<char>((v & 0x7F) | 0x80);
    out += static_cast<char>(v);
  };
  auto number = [&](std::string& out, uint32_t field, uint64_t v) {
    varint(out, uint64_t{field} << 3);
    varint(out, v);
  };
  auto bytes = [&](std::string& out, uint32_t field, std::string_view b) {
    varint(out, (uint64_t{field} << 3) | 2);
    varint(out, b.size());
    out.append(b);
  };
  const Metadata md = spm_gguf_metadata();
  const MetaValue& tokens = *md.find("tokenizer.ggml.tokens");
  const MetaValue& scores = *md.find("tokenizer.ggml.scores");
  const MetaValue& types = *md.find("tokenizer.ggml.token_type");
  std::string proto;
  for (size_t i = 0; i < tokens.array_size(); ++i) {
    std::string piece;
    bytes(piece, 1, tokens.string_item(i));
    const auto score = static_cast<float>(scores.array_item(i).as_double());
    char le[4];
    std::memcpy(le, &score, 4);
    varint(piece, (uint64_t{2} << 3) | 5);
    piece.append(le, 4);
    number(piece, 3, static_cast<uint64_t>(types.array_item(i).as_int()));
    bytes(proto, 1, piece);
  }
  std::string trainer;
  number(trainer, 3, static_cast<uint64_t>(s.model_type));
  number(trainer, 24, s.treat_whitespace_as_suffix ? 1 : 0);
  number(trainer, 35, 1);  // byte_fallback
  number(trainer, 40, 0);
  number(trainer, 41, 1);
  number(trainer, 42, 2);
  bytes(proto, 2, trainer);
  std::string normalizer;
  bytes(normalizer, 1, s.normalizer_name);
  if (!s.charsmap.empty()) bytes(normalizer, 2, s.charsmap);
  number(normalizer, 3, s.add_dummy_prefix ? 1 : 0);
  number(normalizer, 4, s.remove_extra_whitespaces ? 1 : 0);
  number(normalizer, 5, s.escape_whitespaces ? 1 : 0);
  bytes(proto, 3, normalizer);
  return proto;
}

// Tokenizers with a token for every byte, so decode(encode(x)) == x for any bytes.
inline std::vector<std::shared_ptr<const Tokenizer>> fixed_tokenizers() {
  return {Tokenizer::load(demo_model() / "tokenizer.json"),
          Tokenizer::from_gguf_metadata(spm_gguf_metadata(), "spm.gguf")};
}

// A pack of a tiny random model, written by loom's pack writer.
inline std::filesystem::path scratch_pack() {
  static const std::filesystem::path dir = [] {
    const auto d = scratch_dir("pack");
    DemoOptions o = small_demo();
    write_demo_model(d / "src", o);
    PackOptions po;
    po.hash_sources = false;
    po.quantize = "q8_0";  // matrices in blocks, so a seed can mark one packed (q8_0_x16)
    write_pack(d / "src", d / "pack", po);
    return d / "pack";
  }();
  return dir;
}

}  // namespace loom::fuzz
