// loom packs — loom's own mmap-ready model format: convert once, then start in
// milliseconds.
//
// A pack is a directory:
//   index.json      format version, architecture, rope row order, every tensor's internal
//                   name, dtype, shape, layout, data file, offset, length and sha256, the
//                   data files' sizes, and provenance (source files with sizes and sha256,
//                   the source revision when the model directory carries one, converter
//                   version, options and time)
//   config.json     the model's config (Hugging Face keys)
//   data-NNNNN.bin  tensor bytes in internal names and layouts (rows, or a kernel-native
//                   packing with PackOptions::repack), each tensor 64-byte aligned
//   tokenizer.json / tokenizer_config.json, or tokenizer.gguf (a vocab-only GGUF), when
//                   the source had a tokenizer
// Loading a pack is pure mmap with zero conversion (load_model detects packs).
//
// Conversion is crash-safe and resumable: it writes into `<dst>.partial/`, records its
// progress in a checkpoint every few tensors, continues from the checkpoint when run
// again (re-verifying what was already written), and the final directory appears by an
// atomic rename — a half-written pack never looks complete.
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "loom/dtype.hpp"
#include "loom/loader.hpp"

namespace loom {

struct PackOptions {
  std::optional<DType> dtype;          // matrices' dtype in the pack; nullopt keeps the source's
  // Quantization recipe for the weight matrices (norms and biases stay f32), any case:
  // a block type ("q8_0", "q4_k"), a group type ("gq8", "gq4" with group_size, or
  // "gq4_64"), or a preset ("q4_k_m", "q5_k_m", "gq4_m", ...); "" = none. A bad name or
  // group size throws Error(invalid_argument) listing the valid ones, before any work.
  // docs/cli-and-packs.md has the table.
  std::string quantize;
  int group_size = 0;                  // gq8 / gq4 group: 32, 64 or 128; 0 = 32
  // automatic: store each projection matrix whose dtype has a kernel-native layout on
  // this CPU in that layout (the tensor's "packing" in the index, the ISA in the
  // provenance's "repack"), so a load on a CPU like this one maps it ready for its
  // kernel; elsewhere the loader unpacks it to rows. off: rows, readable everywhere.
  RepackMode repack = RepackMode::off;
  uint64_t max_data_file_bytes = uint64_t{4} << 30;
  int checkpoint_every = 4;            // tensors between checkpoints
  bool hash_sources = true;            // sha256 of each source file into the provenance
  // Progress: fraction of tensors written, current tensor; return false to stop (the
  // partial directory stays, resumable).
  std::function<bool(double fraction, std::string_view tensor)> progress;
  // Test hook: stop the process (std::_Exit) after writing this many tensors, as a crash
  // would. 0 = off. Also settable with LOOM_TEST_CRASH_AFTER_TENSORS.
  int crash_after_tensors = 0;
  LoadOptions load;                    // how the source is opened
};

struct PackResult {
  std::filesystem::path path;
  int64_t tensors = 0;
  int64_t bytes = 0;
  int64_t resumed_tensors = 0;  // taken over from an interrupted run (verified)
  double seconds = 0.0;
};

// Converts any readable source (model directory, .gguf, pack) into a pack at `dst`.
// Throws if `dst` already exists.
PackResult write_pack(const std::filesystem::path& src, const std::filesystem::path& dst,
                      const PackOptions& options = {});

struct VerifyProblem {
  std::string tensor;  // or "" for file-level problems
  std::string file;
  std::string detail;
};

// Checks a pack's data files and every tensor against the index (sizes, sha256), hashing
// on `threads` threads (<= 0: one per hardware thread). Returns every problem found, in
// index order (empty: the pack is intact). Throws only when the index itself cannot be
// read.
std::vector<VerifyProblem> verify_pack(const std::filesystem::path& pack, int threads = 0);

// True when `path` is a pack directory (has an index.json of format "loom-pack").
bool is_pack(const std::filesystem::path& path);

}  // namespace loom
