// Internal: the adaptive draft length of speculative decoding. Each round it picks the k
// (0..max_draft) that maximizes expected tokens per second,
//   E(alpha, k) / (verify(1 + k) + k * draft_per_token),
// with E(alpha, k) = (1 - alpha^(k+1)) / (1 - alpha) the expected tokens of a round, from
// estimates: the per-token acceptance alpha (decayed accepted drafts over accepted drafts
// plus rejections, the maximum-likelihood estimate of a geometric run), the time of a
// verification pass of each size (the median of its last kWindow passes; sizes not yet
// run are interpolated, or extrapolated with the smallest measured slope, so that a
// longer draft gets tried), and the draft's running time per drafted token. k = 0 is a
// plain decode step: when drafting does not pay the rounds fall back to plain decoding,
// with a probe of one draft now and then so a change is noticed. The wait before a probe
// is probe_interval rounds scaled by what a probe costs in plain steps (a free drafter
// such as prompt lookup probes almost every round, a draft model as costly as a step
// every probe_interval), doubling after each rejected probe, up to 16 x; at
// once where even perfect drafts would not pay, but the probes never stop: one slow
// measurement must not end drafting for good. The first drafting round's draft time and
// the first pass of each size are not counted (cold caches, first-use buffers).
#pragma once

#include <array>
#include <cstdint>
#include <vector>

#include "loom/speculative.hpp"

namespace loom::runtime {

class DraftLength {
 public:
  explicit DraftLength(const SpeculativeParams& params);
  int32_t next();
  // One round: `drafted` tokens proposed (of `asked`), `accepted` kept; the drafter's and
  // the verification pass's seconds (a pass of 1 + drafted tokens).
  void observe(int32_t asked, int32_t drafted, int32_t accepted, double draft_seconds, double verify_seconds);
  double alpha() const noexcept;
  // The estimated seconds of a verification pass of n tokens (< 0: nothing measured yet).
  double verify_estimate(int32_t n) const;

  static constexpr int kWindow = 8;  // passes of a size whose median is its cost

 private:
  // The last kWindow counted times of passes of one size.
  struct PassTimes {
    std::array<double, kWindow> seconds{};
    int32_t count = 0;  // samples held, at most kWindow
    int32_t next = 0;   // where the next one goes
    void add(double s);
    double median() const;  // < 0 when empty
  };
  static constexpr int32_t kFirstDraft = 2;  // the measuring draft's length

  SpeculativeParams params_;
  double accepted_ = 1.0;  // decayed counts; the prior is alpha = 0.5
  double rejected_ = 1.0;
  std::vector<PassTimes> verify_;  // [n]: passes of n tokens
  std::vector<bool> seen_;         // [n]: a pass of n tokens ran (the first one is not counted)
  double draft_per_token_ = -1.0;
  int32_t plain_rounds_ = 0;
  int32_t interval_;      // plain rounds before the next probe, for a probe costing a step
  bool probing_ = false;  // the round in flight is a probe
  int32_t rounds_since_plain_ = 0;  // rounds since the last pass of one token
  bool draft_warm_ = false;         // the first drafting round was seen (its time not counted)
};

}  // namespace loom::runtime
