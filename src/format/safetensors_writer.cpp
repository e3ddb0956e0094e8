// The safetensors writers (single file, and sharded with an index).
#include <fmt/format.h>

#include <set>

#include "common/json_writer.hpp"
#include "format/atomic_file.hpp"
#include "format/safetensors.hpp"
#include "loom/format.hpp"

namespace loom {

namespace {

void check_names(std::span<const NamedTensor> tensors, const std::string& file) {
  std::set<std::string_view> seen;
  for (const auto& t : tensors) {
    if (t.name == "__metadata__") {
      throw Error(ErrorCode::invalid_argument, "\"__metadata__\" is reserved in safetensors",
                  {.file = file, .tensor = t.name});
    }
    if (!seen.insert(t.name).second) {
      throw Error(ErrorCode::invalid_argument, "duplicate tensor name",
                  {.file = file, .tensor = t.name});
    }
    if (!t.tensor.defined()) {
      throw Error(ErrorCode::invalid_argument, "tensor is undefined", {.file = file, .tensor = t.name});
    }
    if (!format::safetensors_dtype_name(t.tensor.dtype())) {
      throw Error(ErrorCode::unsupported,
                  "safetensors cannot hold dtype " + std::string(dtype_name(t.tensor.dtype())),
                  {.file = file, .tensor = t.name});
    }
  }
}

std::string header_json(std::span<const NamedTensor> tensors,
                        const std::map<std::string, std::string>& metadata) {
  std::string json = "{";
  bool first = true;
  if (!metadata.empty()) {
    json += "\"__metadata__\":{";
    for (const auto& [k, v] : metadata) {
      if (!first) json += ',';
      first = false;
      JsonWriter::escape_into(json, k);
      json += ':';
      JsonWriter::escape_into(json, v);
    }
    json += '}';
    first = false;
  }
  uint64_t offset = 0;
  for (const auto& t : tensors) {
    if (!first) json += ',';
    first = false;
    JsonWriter::escape_into(json, t.name);
    json += fmt::format(":{{\"dtype\":\"{}\",\"shape\":[",
                        *format::safetensors_dtype_name(t.tensor.dtype()));
    const auto dims = t.tensor.shape().dims();
    for (size_t i = 0; i < dims.size(); ++i) json += fmt::format("{}{}", i ? "," : "", dims[i]);
    const auto n = static_cast<uint64_t>(t.tensor.nbytes());
    json += fmt::format("],\"data_offsets\":[{},{}]}}", offset, offset + n);
    offset += n;
  }
  json += '}';
  // Pad with spaces so the data section starts 8-byte aligned, as the reference
  // writer does (keeps f64/i64 views aligned in the mapping).
  while ((8 + json.size()) % 8 != 0) json += ' ';
  return json;
}

}  // namespace

void write_safetensors(const std::filesystem::path& path, std::span<const NamedTensor> tensors,
                       const std::map<std::string, std::string>& metadata) {
  check_names(tensors, path.string());
  const std::string json = header_json(tensors, metadata);
  format::AtomicFile out(path);
  std::vector<std::byte> prefix;
  format::append_le<uint64_t>(prefix, json.size());
  out.write(prefix);
  out.write(json);
  for (const auto& t : tensors) out.write_tensor(t.tensor, t.name);
  out.commit();
}

void write_safetensors_sharded(const std::filesystem::path& dir, std::string_view stem,
                               std::span<const NamedTensor> tensors, int shard_count,
                               const std::map<std::string, std::string>& metadata) {
  const std::string index_name = std::string(stem) + ".safetensors.index.json";
  check_names(tensors, (dir / index_name).string());
  const size_t n = tensors.size();
  if (shard_count < 1 || static_cast<size_t>(shard_count) > std::max<size_t>(n, 1)) {
    throw Error(ErrorCode::invalid_argument,
                "cannot split " + std::to_string(n) + " tensors into " +
                    std::to_string(shard_count) + " shards",
                {.file = (dir / index_name).string()});
  }
  const auto shards = static_cast<size_t>(shard_count);
  uint64_t total = 0;
  for (const auto& t : tensors) total += static_cast<uint64_t>(t.tensor.nbytes());

  // Shard k starts at the first tensor whose preceding bytes reach k/shards of the
  // total, keeping every shard non-empty.
  std::vector<size_t> starts(shards + 1, 0);
  starts[shards] = n;
  uint64_t before = 0;
  size_t next = 1;
  for (size_t i = 0; i < n && next < shards; ++i) {
    const bool reached = static_cast<long double>(before) * shards >= static_cast<long double>(total) * next;
    const bool must = n - i <= shards - next;  // only enough tensors left for one per shard
    if (i > starts[next - 1] && (reached || must)) starts[next++] = i;
    before += static_cast<uint64_t>(tensors[i].tensor.nbytes());
  }
  for (; next < shards; ++next) starts[next] = std::min(n, starts[next - 1] + 1);

  std::string weight_map;
  for (size_t s = 0; s < shards; ++s) {
    const std::string file =
        fmt::format("{}-{:05d}-of-{:05d}.safetensors", stem, s + 1, shards);
    const auto part = tensors.subspan(starts[s], starts[s + 1] - starts[s]);
    write_safetensors(dir / file, part, metadata);
    for (const auto& t : part) {
      if (!weight_map.empty()) weight_map += ",\n    ";
      JsonWriter::escape_into(weight_map, t.name);
      weight_map += ": ";
      JsonWriter::escape_into(weight_map, file);
    }
  }
  const std::string index = fmt::format(
      "{{\n  \"metadata\": {{\"total_size\": {}}},\n  \"weight_map\": {{\n    {}\n  }}\n}}\n", total,
      weight_map);
  // The index goes last: until it exists the shards are not a model.
  format::AtomicFile out(dir / index_name);
  out.write(index);
  out.commit();
}

}  // namespace loom
