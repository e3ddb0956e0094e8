#include "runtime/draft_length.hpp"

#include <algorithm>
#include <cmath>

namespace loom::runtime {

DraftLength::DraftLength(const SpeculativeParams& params)
    : params_(params), verify_(static_cast<size_t>(params.max_draft) + 2, -1.0) {}

double DraftLength::alpha() const noexcept { return accepted_ / (accepted_ + rejected_); }

// A pass size never measured: from the nearest measured ones (linear between two, or
// the measured slope beyond them; with one point only, 5% more per extra token, the
// order of what a memory-bound decode pays for a few more rows).
double DraftLength::verify_estimate(int32_t n) const {
  const auto at = [&](int32_t i) { return verify_[static_cast<size_t>(i)]; };
  if (at(n) >= 0.0) return at(n);
  int32_t lo = -1, hi = -1, first = -1, last = -1;
  for (int32_t i = 1; i < static_cast<int32_t>(verify_.size()); ++i) {
    if (at(i) < 0.0) continue;
    if (first < 0) first = i;
    last = i;
    if (i < n) lo = i;
    if (i > n && hi < 0) hi = i;
  }
  if (first < 0) return -1.0;
  if (lo >= 0 && hi >= 0) return at(lo) + (at(hi) - at(lo)) * (n - lo) / (hi - lo);
  const double slope = first != last ? std::max(0.0, (at(last) - at(first)) / (last - first)) : 0.05 * at(first);
  const int32_t near = lo >= 0 ? lo : hi;
  return std::max(at(near) + slope * (n - near), 0.5 * at(near));
}

int32_t DraftLength::next() {
  const int32_t kmax = params_.max_draft;
  if (!params_.adaptive) return kmax;
  if (first_) return kmax;  // nothing measured yet: try the most
  const double a = std::min(alpha(), 0.999);
  const double td = std::max(draft_per_token_, 0.0);
  int32_t best_k = 0;
  double best = -1.0;
  for (int32_t k = 0; k <= kmax; ++k) {
    const double v = verify_estimate(k + 1);
    if (v <= 0.0) continue;
    const double tokens = (1.0 - std::pow(a, k + 1)) / (1.0 - a);
    const double rate = tokens / (v + k * td);
    if (rate > best) {
      best = rate;
      best_k = k;
    }
  }
  if (best_k == 0) {
    if (++plain_rounds_ >= params_.probe_interval) {
      plain_rounds_ = 0;
      return 1;
    }
    return 0;
  }
  plain_rounds_ = 0;
  return best_k;
}

void DraftLength::observe(int32_t asked, int32_t drafted, int32_t accepted, double draft_seconds,
                          double verify_seconds) {
  (void)asked;
  const double s = params_.smoothing;
  first_ = false;
  auto& v = verify_[static_cast<size_t>(std::min<int32_t>(drafted + 1, static_cast<int32_t>(verify_.size()) - 1))];
  v = v < 0.0 ? verify_seconds : (1.0 - s) * v + s * verify_seconds;
  if (drafted == 0) return;
  const double per_token = draft_seconds / drafted;
  draft_per_token_ = draft_per_token_ < 0.0 ? per_token : (1.0 - s) * draft_per_token_ + s * per_token;
  accepted_ = (1.0 - s) * accepted_ + accepted;
  rejected_ = (1.0 - s) * rejected_ + (accepted < drafted ? 1.0 : 0.0);
}

}  // namespace loom::runtime
