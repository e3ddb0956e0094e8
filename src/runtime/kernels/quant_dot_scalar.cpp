// Portable kernels: the reference every SIMD family is tested against.
//
// Each block's integer dot product of weight quants with activation quants is exact; the
// f32 scaling and the order of the f32 additions follow ggml's generic (non-SIMD)
// ggml_vec_dot_*_q8_* functions, so on the same inputs this family returns the same
// floats llama.cpp's portable build does:
//   q8_0, q5_0:  sum += (d_w * d_a) * isum            q4_0: sum += (isum * d_w) * d_a
//   q4_1, q5_1:  sum += (d_w * d_a) * isum + (m_w * d_a) * sum(q_a)   (q8_0 activations,
//                where ggml uses q8_1's f16 sum)
//   q2_k:        sum += (d_a * d) * isum - (d_a * dmin) * sum_g(m_g * bsum_g)
//   gq8, gq4:    sum += (d_w * d_a) * isum per 32-element activation block (loom's own
//                types; gq4's isum is over (q - z) * q_a)
//   q3_k..q6_k:  eight lane sums, lane l += (d * d_a) * isum_l over elements e = l mod 8;
//                q4_k / q5_k subtract (dmin * d_a) * sum_g(m_g * bsum_g) from a separate
//                sum; the lanes are added to it at the end of the row.
// The expressions keep ggml's shape so a compiler contracts them into FMAs the same way
// (GCC does by default when the target has FMA): built with -march=native, this family
// reproduced llama.cpp's logits on the small-quant reference GGUFs to the last bit (q8_0)
// or to ~7e-7 (q4_k, q6_k). For q4_0 the reference build used the order of loom's AVX2
// family instead (9.6e-8 there, 1.4e-2 here): see tests/model/reference_models_test.cpp.

#include <cmath>
#include <cstring>

#include "runtime/kernels/quant_dot_kernels.hpp"
#include "tensor/quant/blocks.hpp"
#include "tensor/quant/quant_formats.hpp"

