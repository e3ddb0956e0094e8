// SentencePiece `tokenizer.model` files (a protobuf ModelProto), read into the same
// tokenizer.ggml.* metadata llama.cpp's converter writes for them, so one code path
// (the GGUF "llama" vocabulary) tokenizes both. Mistral and Phi-3 repositories ship only
// this file, with added tokens in added_tokens.json / tokenizer_config.json.
#include <simdjson.h>

#include <iterator>
#include <map>

#include "common/read_file.hpp"
#include "format/lenient_json.hpp"
#include "loom/error.hpp"
#include "loom/format.hpp"
#include "loom/tokenizer.hpp"
#include "tokenizer/sentencepiece_model.hpp"
#include "tokenizer/tokenizer_impl.hpp"

namespace loom {

namespace fs = std::filesystem;

namespace {

// A bounded protobuf wire-format reader (only what ModelProto needs).
class ProtoReader {
 public:
  ProtoReader(std::string_view bytes, std::string path, uint64_t base = 0)
      : bytes_(bytes), path_(std::move(path)), base_(base) {}

  bool done() const { return pos_ >= bytes_.size(); }

  uint64_t varint() {
    uint64_t out = 0;
    for (int shift = 0; shift < 64; shift += 7) {
      if (pos_ >= bytes_.size()) fail("truncated varint");
      const auto b = static_cast<uint8_t>(bytes_[pos_++]);
      out |= static_cast<uint64_t>(b & 0x7F) << shift;
      if ((b & 0x80) == 0) return out;
    }
    fail("varint longer than 10 bytes");
  }

  std::string_view bytes_field() {
    const uint64_t n = varint();
    if (n > bytes_.size() - pos_) fail("length-delimited field runs past the end");
    auto out = bytes_.substr(pos_, static_cast<size_t>(n));
    pos_ += static_cast<size_t>(n);
    return out;
  }

  float fixed32_float() {
    if (bytes_.size() - pos_ < 4) fail("truncated fixed32");
    float f;
    std::memcpy(&f, bytes_.data() + pos_, 4);  // little-endian on every supported host
    pos_ += 4;
    return f;
  }

  void skip(uint32_t wire_type) {
    switch (wire_type) {
      case 0: varint(); return;
      case 1:
        if (bytes_.size() - pos_ < 8) fail("truncated fixed64");
        pos_ += 8;
        return;
      case 2: bytes_field(); return;
      case 5:
        if (bytes_.size() - pos_ < 4) fail("truncated fixed32");
        pos_ += 4;
        return;
      default: fail("unknown wire type " + std::to_string(wire_type));
    }
  }

  uint64_t offset() const { return base_ + pos_; }
  const std::string& path() const { return path_; }

  [[noreturn]] void fail(const std::string& why) const {
    throw Error(ErrorCode::format, "SentencePiece model: " + why, {.file = path_, .offset = base_ + pos_});
  }

