// Internal: the kernel-native weight layouts (Layout::repacked, tagged by loom::Packing),
// as a table, and the byte shuffles between them and plain rows.
//
// A packing interleaves the rows of a matrix in panels of `panel_rows`, the order in
// which one kernel reads them best; which packing the kernels want for a dtype on this
// CPU is the runtime's answer (KernelRegistry::preferred_packing), asked by the loader.
// The shuffles here are plain byte moves, the same on every CPU, so a packed tensor and
// its rows hold the same numbers: pack() then unpack() gives the rows back bit for bit.
// Packs store packed tensors under these names (`loom convert --repack`), so a packing's
// byte order is part of the pack format: a changed order needs a new name, never an
// edit of an existing one.
//
// q8_0_x16, for a [rows, cols] q8_0 matrix (cols a multiple of 32; rows padded to a
// multiple of 16 with zero rows): panel p holds rows 16p..16p+15 as nb = cols / 32
// groups of 544 bytes, one per block, each
//   16 f16 scales (row r's at 2 * r), then
//   8 vectors of 64 bytes, vector j holding row r's quants 4j..4j+3 of the block at
//   bytes 4r..4r+3, each stored as q + 128.
// So one 64-byte load gives four columns of sixteen rows, the shape of one VPDPBUSD with
// four activation bytes broadcast (runtime/kernels/packed_blocks32.cpp), and a panel is one
// stream in block order (scales beside their quants: decode streamed 5-17% faster than
// with every scale of the panel first, a second stream).
//
// q4_0_x16, for a [rows, cols] q4_0 matrix (cols a multiple of 32; rows padded with
// scale-0 rows): per panel nb groups of 288 bytes, each 16 f16 scales, then 4 vectors of
// 64 bytes, vector j holding row r's nibble bytes 4j..4j+3 at bytes 4r..4r+3 (low
// nibbles: columns 4j.., high: 16 + 4j..). The same bytes as the rows, reordered.
//
// q4_k_x16, for a [rows, cols] q4_k matrix (cols a multiple of 256; rows padded with zero
// rows): panel p holds rows 16p..16p+15 as nb = cols / 256 groups of 2368 bytes, one per
// block, each
//   16 f16 d, 16 f16 dmin (row r's at 2 * r),
//   the 6-bit scales as bytes, [sub-block s][row r] (128 bytes),
//   the 6-bit mins as bytes, [sub-block pair k][row r][s % 2] (128 bytes: the two mins a
//   row's lane needs for one VPDPWSSD side by side),
//   the 128 nibble bytes: for sub-block pair g (0..3), 8 vectors of 64 bytes, vector j
//   holding row r's bytes 32g + 4j .. 32g + 4j + 3 at bytes 4r..4r+3 (low nibbles: sub-
//   block 2g, high: 2g + 1).
// The 12 scale bytes of a block hold exactly the sixteen 6-bit values, so unpacking
// re-encodes them bit for bit; a packed block is 148 bytes a row instead of 144.
//
// q4_1_x16, q5_0_x16, q5_1_x16, for [rows, cols] q4_1 / q5_0 / q5_1 matrices (cols a
// multiple of 32; rows padded with zero rows): per panel and block the 16 f16 d, the 16
// f16 m (q4_1, q5_1), the 4 nibble vectors of q4_0_x16, then (q5_0, q5_1) for each vector
// j two 64-bit masks (little-endian): bit 4r + i of the first is the fifth bit of column
// 4j + i of row r (the low nibble in byte 4r + i), of the second that of column 16 + 4j + i.
// The rows' own bytes (20, 22, 24 a row-block), reordered.
//
// gq8_G_x16 and gq4_G_x16 (G = 32, 64, 128), for loom's group types (docs/quantization.md):
// rows in panels of 16 (padded with zero-scale rows); per panel and group of G columns
//   gq8: 16 f16 d, then for each 32-column run s of the group q8_0_x16's 8 vectors (the
//        quants as q + 128): 32 + 16 G bytes, the rows' own 2 + G each (gq8_32's group
//        is q8_0_x16's);
//   gq4: 16 f16 d, the 16 zero-point bytes, the 16 reserved bytes, then for each run s
//        q4_0_x16's 4 vectors (the run's 16 nibble bytes as stored): 64 + 8 G bytes, the
//        rows' own 4 + G/2 each.
// Every byte of the rows is kept (the zero point's unused high nibble and the reserved
// byte too), so unpacking is exact for any bytes.
//
// q5_k_x16, for a [rows, cols] q5_k matrix (cols a multiple of 256; rows padded with zero
// rows): q4_k_x16's group with each sub-block pair's fifth bits after its nibbles: per
// panel nb groups of 2880 bytes (180 a row-block, the rows' own 176 with the scales
// decoded), each
//   16 f16 d, 16 f16 dmin, the scales and mins as bytes (as q4_k_x16),
//   for sub-block pair g (0..3), 640 bytes: the 8 nibble vectors of q4_k_x16, then for
//   each vector j two 64-bit masks (8 bytes each, little-endian): bit 4r + i of the first
//   is the fifth bit of the low-nibble value in byte 4r + i of vector j (sub-block 2g),
//   of the second the high-nibble one's (sub-block 2g + 1).
// A mask is a k-register: one masked byte add (VPADDB) puts the fifth bits into a
// vector's values, which stay unsigned (0..31) for VPDPBUSD.
//
// q6_k_x16, for a [rows, cols] q6_k matrix (cols a multiple of 256; rows padded with zero
// rows): panel p holds rows 16p..16p+15 as nb groups of 3360 bytes (the rows' own 210 a
// block, reordered), each
//   16 f16 d, the 16 int8 scales [group][row] (256 bytes),
//   for each half h (0, 1) and column chunk j (0..7), three vectors of 64 bytes holding
//   at bytes 4r..4r+3 row r's ql[64h + 4j .. + 3], ql[64h + 32 + 4j ..] and
//   qh[32h + 4j ..] (3072 bytes).
// Three adjacent loads give the 6-bit values of four columns in each of the four
// quarters of a half, and a panel is read as one stream.
//
// q2_k_x16 and q3_k_x16, for [rows, cols] q2_k / q3_k matrices (cols a multiple of 256;
// rows padded with zero rows): q6_k_x16's order for the 2-bit quants. Per panel nb groups,
//   q2_k (1344 bytes, the rows' own 84 a block, reordered): 16 f16 d, 16 f16 dmin, the 16
//     scale bytes (scale | min << 4) [group][row], then for half h (0, 1) 8 vectors of 64
//     bytes, vector j holding row r's qs[32h + 4j .. + 3] at bytes 4r..4r+3;
//   q3_k (1824 bytes, 114 a block: the 12 scale bytes decoded): 16 f16 d, the sixteen
//     6-bit scales minus 32 as int8 [group][row], 8 vectors holding row r's
//     hmask[4j .. + 3] at bytes 4r..4r+3, then q2_k's 16 quant vectors.
// Byte qs[32h + l] holds the low two bits of column l of quarters 0..3 of half h (bits
// 2q, 2q + 1), hmask[l] their high bits (q3_k: bit 4h + q), as in the rows.
//
// f32_x64, f16_x64 and bf16_x64, for [rows, cols] matrices of those dtypes (cols a
// multiple of 16; rows padded to a multiple of 64 with zero rows): panel p holds rows
// 64p..64p+63 column by column, element (r, k) of the panel at index 64k + r. A panel is
// one stream in column order, and one vector load (16 lanes) gives column k of 16 rows:
// the broadcast GEMM of runtime/kernels/packed_plain.cpp multiplies it by one token's
// x[k] for four vectors (64 rows) at a time. The elements are the rows' own, moved.
#pragma once
#include <cstdint>
#include <optional>
#include <string_view>

