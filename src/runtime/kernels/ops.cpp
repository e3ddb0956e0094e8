#include "runtime/kernels/ops.hpp"

#include <algorithm>
#include <cmath>

#include "loom/cpu.hpp"

namespace loom::kernels {

// These loops are simple enough for the compiler to vectorize; they are a small part of
// the time next to the weight products. Sums accumulate in double where a long
// reduction would otherwise lose precision.

namespace {

// The sum of term(i) over [0, n) in double, as kLanes interleaved partial sums (term i
// into sum i % kLanes) added pairwise at the end: one fixed order on every ISA, which
// the compiler vectorizes (the lanes are independent chains). One running sum was a
// chain of dependent additions, about 4 cycles an element, and the norms run on the
// calling thread: 5% of a 128-token prefill of the small q6_k model at 2 threads.
template <class Term>
double lane_sum(int64_t n, Term&& term) {
  constexpr int kLanes = 16;
  double part[kLanes] = {};
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes) {
    for (int k = 0; k < kLanes; ++k) part[k] += term(i + k);
  }
  if (i < n) {
    for (int k = 0; k < kLanes; ++k) {
      if (i + k < n) part[k] += term(i + k);
    }
  }
  for (int width = kLanes / 2; width >= 1; width /= 2) {
    for (int k = 0; k < width; ++k) part[k] += part[k + width];
  }
  return part[0];
}

}  // namespace

void rms_norm(const float* x, const float* weight, float eps, float* out, int64_t n) {
  const double sum = lane_sum(n, [x](int64_t i) { return static_cast<double>(x[i]) * x[i]; });
  const auto scale = static_cast<float>(1.0 / std::sqrt(sum / static_cast<double>(n) + eps));
  for (int64_t i = 0; i < n; ++i) out[i] = x[i] * scale * weight[i];
}

void layer_norm(const float* x, const float* weight, const float* bias, float eps, float* out,
                int64_t n) {
  const double mean = lane_sum(n, [x](int64_t i) { return static_cast<double>(x[i]); }) / static_cast<double>(n);
  const double var = lane_sum(n, [x, mean](int64_t i) {
                       const double d = x[i] - mean;
                       return d * d;
                     }) /
                     static_cast<double>(n);
  const double inv = 1.0 / std::sqrt(var + eps);
  for (int64_t i = 0; i < n; ++i) {
    out[i] = static_cast<float>((x[i] - mean) * inv) * weight[i] + (bias ? bias[i] : 0.0f);
  }
}

void softmax(float* x, int64_t n) {
  if (n <= 0) return;
  const float max = *std::max_element(x, x + n);
  double sum = 0.0;
  for (int64_t i = 0; i < n; ++i) {
    x[i] = std::exp(x[i] - max);
    sum += x[i];
  }
  const auto inv = static_cast<float>(1.0 / sum);
  for (int64_t i = 0; i < n; ++i) x[i] *= inv;
}

void silu_mul(float* gate, const float* up, int64_t n) {
  if (active_isa() != Isa::scalar) return silu_mul_avx2(gate, up, n);
  for (int64_t i = 0; i < n; ++i) {
    const float g = gate[i];
    gate[i] = g / (1.0f + std::exp(-g)) * up[i];
  }
}

void gelu_tanh(float* x, int64_t n) {
  constexpr float kSqrt2OverPi = 0.7978845608028654f;
  for (int64_t i = 0; i < n; ++i) {
    const float v = x[i];
    x[i] = 0.5f * v * (1.0f + std::tanh(kSqrt2OverPi * (v + 0.044715f * v * v * v)));
  }
}

void gelu_erf(float* x, int64_t n) {
  constexpr float kInvSqrt2 = 0.70710678118654752f;
  for (int64_t i = 0; i < n; ++i) {
    const float v = x[i];
    x[i] = 0.5f * v * (1.0f + std::erf(v * kInvSqrt2));
  }
}

namespace {

void silu(float* x, int64_t n) {
  for (int64_t i = 0; i < n; ++i) x[i] = x[i] / (1.0f + std::exp(-x[i]));
}

// One row per Activation, in enum order (checked below).
struct ActivationKernel {
  Activation id;
  void (*apply)(float*, int64_t);
};
constexpr ActivationKernel kActivations[] = {
    {Activation::silu, silu},
    {Activation::gelu_tanh, gelu_tanh},
    {Activation::gelu_erf, gelu_erf},
};
constexpr bool in_enum_order() {
  for (size_t i = 0; i < std::size(kActivations); ++i) {
    if (static_cast<size_t>(kActivations[i].id) != i) return false;
  }
  return true;
}
static_assert(in_enum_order(), "kActivations must list every Activation in enum order");

}  // namespace

void activate(Activation act, float* x, int64_t n) { kActivations[static_cast<size_t>(act)].apply(x, n); }

void activate_mul(Activation act, float* gate, const float* up, int64_t n) {
  if (act == Activation::silu) return silu_mul(gate, up, n);
  activate(act, gate, n);
  for (int64_t i = 0; i < n; ++i) gate[i] *= up[i];
}

void softcap(float* x, int64_t n, float cap) {
  for (int64_t i = 0; i < n; ++i) x[i] = cap * std::tanh(x[i] / cap);
}

void scale_inplace(float* x, int64_t n, float s) {
  for (int64_t i = 0; i < n; ++i) x[i] *= s;
}

void add_inplace(float* y, const float* x, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] += x[i];
}

float dot(const float* a, const float* b, int64_t n) {
  float acc = 0.0f;
  for (int64_t i = 0; i < n; ++i) acc += a[i] * b[i];
  return acc;
}

void axpy(float a, const float* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] += a * x[i];
}

void rope_half(float* v, const float* cos, const float* sin, int64_t rot_dims) {
  const int64_t half = rot_dims / 2;
  for (int64_t i = 0; i < half; ++i) {
    const float a = v[i];
    const float b = v[i + half];
    v[i] = a * cos[i] - b * sin[i];
    v[i + half] = b * cos[i] + a * sin[i];
  }
}

void rope_interleaved(float* v, const float* cos, const float* sin, int64_t rot_dims) {
  const int64_t half = rot_dims / 2;
  for (int64_t i = 0; i < half; ++i) {
    const float a = v[2 * i];
    const float b = v[2 * i + 1];
    v[2 * i] = a * cos[i] - b * sin[i];
    v[2 * i + 1] = b * cos[i] + a * sin[i];
  }
}

}  // namespace loom::kernels