namespace loom::quant::kernels {

namespace {

constexpr size_t kQ8_0Bytes = sizeof(BlockQ8_0);
constexpr size_t kQ8KBytes = sizeof(BlockQ8K);

const int8_t* q8_0_quants(const uint8_t* block) {
  return reinterpret_cast<const int8_t*>(block + off::q8_0_qs);
}
const int8_t* q8_k_quants(const uint8_t* block) {
  return reinterpret_cast<const int8_t*>(block + off::q8_k_qs);
}
int q8_k_bsum(const uint8_t* block, int g) {
  return load_i16(block + off::q8_k_bsums + 2 * static_cast<size_t>(g));
}

// The running sums of one row-activation dot product.
struct Acc {
  float sum = 0.0f;
  float lanes[8] = {};
  float result() const {
    float out = sum;
    for (float lane : lanes) out += lane;
    return out;
  }
};

// ---- one block of each weight type against one activation block ----

void block_q8_0(const uint8_t* w, const uint8_t* a, Acc& acc) {
  const auto* qw = reinterpret_cast<const int8_t*>(w + off::q8_0_qs);
  const int8_t* qa = q8_0_quants(a);
  int sum = 0;
  for (int j = 0; j < kBlock; ++j) sum += qw[j] * qa[j];
  acc.sum += static_cast<float>(sum) * (load_f16(w) * load_f16(a));
}

void block_q4_0(const uint8_t* w, const uint8_t* a, Acc& acc) {
  const uint8_t* qs = w + off::q4_0_qs;
  const int8_t* qa = q8_0_quants(a);
  int sum = 0;
  for (int j = 0; j < 16; ++j) {
    sum += ((qs[j] & 0xF) - 8) * qa[j] + ((qs[j] >> 4) - 8) * qa[j + 16];
  }
  acc.sum += static_cast<float>(sum) * load_f16(w) * load_f16(a);
}

void block_q5_0(const uint8_t* w, const uint8_t* a, Acc& acc) {
  const uint32_t qh = load_u32(w + off::q5_0_qh);
  const uint8_t* qs = w + off::q5_0_qs;
  const int8_t* qa = q8_0_quants(a);
  int sum = 0;
  for (int j = 0; j < 16; ++j) {
    const int lo = (qs[j] & 0xF) | static_cast<int>(((qh >> j) & 1) << 4);
    const int hi = (qs[j] >> 4) | static_cast<int>(((qh >> (j + 16)) & 1) << 4);
    sum += (lo - 16) * qa[j] + (hi - 16) * qa[j + 16];
  }
  acc.sum += (load_f16(w) * load_f16(a)) * static_cast<float>(sum);
}

int sum_quants(const int8_t* q, int n) {
  int s = 0;
  for (int j = 0; j < n; ++j) s += q[j];
  return s;
}

void block_q4_1(const uint8_t* w, const uint8_t* a, Acc& acc) {
  const uint8_t* qs = w + off::q4_1_qs;
  const int8_t* qa = q8_0_quants(a);
  int sum = 0;
  for (int j = 0; j < 16; ++j) sum += (qs[j] & 0xF) * qa[j] + (qs[j] >> 4) * qa[j + 16];
  const float da = load_f16(a);
  acc.sum += (load_f16(w) * da) * static_cast<float>(sum) +
             (load_f16(w + off::q4_1_m) * da) * static_cast<float>(sum_quants(qa, kBlock));
}

void block_q5_1(const uint8_t* w, const uint8_t* a, Acc& acc) {
  const uint32_t qh = load_u32(w + off::q5_1_qh);
  const uint8_t* qs = w + off::q5_1_qs;
  const int8_t* qa = q8_0_quants(a);
  int sum = 0;
  for (int j = 0; j < 16; ++j) {
    const int lo = (qs[j] & 0xF) | static_cast<int>(((qh >> j) & 1) << 4);
    const int hi = (qs[j] >> 4) | static_cast<int>(((qh >> (j + 16)) & 1) << 4);
    sum += lo * qa[j] + hi * qa[j + 16];
  }
  const float da = load_f16(a);
  acc.sum += (load_f16(w) * da) * static_cast<float>(sum) +
             (load_f16(w + off::q5_1_m) * da) * static_cast<float>(sum_quants(qa, kBlock));
}

void block_q2_k(const uint8_t* w, const uint8_t* a, Acc& acc) {
  const uint8_t* scales = w + off::q2_k_scales;
  const uint8_t* qs = w + off::q2_k_qs;
  const int8_t* qa = q8_k_quants(a);
  int sum = 0;
  int sum_min = 0;
  for (int g = 0; g < 16; ++g) {
    int group = 0;
    for (int e = 16 * g; e < 16 * g + 16; ++e) {
      const int q = (qs[32 * (e / 128) + e % 32] >> (2 * ((e % 128) / 32))) & 3;
      group += q * qa[e];
    }
    sum += (scales[g] & 0xF) * group;
    sum_min += (scales[g] >> 4) * q8_k_bsum(a, g);
  }
  const float da = load_f32(a + off::q8_k_d);
  const float d = da * load_f16(w + off::q2_k_d);
  const float dmin = da * load_f16(w + off::q2_k_dmin);
  acc.sum += d * static_cast<float>(sum) - dmin * static_cast<float>(sum_min);
}

// The k-quants' lane sums: lane l gets sc_g(e) * q_w[e] * q_a[e] over e = l (mod 8),
// scaled by d * d_a into acc.lanes[l].
void add_lanes(const int* level, const int* scale_of_element, const int8_t* qa, float d,
               Acc& acc) {
  int lanes[8] = {};
  for (int e = 0; e < kSuperBlock; ++e) lanes[e % 8] += scale_of_element[e] * level[e] * qa[e];
  for (int l = 0; l < 8; ++l) acc.lanes[l] += d * static_cast<float>(lanes[l]);
}

void block_q3_k(const uint8_t* w, const uint8_t* a, Acc& acc) {
  const uint8_t* hmask = w + off::q3_k_hmask;
  const uint8_t* qs = w + off::q3_k_qs;
  const uint8_t* scales = w + off::q3_k_scales;
  int level[kSuperBlock];
  int scale[kSuperBlock];
  for (int e = 0; e < kSuperBlock; ++e) {
    const int chunk = e / 128;
    const int pos = (e % 128) / 32;
    const int low = (qs[32 * chunk + e % 32] >> (2 * pos)) & 3;
    const int high = (hmask[e % 32] >> (4 * chunk + pos)) & 1;
    level[e] = low + 4 * high - 4;
    scale[e] = q3k_scale(scales, e / 16);
  }
  add_lanes(level, scale, q8_k_quants(a), load_f16(w + off::q3_k_d) * load_f32(a + off::q8_k_d),
            acc);
}

template <bool kFifthBit>
void block_k_with_min(const uint8_t* w, const uint8_t* a, size_t d_at, size_t dmin_at,
                      size_t scales_at, size_t qh_at, size_t qs_at, Acc& acc) {
  const uint8_t* scales = w + scales_at;
  const uint8_t* qs = w + qs_at;
  int level[kSuperBlock];
  int scale[kSuperBlock];
  int sum_min = 0;
  for (int g = 0; g < 8; ++g) {
    uint8_t sc = 0;
    uint8_t m = 0;
    k4_scale_min(scales, g, &sc, &m);
    const int shift = 4 * (g % 2);
    const uint8_t* q = qs + 32 * (g / 2);
    for (int l = 0; l < 32; ++l) {
      int v = (q[l] >> shift) & 0xF;
      if constexpr (kFifthBit) v |= ((w[qh_at + static_cast<size_t>(l)] >> g) & 1) << 4;
      level[32 * g + l] = v;
      scale[32 * g + l] = sc;
    }
    sum_min += m * (q8_k_bsum(a, 2 * g) + q8_k_bsum(a, 2 * g + 1));
  }
  const float da = load_f32(a + off::q8_k_d);
  add_lanes(level, scale, q8_k_quants(a), load_f16(w + d_at) * da, acc);
  acc.sum -= (load_f16(w + dmin_at) * da) * static_cast<float>(sum_min);
}

void block_q4_k(const uint8_t* w, const uint8_t* a, Acc& acc) {
  block_k_with_min<false>(w, a, off::q4_k_d, off::q4_k_dmin, off::q4_k_scales, 0, off::q4_k_qs,
                          acc);
}

void block_q5_k(const uint8_t* w, const uint8_t* a, Acc& acc) {
  block_k_with_min<true>(w, a, off::q5_k_d, off::q5_k_dmin, off::q5_k_scales, off::q5_k_qh,
                         off::q5_k_qs, acc);
}

void block_q6_k(const uint8_t* w, const uint8_t* a, Acc& acc) {
  const uint8_t* ql = w + off::q6_k_ql;
  const uint8_t* qh = w + off::q6_k_qh;
  const auto* scales = reinterpret_cast<const int8_t*>(w + off::q6_k_scales);
  int level[kSuperBlock];
  int scale[kSuperBlock];
  for (int e = 0; e < kSuperBlock; ++e) {
    const int chunk = e / 128;
    const int quarter = (e % 128) / 32;
    const int l = e % 32;
    const uint8_t low_byte = ql[64 * chunk + l + 32 * (quarter % 2)];
    const int low = quarter < 2 ? (low_byte & 0xF) : (low_byte >> 4);
    const int high = (qh[32 * chunk + l] >> (2 * quarter)) & 3;
    level[e] = (low | (high << 4)) - 32;
    scale[e] = scales[e / 16];
  }
  add_lanes(level, scale, q8_k_quants(a), load_f16(w + off::q6_k_d) * load_f32(a + off::q8_k_d),
            acc);
}

// loom's group types: a weight block (one group of G) meets G/32 q8_0 activation blocks,
// each with its own scale: sum += (d_w * d_a) * isum per activation block.
template <int G>
void block_gq8(const uint8_t* w, const uint8_t* a, Acc& acc) {
  const float d = load_f16(w + group::d);
  const auto* qw = reinterpret_cast<const int8_t*>(w + group::gq8_qs);
  for (int s = 0; s < G / kBlock; ++s, a += kQ8_0Bytes, qw += kBlock) {
    const int8_t* qa = q8_0_quants(a);
    int sum = 0;
    for (int j = 0; j < kBlock; ++j) sum += qw[j] * qa[j];
    acc.sum += (d * load_f16(a)) * static_cast<float>(sum);
  }
}

template <int G>
void block_gq4(const uint8_t* w, const uint8_t* a, Acc& acc) {
  const float d = load_f16(w + group::d);
  const int z = w[group::gq4_z] & 0xF;
  const uint8_t* qs = w + group::gq4_qs;
  for (int s = 0; s < G / kBlock; ++s, a += kQ8_0Bytes, qs += 16) {
    const int8_t* qa = q8_0_quants(a);
    int sum = 0;
    for (int j = 0; j < 16; ++j) sum += ((qs[j] & 0xF) - z) * qa[j] + ((qs[j] >> 4) - z) * qa[j + 16];
    acc.sum += (d * load_f16(a)) * static_cast<float>(sum);
  }
}

// ---- row kernels ----

template <void (*BlockDot)(const uint8_t*, const uint8_t*, Acc&), size_t kWeightBytes,
          size_t kActBytes>
struct RowDot {
  template <int Nt>
  struct Tile {
    static void run(const uint8_t* w, const ActTile& acts, int64_t blocks, float* out) {
      for (int t = 0; t < Nt; ++t) {
        Acc acc;
        for (int64_t b = 0; b < blocks; ++b) {
          BlockDot(w + static_cast<size_t>(b) * kWeightBytes,
                   acts.rows[t] + static_cast<size_t>(b) * kActBytes, acc);
        }
        out[t] = acc.result();
      }
    }
  };
};

template <int Nt>
using DotQ8_0 = RowDot<block_q8_0, sizeof(BlockQ8_0), kQ8_0Bytes>::Tile<Nt>;
template <int Nt>
using DotQ4_0 = RowDot<block_q4_0, sizeof(BlockQ4_0), kQ8_0Bytes>::Tile<Nt>;
template <int Nt>
using DotQ4_1 = RowDot<block_q4_1, sizeof(BlockQ4_1), kQ8_0Bytes>::Tile<Nt>;
template <int Nt>
using DotQ5_0 = RowDot<block_q5_0, sizeof(BlockQ5_0), kQ8_0Bytes>::Tile<Nt>;
template <int Nt>
using DotQ5_1 = RowDot<block_q5_1, sizeof(BlockQ5_1), kQ8_0Bytes>::Tile<Nt>;
template <int Nt>
using DotQ2K = RowDot<block_q2_k, sizeof(BlockQ2K), kQ8KBytes>::Tile<Nt>;
template <int Nt>
using DotQ3K = RowDot<block_q3_k, sizeof(BlockQ3K), kQ8KBytes>::Tile<Nt>;
template <int Nt>
using DotQ4K = RowDot<block_q4_k, sizeof(BlockQ4K), kQ8KBytes>::Tile<Nt>;
template <int Nt>
using DotQ5K = RowDot<block_q5_k, sizeof(BlockQ5K), kQ8KBytes>::Tile<Nt>;
template <int Nt>
using DotQ6K = RowDot<block_q6_k, sizeof(BlockQ6K), kQ8KBytes>::Tile<Nt>;

template <int Nt>
using DotGq8_32 = RowDot<block_gq8<32>, group::block_bytes(8, 32), kQ8_0Bytes>::Tile<Nt>;
template <int Nt>
using DotGq8_64 = RowDot<block_gq8<64>, group::block_bytes(8, 64), 2 * kQ8_0Bytes>::Tile<Nt>;
template <int Nt>
using DotGq8_128 = RowDot<block_gq8<128>, group::block_bytes(8, 128), 4 * kQ8_0Bytes>::Tile<Nt>;
template <int Nt>
using DotGq4_32 = RowDot<block_gq4<32>, group::block_bytes(4, 32), kQ8_0Bytes>::Tile<Nt>;
template <int Nt>
using DotGq4_64 = RowDot<block_gq4<64>, group::block_bytes(4, 64), 2 * kQ8_0Bytes>::Tile<Nt>;
template <int Nt>
using DotGq4_128 = RowDot<block_gq4<128>, group::block_bytes(4, 128), 4 * kQ8_0Bytes>::Tile<Nt>;

KernelSet make_scalar_set() {
  KernelSet set;
  register_tiles<DotQ8_0>(set, DType::q8_0);
  register_tiles<DotQ4_0>(set, DType::q4_0);
  register_tiles<DotQ4_1>(set, DType::q4_1);
  register_tiles<DotQ5_0>(set, DType::q5_0);
  register_tiles<DotQ5_1>(set, DType::q5_1);
  register_tiles<DotQ2K>(set, DType::q2_k);
  register_tiles<DotQ3K>(set, DType::q3_k);
  register_tiles<DotQ4K>(set, DType::q4_k);
  register_tiles<DotQ5K>(set, DType::q5_k);
  register_tiles<DotQ6K>(set, DType::q6_k);
  register_tiles<DotGq8_32>(set, DType::gq8_32);
  register_tiles<DotGq8_64>(set, DType::gq8_64);
  register_tiles<DotGq8_128>(set, DType::gq8_128);
  register_tiles<DotGq4_32>(set, DType::gq4_32);
  register_tiles<DotGq4_64>(set, DType::gq4_64);
  register_tiles<DotGq4_128>(set, DType::gq4_128);
  set.quantize_q8_0 = quantize_act_q8_0_scalar;
  set.quantize_q8_k = quantize_act_q8_k_scalar;
  return set;
}

bool all_finite(const float* x, int n) {
  for (int j = 0; j < n; ++j) {
    if (!std::isfinite(x[j])) return false;
  }
  return true;
}

}  // namespace

// ---- activation quantizers ----

void write_poisoned_q8_0(uint8_t* block) {
  std::memset(block, 0, kQ8_0Bytes);
  store_u16(block, 0x7E00);  // f16 quiet NaN
}

void write_poisoned_q8_k(uint8_t* block) {
  std::memset(block, 0, kQ8KBytes);
  store_f32(block + off::q8_k_d, std::nanf(""));
}

void fill_q8_k_bsums(uint8_t* block) {
  const int8_t* q = q8_k_quants(block);
  for (int g = 0; g < 16; ++g) {
    int sum = 0;
    for (int i = 0; i < 16; ++i) sum += q[16 * g + i];
    store_i16(block + off::q8_k_bsums + 2 * static_cast<size_t>(g), static_cast<int16_t>(sum));
  }
}

void quantize_act_q8_0_scalar(const float* x, uint8_t* dst, int64_t n) {
  for (int64_t b = 0; b < n / kBlock; ++b, x += kBlock, dst += kQ8_0Bytes) {
    if (!all_finite(x, kBlock)) {
      write_poisoned_q8_0(dst);
      continue;
    }
    float amax = 0.0f;
    for (int j = 0; j < kBlock; ++j) amax = std::fmax(amax, std::fabs(x[j]));
    const float id = amax != 0.0f ? 127.0f / amax : 0.0f;
    store_f16(dst, amax / 127.0f);
    auto* q = reinterpret_cast<int8_t*>(dst + off::q8_0_qs);
    for (int j = 0; j < kBlock; ++j) q[j] = static_cast<int8_t>(codec::nearest_int(x[j] * id));
  }
}

void quantize_act_q8_k_scalar(const float* x, uint8_t* dst, int64_t n) {
  for (int64_t b = 0; b < n / kSuperBlock; ++b, x += kSuperBlock, dst += kQ8KBytes) {
    if (!all_finite(x, kSuperBlock)) {
      write_poisoned_q8_k(dst);
      continue;
    }
    codec::quantize_q8_k(x, dst, 1);
  }
}

const KernelSet& scalar_kernels() noexcept {
  static const KernelSet set = make_scalar_set();
  return set;
}

}  // namespace loom::quant::kernels
