// The debug hook's helpers: stage names, activation statistics, dump file names.
#include "loom/trace.hpp"

#include <algorithm>
#include <cmath>
#include <limits>

namespace loom {

TraceStage split_trace_name(std::string_view name) noexcept {
  constexpr std::string_view kPrefix = "blk.";
  if (!name.starts_with(kPrefix)) return {name, -1};
  int64_t layer = 0;
  size_t i = kPrefix.size();
  for (; i < name.size() && name[i] >= '0' && name[i] <= '9'; ++i) {
    layer = layer * 10 + (name[i] - '0');
    if (layer > std::numeric_limits<int32_t>::max()) return {name, -1};
  }
  // Digits, a dot, and a stage name after it; anything else is not a block stage.
  if (i == kPrefix.size() || i + 1 >= name.size() || name[i] != '.') return {name, -1};
  return {name.substr(i + 1), static_cast<int32_t>(layer)};
}

ActivationStats activation_stats(std::span<const float> values) noexcept {
  ActivationStats s;
  s.count = static_cast<int64_t>(values.size());
  double sum = 0.0;
  int64_t finite = 0;
  double lo = std::numeric_limits<double>::infinity();
  double hi = -std::numeric_limits<double>::infinity();
  for (const float f : values) {
    if (std::isnan(f)) {
      ++s.nan;
      continue;
    }
    if (std::isinf(f)) {
      ++s.inf;
      continue;
    }
    const auto d = static_cast<double>(f);
    lo = std::min(lo, d);
    hi = std::max(hi, d);
    sum += d;
    ++finite;
  }
  if (finite > 0) {
    s.min = lo;
    s.max = hi;
    s.mean = sum / static_cast<double>(finite);
  }
  return s;
}

std::string trace_dump_name(int64_t pass, std::string_view stage, int32_t layer) {
  std::string out = std::to_string(pass) + "-" + std::string(stage);
  if (layer >= 0) out += "-L" + std::to_string(layer);
  return out + ".npy";
}

}  // namespace loom