 private:
  std::string_view bytes_;
  std::string path_;
  uint64_t base_;
  size_t pos_ = 0;
};

struct SpPiece {
  std::string text;
  float score = 0.0f;
  int64_t type = tok::type_normal;
};

// What ModelProto says, with the proto's defaults for absent fields.
struct SpModel {
  std::vector<SpPiece> pieces;
  int64_t model_type = 1;  // UNIGRAM=1, BPE=2, WORD=3, CHAR=4
  int64_t unk_id = 0, bos_id = 1, eos_id = 2, pad_id = -1;
  bool treat_whitespace_as_suffix = false;  // TrainerSpec 24
  // NormalizerSpec (field 3) and the denormalizer applied when decoding (field 5).
  std::string normalizer_name;
  size_t normalizer_charsmap_bytes = 0;  // precompiled_charsmap: empty = identity
  size_t denormalizer_charsmap_bytes = 0;
  bool add_dummy_prefix = true;
  bool remove_extra_whitespaces = true;
  bool escape_whitespaces = true;
};

// Settings that change the ids or the text and that neither llama.cpp's converter nor
// loom implements: such a model is refused, naming the setting, instead of being
// tokenized as if it were plain (Llama, Mistral, Phi-3 and Gemma use none of them).
struct UnsupportedSetting {
  bool (*present)(const SpModel&);
  std::string (*describe)(const SpModel&);
};

const UnsupportedSetting kUnsupportedSettings[] = {
    {[](const SpModel& m) { return m.model_type != 2; },
     [](const SpModel& m) {
       return "trainer_spec.model_type " + std::to_string(m.model_type) +
              " (only BPE, type 2, is supported; Unigram is not)";
     }},
    {[](const SpModel& m) { return m.normalizer_charsmap_bytes > 0; },
     [](const SpModel& m) {
       return "normalizer_spec.precompiled_charsmap (normalizer '" + m.normalizer_name +
              "'): character normalization is not supported, only 'identity'";
     }},
    {[](const SpModel& m) { return m.remove_extra_whitespaces; },
     [](const SpModel&) {
       return std::string("normalizer_spec.remove_extra_whitespaces (true, or absent: the proto default) is not supported");
     }},
    {[](const SpModel& m) { return !m.escape_whitespaces; },
     [](const SpModel&) {
       return std::string("normalizer_spec.escape_whitespaces false (spaces not written as U+2581) is not supported");
     }},
    {[](const SpModel& m) { return m.denormalizer_charsmap_bytes > 0; },
     [](const SpModel&) { return std::string("denormalizer_spec.precompiled_charsmap is not supported"); }},
    {[](const SpModel& m) { return m.treat_whitespace_as_suffix; },
     [](const SpModel&) { return std::string("trainer_spec.treat_whitespace_as_suffix is not supported"); }},
};

void refuse_unsupported(const SpModel& m, const std::string& path) {
  for (const auto& setting : kUnsupportedSettings) {
    if (setting.present(m)) {
      throw Error(ErrorCode::unsupported, "SentencePiece model: " + setting.describe(m), {.file = path});
    }
  }
}

// NormalizerSpec fields: name = 1, precompiled_charsmap = 2, add_dummy_prefix = 3,
// remove_extra_whitespaces = 4, escape_whitespaces = 5.
void parse_normalizer_spec(ProtoReader& s, SpModel& m, bool denormalizer) {
  while (!s.done()) {
    const uint64_t k = s.varint();
    const auto f = static_cast<uint32_t>(k >> 3);
    const auto w = static_cast<uint32_t>(k & 7);
    if (w == 2 && (f == 1 || f == 2)) {
      const std::string_view bytes = s.bytes_field();
      if (denormalizer) {
        if (f == 2) m.denormalizer_charsmap_bytes = bytes.size();
      } else if (f == 1) {
        m.normalizer_name = std::string(bytes.substr(0, 64));
      } else {
        m.normalizer_charsmap_bytes = bytes.size();
      }
      continue;
    }
    if (w != 0 || denormalizer) {
      s.skip(w);
      continue;
    }
    const bool v = s.varint() != 0;
    if (f == 3) m.add_dummy_prefix = v;
    if (f == 4) m.remove_extra_whitespaces = v;
    if (f == 5) m.escape_whitespaces = v;
  }
}

SpModel parse_model_proto(std::string_view bytes, const std::string& path) {
  SpModel m;
  ProtoReader r(bytes, path);
  while (!r.done()) {
    const uint64_t key = r.varint();
    const auto field = static_cast<uint32_t>(key >> 3);
    const auto wire = static_cast<uint32_t>(key & 7);
    if (field == 1 && wire == 2) {  // SentencePiece
      const uint64_t at = r.offset();
      ProtoReader p(r.bytes_field(), path, at);
      SpPiece piece;
      while (!p.done()) {
        const uint64_t k = p.varint();
        const auto f = static_cast<uint32_t>(k >> 3);
        const auto w = static_cast<uint32_t>(k & 7);
        if (f == 1 && w == 2) {
          piece.text = std::string(p.bytes_field());
        } else if (f == 2 && w == 5) {
          piece.score = p.fixed32_float();
        } else if (f == 3 && w == 0) {
          piece.type = static_cast<int64_t>(p.varint());
        } else {
          p.skip(w);
        }
      }
      if (m.pieces.size() >= (size_t{1} << 24)) r.fail("more than 16M pieces");
      m.pieces.push_back(std::move(piece));
    } else if (field == 2 && wire == 2) {  // TrainerSpec
      const uint64_t at = r.offset();
      ProtoReader s(r.bytes_field(), path, at);
      while (!s.done()) {
        const uint64_t k = s.varint();
        const auto f = static_cast<uint32_t>(k >> 3);
        const auto w = static_cast<uint32_t>(k & 7);
        if (w != 0) {
          s.skip(w);
          continue;
        }
        const auto v = static_cast<int64_t>(s.varint());
        if (f == 3) m.model_type = v;
        if (f == 24) m.treat_whitespace_as_suffix = v != 0;
        if (f == 40) m.unk_id = static_cast<int32_t>(v);
        if (f == 41) m.bos_id = static_cast<int32_t>(v);
        if (f == 42) m.eos_id = static_cast<int32_t>(v);
        if (f == 43) m.pad_id = static_cast<int32_t>(v);
      }
    } else if ((field == 3 || field == 5) && wire == 2) {  // NormalizerSpec, denormalizer
      const uint64_t at = r.offset();
      ProtoReader s(r.bytes_field(), path, at);
      parse_normalizer_spec(s, m, field == 5);
    } else {
      r.skip(wire);
    }
  }
  if (m.pieces.empty()) r.fail("no pieces");
  return m;
}

struct AddedToken {
  int64_t id;
  std::string content;
  bool special;
};

// tokenizer_config.json's added_tokens_decoder and flags, added_tokens.json, and the
// config's vocab_size (the embedding may be larger than the SentencePiece vocabulary).
struct HfSideFiles {
  std::vector<AddedToken> added;
  std::optional<bool> add_bos, add_eos;
  std::string bos_token, eos_token, pad_token, unk_token;
  std::optional<int64_t> vocab_size;
  std::string chat_template;
  std::vector<std::string> warnings;  // what lenient JSON parsing forgave
};

std::string token_content(simdjson::dom::element e) {
  std::string_view s;
  if (e.get(s) == simdjson::SUCCESS) return std::string(s);
  if (e["content"].get(s) == simdjson::SUCCESS) return std::string(s);
  return "";
}

HfSideFiles read_side_files(const fs::path& dir) {
  HfSideFiles out;
  simdjson::dom::parser parser;
  simdjson::padded_string storage;
  std::error_code ec;
  std::map<int64_t, AddedToken> added;
  // Read leniently, like every Hugging Face side file (format/lenient_json.hpp).
  auto parse = [&](const fs::path& path) {
    return format::parse_lenient_json(parser, storage, read_file(path), path.string(), &out.warnings);
  };
  if (fs::is_regular_file(dir / "added_tokens.json", ec)) {
    simdjson::dom::object obj;
    if (parse(dir / "added_tokens.json").get(obj) == simdjson::SUCCESS) {
      for (auto [key, value] : obj) {
        int64_t id = 0;
        if (value.get(id) == simdjson::SUCCESS) added[id] = {id, std::string(key), false};
      }
    }
  }
  if (fs::is_regular_file(dir / "tokenizer_config.json", ec)) {
    const simdjson::dom::element root = parse(dir / "tokenizer_config.json");
    bool b = false;
    if (root["add_bos_token"].get(b) == simdjson::SUCCESS) out.add_bos = b;
    if (root["add_eos_token"].get(b) == simdjson::SUCCESS) out.add_eos = b;
    simdjson::dom::element e;
    if (root["bos_token"].get(e) == simdjson::SUCCESS) out.bos_token = token_content(e);
    if (root["eos_token"].get(e) == simdjson::SUCCESS) out.eos_token = token_content(e);
    if (root["pad_token"].get(e) == simdjson::SUCCESS) out.pad_token = token_content(e);
    if (root["unk_token"].get(e) == simdjson::SUCCESS) out.unk_token = token_content(e);
    std::string_view tmpl;
    if (root["chat_template"].get(tmpl) == simdjson::SUCCESS) out.chat_template = std::string(tmpl);
    simdjson::dom::object decoder;
    if (root["added_tokens_decoder"].get(decoder) == simdjson::SUCCESS) {
      for (auto [key, value] : decoder) {
        const int64_t id = std::strtoll(std::string(key).c_str(), nullptr, 10);
        bool special = false;
        if (value["special"].get(special) != simdjson::SUCCESS) special = false;
        added[id] = {id, token_content(value), special};
      }
    }
  }
  if (fs::is_regular_file(dir / "config.json", ec)) {
    int64_t v = 0;
    if (parse(dir / "config.json")["vocab_size"].get(v) == simdjson::SUCCESS) out.vocab_size = v;
  }
  for (auto& [id, t] : added) out.added.push_back(std::move(t));
  return out;
}

// The metadata of a parsed model plus its side files; `dir` names the side files in errors.
Metadata to_metadata(const SpModel& m, const HfSideFiles& side, const fs::path& dir) {
  std::vector<SpPiece> pieces = m.pieces;
  // Added tokens beyond the model's pieces, then [PADn] up to the config's vocab size
  // (as llama.cpp's converter does), so ids line up with the embedding rows.
  for (const auto& t : side.added) {
    if (t.id < static_cast<int64_t>(pieces.size())) {
      if (t.special && pieces[static_cast<size_t>(t.id)].text == t.content) {
        pieces[static_cast<size_t>(t.id)].type = tok::type_control;
      }
      continue;
    }
    if (t.id > (int64_t{1} << 24)) throw Error(ErrorCode::format, "added token id out of range", {.file = (dir / "tokenizer_config.json").string()});
    while (static_cast<int64_t>(pieces.size()) < t.id) {
      pieces.push_back({"[PAD" + std::to_string(pieces.size()) + "]", -1000.0f, tok::type_unused});
    }
    pieces.push_back({t.content, 0.0f, t.special ? tok::type_control : tok::type_user_defined});
  }
  if (side.vocab_size && *side.vocab_size <= (int64_t{1} << 24)) {
    while (static_cast<int64_t>(pieces.size()) < *side.vocab_size) {
      pieces.push_back({"[PAD" + std::to_string(pieces.size()) + "]", -1000.0f, tok::type_unused});
    }
  }
  auto id_of = [&](const std::string& text, int64_t fallback) -> int64_t {
    if (!text.empty()) {
      for (size_t i = 0; i < pieces.size(); ++i) {
        if (pieces[i].text == text) return static_cast<int64_t>(i);
      }
    }
    return fallback;
  };
  using T = MetaValue::Type;
  std::vector<MetaValue> tokens, scores, types;
  for (const auto& p : pieces) {
    tokens.push_back(MetaValue::of_string(p.text));
    scores.push_back(MetaValue::of_float(p.score, T::f32));
    types.push_back(MetaValue::of_int(p.type, T::i32));
  }
  Metadata md;
  md.set("tokenizer.ggml.model", MetaValue::of_string("llama"));
  md.set("tokenizer.ggml.pre", MetaValue::of_string("default"));
  md.set("tokenizer.ggml.tokens", MetaValue::of_array(std::move(tokens), T::string));
  md.set("tokenizer.ggml.scores", MetaValue::of_array(std::move(scores), T::f32));
  md.set("tokenizer.ggml.token_type", MetaValue::of_array(std::move(types), T::i32));
  auto set_id = [&](const char* key, int64_t id) {
    if (id >= 0 && id < static_cast<int64_t>(pieces.size())) md.set(key, MetaValue::of_uint(static_cast<uint64_t>(id), T::u32));
  };
  set_id("tokenizer.ggml.bos_token_id", id_of(side.bos_token, m.bos_id));
  set_id("tokenizer.ggml.eos_token_id", id_of(side.eos_token, m.eos_id));
  set_id("tokenizer.ggml.unknown_token_id", id_of(side.unk_token, m.unk_id));
  set_id("tokenizer.ggml.padding_token_id", id_of(side.pad_token, m.pad_id));
  md.set("tokenizer.ggml.add_bos_token", MetaValue::of_bool(side.add_bos.value_or(true)));
  md.set("tokenizer.ggml.add_eos_token", MetaValue::of_bool(side.add_eos.value_or(false)));
  md.set("tokenizer.ggml.add_space_prefix", MetaValue::of_bool(m.add_dummy_prefix));
  if (!side.chat_template.empty()) md.set("tokenizer.chat_template", MetaValue::of_string(side.chat_template));
  return md;
}

}  // namespace

namespace tok {

Metadata sentencepiece_model_metadata(std::string_view proto, const std::string& name) {
  const SpModel m = parse_model_proto(proto, name);
  refuse_unsupported(m, name);
  const fs::path path(name);
  return to_metadata(m, HfSideFiles{}, path.has_parent_path() ? path.parent_path() : fs::path("."));
}

Metadata sentencepiece_metadata(const fs::path& dir, std::vector<std::string>& warnings) {
  const fs::path model_path = dir / "tokenizer.model";
  const SpModel m = parse_model_proto(read_file(model_path), model_path.string());
  refuse_unsupported(m, model_path.string());
  HfSideFiles side = read_side_files(dir);
  for (auto& w : side.warnings) warnings.push_back(std::move(w));
  return to_metadata(m, side, dir);
}

}  // namespace tok

std::shared_ptr<const Tokenizer> Tokenizer::from_sentencepiece_model(const fs::path& dir) {
  std::vector<std::string> warnings;
  Metadata md = tok::sentencepiece_metadata(dir, warnings);
  auto impl = tok::build_from_gguf(md, (dir / "tokenizer.model").string());
  impl->load_warnings = std::move(warnings);
  return std::make_shared<const Tokenizer>(std::move(impl));
}

}  // namespace loom
