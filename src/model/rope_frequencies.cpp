// RoPE's per-pair frequencies with the config's scaling: the one place the scaling
// formulas live (the forward pass rotates with them; the GGUF exporter writes Llama 3's
// as rope_freqs factors).
#include "model/rope_frequencies.hpp"

#include <cmath>
#include <numbers>

namespace loom::rope {

// Rotary frequencies (one per rotated pair), with the config's scaling applied.
std::vector<double> inverse_frequencies(const ModelConfig& c, int64_t context_length) {
  const int64_t half = c.rope_dims / 2;
  std::vector<double> inv(static_cast<size_t>(half));
  for (int64_t i = 0; i < half; ++i) {
    inv[static_cast<size_t>(i)] =
        1.0 / std::pow(c.rope_theta, static_cast<double>(2 * i) / static_cast<double>(c.rope_dims));
  }
  const RopeScaling& rs = c.rope_scaling;
  switch (rs.kind) {
    case RopeScalingKind::none: break;
    case RopeScalingKind::linear:
      for (auto& f : inv) f /= rs.factor;
      break;
    case RopeScalingKind::llama3: {
      // Llama 3.1: long wavelengths are slowed by `factor`, short ones kept, and the
      // band between blended smoothly.
      const double orig = static_cast<double>(rs.original_max_positions);
      const double low_wavelen = orig / rs.low_freq_factor;
      const double high_wavelen = orig / rs.high_freq_factor;
      for (auto& f : inv) {
        const double wavelen = 2.0 * std::numbers::pi / f;
        if (wavelen < high_wavelen) continue;
        if (wavelen > low_wavelen) {
          f /= rs.factor;
          continue;
        }
        const double smooth =
            (orig / wavelen - rs.low_freq_factor) / (rs.high_freq_factor - rs.low_freq_factor);
        f = (1.0 - smooth) * f / rs.factor + smooth * f;
      }
      break;
    }
    case RopeScalingKind::longrope: {
      // Phi-3 LongRoPE: per-frequency divisors, the long set when the session's context
      // exceeds the original training length (llama.cpp's static choice).
      const auto& factors =
          context_length > rs.original_max_positions ? rs.long_factor : rs.short_factor;
      for (size_t i = 0; i < inv.size(); ++i) inv[i] /= factors[i];
      break;
    }
  }
  return inv;
}

// LongRoPE scales cos/sin by this "attention factor" when the model was extended.
double magnitude(const ModelConfig& c) {
  if (c.rope_scaling.kind != RopeScalingKind::longrope) return 1.0;
  const double scale = static_cast<double>(c.max_positions) /
                       static_cast<double>(c.rope_scaling.original_max_positions);
  if (scale <= 1.0) return 1.0;
  return std::sqrt(1.0 + std::log(scale) / std::log(static_cast<double>(c.rope_scaling.original_max_positions)));
}

std::vector<double> scaling_divisors(const ModelConfig& c) {
  ModelConfig unscaled = c;
  unscaled.rope_scaling = RopeScaling{};
  const auto plain = inverse_frequencies(unscaled, 0);
  const auto scaled = inverse_frequencies(c, 0);
  std::vector<double> out(plain.size());
  for (size_t i = 0; i < plain.size(); ++i) out[i] = plain[i] / scaled[i];
  return out;
}

}  // namespace loom::rope
