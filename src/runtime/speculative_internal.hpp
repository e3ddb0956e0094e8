// Internal to speculative decoding: the draws, shared by the verification loop and the
// model drafter so both pick a token from a distribution exactly as Sampler::sample does.
#pragma once

#include <cstdint>

#include "loom/sampler.hpp"

namespace loom::runtime {

// A token drawn from a normalized candidate list (one uniform from `rng`; the last
// candidate when rounding leaves the cumulative sum a hair under u).
inline int32_t draw(const CandidateList& list, Rng& rng) {
  const double u = rng.next_double();
  double cum = 0.0;
  for (const auto& c : list.items) {
    cum += c.p;
    if (u < cum) return c.id;
  }
  return list.items.back().id;
}

}  // namespace loom::runtime
