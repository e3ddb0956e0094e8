// libFuzzer harness: sharded checkpoint index JSON.
#include <string_view>

#include "format/shard_index.hpp"
#include "fuzz/fuzz_common.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    const auto index = loom::format::parse_shard_index(
        std::string_view(reinterpret_cast<const char*>(data), size), "fuzz.index.json");
    for (const auto& [tensor, shard] : index.weight_map) {
      if (shard >= index.shards.size()) __builtin_trap();
    }
  } catch (const loom::Error&) {
  }
  return 0;
}
