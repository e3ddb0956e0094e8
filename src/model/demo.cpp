#include "loom/demo.hpp"

#include <algorithm>
#include <array>
#include <map>
#include <string>
#include <vector>

#include "common/json_writer.hpp"
#include "format/atomic_file.hpp"
#include "loom/convert.hpp"
#include "loom/error.hpp"
#include "loom/exporter.hpp"
#include "model/weight_slots.hpp"

namespace loom {

namespace {

// The text the demo tokenizer's merges are learned from (written for loom).
constexpr std::string_view kCorpus =
    "Once upon a time, in a small town between the hills and the river, there was a weaver "
    "named Mara. Every morning she sat at her loom and worked the threads one by one. The "
    "warp ran long and straight, and the weft went over and under, over and under, until a "
    "pattern grew out of the plain threads. People came from the town and from the farms "
    "to see the cloth. They asked her how she knew where each thread should go. She said "
    "that a loom is a machine for remembering: it holds every thread in its place, so the "
    "weaver can think about the pattern and not about the knots. "
    "One day a boy named Tom came to the house with a question. He wanted to know if the "
    "loom could weave a story. Mara laughed and said that every cloth is a story, if you "
    "read the pattern from the first row to the last. The boy sat down and watched. The "
    "shuttle moved from the left to the right and back again. The light came in through "
    "the window, and the colors of the threads were red and blue and gold. "
    "When the sun went down, the cloth was finished. It showed the hills, the river, the "
    "town and the people in it. Tom looked at it for a long time. Then he said that he "
    "would like to learn to weave, and Mara said that he could start the next morning. "
    "The next day he came back, and the day after that, and every day for a year. He "
    "learned to count the threads, to read a pattern, to fix a broken warp and to keep "
    "the tension even. He learned that the most important part of the work happens before "
    "the first thread is woven: you set up the loom, you check every thread, and you make "
    "sure that nothing is missing and nothing is in the wrong place. "
    "Years later, Tom had a loom of his own. Children came to his house to watch, and he "
    "told them the story of Mara and the cloth that showed the whole town. \"A good loom,\" "
    "he said, \"does not guess. It knows where every thread comes from, and it tells you "
    "when one is missing.\" The children did not understand, but they liked the colors, "
    "and they came back the next day to see the pattern grow. "
    "def weave(threads, pattern):\n    for row in pattern:\n        yield [threads[i] for i in row]\n"
    "The numbers 1, 2, 3, 10, 20, 100 and 2026 were written on the wall of the workshop.";

// GPT-2's byte-to-unicode table: printable bytes map to themselves, the others to
// code points from U+0100 on, so every byte has a visible character.
std::array<std::string, 256> byte_symbols() {
  std::array<int, 256> cp{};
  std::vector<bool> printable(256, false);
  for (int b = '!'; b <= '~'; ++b) printable[static_cast<size_t>(b)] = true;
  for (int b = 0xA1; b <= 0xAC; ++b) printable[static_cast<size_t>(b)] = true;
  for (int b = 0xAE; b <= 0xFF; ++b) printable[static_cast<size_t>(b)] = true;
  int next = 256;
  for (int b = 0; b < 256; ++b) cp[static_cast<size_t>(b)] = printable[static_cast<size_t>(b)] ? b : next++;
  std::array<std::string, 256> out;
  for (int b = 0; b < 256; ++b) {
    const int c = cp[static_cast<size_t>(b)];
    std::string s;
    if (c < 0x80) {
      s += static_cast<char>(c);
    } else {
      s += static_cast<char>(0xC0 | (c >> 6));
      s += static_cast<char>(0x80 | (c & 0x3F));
    }
    out[static_cast<size_t>(b)] = s;
  }
  return out;
}

struct Bpe {
  std::vector<std::string> vocab;  // id -> symbol string
  std::vector<std::pair<std::string, std::string>> merges;
};

// Learns `n_merges` merges over words split at spaces (a leading space stays with its
// word, as GPT-2's pre-tokenizer keeps it). Ties go to the lexicographically smallest
// pair, so training is deterministic.
Bpe train_bpe(std::string_view corpus, int n_merges) {
  const auto bytes = byte_symbols();
  Bpe bpe;
  for (const auto& s : bytes) bpe.vocab.push_back(s);
  std::map<std::vector<std::string>, int> words;
  std::vector<std::string> word;
  for (size_t i = 0; i < corpus.size(); ++i) {
    const auto c = static_cast<unsigned char>(corpus[i]);
    if ((c == ' ' || c == '\n') && !word.empty()) {
      ++words[word];
      word.clear();
    }
    word.push_back(bytes[c]);
  }
  if (!word.empty()) ++words[word];
  for (int m = 0; m < n_merges; ++m) {
    std::map<std::pair<std::string, std::string>, int> pairs;
    for (const auto& [w, count] : words) {
      for (size_t i = 0; i + 1 < w.size(); ++i) pairs[{w[i], w[i + 1]}] += count;
    }
    const std::pair<std::string, std::string>* best = nullptr;
    int best_count = 1;  // a merge must occur at least twice
    for (const auto& [pair, count] : pairs) {
      if (count > best_count) {
        best = &pair;
        best_count = count;
      }
    }
    if (best == nullptr) break;
    const auto merge = *best;
    bpe.merges.push_back(merge);
    bpe.vocab.push_back(merge.first + merge.second);
    std::map<std::vector<std::string>, int> next;
    for (const auto& [w, count] : words) {
      std::vector<std::string> merged;
      for (size_t i = 0; i < w.size(); ++i) {
        if (i + 1 < w.size() && w[i] == merge.first && w[i + 1] == merge.second) {
          merged.push_back(merge.first + merge.second);
          ++i;
        } else {
          merged.push_back(w[i]);
        }
      }
      next[merged] += count;
    }
    words = std::move(next);
  }
  return bpe;
}

constexpr std::string_view kBos = "<|begin_of_text|>";
constexpr std::string_view kEos = "<|end_of_text|>";

std::string tokenizer_json(const Bpe& bpe) {
  const auto bos = static_cast<int64_t>(bpe.vocab.size());
  const auto eos = bos + 1;
  JsonWriter w;
  w.begin_object();
  w.field("version", "1.0").key("truncation").null().key("padding").null();
  w.key("added_tokens").begin_array();
  for (auto [id, text] : {std::pair<int64_t, std::string_view>{bos, kBos}, {eos, kEos}}) {
    w.begin_object().field("id", id).field("content", text).field("single_word", false);
    w.field("lstrip", false).field("rstrip", false).field("normalized", false).field("special", true);
    w.end_object();
  }
  w.end_array();
  w.key("normalizer").null();
  w.key("pre_tokenizer").begin_object().field("type", "ByteLevel").field("add_prefix_space", false);
  w.field("trim_offsets", true).field("use_regex", true).end_object();
  w.key("post_processor").begin_object().field("type", "TemplateProcessing");
  w.key("single").begin_array();
  w.begin_object().key("SpecialToken").begin_object().field("id", kBos).field("type_id", 0).end_object().end_object();
  w.begin_object().key("Sequence").begin_object().field("id", "A").field("type_id", 0).end_object().end_object();
  w.end_array();
  w.key("pair").begin_array();
  w.begin_object().key("SpecialToken").begin_object().field("id", kBos).field("type_id", 0).end_object().end_object();
  w.begin_object().key("Sequence").begin_object().field("id", "A").field("type_id", 0).end_object().end_object();
  w.begin_object().key("Sequence").begin_object().field("id", "B").field("type_id", 1).end_object().end_object();
  w.end_array();
  w.key("special_tokens").begin_object().key(kBos).begin_object().field("id", kBos);
  w.key("ids").begin_array().value(bos).end_array();
  w.key("tokens").begin_array().value(kBos).end_array();
  w.end_object().end_object();
  w.end_object();
  w.key("decoder").begin_object().field("type", "ByteLevel").field("add_prefix_space", true);
  w.field("trim_offsets", true).field("use_regex", true).end_object();
  w.key("model").begin_object().field("type", "BPE").key("dropout").null().key("unk_token").null();
  w.key("continuing_subword_prefix").null().key("end_of_word_suffix").null();
  w.field("fuse_unk", false).field("byte_fallback", false).field("ignore_merges", false);
  w.key("vocab").begin_object();
  for (size_t i = 0; i < bpe.vocab.size(); ++i) w.field(bpe.vocab[i], static_cast<int64_t>(i));
  w.end_object();
  w.key("merges").begin_array();
  for (const auto& [a, b] : bpe.merges) w.value(a + " " + b);
  w.end_array();
  w.end_object();
  w.end_object();
  return w.str() + "\n";
}

std::string tokenizer_config_json() {
  JsonWriter w;
  w.begin_object();
  w.field("tokenizer_class", "PreTrainedTokenizerFast");
  w.field("bos_token", kBos).field("eos_token", kEos);
  w.field("model_max_length", 1024);
  w.end_object();
  return w.str() + "\n";
}

}  // namespace

ModelWeights make_random_weights(const ModelConfig& c, uint64_t seed, DType matrix_dtype, float scale) {
  uint64_t state = seed * 0x9E3779B97F4A7C15ull + 1;
  auto next = [&] {
    state = state * 6364136223846793005ull + 1442695040888963407ull;
    // Uniform in [-1, 1) from the top 24 bits.
    return static_cast<float>(state >> 40) / 8388608.0f - 1.0f;
  };
  // A uniform variable on [-a, a] has std a / sqrt(3).
  const float amplitude = scale * 1.7320508f;
  ModelWeights w;
  w.layers.resize(static_cast<size_t>(c.n_layers));
  for (const auto& slot : slots::all_slots()) {
    if (!slot.needed(c) || slots::tied_in(c, slot)) continue;
    const int64_t layers = slot.per_layer ? c.n_layers : 1;
    for (int64_t l = 0; l < layers; ++l) {
      const Shape shape = slot.shape(c);
      const bool vec = slots::is_vector(slot.role);
      const bool norm = slot.role == slots::Role::norm;
      std::vector<float> values(static_cast<size_t>(shape.numel()));
      for (auto& v : values) v = (norm ? 1.0f : 0.0f) + (vec ? 0.05f : amplitude) * next();
      const DType dtype = vec ? DType::f32 : matrix_dtype;
      Tensor t = Tensor::empty(shape, dtype);
      convert(DType::f32, values.data(), dtype, t.mutable_raw_data(), values.size());
      slots::tensor_of(w, slot, l) = std::move(t);
    }
  }
  if (c.tie_word_embeddings) w.output = w.token_embd;
  return w;
}

void write_demo_model(const std::filesystem::path& dir, const DemoOptions& o) {
  const Bpe bpe = train_bpe(kCorpus, o.merges);
  ModelConfig c;
  c.architecture = "llama";
  c.vocab_size = static_cast<int64_t>(bpe.vocab.size()) + 2;
  c.hidden_size = o.hidden_size;
  c.intermediate_size = o.intermediate_size;
  c.n_layers = o.n_layers;
  c.n_heads = o.n_heads;
  c.n_kv_heads = o.n_kv_heads;
  c.head_dim = o.hidden_size / o.n_heads;
  c.rope_dims = c.head_dim;
  c.max_positions = o.context_length;
  c.norm_eps = 1e-5;
  c.rope_theta = 10000.0;
  c.tie_word_embeddings = false;
  c.bos_token_id = static_cast<int32_t>(bpe.vocab.size());
  c.eos_token_ids = {static_cast<int32_t>(bpe.vocab.size()) + 1};
  c.torch_dtype = "float32";
  c.validate();
  // Scale the output projection up so sampling shows some preference among tokens.
  ModelWeights w = make_random_weights(c, o.seed, DType::f32, 0.05f);
  std::filesystem::create_directories(dir);
  export_model(c, w, dir, ExportFormat::safetensors);
  format::write_file_atomically(dir / "tokenizer.json", tokenizer_json(bpe));
  format::write_file_atomically(dir / "tokenizer_config.json", tokenizer_config_json());
}

}  // namespace loom
