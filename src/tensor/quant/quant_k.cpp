// Codecs of the k-quants (256-element super-blocks): q2_k, q3_k, q4_k, q5_k, q6_k, and
// the activation type q8_k.
//
// A super-block has one or two f16 scales (d, and dmin for the types with an offset)
// and small integer scales per group of 16 or 32 elements, so the effective scale of a
// group is d * sc. Dequantization evaluates ggml's f32 expressions in ggml's order and
// is bit-identical to dequantize_row_*.
//
// The quantizers follow ggml's reference quantizers (quantize_row_*_ref) step for step:
//   * q4_k / q5_k / q2_k fit a scale and a min per group by weighted least squares over
//     a small sweep of candidate scales (fit_scale_and_min), then quantize the group
//     scales and mins to 6 (or 4) bits against the super-block's largest, and finally
//     re-round every element against the scale and min it will actually be decoded with;
//   * q6_k / q3_k fit a symmetric scale per group of 16 (fit_symmetric_scale: an
//     x^2-weighted least-squares refinement of the max-abs scale), quantize the group
//     scales to 8 (or 6) bits, and re-round the elements the same way.
// Keeping the same float operations in the same order keeps loom's output identical to
// llama.cpp's: tests/tensor/quant_reference_test.cpp checks that every block of
// llama-quantize's q4_k / q6_k (and q8_0 / q4_0) files is reproduced byte for byte.
//
// The quantizers must round exactly like ggml's reference C code, which evaluates every
// multiply and add separately; a compiler that fuses them into FMAs (GCC does by default
// for C++) moves some values across a rounding boundary and changes a few percent of the
// blocks. So contraction is off for this file, whatever the build flags.
#if defined(__clang__)
#pragma clang fp contract(off)
#elif defined(__GNUC__)
#pragma GCC optimize("fp-contract=off")
#endif

#include <algorithm>
#include <cmath>
#include <cstring>

#include "loom/cpu.hpp"
#include "tensor/quant/blocks.hpp"
#include "tensor/quant/quant_formats.hpp"

