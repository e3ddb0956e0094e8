// Readers for the independent-engine reference data in ../shared/reference (layouts in
// its README.md): token ids, per-position logits, and comparison helpers.
#pragma once

#include <filesystem>
#include <span>
#include <vector>

namespace loom::test {

// One line of space-separated ids.
std::vector<int32_t> read_ids(const std::filesystem::path& path);
// '#' header lines skipped; one row of whitespace-separated floats per position.
std::vector<std::vector<float>> read_logits(const std::filesystem::path& path);

// ||a - b|| / ||b|| (L2).
double relative_l2(std::span<const float> a, std::span<const float> b);
int64_t argmax(std::span<const float> v);

}  // namespace loom::test
