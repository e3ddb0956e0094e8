// loom::LoadReport — what a load did, for the user and for tools: what was expected
// and found, where each weight came from (file, offset, stored dtype), how it was
// turned into the internal tensor (zero-copy view, dtype conversion, transposition,
// split of a fused tensor), what is tied, how long it took, and memory by category.
//
// A plain value, produced by load_model() and kept by the Model. Text and JSON
// renderings: a summary by default, every tensor with `trace`.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "loom/convert.hpp"
#include "loom/generation_defaults.hpp"
#include "loom/manifest.hpp"
#include "loom/shape.hpp"
#include "loom/tensor.hpp"

namespace loom {

struct TensorLoadRecord {
  std::string internal_name;  // "blk.0.attn_q"
  std::string external_name;  // "model.layers.0.self_attn.q_proj.weight" (token_embd's for tied)
  std::string file;
  uint64_t offset = 0;        // byte offset of the stored tensor in `file`
  uint64_t stored_bytes = 0;
  Shape shape;                // internal (logical) shape
  DType stored_dtype = DType::f32;
  DType dtype = DType::f32;   // in memory
  std::string layout_change;  // "" or e.g. "transposed from [64, 192]", "rows 64..127 of ..."
  bool zero_copy = false;     // a view into the mapped file
  bool tied = false;          // shares token_embd's storage
  ConvertStats conversion;    // NaN / Inf / clamp counts of the conversion
  // Kernel-native layout it was repacked into after loading (LoadOptions::repack), or
  // Packing::none; the copy's bytes count as owned, and how long the shuffle took.
  Packing packing = Packing::none;
  double repack_seconds = 0.0;
  // The kernel-native layout the source stored it in (a loom pack written with
  // --repack), or Packing::none. Kept as a mapped view (packing == stored_packing,
  // zero_copy) where this CPU's kernels read that layout, else unpacked to rows.
  Packing stored_packing = Packing::none;
};

struct MemoryUsage {
  int64_t mapped_weight_bytes = 0;  // zero-copy views into mapped files
  int64_t owned_weight_bytes = 0;   // converted tensors in loom-owned buffers
  int64_t transient_peak_bytes = 0; // staging buffers of the conversion pipeline, at peak
  int64_t kv_cache_bytes = 0;       // estimate for kv_context x kv_batch in kv_dtype
  int64_t kv_context = 0;
  int64_t kv_batch = 1;
  DType kv_dtype = DType::f32;
  int64_t rss_before_bytes = 0;     // process RSS when the load started
  int64_t rss_peak_bytes = 0;       // highest RSS seen while loading
};

struct LoadReport {
  std::string source_path;
  std::string format;        // "safetensors", "gguf", ...
  std::string architecture;
  std::vector<std::string> files;
  int64_t expected_tensors = 0;  // slots the config needs
  int64_t loaded_tensors = 0;    // slots filled (tied ones included)
  int64_t zero_copy_tensors = 0;
  int64_t converted_tensors = 0;
  int64_t repacked_tensors = 0;   // of the converted ones: owned copies in a kernel-native layout
  int64_t stored_packed_tensors = 0;  // of the zero-copy ones: mapped in the packed layout a pack stored
  std::vector<TensorLoadRecord> tensors;
  std::vector<std::string> tied;          // "output -> token_embd"
  std::vector<ManifestProblem> warnings;  // tolerated problems (lenient extras, ...)
  std::vector<std::string> ignored;       // non-weight buffers skipped
  std::vector<std::string> notes;         // e.g. "q/k rows kept in GGUF interleaved-RoPE order"
  double load_seconds = 0.0;
  // Where load_seconds went: opening the files (headers and metadata parsed, any hashes
  // checked, the config and manifest built); planning, mapping, converting and repacking
  // the weights; building the tokenizer. The rest is reporting.
  struct Phases {
    double open_seconds = 0.0;
    double weights_seconds = 0.0;
    double tokenizer_seconds = 0.0;
  } phases;
  MemoryUsage memory;
  ConvertStats conversion_totals;
  std::string tokenizer;  // where the tokenizer came from, or "" when none
  // Side-file problems that were forgiven, one line per file, e.g. "…/config.json: a
  // UTF-8 byte-order mark, 2 comments and 1 trailing comma were ignored".
  std::vector<std::string> file_warnings;
  // The model's generation defaults, each with its source (generation_config.json or
  // loom default); also on the Model (Model::generation_defaults()).
  GenerationDefaults generation;

  std::string to_text(bool trace = false) const;
  std::string to_json(bool trace = false) const;
};

}  // namespace loom
