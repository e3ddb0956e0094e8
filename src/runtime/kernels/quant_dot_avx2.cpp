// The AVX2 family of quantized dot-product kernels (256-bit, vpmaddubsw + vpmaddwd).
// Every function carries LOOM_TARGET_AVX2, so this file builds for any -march; the
// dispatcher (quant_dot.cpp) only calls it on CPUs with AVX2, FMA and F16C.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "common/simd.hpp"
#include "runtime/kernels/quant_dot_kernels.hpp"

namespace loom::quant::kernels {

namespace avx2_family {
#define QD_TARGET LOOM_TARGET_AVX2
#define QD_VNNI 0
#include "runtime/kernels/quant_dot_x86.inl"
#undef QD_VNNI
#undef QD_TARGET

KernelSet make_set() {
  KernelSet set;
  register_tiles<Legacy<WQ8_0>::Tile>(set, DType::q8_0);
  register_tiles<Legacy<WQ4_0>::Tile>(set, DType::q4_0);
  register_tiles<Legacy<WQ4_1>::Tile>(set, DType::q4_1);
  register_tiles<Legacy<WQ5_0>::Tile>(set, DType::q5_0);
  register_tiles<Legacy<WQ5_1>::Tile>(set, DType::q5_1);
  register_tiles<Q2K::Tile>(set, DType::q2_k);
  register_tiles<Q3K::Tile>(set, DType::q3_k);
  register_tiles<KWithMin<false>::Tile>(set, DType::q4_k);
  register_tiles<KWithMin<true>::Tile>(set, DType::q5_k);
  register_tiles<Q6K::Tile>(set, DType::q6_k);
  register_tiles<Grouped<WGq8<32>>::Tile>(set, DType::gq8_32);
  register_tiles<Grouped<WGq8<64>>::Tile>(set, DType::gq8_64);
  register_tiles<Grouped<WGq8<128>>::Tile>(set, DType::gq8_128);
  register_tiles<GroupedU4<32>::Tile>(set, DType::gq4_32);
  set.prepare[static_cast<size_t>(DType::gq4_32)] = {gq4_act_sums_bytes<32>, gq4_act_sums<32>};
  register_tiles<GroupedU4<64>::Tile>(set, DType::gq4_64);
  set.prepare[static_cast<size_t>(DType::gq4_64)] = {gq4_act_sums_bytes<64>, gq4_act_sums<64>};
  register_tiles<GroupedU4<128>::Tile>(set, DType::gq4_128);
  set.prepare[static_cast<size_t>(DType::gq4_128)] = {gq4_act_sums_bytes<128>, gq4_act_sums<128>};
  set.quantize_q8_0 = quantize_act_q8_0;
  set.quantize_q8_k = quantize_act_q8_k;
  return set;
}
}  // namespace avx2_family

const KernelSet& avx2_kernels() noexcept {
  static const KernelSet set = avx2_family::make_set();
  return set;
}

}  // namespace loom::quant::kernels
