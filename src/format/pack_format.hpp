// Internal: the loom pack format (docs/cli-and-packs.md) — a directory with index.json,
// data files of aligned tensor bytes, and side files. Tensors are named by loom's internal
// slot names (the third naming scheme, beside Hugging Face's and GGUF's: identity rules
// generated from the slot table, model/architectures.cpp). This layer reads packs as a
// WeightSource, reads and writes index entries, and verifies a pack's bytes; the writer
// that turns a model into a pack is model/pack.cpp. Any thread.
#pragma once

#include <simdjson.h>

#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "common/json_writer.hpp"
#include "loom/format.hpp"
#include "loom/thread_pool.hpp"

namespace loom::format::pack {

constexpr int kVersion = 1;
constexpr uint64_t kAlignment = 64;  // of every tensor's offset in its data file

struct PackedTensor {
  std::string name;
  DType dtype = DType::f32;
  Shape shape;
  std::string layout = "row_major";  // or "repacked" (then `packing` names the kernel layout)
  Packing packing = Packing::none;
  std::string file;
  uint64_t offset = 0;
  uint64_t length = 0;
  std::string sha256;
  std::string tied_to;  // internal name of the tensor whose bytes this one shares
};

std::string shape_json(const Shape& s);
void write_tensor_entry(JsonWriter& w, const PackedTensor& t);

// Throws Error(format) naming `path` when `text` is not JSON.
simdjson::dom::element parse_json(simdjson::dom::parser& parser, const simdjson::padded_string& text,
                                  const std::filesystem::path& path);
// The "tensors" list of an index.json or checkpoint.json; throws Error(format) naming the
// file and the tensor (a data file outside the pack is refused).
std::vector<PackedTensor> read_tensor_entries(simdjson::dom::element root, const std::filesystem::path& path);
// A string field; throws Error(format) naming the field and the file.
std::string string_field(simdjson::dom::element e, std::string_view key, const std::filesystem::path& path);

// True when `path` is a directory whose index.json has format "loom-pack".
bool is_pack_dir(const std::filesystem::path& path);
// The pack's tensors as a WeightSource (FormatKind::pack), zero-copy where mapped. Packed
// tensors come as packed records (TensorRecord::packing); the metadata key
// "loom.pack.repacked_for" holds the ISA the pack's provenance says they were packed for.
std::unique_ptr<WeightSource> open(const std::filesystem::path& dir, const OpenOptions& options);

struct Problem {
  std::string tensor;  // or "" for file-level problems
  std::string file;
  std::string detail;
};
// Every data file's size and every tensor's sha256 against the index; the tensors are
// hashed on `pool`'s threads, problems listed in index order.
std::vector<Problem> verify(const std::filesystem::path& pack, ThreadPool& pool);

}  // namespace loom::format::pack
