// The statistics `loom bench` reports, shared by its plain, batched and speculative modes.
#pragma once

#include <algorithm>
#include <vector>

namespace loom::cli {

// The median of the samples: the middle one, or the mean of the two middle ones for an
// even count (the upper one alone made `--reps 2` report the slower run).
inline double median(std::vector<double> v) {
  if (v.empty()) return 0.0;
  std::sort(v.begin(), v.end());
  const size_t mid = v.size() / 2;
  return v.size() % 2 == 1 ? v[mid] : (v[mid - 1] + v[mid]) / 2.0;
}

}  // namespace loom::cli
