// open_weights and sniff_format: from a path (file or model directory) to a
// WeightSource, choosing each file's format by its magic bytes.
#include <algorithm>
#include <array>
#include <map>
#include <set>

#include "format/byte_source.hpp"
#include "format/gguf.hpp"
#include "format/llama2c.hpp"
#include "format/npy.hpp"
#include "format/safetensors.hpp"
#include "format/shard_index.hpp"
#include "format/torch.hpp"
#include "loom/format.hpp"

namespace loom {

namespace fs = std::filesystem;

namespace {

constexpr size_t kSniffBytes = 32;  // a legacy llama2.c header is 28
constexpr uint64_t kMaxIndexBytes = 64u << 20;

bool starts_with(std::span<const std::byte> head, std::string_view magic) {
  return head.size() >= magic.size() && format::as_chars(head.first(magic.size())) == magic;
}

// A JSON object (a shard index): '{' after optional BOM and whitespace.
bool looks_like_json_object(std::span<const std::byte> head) {
  std::string_view text = format::as_chars(head);
  if (text.starts_with("\xEF\xBB\xBF")) text.remove_prefix(3);
  const auto pos = text.find_first_not_of(" \t\r\n");
  return pos != std::string_view::npos && text[pos] == '{';
}

struct Opened {
  FormatKind kind;
  format::ParsedWeights parsed;
  SourceFile file;
};

std::shared_ptr<MappedFile> open_mapped(const fs::path& path, const OpenOptions& options) {
  return MappedFile::open(path.string(), options.io_mode, options.fs_magic_override);
}

std::vector<std::byte> read_head(const MappedFile& file) {
  std::vector<std::byte> head(static_cast<size_t>(std::min<uint64_t>(file.size(), kSniffBytes)));
  file.read(0, head);
  return head;
}

Opened open_weight_file(const fs::path& path, const OpenOptions& options) {
  auto file = open_mapped(path, options);
  const auto head = read_head(*file);
  const auto kind = sniff_format(head, file->size());
  const format::FileSource source(file);
  if (!kind) {
    // A sane llama2.c header whose size does not match: say so (a truncated download is
    // the usual cause) rather than "unrecognised".
    if (format::read_llama2c_legacy_header(head)) format::parse_llama2c(source);
    throw Error(ErrorCode::unsupported,
                "unrecognised file format (not safetensors, GGUF, a torch.save zip, .npy or a llama2.c checkpoint)",
                {.file = path.string(), .offset = 0});
  }
  Opened out{*kind, {}, SourceFile{path.string(), file->size(), file}};
  switch (*kind) {
    case FormatKind::safetensors: out.parsed = format::parse_safetensors(source); break;
    case FormatKind::gguf: out.parsed = format::parse_gguf(source); break;
    case FormatKind::torch: out.parsed = format::parse_torch(source); break;
    case FormatKind::npy: {
      const auto h = format::parse_npy(source);
      TensorRecord r;
      r.name = path.stem().string();
      r.dtype = h.dtype;
      r.shape = h.shape;
      r.offset = h.data_offset;
      r.nbytes = r.span_bytes = h.nbytes;
      out.parsed.tensors.push_back(std::move(r));
      break;
    }
    case FormatKind::llama2c: out.parsed = format::parse_llama2c(source); break;
    case FormatKind::pack:
      throw Error(ErrorCode::unsupported, "loom pack data files are opened through their index",
                  {.file = path.string()});
  }
  return out;
}

std::unique_ptr<WeightSource> single(const fs::path& path, const std::string& root,
                                     const OpenOptions& options) {
  Opened o = open_weight_file(path, options);
  return std::make_unique<WeightSource>(o.kind, root, std::vector<SourceFile>{o.file},
                                        std::move(o.parsed.tensors), std::move(o.parsed.metadata));
}

std::unique_ptr<WeightSource> sharded(const fs::path& index_path, const std::string& root,
                                      const OpenOptions& options) {
  const std::string index_file = index_path.string();
  auto file = MappedFile::open(index_file, IoMode::stream, options.fs_magic_override);
  if (file->size() > kMaxIndexBytes) {
    throw Error(ErrorCode::format, "shard index of " + std::to_string(file->size()) + " bytes is too large",
                {.file = index_file});
  }
  std::string json(static_cast<size_t>(file->size()), '\0');
  file->read(0, std::as_writable_bytes(std::span<char>(json.data(), json.size())));
  format::ShardIndex index = format::parse_shard_index(json, index_file);

  // Which shard each tensor belongs to, by name.
  std::map<std::string_view, size_t> expected;
  for (const auto& [tensor, shard] : index.weight_map) expected.emplace(tensor, shard);
  // The first tensor the index maps to each shard, to name it in "missing shard" errors.
  std::vector<std::string_view> first_tensor(index.shards.size());
  for (const auto& [tensor, shard] : index.weight_map) {
    if (first_tensor[shard].empty()) first_tensor[shard] = tensor;
  }

  const fs::path dir = index_path.parent_path();
  std::vector<SourceFile> files;
  std::vector<TensorRecord> tensors;
  Metadata metadata = index.metadata;
  std::map<std::string, size_t, std::less<>> found_in;  // tensor -> shard
  std::optional<FormatKind> kind;
  for (size_t s = 0; s < index.shards.size(); ++s) {
    const std::string& shard_name = index.shards[s];
    const fs::path shard_path = dir / shard_name;
    std::error_code ec;
    if (!fs::is_regular_file(shard_path, ec)) {
      throw Error(ErrorCode::io,
                  "shard '" + shard_name + "' listed in the index does not exist (" + shard_path.string() + ")",
                  {.file = index_file, .tensor = std::string(first_tensor[s])});
    }
    Opened o = open_weight_file(shard_path, options);
    if (o.kind != FormatKind::safetensors && o.kind != FormatKind::torch) {
      throw Error(ErrorCode::format,
                  "shard '" + shard_name + "' is " + std::string(format_kind_name(o.kind)) +
                      "; sharded checkpoints hold safetensors or torch files",
                  {.file = shard_path.string()});
    }
    if (kind && *kind != o.kind) {
      throw Error(ErrorCode::format,
                  "shard '" + shard_name + "' is " + std::string(format_kind_name(o.kind)) +
                      " but earlier shards are " + std::string(format_kind_name(*kind)),
                  {.file = shard_path.string()});
    }
    kind = o.kind;
    for (auto& r : o.parsed.tensors) {
      auto want = expected.find(r.name);
      if (auto prev = found_in.find(r.name); prev != found_in.end()) {
        throw Error(ErrorCode::format,
                    "tensor is in two shards: '" + index.shards[prev->second] + "' and '" + shard_name + "'",
                    {.file = shard_path.string(), .tensor = r.name});
      }
      if (want == expected.end()) {
        throw Error(ErrorCode::format,
                    "tensor in shard '" + shard_name + "' is not listed in the index's weight_map",
                    {.file = shard_path.string(), .tensor = r.name});
      }
      if (want->second != s) {
        throw Error(ErrorCode::format,
                    "tensor is in shard '" + shard_name + "' but the index maps it to '" +
                        index.shards[want->second] + "'",
                    {.file = shard_path.string(), .tensor = r.name});
      }
      found_in.emplace(r.name, s);
      r.file_index = static_cast<uint32_t>(files.size());
      tensors.push_back(std::move(r));
    }
    for (const auto& [key, value] : o.parsed.metadata.entries()) {
      if (!metadata.contains(key)) metadata.set(key, value);
    }
    files.push_back(std::move(o.file));
  }
  for (const auto& [tensor, shard] : index.weight_map) {
    if (!found_in.contains(tensor)) {
      throw Error(ErrorCode::missing_tensor,
                  "tensor listed in the index is missing from shard '" + index.shards[shard] + "'",
                  {.file = (dir / index.shards[shard]).string(), .tensor = tensor});
    }
  }
  auto source = std::make_unique<WeightSource>(*kind, root, std::move(files), std::move(tensors),
                                               std::move(metadata));
  for (auto& w : index.warnings) source->add_warning(std::move(w));
  return source;
}

std::unique_ptr<WeightSource> npy_directory(const std::vector<fs::path>& paths, const std::string& root,
                                            const OpenOptions& options) {
  std::vector<SourceFile> files;
  std::vector<TensorRecord> tensors;
  for (const auto& p : paths) {
    Opened o = open_weight_file(p, options);
    if (o.kind != FormatKind::npy) {
      throw Error(ErrorCode::format, "file is not an .npy array", {.file = p.string()});
    }
    for (auto& r : o.parsed.tensors) {
      r.file_index = static_cast<uint32_t>(files.size());
      tensors.push_back(std::move(r));
    }
    files.push_back(std::move(o.file));
  }
  return std::make_unique<WeightSource>(FormatKind::npy, root, std::move(files), std::move(tensors),
                                        Metadata{});
}

// ---- directory resolution ----

enum class Layout : uint8_t { file, index, npy_folder };

struct Rule {
  std::string_view pattern;  // an exact name, or "*suffix"
  Layout layout;
};

// Tried in order; an exact name wins, a "*suffix" rule must match exactly one file.
constexpr std::array<Rule, 9> kRules{{
    {"model.safetensors.index.json", Layout::index},
    {"model.safetensors", Layout::file},
    {"pytorch_model.bin.index.json", Layout::index},
    {"pytorch_model.bin", Layout::file},
    {"*.safetensors.index.json", Layout::index},
    {"*.safetensors", Layout::file},
    {"*.bin.index.json", Layout::index},
    {"*.gguf", Layout::file},
    {"*.npy", Layout::npy_folder},
}};

std::unique_ptr<WeightSource> open_directory(const fs::path& dir, const OpenOptions& options) {
  std::vector<fs::path> entries;
  for (const auto& e : fs::directory_iterator(dir)) {
    std::error_code ec;
    if (e.is_regular_file(ec)) entries.push_back(e.path());
  }
  std::sort(entries.begin(), entries.end());
  const std::string root = dir.string();
  for (const Rule& rule : kRules) {
    std::vector<fs::path> matches;
    for (const auto& p : entries) {
      const std::string name = p.filename().string();
      const bool hit = rule.pattern.starts_with('*')
                           ? name.size() > rule.pattern.size() - 1 && name.ends_with(rule.pattern.substr(1))
                           : name == rule.pattern;
      if (hit) matches.push_back(p);
    }
    if (matches.empty()) continue;
    if (rule.layout == Layout::npy_folder) return npy_directory(matches, root, options);
    if (matches.size() > 1) {
      std::string names;
      for (const auto& m : matches) names += (names.empty() ? "" : ", ") + m.filename().string();
      throw Error(ErrorCode::invalid_argument,
                  "ambiguous model directory: " + std::to_string(matches.size()) + " files match '" +
                      std::string(rule.pattern) + "' (" + names + "); open one of them directly",
                  {.file = root});
    }
    return rule.layout == Layout::index ? sharded(matches[0], root, options)
                                        : single(matches[0], root, options);
  }
  throw Error(ErrorCode::io,
              "no weights found: expected model.safetensors(.index.json), pytorch_model.bin(.index.json), "
              "a .gguf file or .npy files",
              {.file = root});
}

}  // namespace

std::optional<FormatKind> sniff_format(std::span<const std::byte> head, std::optional<uint64_t> file_size) noexcept {
  if (starts_with(head, "GGUF")) return FormatKind::gguf;
  if (starts_with(head, "\x93NUMPY")) return FormatKind::npy;
  // A zip archive (local file header, or the end record of an empty archive) is what
  // torch.save writes; the legacy format is a bare pickle stream, reported by the
  // torch reader with its own message.
  if (starts_with(head, "PK\x03\x04") || starts_with(head, "PK\x05\x06")) return FormatKind::torch;
  // llama2.c: export.py's magic, or a legacy header whose implied size is exactly the
  // file's. Checked before the legacy pickle test, because a dim of 640 begins with the
  // bytes 0x80 0x02 that a protocol-2 pickle begins with; an exact size match is by far
  // the stronger evidence.
  if (format::looks_like_llama2c(head, file_size)) return FormatKind::llama2c;
  if (format::looks_like_legacy_torch(head)) return FormatKind::torch;
  // safetensors: a plausible little-endian header length, then the JSON object.
  if (head.size() >= 9) {
    const uint64_t n = format::load_le<uint64_t>(head.data());
    if (n >= 2 && n <= format::kSafetensorsMaxHeader && looks_like_json_object(head.subspan(8))) {
      return FormatKind::safetensors;
    }
  }
  return std::nullopt;
}

std::unique_ptr<WeightSource> open_weights(const fs::path& path, const OpenOptions& options) {
  std::error_code ec;
  const auto status = fs::status(path, ec);
  if (ec || !fs::exists(status)) {
    throw Error(ErrorCode::io, "no such file or directory", {.file = path.string()});
  }
  if (fs::is_directory(status)) return open_directory(path, options);
  // A JSON file is a shard index; anything else is identified by its magic bytes.
  auto probe = MappedFile::open(path.string(), IoMode::stream, options.fs_magic_override);
  const auto head = read_head(*probe);
  if (looks_like_json_object(head)) return sharded(path, path.string(), options);
  return single(path, path.string(), options);
}

}  // namespace loom
