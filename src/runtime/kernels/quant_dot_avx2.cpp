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
  register_shared_kernels(set);
  register_tiles<Legacy<WQ8_0>::Tile>(set, DType::q8_0);
  register_tiles<Legacy<WQ4_0>::Tile>(set, DType::q4_0);
  register_tiles<Q6K::Tile>(set, DType::q6_k);
  return set;
}
}  // namespace avx2_family

const KernelSet& avx2_kernels() noexcept {
  static const KernelSet set = avx2_family::make_set();
  return set;
}

}  // namespace loom::quant::kernels
