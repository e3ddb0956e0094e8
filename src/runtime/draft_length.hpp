// Internal: the adaptive draft length of speculative decoding. Each round it picks the k
// (0..max_draft) that maximizes expected tokens per second,
//   E(alpha, k) / (verify(1 + k) + k * draft_per_token),
// with E(alpha, k) = (1 - alpha^(k+1)) / (1 - alpha) the expected tokens of a round, from
// running estimates: the per-token acceptance alpha (accepted drafts over accepted drafts
// plus rejections, the maximum-likelihood estimate of a geometric run), the time of a
// verification pass of each size, and the draft's time per drafted token. k = 0 is a
// plain decode step: when drafting does not pay the rounds fall back to plain decoding,
// with a probe of one draft after probe_interval rounds so a change is noticed (the
// wait doubling after each probe that changes nothing, up to 16 x probe_interval; at
// once where even perfect drafts would not pay, but the probes never stop: one slow
// measurement must not end drafting for good). The first drafting round's draft time and
// the first pass of each size are not counted (cold caches, first-use buffers).
#pragma once

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

 private:
  double verify_estimate(int32_t n) const;
  static constexpr int32_t kFirstDraft = 2;  // the measuring draft's length

  SpeculativeParams params_;
  double accepted_ = 1.0;  // decayed counts; the prior is alpha = 0.5
  double rejected_ = 1.0;
  std::vector<double> verify_;  // [n]: running mean seconds of a pass of n tokens, < 0 unknown
  std::vector<bool> seen_;       // [n]: a pass of n tokens ran (the first one is not counted)
  double draft_per_token_ = -1.0;
  int32_t plain_rounds_ = 0;
  int32_t interval_;      // plain rounds before the next probe
  bool probing_ = false;  // the last non-plain round was a probe
  int32_t drafting_rounds_ = 0;  // drafting rounds since the last plain one
  bool draft_warm_ = false;      // the first drafting round was seen (its time not counted)
};

}  // namespace loom::runtime