#include "loom/dtype.hpp"
#include "loom/shape.hpp"
#include "loom/tensor.hpp"

namespace loom {

class ThreadPool;

// Where the parts of one block of one panel lie: the offsets the packing's shuffles write
// and its kernel (runtime/kernels/packed_*.cpp) reads, one definition for both.
namespace packed_layout {

// Byte i of a row's run of quant bytes, in consecutive 64-byte vectors of four bytes per
// row: vector i / 4, lane r, byte i % 4 (what one VPDPBUSD with four broadcast bytes reads).
constexpr int64_t lane_byte(int64_t r, int64_t i) { return (i / 4) * 64 + r * 4 + i % 4; }
// The bit of a vector's 64-bit fifth-bit mask (q5_k_x16, q5_0_x16, q5_1_x16) that belongs
// to byte i (0..3) of lane r: the same position as the byte, so one masked byte add
// applies the mask.
constexpr int64_t lane_bit(int64_t r, int64_t i) { return 4 * r + i; }

struct Q8_0 {  // q8_0_x16: 16 f16 scales, 8 vectors of q + 128
  static constexpr int64_t group = 544, scales = 0, quants = 32;
};
struct Q4_0 {  // q4_0_x16: 16 f16 scales, 4 vectors of nibble bytes
  static constexpr int64_t group = 288, scales = 0, quants = 32;
};
struct Q4_1 {  // q4_1_x16: 16 f16 d, 16 f16 m, 4 vectors of nibble bytes
  static constexpr int64_t group = 320, scales = 0, mins = 32, quants = 64;
};
struct Q5_0 {  // q5_0_x16: 16 f16 d, 4 nibble vectors, 4 x 2 fifth-bit masks
  static constexpr int64_t group = 352, scales = 0, quants = 32, masks = 288;
  // The mask of vector j's low (high = false) or high nibbles.
  static constexpr int64_t mask_at(int64_t j, bool high) { return masks + j * 16 + (high ? 8 : 0); }
};
struct Q5_1 {  // q5_1_x16: 16 f16 d, 16 f16 m, 4 nibble vectors, 4 x 2 fifth-bit masks
  static constexpr int64_t group = 384, scales = 0, mins = 32, quants = 64, masks = 320;
  static constexpr int64_t mask_at(int64_t j, bool high) { return masks + j * 16 + (high ? 8 : 0); }
};
template <int64_t G>
struct Gq8 {  // gq8_G_x16: 16 f16 d, then G / 32 runs of 8 vectors of q + 128
  static constexpr int64_t runs = G / 32, group = 32 + runs * 512, scales = 0, quants = 32;
  static constexpr int64_t run_bytes = 512;
};
template <int64_t G>
struct Gq4 {  // gq4_G_x16: 16 f16 d, 16 zero points, 16 reserved, then G / 32 runs of 4 vectors
  static constexpr int64_t runs = G / 32, group = 64 + runs * 256, scales = 0, zeros = 32, reserved = 48,
                           quants = 64;
  static constexpr int64_t run_bytes = 256;
};
struct Q4K {  // q4_k_x16: d, dmin, scales [s][r], mins [s/2][r][s%2], 4 x 8 nibble vectors
  static constexpr int64_t group = 2368, d = 0, dmin = 32, scales = 64, mins = 192, quants = 320;
  // Byte c (0..127) of a row's nibbles: sub-block pair c / 32, then lane_byte.
  static constexpr int64_t quant_at(int64_t r, int64_t c) { return quants + (c / 32) * 512 + lane_byte(r, c % 32); }
};
struct Q5K {  // q5_k_x16: q4_k_x16's d, dmin, scales, mins; per pair 8 nibble vectors + 8 x 2 masks
  static constexpr int64_t group = 2880, d = 0, dmin = 32, scales = 64, mins = 192, pairs = 320;
  static constexpr int64_t pair_bytes = 640, masks = 512;  // within a pair: nibbles, then masks
  // Byte c (0..127) of a row's nibbles: sub-block pair c / 32, then lane_byte.
  static constexpr int64_t quant_at(int64_t r, int64_t c) { return pairs + (c / 32) * pair_bytes + lane_byte(r, c % 32); }
  // The masks of pair g's vector j: low-nibble values' fifth bits, then the high ones'.
  static constexpr int64_t mask_at(int64_t g, int64_t j) { return pairs + g * pair_bytes + masks + j * 16; }
};
struct Q2K {  // q2_k_x16: d, dmin, scale | min << 4 bytes [g][r], 2 x 8 quant vectors
  static constexpr int64_t group = 1344, d = 0, dmin = 32, scales = 64, quants = 320;
  // Byte i (0..63) of a row's qs: half i / 32, then lane_byte.
  static constexpr int64_t quant_at(int64_t r, int64_t i) { return quants + (i / 32) * 512 + lane_byte(r, i % 32); }
};
struct Q3K {  // q3_k_x16: d, int8 scales [g][r], 8 hmask vectors, 2 x 8 quant vectors
  static constexpr int64_t group = 1824, d = 0, scales = 32, hmask = 288, quants = 800;
  // Byte l (0..31) of a row's hmask.
  static constexpr int64_t hmask_at(int64_t r, int64_t l) { return hmask + lane_byte(r, l); }
  // Byte i (0..63) of a row's qs: half i / 32, then lane_byte.
  static constexpr int64_t quant_at(int64_t r, int64_t i) { return quants + (i / 32) * 512 + lane_byte(r, i % 32); }
};
struct Q6K {  // q6_k_x16: d, int8 scales [g][r], per half and chunk: ql part 0, ql part 1, qh
  static constexpr int64_t group = 3360, d = 0, scales = 32, chunks = 288;
  // The three vectors of half h (0, 1), column chunk j (0..7).
  static constexpr int64_t chunk_at(int64_t h, int64_t j) { return chunks + (h * 8 + j) * 192; }
};

struct Plain {  // f32_x64, f16_x64, bf16_x64: [column][64 rows] per panel
  static constexpr int64_t rows = 64, block_cols = 16;
  // Element index of row r (0..63), column k of a panel (or of one group of 16 columns).
  static constexpr int64_t at(int64_t r, int64_t k) { return k * rows + r; }
};

}  // namespace packed_layout

struct PackingInfo {
  Packing id;
  std::string_view name;
  DType dtype;           // the dtype it packs (DType::f32 for none: unused)
  int panel_rows;        // rows interleaved together (the stored rows are a multiple)
  int block_cols;        // columns of one block (cols must be a multiple)
  int block_bytes;       // bytes of one block of one row in the packed form (scales included)
  // The byte moves of one row-block: row r (0..panel_rows) of a panel, its block in the
  // rows (the dtype's block bytes) to and from the panel's group for that block
  // (block_bytes * panel_rows bytes, zeroed before packing), and what a padding row past
  // the matrix's last writes into a group (nullptr: it stays zero). pack() walks the
  // panels and their groups, unpack() the panels, rows and blocks.
  void (*pack_block)(const uint8_t* block, int64_t r, uint8_t* group);
  void (*unpack_block)(const uint8_t* group, int64_t r, uint8_t* block);
  void (*pad_block)(int64_t r, uint8_t* group);
  // Optional (nullptr: none): rows r0..r0 + 7 of a group at once, the bytes eight
  // pack_block calls would write, row r0 + i's block at row0 + i * row_stride. pack()
  // takes it where the CPU has AVX2 (the plain panels' transposes, packing_x86.cpp).
  void (*pack_eight_rows)(const uint8_t* row0, int64_t row_stride, int64_t r0, uint8_t* group);
};

// The table entry of a packing (Packing::none included).
const PackingInfo& packing_info(Packing packing) noexcept;

// The packing named `name` (its table name, e.g. "q8_0_x16"; "none" too), or nullopt.
std::optional<Packing> packing_from_name(std::string_view name) noexcept;

// Bytes a packed [rows, cols] matrix takes (rows rounded up to whole panels).
int64_t packed_nbytes(Packing packing, const Shape& shape);

// Whether a tensor of `dtype` and `shape` can hold `packing`: the packing's dtype, rank 2,
// rows of whole blocks (Tensor::packed, can_pack and the pack reader ask).
bool packing_fits(Packing packing, DType dtype, const Shape& shape) noexcept;

// Whether `t` can be packed as `packing`: a contiguous, non-empty row-major tensor that
// packing_fits.
bool can_pack(const Tensor& t, Packing packing) noexcept;

// An owned packed copy of the row-major `t` (can_pack must hold, else
// Error(invalid_argument)); panels are split over `pool` when one is given.
Tensor pack(const Tensor& t, Packing packing, ThreadPool* pool = nullptr);
// The same, written into `storage` (owned, writable) at `byte_offset`, which must leave
// packed_nbytes(packing, t.shape()) bytes (else Error(internal)): how the loader packs
// matrices it multiplies as one straight into one buffer (model/joined_products.hpp).
Tensor pack_into(const Tensor& t, Packing packing, std::shared_ptr<Storage> storage, uint64_t byte_offset,
                 ThreadPool* pool = nullptr);

// An owned row-major copy of a packed tensor (panels split over `pool` when one is
// given); a tensor that is not packed is returned as it is (no copy).
Tensor unpack(const Tensor& t, ThreadPool* pool = nullptr);

// Row `row` of the 2-D `t` as the dtype's row bytes (dtype_bytes of one row) into `out`:
// unpacked from its panel when `t` is packed, copied when it is row-major and contiguous.
// What an embedding lookup in a packed (tied) table reads. Throws Error(invalid_argument)
// for a row outside the matrix or another layout.
void unpack_row(const Tensor& t, int64_t row, void* out);

}  // namespace loom
