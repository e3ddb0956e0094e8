// Internal: the index of a sharded checkpoint (`*.safetensors.index.json`,
// `pytorch_model.bin.index.json`): {"metadata": {...}, "weight_map": {tensor: shard}}.
#pragma once

#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "loom/format.hpp"

namespace loom::format {

struct ShardIndex {
  std::vector<std::string> shards;  // distinct shard file names, in first-seen order
  std::vector<std::pair<std::string, size_t>> weight_map;  // tensor -> index into shards
  Metadata metadata;  // the index's scalar "metadata" entries (e.g. total_size)
  std::vector<std::string> warnings;  // what lenient parsing forgave (comments, ...)
};

// Shard names must be relative paths without ".." (an index never points outside its
// directory). The JSON is read leniently (format/lenient_json.hpp): people edit indexes
// by hand. Throws Error(format) naming `file` and, where known, the tensor.
ShardIndex parse_shard_index(std::string_view json, const std::string& file);

}  // namespace loom::format
