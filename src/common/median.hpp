// Internal: the median the benchmarks report (loom bench, bench/), one definition for
// all of them.
#pragma once

#include <algorithm>
#include <vector>

namespace loom {

// The median of the samples: the middle one, or the mean of the two middle ones for an
// even count (the upper one alone made `--reps 2` report the slower run); 0 for none.
inline double median(std::vector<double> v) {
  if (v.empty()) return 0.0;
  std::sort(v.begin(), v.end());
  const size_t mid = v.size() / 2;
  return v.size() % 2 == 1 ? v[mid] : (v[mid - 1] + v[mid]) / 2.0;
}

}  // namespace loom
