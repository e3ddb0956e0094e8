#include "runtime/draft_length.hpp"

#include <algorithm>
#include <cmath>

namespace loom::runtime {

void DraftLength::PassTimes::add(double s) {
  seconds[static_cast<size_t>(next)] = s;
  next = (next + 1) % kWindow;
  count = std::min(count + 1, kWindow);
}

double DraftLength::PassTimes::median() const {
  if (count == 0) return -1.0;
  // Insertion sort of at most kWindow values (std::sort over a prefix of a std::array
  // trips GCC 12's -Warray-bounds).
  std::array<double, kWindow> sorted{};
  for (int32_t i = 0; i < count; ++i) {
    int32_t j = i;
    for (; j > 0 && sorted[static_cast<size_t>(j - 1)] > seconds[static_cast<size_t>(i)]; --j) {
      sorted[static_cast<size_t>(j)] = sorted[static_cast<size_t>(j - 1)];
    }
    sorted[static_cast<size_t>(j)] = seconds[static_cast<size_t>(i)];
  }
  const auto mid = static_cast<size_t>(count / 2);
  return count % 2 == 1 ? sorted[mid] : 0.5 * (sorted[mid - 1] + sorted[mid]);
}

DraftLength::DraftLength(const SpeculativeParams& params)
    : params_(params),
      verify_(static_cast<size_t>(params.max_draft) + 2),
      seen_(verify_.size(), false),
      interval_(params.probe_interval) {}

double DraftLength::alpha() const noexcept { return accepted_ / (accepted_ + rejected_); }

// A size never measured: linear between the nearest measured ones, or beyond them the
// smallest slope between measured neighbours (with one size measured, 5% more per extra
// token, the order of what a memory-bound decode pays for a few more rows). Optimistic
// on purpose: a size the estimate prices out is never run, so never measured, and one
// slow pass of a short draft must not price out every longer one.
double DraftLength::verify_estimate(int32_t n) const {
  const auto at = [&](int32_t i) { return verify_[static_cast<size_t>(i)].median(); };
  if (n >= 1 && n < static_cast<int32_t>(verify_.size()) && at(n) >= 0.0) return at(n);
  int32_t lo = -1, hi = -1, prev = -1;
  double slope = -1.0;
  for (int32_t i = 1; i < static_cast<int32_t>(verify_.size()); ++i) {
    if (at(i) < 0.0) continue;
    if (prev >= 0) {
      const double s = std::max(0.0, (at(i) - at(prev)) / (i - prev));
      slope = slope < 0.0 ? s : std::min(slope, s);
    }
    prev = i;
    if (i < n) lo = i;
    if (i > n && hi < 0) hi = i;
  }
  if (prev < 0) return -1.0;
  if (lo >= 0 && hi >= 0) return at(lo) + (at(hi) - at(lo)) * (n - lo) / (hi - lo);
  const int32_t near = lo >= 0 ? lo : hi;
  if (slope < 0.0) slope = 0.05 * at(near);
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
  if (verify_[1].count == 0) return 0;
  if (draft_per_token_ < 0.0) return std::min(kmax, kFirstDraft);
  // While drafting, a plain step now and then keeps its cost measured. Rounds in which
  // the drafter had nothing to propose (prompt lookup without a match) measure it too.
  if (rounds_since_plain_ >= 4 * params_.probe_interval) return 0;
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
    // A probe of one draft now and then; each rejected one doubles the wait (up to 16 x
    // probe_interval): a draft that does not pay costs less and less, while accepted
    // probes keep coming at the same pace until the acceptance they raise turns the
    // choice. Where even perfect drafts would not pay on the current estimates,
    // the probes still come (at the longest wait): one slow measurement of the draft
    // (a page fault, a descheduled thread) must not end drafting for good. The wait is
    // in plain steps' worth of probe cost: a probe costs what its pass and its draft add
    // to a plain step, next to nothing for prompt lookup, a step or more for a draft
    // model, so cheap probes come often and probing costs about the same share of the
    // time for any drafter.
    if (ceiling <= best) interval_ = params_.probe_interval * 16;
    const double step = verify_estimate(1);
    const double probe_cost = std::clamp((verify_estimate(2) + td - step) / step, 0.0, 1.0);
    const auto wait = std::max<int32_t>(1, static_cast<int32_t>(std::ceil(interval_ * probe_cost)));
    if (++plain_rounds_ >= wait) {
      plain_rounds_ = 0;
      probing_ = true;
      return 1;
    }
    return 0;
  }
  plain_rounds_ = 0;
  probing_ = false;
  interval_ = params_.probe_interval;
  return best_k;
}

void DraftLength::observe(int32_t asked, int32_t drafted, int32_t accepted, double draft_seconds,
                          double verify_seconds) {
  (void)asked;
  const double s = params_.smoothing;
  const auto n = static_cast<size_t>(std::min<int32_t>(drafted + 1, static_cast<int32_t>(verify_.size()) - 1));
  // The first pass of each size is not typical: the first after the prompt runs on cold
  // caches, and the first of several tokens sizes its buffers (logits of every row,
  // attention scratch). Counted, it could cost up to twice a later one.
  if (seen_[n]) {
    verify_[n].add(verify_seconds);
  } else {
    seen_[n] = true;
  }
  rounds_since_plain_ = drafted == 0 ? 0 : rounds_since_plain_ + 1;
  if (drafted == 0) return;
  // The first drafting round runs the draft on cold caches (and its first pass over the
  // weights): its time is not typical, and next() measures again while it is unknown.
  // Running mean, each sample clipped to [1/2, 2] x the mean so far: a draft descheduled
  // by another process must not decide the next hundred rounds.
  const double per_token = draft_seconds / drafted;
  if (draft_warm_) {
    draft_per_token_ = draft_per_token_ < 0.0
                           ? per_token
                           : (1.0 - s) * draft_per_token_ +
                                 s * std::clamp(per_token, 0.5 * draft_per_token_, 2.0 * draft_per_token_);
  }
  draft_warm_ = true;
  if (probing_ && accepted < drafted) interval_ = std::min(interval_ * 2, params_.probe_interval * 16);
  probing_ = false;
  accepted_ = (1.0 - s) * accepted_ + accepted;
  rejected_ = (1.0 - s) * rejected_ + (accepted < drafted ? 1.0 : 0.0);
}

}  // namespace loom::runtime
