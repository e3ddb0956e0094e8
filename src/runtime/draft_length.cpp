#include "runtime/draft_length.hpp"

#include <algorithm>
#include <cmath>

namespace loom::runtime {

DraftLength::DraftLength(const SpeculativeParams& params)
    : params_(params),
      verify_(static_cast<size_t>(params.max_draft) + 2, -1.0),
      seen_(verify_.size(), false),
      interval_(params.probe_interval) {}

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
  // Measure first: a plain step (the cost drafting must beat), then a short draft (the
  // draft's cost per token and a first acceptance; a full-length first draft from a weak
  // drafter costs k draft steps and a long pass for nothing). A plain step's cost cannot
  // be guessed from a long pass's: it is a small part of it where decode is bound by
  // memory, nearly proportional to the rows for a tiny model.
  if (verify_[1] < 0.0) return 0;
  if (draft_per_token_ < 0.0) return std::min(kmax, kFirstDraft);
  // While drafting, a plain step now and then keeps its cost measured (a plain round
  // loses nothing against plain decoding).
  if (drafting_rounds_ >= params_.probe_interval) {
    drafting_rounds_ = 0;
    return 0;
  }
  const double a = std::min(alpha(), 0.999);
  const double td = std::max(draft_per_token_, 0.0);
  // Drafting must beat a plain step by a margin (10%): the timings are noisy (other processes,
  // frequency changes), and a weak draft that wins by noise only costs passes.
  constexpr double kMargin = 1.1;
  int32_t best_k = 0;
  double best = -1.0;
  for (int32_t k = 0; k <= kmax; ++k) {
    const double v = verify_estimate(k + 1);
    if (v <= 0.0) continue;
    const double tokens = (1.0 - std::pow(a, k + 1)) / (1.0 - a);
    const double rate = tokens / (v + k * td) / (k > 0 ? kMargin : 1.0);
    if (rate > best) {
      best = rate;
      best_k = k;
    }
  }
  if (best_k == 0) {
    // Were every draft right, would drafting pay? If not (a draft about as costly as the
    // target, or passes that cost in proportion to their rows), probing is waste too.
    double ceiling = 0.0;
    for (int32_t k = 1; k <= kmax; ++k) {
      const double v = verify_estimate(k + 1);
      if (v > 0.0) ceiling = std::max(ceiling, (k + 1) / (v + k * td) / kMargin);
    }
    // A probe of one draft now and then; each one that does not turn the choice around
    // doubles the wait (up to 16 x probe_interval): a draft that does not pay costs
    // less and less. Where even perfect drafts would not pay on the current estimates,
    // the probes still come (at the longest wait): one slow measurement of the draft
    // (a page fault, a descheduled thread) must not end drafting for good.
    if (ceiling <= best) interval_ = params_.probe_interval * 16;
    if (++plain_rounds_ >= interval_) {
      plain_rounds_ = 0;
      if (probing_) interval_ = std::min(interval_ * 2, params_.probe_interval * 16);
      probing_ = true;
      return 1;
    }
    return 0;
  }
  plain_rounds_ = 0;
  probing_ = false;
  interval_ = params_.probe_interval;
  ++drafting_rounds_;
  return best_k;
}

void DraftLength::observe(int32_t asked, int32_t drafted, int32_t accepted, double draft_seconds,
                          double verify_seconds) {
  (void)asked;
  const double s = params_.smoothing;
  // Running means of timings, each sample clipped to [1/2, 2] x the mean so far: a pass
  // descheduled by another process must not decide the next hundred rounds.
  const auto update = [s](double& mean, double sample) {
    mean = mean < 0.0 ? sample : (1.0 - s) * mean + s * std::clamp(sample, 0.5 * mean, 2.0 * mean);
  };
  const auto n = static_cast<size_t>(std::min<int32_t>(drafted + 1, static_cast<int32_t>(verify_.size()) - 1));
  // The first pass of each size is not typical: the first after the prompt runs on cold
  // caches, and the first of several tokens sizes its buffers (logits of every row,
  // attention scratch). Counted, it could cost up to twice a later one, and a size the
  // choice then avoids would never be measured again.
  if (seen_[n]) {
    update(verify_[n], verify_seconds);
  } else {
    seen_[n] = true;
  }
  if (drafted == 0) return;
  // The first drafting round runs the draft on cold caches (and its first pass over the
  // weights): its time is not typical, and next() measures again while it is unknown.
  if (draft_warm_) update(draft_per_token_, draft_seconds / drafted);
  draft_warm_ = true;
  accepted_ = (1.0 - s) * accepted_ + accepted;
  rejected_ = (1.0 - s) * rejected_ + (accepted < drafted ? 1.0 : 0.0);
}

}  // namespace loom::runtime