namespace loom::quant::codec {

namespace {

constexpr float kGroupMaxEps = 1e-15f;  // groups whose largest |x| is below this are zero

// The element of largest magnitude (the first of equals), with its sign: ggml's
// symmetric fits map it onto the most negative level.
float largest_magnitude(const float* x, int n) {
  float max = 0;
  float amax = 0;
  for (int i = 0; i < n; ++i) {
    const float ax = std::fabs(x[i]);
    if (ax > amax) {
      amax = ax;
      max = x[i];
    }
  }
  return max;
}

// ---- scale searches ----

// Fits x ~= scale * L - min_out (L in [0, nmax], min_out >= 0) minimising the weighted
// squared (or absolute, use_mad) error. Starts from the min/max mapping, then tries
// nstep + 1 candidate inverse scales (nmax + rmin + rdelta * i) / (max - min), each
// followed by a closed-form least-squares solve for scale and min given its levels.
float fit_scale_and_min(int n, int nmax, const float* x, const float* w, uint8_t* L, float* min_out,
                        uint8_t* Laux, float rmin, float rdelta, int nstep, bool use_mad) {
  float min = x[0];
  float max = x[0];
  float sum_w = w[0];
  float sum_x = sum_w * x[0];
  for (int i = 1; i < n; ++i) {
    if (x[i] < min) min = x[i];
    if (x[i] > max) max = x[i];
    sum_w += w[i];
    sum_x += w[i] * x[i];
  }
  if (min > 0) min = 0;
  if (max == min) {
    std::memset(L, 0, static_cast<size_t>(n));
    *min_out = -min;
    return 0.0f;
  }
  float iscale = static_cast<float>(nmax) / (max - min);
  float scale = 1.0f / iscale;
  float best_error = 0;
  for (int i = 0; i < n; ++i) {
    const int l = nearest_int(iscale * (x[i] - min));
    L[i] = static_cast<uint8_t>(std::clamp(l, 0, nmax));
    float diff = scale * static_cast<float>(L[i]) + min - x[i];
    diff = use_mad ? std::fabs(diff) : diff * diff;
    best_error += w[i] * diff;
  }
  if (nstep < 1) {
    *min_out = -min;
    return scale;
  }
  // Step `step`'s inverse scale, from the min as it stands (the sweep moves it).
  const auto iscale_at = [&](int step) {
    return (rmin + rdelta * static_cast<float>(step) + static_cast<float>(nmax)) / (max - min);
  };
  if (active_isa() >= Isa::avx512 && n <= kSweepMaxItems) {
    // The same sweep, a candidate a lane (quant_x86.cpp): from each step that beats the
    // best, its levels with the min before it, then the next sweep from the step after.
    const SweepInputs in{n, nmax, x, w, max, sum_w, sum_x, rmin, rdelta, nstep, use_mad};
    for (SweepStep s = sweep_scale_and_min_avx512(in, 0, min, best_error); s.step >= 0;
         s = sweep_scale_and_min_avx512(in, s.step + 1, min, best_error)) {
      const float iscale_kept = iscale_at(s.step);
      for (int i = 0; i < n; ++i) {
        L[i] = static_cast<uint8_t>(std::clamp(nearest_int(iscale_kept * (x[i] - min)), 0, nmax));
      }
      best_error = s.error;
      scale = s.scale;
      min = s.min;
    }
    *min_out = -min;
    return scale;
  }
  for (int step = 0; step <= nstep; ++step) {
    iscale = iscale_at(step);
    float sum_l = 0;
    float sum_l2 = 0;
    float sum_xl = 0;
    for (int i = 0; i < n; ++i) {
      const int l = std::clamp(nearest_int(iscale * (x[i] - min)), 0, nmax);
      Laux[i] = static_cast<uint8_t>(l);
      const float fl = static_cast<float>(l);
      sum_l += w[i] * fl;
      sum_l2 += w[i] * fl * fl;
      sum_xl += w[i] * fl * x[i];
    }
    const float det = sum_w * sum_l2 - sum_l * sum_l;
    if (det > 0) {
      float this_scale = (sum_w * sum_xl - sum_x * sum_l) / det;
      float this_min = (sum_l2 * sum_x - sum_l * sum_xl) / det;
      if (this_min > 0) {
        this_min = 0;
        this_scale = sum_xl / sum_l2;
      }
      float error = 0;
      for (int i = 0; i < n; ++i) {
        float diff = this_scale * static_cast<float>(Laux[i]) + this_min - x[i];
        diff = use_mad ? std::fabs(diff) : diff * diff;
        error += w[i] * diff;
      }
      if (error < best_error) {
        std::memcpy(L, Laux, static_cast<size_t>(n));
        best_error = error;
        scale = this_scale;
        min = this_min;
      }
    }
  }
  *min_out = -min;
  return scale;
}

// Fits x ~= scale * (L - nmax), L in [0, 2 nmax - 1], weighting each element by x^2:
// the max-abs scale (largest-magnitude value onto -nmax) and 18 nearby ones, each
// followed by the least-squares scale for its levels; returns the best scale.
float fit_symmetric_scale(int n, int nmax, const float* x, int8_t* L) {
  const float max = largest_magnitude(x, n);
  if (std::fabs(max) < kGroupMaxEps) {
    std::memset(L, 0, static_cast<size_t>(n));
    return 0.0f;
  }
  const auto levels_for = [&](float iscale, bool store, float* sumlx_out, float* suml2_out) {
    float sumlx = 0;
    float suml2 = 0;
    for (int i = 0; i < n; ++i) {
      const int l = std::clamp(nearest_int(iscale * x[i]), -nmax, nmax - 1);
      if (store) L[i] = static_cast<int8_t>(l + nmax);
      const float w = x[i] * x[i];
      const float fl = static_cast<float>(l);
      sumlx += w * x[i] * fl;
      suml2 += w * fl * fl;
    }
    *sumlx_out = sumlx;
    *suml2_out = suml2;
  };
  float sumlx = 0;
  float suml2 = 0;
  levels_for(static_cast<float>(-nmax) / max, true, &sumlx, &suml2);
  float scale = suml2 != 0.0f ? sumlx / suml2 : 0.0f;
  float best = scale * sumlx;
  const auto iscale_of = [&](int step) { return -(static_cast<float>(nmax) + 0.1f * static_cast<float>(step)) / max; };
  if (active_isa() >= Isa::avx512) {
    // Every candidate's sums at once (quant_x86.cpp, the same floats), then the same
    // scan: the levels of the last candidate kept.
    float lx[kSymmetricCandidates], l2[kSymmetricCandidates];
    symmetric_sums_avx512(n, nmax, x, max, lx, l2);
    int kept = 0;
    for (int k = 0; k < kSymmetricCandidates; ++k) {
      if (l2[k] > 0 && lx[k] * lx[k] > best * l2[k]) {
        scale = lx[k] / l2[k];
        best = scale * lx[k];
        kept = kSymmetricSteps[k];
      }
    }
    if (kept != 0) levels_for(iscale_of(kept), true, &sumlx, &suml2);
    return scale;
  }
  for (const int step : kSymmetricSteps) {
    const float iscale = iscale_of(step);
    levels_for(iscale, false, &sumlx, &suml2);
    if (suml2 > 0 && sumlx * sumlx > best * suml2) {
      levels_for(iscale, true, &sumlx, &suml2);
      scale = sumlx / suml2;
      best = scale * sumlx;
    }
  }
  return scale;
}

// q3_k's group fit: the max-abs scale, then up to five passes that move single
// elements to the level that most improves the x^2-weighted least-squares fit.
// L receives levels in [0, 2 nmax - 1] (bias nmax).
float fit_q3_scale(int n, int nmax, const float* x, int8_t* L) {
  const float max = largest_magnitude(x, n);
  if (std::fabs(max) < kGroupMaxEps) {
    std::memset(L, 0, static_cast<size_t>(n));
    return 0.0f;
  }
  const float iscale = static_cast<float>(-nmax) / max;
  float sumlx = 0;
  float suml2 = 0;
  for (int i = 0; i < n; ++i) {
    const int l = std::clamp(nearest_int(iscale * x[i]), -nmax, nmax - 1);
    L[i] = static_cast<int8_t>(l);
    const float w = x[i] * x[i];
    sumlx += w * x[i] * static_cast<float>(l);
    suml2 += w * static_cast<float>(l) * static_cast<float>(l);
  }
  for (int pass = 0; pass < 5; ++pass) {
    int changed = 0;
    for (int i = 0; i < n; ++i) {
      const float w = x[i] * x[i];
      const auto li = static_cast<float>(L[i]);
      float slx = sumlx - w * x[i] * li;
      if (slx > 0) {
        float sl2 = suml2 - w * li * li;
        const int new_l = std::clamp(nearest_int(x[i] * sl2 / slx), -nmax, nmax - 1);
        if (new_l != L[i]) {
          const auto fl = static_cast<float>(new_l);
          slx += w * x[i] * fl;
          sl2 += w * fl * fl;
          if (sl2 > 0 && slx * slx * suml2 > sumlx * sumlx * sl2) {
            L[i] = static_cast<int8_t>(new_l);
            sumlx = slx;
            suml2 = sl2;
            ++changed;
          }
        }
      }
    }
    if (changed == 0) break;
  }
  for (int i = 0; i < n; ++i) L[i] = static_cast<int8_t>(L[i] + nmax);
  return suml2 > 0.0f ? sumlx / suml2 : 0.0f;
}

// Packs 256 two-bit levels the way q2_k and q3_k store them: byte i of each 32-byte
// chunk c holds elements 128c + i, +32, +64, +96 at bits 0, 2, 4, 6.
void pack_2bit(const uint8_t* L, uint8_t* qs) {
  for (int c = 0; c < 2; ++c) {
    for (int i = 0; i < 32; ++i) {
      const uint8_t* l = L + 128 * c + i;
      qs[32 * c + i] = static_cast<uint8_t>(l[0] | (l[32] << 2) | (l[64] << 4) | (l[96] << 6));
    }
  }
}

// q4_k and q5_k share everything but the level count (15 or 31) and the sweep.
void quantize_k_with_min(const float* x, uint8_t* L, int nmax, float rmin, int nstep,
                         uint8_t* scales_out, uint8_t* d_out, uint8_t* dmin_out) {
  uint8_t Laux[32];
  float weights[32];
  float mins[8];
  float scales[8];
  float max_scale = 0;
  float max_min = 0;
  for (int j = 0; j < 8; ++j) {
    const float* xg = x + 32 * j;
    float sum_x2 = 0;
    for (int l = 0; l < 32; ++l) sum_x2 += xg[l] * xg[l];
    const float av_x = std::sqrt(sum_x2 / 32);
    for (int l = 0; l < 32; ++l) weights[l] = av_x + std::fabs(xg[l]);
    scales[j] = fit_scale_and_min(32, nmax, xg, weights, L + 32 * j, &mins[j], Laux, rmin, 0.1f,
                                  nstep, false);
    max_scale = std::max(max_scale, scales[j]);
    max_min = std::max(max_min, mins[j]);
  }
  const float inv_scale = max_scale > 0 ? 63.f / max_scale : 0.f;
  const float inv_min = max_min > 0 ? 63.f / max_min : 0.f;
  uint8_t ls[8];
  uint8_t lm[8];
  for (int j = 0; j < 8; ++j) {
    ls[j] = static_cast<uint8_t>(std::min(63, nearest_int(inv_scale * scales[j])));
    lm[j] = static_cast<uint8_t>(std::min(63, nearest_int(inv_min * mins[j])));
  }
  k4_store_scales_mins(ls, lm, scales_out);
  store_f16(d_out, max_scale / 63.f);
  store_f16(dmin_out, max_min / 63.f);
  const float d_all = load_f16(d_out);
  const float dmin_all = load_f16(dmin_out);
  for (int j = 0; j < 8; ++j) {
    uint8_t sc = 0;
    uint8_t m = 0;
    k4_scale_min(scales_out, j, &sc, &m);
    const float d = d_all * static_cast<float>(sc);
    if (d == 0.0f) continue;
    const float dm = dmin_all * static_cast<float>(m);
    for (int i = 0; i < 32; ++i) {
      const int l = nearest_int((x[32 * j + i] + dm) / d);
      L[32 * j + i] = static_cast<uint8_t>(std::clamp(l, 0, nmax));
    }
  }
}

}  // namespace

// ---- dequantization ----

void dequantize_q2_k(const uint8_t* src, float* dst, size_t blocks) {
  for (size_t b = 0; b < blocks; ++b, src += sizeof(BlockQ2K)) {
    const float d = load_f16(src + off::q2_k_d);
    const float dmin = load_f16(src + off::q2_k_dmin);
    const uint8_t* scales = src + off::q2_k_scales;
    const uint8_t* q = src + off::q2_k_qs;
    int group = 0;
    for (int chunk = 0; chunk < 2; ++chunk, q += 32) {
      for (int shift = 0; shift < 8; shift += 2) {
        for (int half = 0; half < 2; ++half, ++group) {
          const float dl = d * static_cast<float>(scales[group] & 0xF);
          const float ml = dmin * static_cast<float>(scales[group] >> 4);
          for (int l = 0; l < 16; ++l) {
            *dst++ = dl * static_cast<float>((q[16 * half + l] >> shift) & 3) - ml;
          }
        }
      }
    }
  }
}

void dequantize_q3_k(const uint8_t* src, float* dst, size_t blocks) {
  for (size_t b = 0; b < blocks; ++b, src += sizeof(BlockQ3K)) {
    const float d_all = load_f16(src + off::q3_k_d);
    const uint8_t* scales = src + off::q3_k_scales;
    const uint8_t* hmask = src + off::q3_k_hmask;
    const uint8_t* q = src + off::q3_k_qs;
    int group = 0;
    int hbit = 0;
    for (int chunk = 0; chunk < 2; ++chunk, q += 32) {
      for (int shift = 0; shift < 8; shift += 2, ++hbit) {
        for (int half = 0; half < 2; ++half, ++group) {
          const float dl = d_all * static_cast<float>(q3k_scale(scales, group));
          for (int l = 0; l < 16; ++l) {
            const int i = 16 * half + l;
            const int level = ((q[i] >> shift) & 3) - (((hmask[i] >> hbit) & 1) ? 0 : 4);
            *dst++ = dl * static_cast<float>(level);
          }
        }
      }
    }
  }
}

void dequantize_q4_k(const uint8_t* src, float* dst, size_t blocks) {
  for (size_t b = 0; b < blocks; ++b, src += sizeof(BlockQ4K)) {
    const float d = load_f16(src + off::q4_k_d);
    const float dmin = load_f16(src + off::q4_k_dmin);
    const uint8_t* scales = src + off::q4_k_scales;
    const uint8_t* q = src + off::q4_k_qs;
    for (int pair = 0; pair < 4; ++pair, q += 32) {
      for (int half = 0; half < 2; ++half) {
        uint8_t sc = 0;
        uint8_t m = 0;
        k4_scale_min(scales, 2 * pair + half, &sc, &m);
        const float dl = d * static_cast<float>(sc);
        const float ml = dmin * static_cast<float>(m);
        const int shift = 4 * half;
        for (int l = 0; l < 32; ++l) {
          *dst++ = dl * static_cast<float>((q[l] >> shift) & 0xF) - ml;
        }
      }
    }
  }
}

void dequantize_q5_k(const uint8_t* src, float* dst, size_t blocks) {
  for (size_t b = 0; b < blocks; ++b, src += sizeof(BlockQ5K)) {
    const float d = load_f16(src + off::q5_k_d);
    const float dmin = load_f16(src + off::q5_k_dmin);
    const uint8_t* scales = src + off::q5_k_scales;
    const uint8_t* qh = src + off::q5_k_qh;
    const uint8_t* q = src + off::q5_k_qs;
    for (int pair = 0; pair < 4; ++pair, q += 32) {
      for (int half = 0; half < 2; ++half) {
        const int group = 2 * pair + half;
        uint8_t sc = 0;
        uint8_t m = 0;
        k4_scale_min(scales, group, &sc, &m);
        const float dl = d * static_cast<float>(sc);
        const float ml = dmin * static_cast<float>(m);
        const int shift = 4 * half;
        for (int l = 0; l < 32; ++l) {
          const int level = ((q[l] >> shift) & 0xF) + (((qh[l] >> group) & 1) << 4);
          *dst++ = dl * static_cast<float>(level) - ml;
        }
      }
    }
  }
}

void dequantize_q6_k(const uint8_t* src, float* dst, size_t blocks) {
  for (size_t b = 0; b < blocks; ++b, src += sizeof(BlockQ6K)) {
    const float d = load_f16(src + off::q6_k_d);
    const uint8_t* ql = src + off::q6_k_ql;
    const uint8_t* qh = src + off::q6_k_qh;
    const auto* sc = reinterpret_cast<const int8_t*>(src + off::q6_k_scales);
    for (int chunk = 0; chunk < 2; ++chunk, ql += 64, qh += 32, sc += 8, dst += 128) {
      for (int l = 0; l < 32; ++l) {
        const int g = l / 16;
        const int q1 = ((ql[l] & 0xF) | (((qh[l] >> 0) & 3) << 4)) - 32;
        const int q2 = ((ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4)) - 32;
        const int q3 = ((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
        const int q4 = ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
        dst[l + 0] = d * static_cast<float>(sc[g + 0]) * static_cast<float>(q1);
        dst[l + 32] = d * static_cast<float>(sc[g + 2]) * static_cast<float>(q2);
        dst[l + 64] = d * static_cast<float>(sc[g + 4]) * static_cast<float>(q3);
        dst[l + 96] = d * static_cast<float>(sc[g + 6]) * static_cast<float>(q4);
      }
    }
  }
}

void dequantize_q8_k(const uint8_t* src, float* dst, size_t blocks) {
  for (size_t b = 0; b < blocks; ++b, src += sizeof(BlockQ8K), dst += kSuperBlock) {
    const float d = load_f32(src + off::q8_k_d);
    const auto* qs = reinterpret_cast<const int8_t*>(src + off::q8_k_qs);
    for (int j = 0; j < kSuperBlock; ++j) dst[j] = d * static_cast<float>(qs[j]);
  }
}

// ---- quantization ----

void quantize_q2_k(const float* x, uint8_t* dst, size_t blocks) {
  uint8_t L[kSuperBlock];
  uint8_t Laux[16];
  float weights[16];
  float mins[16];
  float scales[16];
  constexpr float kLevels4 = 15.f;
  for (size_t b = 0; b < blocks; ++b, x += kSuperBlock, dst += sizeof(BlockQ2K)) {
    uint8_t* out_scales = dst + off::q2_k_scales;
    float max_scale = 0;
    float max_min = 0;
    for (int j = 0; j < 16; ++j) {
      for (int l = 0; l < 16; ++l) weights[l] = std::fabs(x[16 * j + l]);
      scales[j] = fit_scale_and_min(16, 3, x + 16 * j, weights, L + 16 * j, &mins[j], Laux, -0.5f,
                                    0.1f, 15, true);
      max_scale = std::max(max_scale, scales[j]);
      max_min = std::max(max_min, mins[j]);
    }
    if (max_scale > 0) {
      const float iscale = kLevels4 / max_scale;
      for (int j = 0; j < 16; ++j) {
        out_scales[j] = static_cast<uint8_t>(nearest_int(iscale * scales[j]));
      }
      store_f16(dst + off::q2_k_d, max_scale / kLevels4);
    } else {
      std::memset(out_scales, 0, 16);
      store_f16(dst + off::q2_k_d, 0.f);
    }
    if (max_min > 0) {
      const float iscale = kLevels4 / max_min;
      for (int j = 0; j < 16; ++j) {
        out_scales[j] = static_cast<uint8_t>(out_scales[j] | (nearest_int(iscale * mins[j]) << 4));
      }
      store_f16(dst + off::q2_k_dmin, max_min / kLevels4);
    } else {
      store_f16(dst + off::q2_k_dmin, 0.f);
    }
    const float d_all = load_f16(dst + off::q2_k_d);
    const float dmin_all = load_f16(dst + off::q2_k_dmin);
    for (int j = 0; j < 16; ++j) {
      const float d = d_all * static_cast<float>(out_scales[j] & 0xF);
      if (d == 0.0f) continue;
      const float dm = dmin_all * static_cast<float>(out_scales[j] >> 4);
      for (int i = 0; i < 16; ++i) {
        L[16 * j + i] =
            static_cast<uint8_t>(std::clamp(nearest_int((x[16 * j + i] + dm) / d), 0, 3));
      }
    }
    pack_2bit(L, dst + off::q2_k_qs);
  }
}

void quantize_q3_k(const float* x, uint8_t* dst, size_t blocks) {
  int8_t L[kSuperBlock];
  float scales[16];
  for (size_t b = 0; b < blocks; ++b, x += kSuperBlock, dst += sizeof(BlockQ3K)) {
    uint8_t* out_scales = dst + off::q3_k_scales;
    float max_scale = 0;
    float amax = 0;
    for (int j = 0; j < 16; ++j) {
      scales[j] = fit_q3_scale(16, 4, x + 16 * j, L + 16 * j);
      const float a = std::fabs(scales[j]);
      if (a > amax) {
        amax = a;
        max_scale = scales[j];
      }
    }
    std::memset(out_scales, 0, 12);
    if (max_scale != 0.0f) {
      const float iscale = -32.f / max_scale;
      uint8_t biased[16];
      for (int j = 0; j < 16; ++j) {
        const int l = static_cast<int8_t>(nearest_int(iscale * scales[j]));
        biased[j] = static_cast<uint8_t>(std::clamp(l, -32, 31) + 32);
      }
      q3k_store_scales(biased, out_scales);
      store_f16(dst + off::q3_k_d, 1 / iscale);
    } else {
      store_f16(dst + off::q3_k_d, 0.f);
    }
    const float d_all = load_f16(dst + off::q3_k_d);
    for (int j = 0; j < 16; ++j) {
      const float d = d_all * static_cast<float>(q3k_scale(out_scales, j));
      if (d == 0.0f) continue;
      for (int i = 0; i < 16; ++i) {
        const int l = std::clamp(nearest_int(x[16 * j + i] / d), -4, 3);
        L[16 * j + i] = static_cast<int8_t>(l + 4);
      }
    }
    // Bit 2 of each level goes to hmask: element e sets bit e/32 of byte e%32.
    uint8_t* hmask = dst + off::q3_k_hmask;
    std::memset(hmask, 0, 32);
    uint8_t low[kSuperBlock];
    for (int e = 0; e < kSuperBlock; ++e) {
      if (L[e] > 3) hmask[e % 32] = static_cast<uint8_t>(hmask[e % 32] | (1 << (e / 32)));
      low[e] = static_cast<uint8_t>(L[e] & 3);
    }
    pack_2bit(low, dst + off::q3_k_qs);
  }
}

void quantize_q4_k(const float* x, uint8_t* dst, size_t blocks) {
  uint8_t L[kSuperBlock];
  for (size_t b = 0; b < blocks; ++b, x += kSuperBlock, dst += sizeof(BlockQ4K)) {
    quantize_k_with_min(x, L, 15, -1.f, 20, dst + off::q4_k_scales, dst + off::q4_k_d,
                        dst + off::q4_k_dmin);
    uint8_t* q = dst + off::q4_k_qs;
    for (int pair = 0; pair < 4; ++pair) {
      for (int l = 0; l < 32; ++l) {
        q[32 * pair + l] = static_cast<uint8_t>(L[64 * pair + l] | (L[64 * pair + l + 32] << 4));
      }
    }
  }
}

void quantize_q5_k(const float* x, uint8_t* dst, size_t blocks) {
  uint8_t L[kSuperBlock];
  for (size_t b = 0; b < blocks; ++b, x += kSuperBlock, dst += sizeof(BlockQ5K)) {
    quantize_k_with_min(x, L, 31, -0.5f, 15, dst + off::q5_k_scales, dst + off::q5_k_d,
                        dst + off::q5_k_dmin);
    uint8_t* qh = dst + off::q5_k_qh;
    uint8_t* q = dst + off::q5_k_qs;
    std::memset(qh, 0, 32);
    for (int pair = 0; pair < 4; ++pair) {
      for (int l = 0; l < 32; ++l) {
        const int lo = L[64 * pair + l];
        const int hi = L[64 * pair + l + 32];
        qh[l] =
            static_cast<uint8_t>(qh[l] | ((lo >> 4) << (2 * pair)) | ((hi >> 4) << (2 * pair + 1)));
        q[32 * pair + l] = static_cast<uint8_t>((lo & 0xF) | ((hi & 0xF) << 4));
      }
    }
  }
}

void quantize_q6_k(const float* x, uint8_t* dst, size_t blocks) {
  int8_t L[kSuperBlock];
  float scales[16];
  for (size_t b = 0; b < blocks; ++b, x += kSuperBlock, dst += sizeof(BlockQ6K)) {
    float max_scale = 0;
    float max_abs_scale = 0;
    for (int g = 0; g < 16; ++g) {
      scales[g] = fit_symmetric_scale(16, 32, x + 16 * g, L + 16 * g);
      const float a = std::fabs(scales[g]);
      if (a > max_abs_scale) {
        max_abs_scale = a;
        max_scale = scales[g];
      }
    }
    if (max_abs_scale < kGroupMaxEps) {
      std::memset(dst, 0, sizeof(BlockQ6K));
      continue;
    }
    // The group scale with the largest magnitude maps onto -128, so it keeps full
    // 8-bit precision; the f16 super-block scale is its inverse.
    const float iscale = -128.f / max_scale;
    store_f16(dst + off::q6_k_d, 1 / iscale);
    auto* out_scales = reinterpret_cast<int8_t*>(dst + off::q6_k_scales);
    for (int g = 0; g < 16; ++g) {
      out_scales[g] = static_cast<int8_t>(std::min(127, nearest_int(iscale * scales[g])));
    }
    const float d_all = load_f16(dst + off::q6_k_d);
    for (int g = 0; g < 16; ++g) {
      const float d = d_all * static_cast<float>(out_scales[g]);
      if (d == 0.0f) continue;
      for (int i = 0; i < 16; ++i) {
        const int l = std::clamp(nearest_int(x[16 * g + i] / d), -32, 31);
        L[16 * g + i] = static_cast<int8_t>(l + 32);
      }
    }
    uint8_t* ql = dst + off::q6_k_ql;
    uint8_t* qh = dst + off::q6_k_qh;
    for (int chunk = 0; chunk < 2; ++chunk, ql += 64, qh += 32) {
      const int8_t* l = L + 128 * chunk;
      for (int i = 0; i < 32; ++i) {
        ql[i] = static_cast<uint8_t>((l[i] & 0xF) | ((l[i + 64] & 0xF) << 4));
        ql[i + 32] = static_cast<uint8_t>((l[i + 32] & 0xF) | ((l[i + 96] & 0xF) << 4));
        qh[i] = static_cast<uint8_t>((l[i] >> 4) | ((l[i + 32] >> 4) << 2) |
                                     ((l[i + 64] >> 4) << 4) | ((l[i + 96] >> 4) << 6));
      }
    }
  }
}

void quantize_q8_k(const float* x, uint8_t* dst, size_t blocks) {
  for (size_t b = 0; b < blocks; ++b, x += kSuperBlock, dst += sizeof(BlockQ8K)) {
    auto* qs = reinterpret_cast<int8_t*>(dst + off::q8_k_qs);
    const float max = largest_magnitude(x, kSuperBlock);
    if (max == 0.0f) {
      std::memset(dst, 0, sizeof(BlockQ8K));
      continue;
    }
    // -127 rather than -128 keeps every quant in [-127, 127], so kernels may negate.
    const float iscale = -127.f / max;
    for (int j = 0; j < kSuperBlock; ++j) {
      qs[j] = static_cast<int8_t>(std::min(127, nearest_int(iscale * x[j])));
    }
    for (int g = 0; g < 16; ++g) {
      int sum = 0;
      for (int i = 0; i < 16; ++i) sum += qs[16 * g + i];
      store_i16(dst + off::q8_k_bsums + 2 * static_cast<size_t>(g), static_cast<int16_t>(sum));
    }
    store_f32(dst + off::q8_k_d, 1 / iscale);
  }
}

}  // namespace loom::quant::codec
