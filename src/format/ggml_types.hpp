// Internal: ggml's tensor type ids (as stored in GGUF tensor infos) <-> loom::DType.
//
// One table: every id ggml has assigned, with its ggml name and the DType loom reads it
// as, or none when loom has no such type (the reader then names the id and type in its
// "unsupported" error instead of guessing).
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>

#include "loom/dtype.hpp"

namespace loom::format {

struct GgmlType {
  uint32_t id;
  std::string_view name;         // ggml_type_name()
  std::optional<DType> dtype;    // nullopt: known to ggml, not supported by loom
};

// nullptr when ggml never assigned the id.
const GgmlType* ggml_type_by_id(uint32_t id) noexcept;
// The ggml id that stores `dtype`, or nullopt when GGUF cannot hold it (u8, bool, f8).
std::optional<uint32_t> ggml_id_for(DType dtype) noexcept;

}  // namespace loom::format
