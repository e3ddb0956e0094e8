// The AVX-512 VNNI family of quantized dot-product kernels (vpdpbusd / vpdpwssd).
// Every function carries LOOM_TARGET_AVX512_VNNI, so this file builds for any -march; the
// dispatcher (quant_dot.cpp) only calls it on CPUs with AVX-512 F/BW/VL/DQ and VNNI.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "common/simd.hpp"
#include "runtime/kernels/quant_dot_kernels.hpp"

namespace loom::quant::kernels {

namespace avx512_family {
#define QD_TARGET LOOM_TARGET_AVX512_VNNI
#define QD_VNNI 1
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
  set.quantize_q8_0 = quantize_act_q8_0;
  set.quantize_q8_k = quantize_act_q8_k;
  return set;
}
}  // namespace avx512_family

const KernelSet& avx512_vnni_kernels() noexcept {
  static const KernelSet set = avx512_family::make_set();
  return set;
}

}  // namespace loom::quant::kernels
