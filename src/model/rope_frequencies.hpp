// Internal: RoPE frequencies from a ModelConfig (theta, rotated dimensions, scaling).
// Pure functions; any thread.
#pragma once

#include <cstdint>
#include <vector>

#include "loom/config.hpp"

namespace loom::rope {

// One inverse frequency per rotated pair (rope_dims / 2), the config's scaling applied.
// LongRoPE picks its long factors when `context_length` exceeds the original length.
std::vector<double> inverse_frequencies(const ModelConfig& config, int64_t context_length);
// LongRoPE's attention factor that scales cos/sin when the model was extended; else 1.
double magnitude(const ModelConfig& config);
// What each unscaled frequency is divided by under the config's scaling (llama.cpp's
// rope_freqs factors for Llama 3).
std::vector<double> scaling_divisors(const ModelConfig& config);

}  // namespace loom::rope
