// Tokenizer::load and Tokenizer::from_gguf_metadata: finding the tokenizer of a path.
#include <simdjson.h>

#include <algorithm>
#include <array>
#include <span>
#include <fstream>
#include <iterator>
#include <optional>

#include "common/read_file.hpp"
#include "format/lenient_json.hpp"
#include "loom/error.hpp"
#include "loom/format.hpp"
#include "loom/tokenizer.hpp"
#include "tokenizer/llama2c_vocab.hpp"
#include "tokenizer/tokenizer_impl.hpp"

namespace loom {

namespace fs = std::filesystem;

namespace {

bool has_gguf_magic(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  char magic[4] = {};
  in.read(magic, 4);
  return in.gcount() == 4 && std::string_view(magic, 4) == "GGUF";
}

// The weight format of a file, when it is one (by its first bytes and size).
std::optional<FormatKind> weight_format(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::array<char, 32> head{};
  in.read(head.data(), head.size());
  std::error_code ec;
  const auto size = fs::file_size(path, ec);
  if (ec) return std::nullopt;
  return sniff_format(std::as_bytes(std::span(head.data(), static_cast<size_t>(in.gcount()))), size);
}

std::shared_ptr<const Tokenizer> load_gguf(const fs::path& path) {
  const auto source = open_weights(path);
  return Tokenizer::from_gguf_metadata(source->metadata(), path.string());
}

// Padding ids tolerated beyond twice the tokenizer's ids (as for a tokenizer.json's own holes).
constexpr int64_t kPaddingSlack = 1024;

// The model's embedding may have more rows than the tokenizer has ids (Pythia: 50304 rows
// for 50277 tokens, gptneox-tiny: 8192 for 8151). The model can still produce those ids,
// so config.json's vocab_size extends the id range with ids that have no token: they
// decode to nothing, as HF's decode skips ids it has no token for (and as llama.cpp
// decodes the [PADn] tokens, type UNUSED, that its converter writes for them).
void pad_to_config_vocab_size(Tokenizer::Impl& impl, const fs::path& dir) {
  const fs::path config = dir / "config.json";
  std::error_code ec;
  if (!fs::is_regular_file(config, ec)) return;
  int64_t vocab_size = 0;
  try {
    simdjson::dom::parser parser;
    simdjson::padded_string storage;
    const auto root = format::parse_lenient_json(parser, storage, read_file(config), config.string(), nullptr,
                                                  {.widen_huge_integers = true});
    if (root["vocab_size"].get(vocab_size) != simdjson::SUCCESS) return;
  } catch (const Error& e) {
    // The model loader reports a broken config.json; the tokenizer alone still works.
    impl.load_warnings.push_back(config.string() + ": vocab_size not read (" + e.detail() + ")");
    return;
  }
  const int64_t have = impl.size();
  if (vocab_size <= have) return;
  if (vocab_size > 2 * have + kPaddingSlack) {
    impl.load_warnings.push_back(config.string() + ": vocab_size " + std::to_string(vocab_size) +
                                 " is far beyond the tokenizer's " + std::to_string(have) + " ids; not padded");
    return;
  }
  impl.pad_ids_to(static_cast<int32_t>(vocab_size));
}

std::shared_ptr<const Tokenizer> load_json(const fs::path& json_path) {
  const fs::path dir = json_path.parent_path();
  const fs::path config_path = dir / "tokenizer_config.json";
  std::string config;
  std::error_code ec;
  if (fs::is_regular_file(config_path, ec)) config = read_file(config_path);
  const std::string json = read_file(json_path);
  auto impl = tok::build_from_tokenizer_json(json, config, json_path.string(), /*json_padded=*/true);
  // Newer model repositories keep the chat template in its own file.
  const fs::path jinja = dir / "chat_template.jinja";
  if (impl->chat_template.empty() && fs::is_regular_file(jinja, ec)) impl->chat_template = read_file(jinja);
  pad_to_config_vocab_size(*impl, dir);
  return std::make_shared<const Tokenizer>(std::move(impl));
}

}  // namespace

std::shared_ptr<const Tokenizer> Tokenizer::from_gguf_metadata(const Metadata& md,
                                                               std::string_view display_name) {
  return std::make_shared<const Tokenizer>(tok::build_from_gguf(md, display_name));
}

std::shared_ptr<const Tokenizer> Tokenizer::load(const fs::path& path) {
  std::error_code ec;
  if (fs::is_directory(path, ec)) {
    if (fs::is_regular_file(path / "tokenizer.json", ec)) return load_json(path / "tokenizer.json");
    if (fs::is_regular_file(path / "tokenizer.model", ec)) return from_sentencepiece_model(path);
    std::vector<fs::path> ggufs;
    for (const auto& entry : fs::directory_iterator(path, ec)) {
      if (entry.is_regular_file(ec) && entry.path().extension() == ".gguf") ggufs.push_back(entry.path());
    }
    std::sort(ggufs.begin(), ggufs.end());
    // Split GGUFs (-00001-of-0000N) keep the metadata in the first shard.
    if (!ggufs.empty()) return load_gguf(ggufs.front());
    throw Error(ErrorCode::io, "no tokenizer.json or .gguf file in the model directory", {.file = path.string()});
  }
  if (!fs::is_regular_file(path, ec)) throw Error(ErrorCode::io, "no such file", {.file = path.string()});
  if (has_gguf_magic(path)) return load_gguf(path);
  if (path.extension() == ".bin") {
    // A llama2.c checkpoint's tokenizer is the file beside it; other weights (a torch
    // pytorch_model.bin) use their directory's; any other .bin is taken for a llama2.c
    // tokenizer.bin.
    const auto kind = weight_format(path);
    if (kind == FormatKind::llama2c) {
      std::string note;
      const fs::path tok = tok::find_llama2c_tokenizer(path, note);
      if (tok.empty()) throw Error(ErrorCode::io, note, {.file = path.string()});
      return from_llama2c(tok);
    }
    if (kind) return load(path.has_parent_path() ? path.parent_path() : fs::path("."));
    return from_llama2c(path);
  }
  return load_json(path);
}

}  // namespace loom
