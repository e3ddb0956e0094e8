// Internal: the pack reader, used by load_model (packs are opened by the model layer,
// not by open_weights: a pack's names are loom's internal names).
#pragma once

#include <filesystem>
#include <memory>

#include "loom/format.hpp"

namespace loom::pack_detail {

std::unique_ptr<WeightSource> open_pack(const std::filesystem::path& dir, const OpenOptions& options);

}  // namespace loom::pack_detail
