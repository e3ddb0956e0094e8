// A test writer of llama2.c files, independent of loom's reader: checkpoints in the
// legacy layout (run.c / export.py version 0) and export.py's version 1, and llama2.c
// tokenizer.bin files. Header-only and free of Catch2, so the fuzz seed writer can use it.
//
// The weights are a deterministic function of (tensor name, element, seed), so the same
// model written in both layouts holds the same numbers.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <map>
#include <string>
#include <utility>
#include <vector>

namespace loom::test {

struct Llama2cSpec {
  int32_t dim = 8;
  int32_t hidden_dim = 12;
  int32_t n_layers = 2;
  int32_t n_heads = 2;
  int32_t n_kv_heads = 1;
  int32_t vocab_size = 16;
  int32_t seq_len = 8;
  bool shared_classifier = true;
  int32_t version = 0;  // 0: legacy, 1: export.py version 1
  uint32_t seed = 1;
};

namespace llama2c_detail {

// Out of line on purpose: GCC 12 at -O3 reports a bogus -Wstringop-overflow for vector
// growth from empty that it can see through (as src/format/byte_source.hpp notes).
[[gnu::noinline]] inline void put_i32(std::vector<uint8_t>& out, int32_t v) {
  uint8_t b[4];
  std::memcpy(b, &v, 4);
  out.insert(out.end(), b, b + 4);
}
[[gnu::noinline]] inline void put_f32(std::vector<uint8_t>& out, float v) {
  uint8_t b[4];
  std::memcpy(b, &v, 4);
  out.insert(out.end(), b, b + 4);
}

// A small deterministic value in [-0.25, 0.25) (norm weights near 1).
inline float value(const std::string& name, int64_t i, uint32_t seed) {
  uint64_t h = 1469598103934665603ull ^ seed;
  for (char c : name) h = (h ^ static_cast<uint8_t>(c)) * 1099511628211ull;
  h = (h ^ static_cast<uint64_t>(i)) * 1099511628211ull;
  h ^= h >> 29;
  const float u = static_cast<float>(h % 1000003) / 1000003.0f - 0.5f;
  return name.find("norm") != std::string::npos ? 1.0f + 0.5f * u : 0.5f * u;
}

struct Array {
  std::string name;  // "{N}" for the layer
  bool per_layer;
  int64_t rows, cols;
};

}  // namespace llama2c_detail

// The tensors of `spec` in file order, with their names ("layers.{N}..." expanded) and
// row-major shapes [rows, cols] (cols 1 for vectors and the RoPE tables' pairs count).
inline std::vector<std::pair<std::string, std::vector<float>>> llama2c_tensors(const Llama2cSpec& s) {
  using llama2c_detail::Array;
  const int64_t head = s.dim / s.n_heads;
  const int64_t kv = head * s.n_kv_heads;
  const Array emb{"tok_embeddings.weight", false, s.vocab_size, s.dim};
  const Array att_norm{"layers.{N}.attention_norm.weight", true, s.dim, 1};
  const Array wq{"layers.{N}.attention.wq.weight", true, s.dim, s.dim};
  const Array wk{"layers.{N}.attention.wk.weight", true, kv, s.dim};
  const Array wv{"layers.{N}.attention.wv.weight", true, kv, s.dim};
  const Array wo{"layers.{N}.attention.wo.weight", true, s.dim, s.dim};
  const Array ffn_norm{"layers.{N}.ffn_norm.weight", true, s.dim, 1};
  const Array w1{"layers.{N}.feed_forward.w1.weight", true, s.hidden_dim, s.dim};
  const Array w2{"layers.{N}.feed_forward.w2.weight", true, s.dim, s.hidden_dim};
  const Array w3{"layers.{N}.feed_forward.w3.weight", true, s.hidden_dim, s.dim};
  const Array norm{"norm.weight", false, s.dim, 1};
  const Array real{"freq_cis_real", false, s.seq_len, head / 2};
  const Array imag{"freq_cis_imag", false, s.seq_len, head / 2};
  const Array out{"output.weight", false, s.vocab_size, s.dim};
  std::vector<Array> order;
  if (s.version == 0) {
    order = {emb, att_norm, wq, wk, wv, wo, ffn_norm, w1, w2, w3, norm, real, imag};
  } else {
    order = {att_norm, ffn_norm, norm, emb, wq, wk, wv, wo, w1, w2, w3};
  }
  if (!s.shared_classifier) order.push_back(out);
  std::vector<std::pair<std::string, std::vector<float>>> tensors;
  for (const Array& a : order) {
    for (int64_t l = 0; l < (a.per_layer ? s.n_layers : 1); ++l) {
      std::string name = a.name;
      if (auto at = name.find("{N}"); at != std::string::npos) name.replace(at, 3, std::to_string(l));
      std::vector<float> v(static_cast<size_t>(a.rows * a.cols));
      for (int64_t i = 0; i < static_cast<int64_t>(v.size()); ++i) {
        if (a.name.starts_with("freq_cis")) {
          // llama2.c's tables: position p, pair j: cos / sin of p * theta^(-2j/head).
          const double f = std::pow(10000.0, -2.0 * static_cast<double>(i % a.cols) / static_cast<double>(head));
          const double angle = static_cast<double>(i / a.cols) * f;
          v[static_cast<size_t>(i)] = static_cast<float>(a.name == "freq_cis_real" ? std::cos(angle) : std::sin(angle));
        } else {
          v[static_cast<size_t>(i)] = llama2c_detail::value(name, i, s.seed);
        }
      }
      tensors.emplace_back(std::move(name), std::move(v));
    }
  }
  return tensors;
}

// The checkpoint's bytes.
inline std::vector<uint8_t> llama2c_checkpoint(const Llama2cSpec& s) {
  using llama2c_detail::put_f32;
  using llama2c_detail::put_i32;
  std::vector<uint8_t> out;
  if (s.version != 0) {
    put_i32(out, 0x616b3432);
    put_i32(out, s.version);
  }
  const int32_t vocab = s.version == 0 && !s.shared_classifier ? -s.vocab_size : s.vocab_size;
  for (int32_t v : {s.dim, s.hidden_dim, s.n_layers, s.n_heads, s.n_kv_heads, vocab, s.seq_len}) put_i32(out, v);
  if (s.version != 0) {
    out.push_back(s.shared_classifier ? 1 : 0);
    out.resize(256, 0);
  }
  for (const auto& [name, values] : llama2c_tensors(s)) {
    for (float f : values) put_f32(out, f);
  }
  return out;
}

// A tokenizer.bin: max_token_length, then {f32 score, i32 length, bytes} per token.
inline std::vector<uint8_t> llama2c_tokenizer_file(const std::vector<std::pair<float, std::string>>& tokens) {
  using llama2c_detail::put_f32;
  using llama2c_detail::put_i32;
  int32_t max_len = 0;
  for (const auto& t : tokens) max_len = std::max(max_len, static_cast<int32_t>(t.second.size()));
  std::vector<uint8_t> out;
  put_i32(out, max_len);
  for (const auto& [score, text] : tokens) {
    put_f32(out, score);
    put_i32(out, static_cast<int32_t>(text.size()));
    out.insert(out.end(), text.begin(), text.end());
  }
  return out;
}

// A small vocabulary laid out like llama2.c's exporter writes one: <unk>, "\n<s>\n",
// "\n</s>\n", the 256 byte tokens, then pieces with ' ' for '▁' and falling scores.
inline std::vector<std::pair<float, std::string>> llama2c_small_vocab() {
  std::vector<std::pair<float, std::string>> v{{0.0f, "<unk>"}, {0.0f, "\n<s>\n"}, {0.0f, "\n</s>\n"}};
  const char* hex = "0123456789ABCDEF";
  for (int b = 0; b < 256; ++b) v.push_back({0.0f, std::string("<0x") + hex[b >> 4] + hex[b & 15] + ">"});
  float score = 0.0f;
  for (const char* piece : {" t", "he", " a", " the", "in", " to", "nd", " and", "e", "t", "a", "h", "n", "d", "o", " "}) {
    v.push_back({score, piece});
    score -= 1.0f;
  }
  return v;
}

}  // namespace loom::test
