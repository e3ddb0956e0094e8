// Internal: the kernel-native weight layouts (Layout::repacked, tagged by loom::Packing),
// as a table, and the byte shuffles between them and plain rows.
//
// A packing interleaves the rows of a matrix in panels of `panel_rows`, the order in
// which one kernel reads them best; which packing the kernels want for a dtype on this
// CPU is the runtime's answer (KernelRegistry::preferred_packing), asked by the loader.
// The shuffles here are plain byte moves, the same on every CPU, so a packed tensor and
// its rows hold the same numbers: pack() then unpack() gives the rows back bit for bit.
//
// q8_0_x16, for a [rows, cols] q8_0 matrix (cols a multiple of 32; rows padded to a
// multiple of 16 with zero rows): panel p holds rows 16p..16p+15 as
//   nb = cols / 32 scale groups of 16 f16 (row r's block scale at 2 * r), then
//   nb quant groups of 512 bytes: for block b, 8 vectors of 64 bytes, vector j holding
//   row r's quants 4j..4j+3 of the block at bytes 4r..4r+3, each stored as q + 128.
// So one 64-byte load gives four columns of sixteen rows, the shape of one VPDPBUSD with
// four activation bytes broadcast (runtime/kernels/packed_q8_0.cpp).
#pragma once
#include <cstdint>
#include <optional>
#include <string_view>

#include "loom/dtype.hpp"
#include "loom/shape.hpp"
#include "loom/tensor.hpp"

namespace loom {

class ThreadPool;

struct PackingInfo {
  Packing id;
  std::string_view name;
  DType dtype;           // the dtype it packs (DType::f32 for none: unused)
  int panel_rows;        // rows interleaved together (the stored rows are a multiple)
  int block_cols;        // columns of one block (cols must be a multiple)
  int block_bytes;       // bytes of one block of one row (scale included)
  // The byte moves of one panel: rows (n_rows of them, nb blocks each, row-major) to
  // panel `panel`'s bytes, and back (only the panel's real rows are written).
  void (*pack_panel)(const uint8_t* rows, int64_t n_rows, int64_t nb, int64_t panel, uint8_t* out);
  void (*unpack_panel)(const uint8_t* in, int64_t n_rows, int64_t nb, int64_t panel, uint8_t* rows);
};

// The table entry of a packing (Packing::none included).
const PackingInfo& packing_info(Packing packing) noexcept;

// The packing named `name` (its table name, e.g. "q8_0_x16"; "none" too), or nullopt.
std::optional<Packing> packing_from_name(std::string_view name) noexcept;

// Bytes a packed [rows, cols] matrix takes (rows rounded up to whole panels).
int64_t packed_nbytes(Packing packing, const Shape& shape);

// Whether `t` can be packed as `packing`: a contiguous rank-2 row-major tensor of the
// packing's dtype whose rows are whole blocks.
bool can_pack(const Tensor& t, Packing packing) noexcept;

// An owned packed copy of the row-major `t` (can_pack must hold, else
// Error(invalid_argument)); panels are split over `pool` when one is given.
Tensor pack(const Tensor& t, Packing packing, ThreadPool* pool = nullptr);

// An owned row-major copy of a packed tensor (panels split over `pool` when one is
// given); a tensor that is not packed is returned as it is (no copy).
Tensor unpack(const Tensor& t, ThreadPool* pool = nullptr);

}  // namespace loom
