// loom::load_model — turns weight files into a runnable Model, as the manifest asks.
//
// The pipeline: open the source (loom/format.hpp), read the config (config.json beside
// the weights, or GGUF metadata), build the manifest (loom/manifest.hpp), then fill
// every slot: a zero-copy view of the mapping wherever the stored dtype and layout
// already fit, otherwise a bounded streaming conversion into a preallocated tensor
// (chunks read by the loading thread, converted on the other threads of a ThreadPool;
// extra memory stays under queue_depth x chunk_bytes). Norm weights and biases are
// always widened to f32.
// Tied output weights alias the embedding. A LoadReport records all of it.
//
// Errors: loom::ManifestError (every mismatch at once), loom::Error with file / tensor /
// offset context, Error(cancelled) when the progress callback returns false — in every
// case nothing stays allocated. Thread-safety: load_model may run on several threads at
// once; each call is independent.
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "loom/format.hpp"
#include "loom/load_report.hpp"
#include "loom/log.hpp"
#include "loom/model.hpp"
#include "loom/thread_pool.hpp"

namespace loom {

struct FileExpectation {
  std::optional<uint64_t> size;
  std::string sha256;  // lowercase hex; empty: not checked
};

// Whether projection matrices are copied into the layout their kernel reads fastest
// (Layout::repacked, loom::Packing) after loading.
enum class RepackMode : uint8_t {
  off,        // keep every weight as stored (zero-copy views where the dtype fits)
  automatic,  // repack the matrices whose dtype has a kernel-native layout on this CPU
              // (today the quantized types, f32, f16 and bf16, with AVX-512 or AVX2): an
              // owned copy, not a mapped view
};

struct LoadOptions {
  IoMode io_mode = IoMode::automatic;
  RepackMode repack = RepackMode::off;
  // Dtype of projection and embedding matrices in memory; nullopt keeps what is stored.
  std::optional<DType> target_dtype;
  bool strict = false;  // true: unexpected tensors fail the load too
  int queue_depth = 2;
  size_t chunk_bytes = size_t{8} << 20;
  int threads = 2;      // conversion workers besides the loading thread (0: it converts too)
  // A host's pool to convert on (its size replaces `threads`; the loading thread is one
  // of its threads): caps the threads of loads and sessions together. Not to be used
  // from inside one of that pool's own parallel_for calls. Null: a pool for this load.
  std::shared_ptr<ThreadPool> pool;
  // Called on the loading thread with the fraction done and the current tensor;
  // return false to cancel (the load throws Error(cancelled) and frees everything).
  std::function<bool(double fraction, std::string_view tensor)> progress;
  // Checked before anything is read: size and/or sha256 per file path (as opened).
  std::map<std::string, FileExpectation> expected_files;
  // Also verify files whose name in a Hugging Face cache (blobs/<sha256>) states their hash.
  bool verify_hf_cache_blobs = false;
  bool load_tokenizer = true;
  // For the report's KV cache estimate.
  int64_t kv_context = 0;  // 0: the model's max_positions capped at 4096
  int64_t kv_batch = 1;
  DType kv_dtype = DType::f32;
  Logger logger = Logger::global();
  uint64_t fs_magic_override = 0;  // tests: pretend the files live on this filesystem
};

std::shared_ptr<const Model> load_model(const std::filesystem::path& path,
                                        const LoadOptions& options = {});

// The config a path would load with (config.json or GGUF metadata), without weights.
ModelConfig load_config(const std::filesystem::path& path, const LoadOptions& options = {});

// Lowercase hex SHA-256 of a file's contents.
std::string sha256_file(const std::filesystem::path& path);

}  // namespace loom
