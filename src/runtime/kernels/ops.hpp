// Internal: the element-wise and row-wise operations of the forward pass. Activations
// are f32; weights of norms and biases are f32 (the loader widens them).
#pragma once

#include <cstdint>
#include <span>

#include "loom/config.hpp"

namespace loom::kernels {

// out = x / sqrt(mean(x^2) + eps) * weight   (eps inside the square root)
void rms_norm(const float* x, const float* weight, float eps, float* out, int64_t n);
// out = (x - mean) / sqrt(var + eps) * weight + bias
void layer_norm(const float* x, const float* weight, const float* bias, float eps, float* out,
                int64_t n);
// In place, numerically stable (max subtracted first).
void softmax(float* x, int64_t n);
// gate[i] = silu(gate[i]) * up[i] (AVX2 and up: silu_mul_avx2, its vector exp within
// 2 ulp of libm's; the same bits for an element wherever it falls in the array)
void silu_mul(float* gate, const float* up, int64_t n);
void silu_mul_avx2(float* gate, const float* up, int64_t n);
// x[i] = 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))   (GPT-2's "gelu_new")
void gelu_tanh(float* x, int64_t n);
// x[i] = 0.5 x (1 + erf(x / sqrt(2)))   (PyTorch's exact GELU, HF "gelu")
void gelu_erf(float* x, int64_t n);
// x[i] = act(x[i]), the function ModelConfig's activation names (one table row each).
void activate(Activation act, float* x, int64_t n);
// gate[i] = act(gate[i]) * up[i]; for silu exactly silu_mul.
void activate_mul(Activation act, float* gate, const float* up, int64_t n);
// x[i] = cap * tanh(x[i] / cap)   (Gemma 2's logit soft-capping)
void softcap(float* x, int64_t n, float cap);
// x[i] *= s
void scale_inplace(float* x, int64_t n, float s);
// y[i] += x[i]
void add_inplace(float* y, const float* x, int64_t n);
float dot(const float* a, const float* b, int64_t n);
// y[i] += a * x[i]
void axpy(float a, const float* x, float* y, int64_t n);

// Rotary position embedding of one head vector `v` (head_dim long; the first
// `rot_dims` are rotated). cos/sin hold rot_dims/2 entries for this position.
// Half style (HF rotate_half): pairs (i, i + rot_dims/2). Interleaved (GGUF llama):
// pairs (2i, 2i+1).
void rope_half(float* v, const float* cos, const float* sin, int64_t rot_dims);
void rope_interleaved(float* v, const float* cos, const float* sin, int64_t rot_dims);

}  // namespace loom::kernels
