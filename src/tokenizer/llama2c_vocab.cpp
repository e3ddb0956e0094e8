// llama2.c tokenizer.bin into tokenizer.ggml.* metadata, and the tokenizer-beside-the-
// checkpoint rule.
#include "tokenizer/llama2c_vocab.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <iterator>
#include <optional>
#include <vector>

#include "common/read_file.hpp"
#include "loom/error.hpp"
#include "loom/tokenizer.hpp"
#include "tokenizer/tokenizer_impl.hpp"

namespace loom {

namespace fs = std::filesystem;

namespace {

constexpr int64_t kMaxTokenLength = int64_t{1} << 20;
constexpr size_t kMaxTokens = size_t{1} << 24;

// Texts llama2.c's exporter writes in place of SentencePiece's, and what they are.
struct Special {
  std::string_view stored;
  std::string_view text;
  int64_t type;
  const char* id_key;
};
constexpr Special kSpecials[] = {
    {"<unk>", "<unk>", tok::type_unknown, "tokenizer.ggml.unknown_token_id"},
    {"\n<s>\n", "<s>", tok::type_control, "tokenizer.ggml.bos_token_id"},
    {"\n</s>\n", "</s>", tok::type_control, "tokenizer.ggml.eos_token_id"},
};

bool is_byte_token(std::string_view t) noexcept {
  auto hex = [](char c) { return (c >= '0' && c <= '9') || (c >= 'A' && c <= 'F'); };
  return t.size() == 6 && t.starts_with("<0x") && hex(t[3]) && hex(t[4]) && t[5] == '>';
}

class Reader {
 public:
  Reader(std::string_view bytes, const std::string& path) : bytes_(bytes), path_(path) {}
  bool done() const noexcept { return pos_ == bytes_.size(); }
  size_t offset() const noexcept { return pos_; }
  template <typename T>
  T scalar(const char* what) {
    if (bytes_.size() - pos_ < sizeof(T)) fail(std::string("truncated ") + what);
    T v;
    std::memcpy(&v, bytes_.data() + pos_, sizeof(T));  // little-endian on every supported host
    pos_ += sizeof(T);
    return v;
  }
  std::string_view take(size_t n) {
    if (bytes_.size() - pos_ < n) fail("token text of " + std::to_string(n) + " bytes runs past the end of the file");
    const auto out = bytes_.substr(pos_, n);
    pos_ += n;
    return out;
  }
  [[noreturn]] void fail(const std::string& why, std::optional<size_t> at = std::nullopt) const {
    throw Error(ErrorCode::format, "llama2.c tokenizer: " + why, {.file = path_, .offset = at.value_or(pos_)});
  }

 private:
  std::string_view bytes_;
  const std::string& path_;
  size_t pos_ = 0;
};

}  // namespace

namespace tok {

Metadata llama2c_vocab_metadata(std::string_view bytes, const std::string& path) {
  Reader r(bytes, path);
  const auto max_length = r.scalar<int32_t>("header");
  if (max_length < 0 || max_length > kMaxTokenLength) {
    r.fail("max_token_length " + std::to_string(max_length) + " is out of range", 0);
  }
  using T = MetaValue::Type;
  std::vector<MetaValue> tokens, scores, types;
  Metadata md;
  while (!r.done()) {
    const size_t at = r.offset();
    if (tokens.size() >= kMaxTokens) r.fail("more than " + std::to_string(kMaxTokens) + " tokens", at);
    const auto score = r.scalar<float>("token record (score)");
    if (!std::isfinite(score)) r.fail("token " + std::to_string(tokens.size()) + " has a non-finite score", at);
    const size_t len_at = r.offset();
    const auto length = r.scalar<int32_t>("token record (length)");
    if (length < 0 || length > max_length) {
      r.fail("token " + std::to_string(tokens.size()) + " has length " + std::to_string(length) +
                 " (max_token_length is " + std::to_string(max_length) + ")",
             len_at);
    }
    std::string text(r.take(static_cast<size_t>(length)));
    int64_t type = is_byte_token(text) ? tok::type_byte : tok::type_normal;
    const auto id = static_cast<uint64_t>(tokens.size());
    if (type == tok::type_normal) {
      for (const Special& s : kSpecials) {
        if (text != s.stored) continue;
        text = std::string(s.text);
        type = s.type;
        if (!md.contains(s.id_key)) md.set(s.id_key, MetaValue::of_uint(id, T::u32));
      }
    }
    if (type == tok::type_normal) {
      // SentencePiece pieces never hold a plain space: each one is a stored '▁'.
      std::string piece;
      for (char c : text) {
        if (c == ' ') {
          piece += kMetaspace;
        } else {
          piece += c;
        }
      }
      text = std::move(piece);
    }
    tokens.push_back(MetaValue::of_string(std::move(text)));
    scores.push_back(MetaValue::of_float(score, T::f32));
    types.push_back(MetaValue::of_int(type, T::i32));
  }
  if (tokens.empty()) r.fail("no tokens");
  md.set("tokenizer.ggml.model", MetaValue::of_string("llama"));
  md.set("tokenizer.ggml.pre", MetaValue::of_string("default"));
  md.set("tokenizer.ggml.tokens", MetaValue::of_array(std::move(tokens), T::string));
  md.set("tokenizer.ggml.scores", MetaValue::of_array(std::move(scores), T::f32));
  md.set("tokenizer.ggml.token_type", MetaValue::of_array(std::move(types), T::i32));
  // llama2.c's run.c encodes with BOS, without EOS, and with SentencePiece's dummy prefix.
  md.set("tokenizer.ggml.add_bos_token", MetaValue::of_bool(true));
  md.set("tokenizer.ggml.add_eos_token", MetaValue::of_bool(false));
  md.set("tokenizer.ggml.add_space_prefix", MetaValue::of_bool(true));
  return md;
}

fs::path find_llama2c_tokenizer(const fs::path& checkpoint, std::string& note) {
  fs::path dir = checkpoint.parent_path();
  if (dir.empty()) dir = ".";
  std::error_code ec;
  if (fs::is_regular_file(dir / "tokenizer.bin", ec)) return dir / "tokenizer.bin";
  std::vector<fs::path> found;
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    const std::string name = e.path().filename().string();
    if (e.is_regular_file(ec) && name.starts_with("tok") && name.ends_with(".bin") &&
        e.path().filename() != checkpoint.filename()) {
      found.push_back(e.path());
    }
  }
  std::sort(found.begin(), found.end());
  if (found.size() == 1) return found[0];
  if (found.empty()) {
    note = "no llama2.c tokenizer (tokenizer.bin or tok*.bin) beside the checkpoint";
  } else {
    std::string names;
    for (const auto& f : found) names += (names.empty() ? "" : ", ") + f.filename().string();
    note = "several llama2.c tokenizers beside the checkpoint (" + names +
           "); none loaded: name the one to use tokenizer.bin";
  }
  return {};
}

}  // namespace tok

std::shared_ptr<const Tokenizer> Tokenizer::from_llama2c(const fs::path& path) {
  return from_gguf_metadata(tok::llama2c_vocab_metadata(read_file(path), path.string()), path.string());
}

}  // namespace loom
