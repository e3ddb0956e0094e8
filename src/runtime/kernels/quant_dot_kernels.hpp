// Internal: the per-family tables of quantized dot-product kernels behind quant_dot.hpp.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>

#include "loom/dtype.hpp"

namespace loom::quant::kernels {

// Activations processed together against one weight row (the prefill tile).
inline constexpr int kMaxTile = 4;

// The activations of one tile: row t starts at rows[t]. For q8_0 activations, scales[t]
// holds the f32 value of each block's f16 scale (converted once per dot_rows call, not
// once per weight row); for q8_k it is null (the block's scale is already f32).
// prepared[t] is the row rearranged by the weight type's Preparation, when its family
// has one (null otherwise).
struct ActTile {
  std::array<const uint8_t*, kMaxTile> rows{};
  std::array<const float*, kMaxTile> scales{};
  std::array<const uint8_t*, kMaxTile> prepared{};
};

// An optional per-call rearrangement of each activation row into the layout a kernel
// reads fastest (done once per dot_rows call, reused by every weight row): `bytes` of
// output for a row of `blocks` blocks; `run` reads the row and its f32 block scales.
struct Preparation {
  size_t (*bytes)(int64_t blocks) = nullptr;
  void (*run)(const uint8_t* row, const float* scales, int64_t blocks, uint8_t* out) = nullptr;
};

// out[t] = dot(weight row w, activation row t of the tile) for t < nt, over `blocks`
// weight blocks (and as many activation blocks: q8_0 blocks for the 32-element types, q8_k
// super-blocks for the k-quants; for the group types, G/32 q8_0 blocks per weight block,
// and the tile's scales are indexed by activation block). One function per tile width nt = 1..kMaxTile.
using RowDotFn = void (*)(const uint8_t* w, const ActTile& acts, int64_t blocks, float* out);
// The same for kRowGroup weight rows at once, row i at w + i * row_stride (the caller
// passes rows far apart: the prefetchers follow distant streams better than adjacent
// ones): out[i * kMaxTile + t]. A family registers one only where it gives every output
// the same bits as its RowDotFn (the choice between them is speed, never results).
inline constexpr int kRowGroup = 4;
using RowGroupDotFn = void (*)(const uint8_t* w, size_t row_stride, const ActTile& acts,
                               int64_t blocks, float* out);
// Quantizes n (a whole number of blocks) f32 values into activation blocks.
using QuantizeActFn = void (*)(const float* x, uint8_t* dst, int64_t n);

inline constexpr size_t kDTypeCount = static_cast<size_t>(DType::gq4_128) + 1;

struct KernelSet {
  // Indexed by weight DType; a null row has no kernel in this family.
  std::array<std::array<RowDotFn, kMaxTile>, kDTypeCount> dot{};
  // Optional, per weight DType and tile width: kRowGroup rows at once (see RowGroupDotFn).
  std::array<std::array<RowGroupDotFn, kMaxTile>, kDTypeCount> dot_group{};
  std::array<Preparation, kDTypeCount> prepare{};
  QuantizeActFn quantize_q8_0 = nullptr;
  QuantizeActFn quantize_q8_k = nullptr;
};

const KernelSet& scalar_kernels() noexcept;
const KernelSet& avx2_kernels() noexcept;
const KernelSet& avx512_vnni_kernels() noexcept;

// Fills a table row with Kernel<Nt>::run for Nt = 1..kMaxTile.
template <template <int> class Kernel, typename Fn>
constexpr void fill_widths(std::array<Fn, kMaxTile>& row) {
  static_assert(kMaxTile == 4, "one entry per tile width");
  row = {&Kernel<1>::run, &Kernel<2>::run, &Kernel<3>::run, &Kernel<4>::run};
}

// Fills `set.dot[dtype]` (one row at a time) with Kernel<Nt> for every tile width.
template <template <int> class Kernel>
constexpr void register_tiles(KernelSet& set, DType dtype) {
  fill_widths<Kernel>(set.dot[static_cast<size_t>(dtype)]);
}

// Fills `set.dot_group[dtype]` (kRowGroup rows at a time) likewise.
template <template <int> class Kernel>
constexpr void register_group_tiles(KernelSet& set, DType dtype) {
  fill_widths<Kernel>(set.dot_group[static_cast<size_t>(dtype)]);
}

// Registers a group kernel for one activation row (decode) only: wider tiles run their
// rows one at a time through set.dot, as dot_rows does where no group is registered.
constexpr void register_group_decode(KernelSet& set, DType dtype, RowGroupDotFn fn) {
  set.dot_group[static_cast<size_t>(dtype)][0] = fn;
}

// Scalar activation quantizers (the reference the SIMD ones match bit for bit), and the
// shared pieces SIMD versions reuse.
void quantize_act_q8_0_scalar(const float* x, uint8_t* dst, int64_t n);
void quantize_act_q8_k_scalar(const float* x, uint8_t* dst, int64_t n);
// Writes the NaN-scale, zero-quant block used for a block with non-finite inputs.
void write_poisoned_q8_0(uint8_t* block);
void write_poisoned_q8_k(uint8_t* block);
// Fills a q8_k block's bsums from its quants.
void fill_q8_k_bsums(uint8_t* block);

}  // namespace loom::quant::kernels
