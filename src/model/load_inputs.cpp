#include "model/load_inputs.hpp"

#include <algorithm>
#include <fstream>
#include <map>
#include <span>

#include "common/log_format.hpp"
#include "common/read_file.hpp"
#include "common/sha256.hpp"
#include "format/pack_format.hpp"
#include "loom/error.hpp"
#include "loom/pack.hpp"
#include "model/config_parse.hpp"
#include "model/generation_config.hpp"
#include "tensor/byte_order.hpp"
#include "tokenizer/llama2c_vocab.hpp"

namespace loom {

std::string sha256_file(const std::filesystem::path& path) {
  auto hash = sha256_file_range(path, 0, std::nullopt);
  if (!hash) throw Error(ErrorCode::io, "cannot read", {.file = path.string()});
  return *hash;
}

namespace load {

std::filesystem::path model_dir(const std::filesystem::path& path) {
  return std::filesystem::is_directory(path) ? path : path.parent_path();
}

ModelConfig config_for(const std::filesystem::path& path, const WeightSource& source,
                       std::vector<std::string>* warnings) {
  if (source.format() == FormatKind::gguf) return config_parse::from_gguf(source);
  if (source.format() == FormatKind::llama2c) return config_parse::from_llama2c(source);
  const auto config_path = model_dir(path) / "config.json";
  if (!std::filesystem::exists(config_path)) {
    throw Error(ErrorCode::format,
                "no config.json beside the weights: loom reads the architecture and shapes of " +
                    std::string(format_kind_name(source.format())) + " models from it",
                {.file = config_path.string()});
  }
  return config_parse::from_hf_json(read_file(config_path), config_path.string(), warnings);
}

// generation_config.json beside the weights (Hugging Face layouts and packs; a GGUF
// carries no such file), else loom's defaults.
GenerationDefaults generation_for(const std::filesystem::path& path, const WeightSource& source,
                                  std::vector<std::string>& warnings) {
  if (source.format() == FormatKind::gguf) return {};
  const auto file = model_dir(path) / "generation_config.json";
  std::error_code ec;
  if (!std::filesystem::is_regular_file(file, ec)) return {};
  return generation_config::parse(read_file(file), file.string(), &warnings);
}

// Appends the ids in `extra` that are in the vocabulary and not yet in `ids`.
void merge_eos(std::vector<int32_t>& ids, const std::vector<int32_t>& extra, int64_t vocab_size) {
  for (int32_t id : extra) {
    if (id >= 0 && id < vocab_size && std::find(ids.begin(), ids.end(), id) == ids.end()) ids.push_back(id);
  }
}

void add_file_warnings(LoadReport& report, const std::vector<std::string>& warnings, const Logger& log) {
  for (const auto& w : warnings) {
    // The SentencePiece reader reads config.json again: one line per file is enough.
    if (std::find(report.file_warnings.begin(), report.file_warnings.end(), w) != report.file_warnings.end()) continue;
    report.file_warnings.push_back(w);
    detail::log(log, LogLevel::warn, "{}", w);
  }
}

// ---- file verification ----

void verify_files(const WeightSource& source, const LoadOptions& options, ThreadPool& pool) {
  std::vector<FileRange> to_hash;
  std::vector<std::string> want_hash;
  for (const auto& f : source.files()) {
    FileExpectation want;
    if (auto it = options.expected_files.find(f.path); it != options.expected_files.end()) want = it->second;
    if (want.sha256.empty() && options.verify_hf_cache_blobs) {
      // A Hugging Face cache snapshot links each file to blobs/<sha256 of its content>
      // (for files stored with git LFS, which weight files are).
      std::error_code ec;
      if (std::filesystem::is_symlink(f.path, ec)) {
        const auto target = std::filesystem::canonical(f.path, ec);
        const std::string blob = target.filename().string();
        if (!ec && target.parent_path().filename() == "blobs" && blob.size() == 64 &&
            blob.find_first_not_of("0123456789abcdef") == std::string::npos) {
          want.sha256 = blob;
        }
      }
    }
    if (want.size && *want.size != f.size) {
      throw Error(ErrorCode::format,
                  "file is " + std::to_string(f.size) + " bytes, expected " + std::to_string(*want.size),
                  {.file = f.path});
    }
    if (!want.sha256.empty()) {
      to_hash.push_back({f.path, 0, std::nullopt});
      want_hash.push_back(want.sha256);
    }
  }
  if (to_hash.empty()) return;
  const auto got = sha256_file_ranges(to_hash, pool);
  for (size_t i = 0; i < to_hash.size(); ++i) {
    const std::string file = to_hash[i].file.string();
    if (!got[i]) throw Error(ErrorCode::io, "cannot read", {.file = file});
    if (*got[i] != want_hash[i]) {
      throw Error(ErrorCode::format, "sha256 is " + *got[i] + ", expected " + want_hash[i], {.file = file});
    }
  }
}

std::unique_ptr<WeightSource> open_source(const std::filesystem::path& path, const LoadOptions& options) {
  const OpenOptions open{.io_mode = options.io_mode, .fs_magic_override = options.fs_magic_override};
  if (is_pack(path)) return format::pack::open(path, open);
  return open_weights(path, open);
}

// The model's tokenizer: GGUF metadata, a llama2.c tokenizer.bin, or tokenizer.json (a pack may carry a
// tokenizer.gguf) beside the weights; null when there is none.
std::shared_ptr<const Tokenizer> tokenizer_for(const std::filesystem::path& path, const WeightSource& source,
                                               LoadReport& report) {
  if (source.format() == FormatKind::gguf) {
    if (!source.metadata().contains("tokenizer.ggml.model")) return nullptr;
    return Tokenizer::from_gguf_metadata(source.metadata(), source.root());
  }
  if (source.format() == FormatKind::llama2c) {
    std::string note;
    const auto tok = tok::find_llama2c_tokenizer(path, note);
    if (tok.empty()) report.notes.push_back(note);
    return tok.empty() ? nullptr : Tokenizer::from_llama2c(tok);
  }
  const auto dir = model_dir(path);
  if (std::filesystem::exists(dir / "tokenizer.json") ||
      (source.format() == FormatKind::pack && std::filesystem::exists(dir / "tokenizer.gguf"))) {
    return Tokenizer::load(dir);
  }
  if (std::filesystem::exists(dir / "tokenizer.model")) return Tokenizer::from_sentencepiece_model(dir);
  report.notes.push_back("no tokenizer beside the weights");
  return nullptr;
}

// "Detect suspicious data and warn": each float tensor the manifest uses, read in a
// bounded sample (at most kByteOrderSampleValues values, so a zero-copy load touches
// only a few pages of each), is checked for byte-swapped values. A warning, not an
// error: the values are used as stored. Strided records (rare PyTorch views) are skipped.
void warn_suspicious_byte_order(const WeightSource& source, const Manifest& manifest, LoadReport& report,
                                const Logger& log) {
  std::map<const TensorRecord*, std::string> users;  // record -> internal names, in manifest order
  std::vector<const TensorRecord*> order;
  for (const ManifestEntry& e : manifest.entries()) {
    if (e.record == nullptr) continue;
    auto [it, fresh] = users.try_emplace(e.record, e.internal_name);
    if (fresh) {
      order.push_back(e.record);
    } else {
      it->second += "+" + e.internal_name;
    }
  }
  std::vector<std::byte> sample;
  for (const TensorRecord* r : order) {
    if (!r->is_contiguous() || !byte_order_checked(r->dtype)) continue;
    const auto esize = static_cast<uint64_t>(dtype_size(r->dtype));
    sample.clear();
    for (const ByteRun& run : byte_order_sample_runs(r->nbytes, esize)) {
      const size_t at = sample.size();
      sample.resize(at + run.size);
      source.read(*r, run.offset, std::span<std::byte>(sample.data() + at, run.size));
    }
    const ByteOrderCheck c = check_byte_order(sample, r->dtype);
    if (!c.suspicious) continue;
    const auto pct = [&](int64_t k) { return 100 * k / c.values; };
    ManifestProblem p{ProblemKind::suspicious_data, users[r], r->name, {}, r->shape,
                      "tensor '" + r->name + "' (" + std::string(dtype_name(r->dtype)) + ", " +
                          source.file_of(*r).path + ") looks byte-swapped: " + std::to_string(pct(c.implausible)) +
                          "% of " + std::to_string(c.values) + " sampled nonzero values are " + std::string(c.band) +
                          ", " + std::to_string(pct(c.implausible_swapped)) +
                          "% with each value's bytes reversed (written in the other byte order, or swapped by a "
                          "converter?); its values are used as stored",
                      false};
    detail::log(log, LogLevel::warn, "{}", p.detail);
    report.warnings.push_back(std::move(p));
  }
}

}  // namespace load
}  // namespace loom
