#include "tensor/packing.hpp"

#include <array>
#include <cstring>

#include "loom/error.hpp"
#include "loom/thread_pool.hpp"

namespace loom {

namespace {


// q8_0_x16: the byte of (row r of the panel, column k of block b) and of row r's scale.
constexpr int64_t kQ8Rows = 16;
constexpr int64_t kQ8ScaleGroup = 2 * kQ8Rows;   // 16 f16
constexpr int64_t kQ8QuantGroup = 32 * kQ8Rows;  // 512 bytes
constexpr int64_t kQ8Group = kQ8ScaleGroup + kQ8QuantGroup;  // one block of a panel: scales, then quants
constexpr int64_t q8_quant_at(int64_t r, int64_t k) { return (k / 4) * 64 + r * 4 + k % 4; }

void pack_q8_0_panel(const uint8_t* rows, int64_t n_rows, int64_t nb, int64_t panel, uint8_t* out) {
  const int64_t row_bytes = nb * 34;
  uint8_t* scales = out;                 // block b's at scales + b * kQ8Group
  uint8_t* quants = out + kQ8ScaleGroup;  // block b's at quants + b * kQ8Group
  for (int64_t r = 0; r < kQ8Rows; ++r) {
    const int64_t row = panel * kQ8Rows + r;
    for (int64_t b = 0; b < nb; ++b) {
      uint8_t* q = quants + b * kQ8Group;
      if (row >= n_rows) {  // padding: scale 0, quants 0 (stored 128)
        std::memset(scales + b * kQ8Group + 2 * r, 0, 2);
        for (int64_t k = 0; k < 32; ++k) q[q8_quant_at(r, k)] = 128;
        continue;
      }
      const uint8_t* block = rows + row * row_bytes + b * 34;
      std::memcpy(scales + b * kQ8Group + 2 * r, block, 2);
      for (int64_t k = 0; k < 32; ++k) q[q8_quant_at(r, k)] = static_cast<uint8_t>(block[2 + k] ^ 0x80);
    }
  }
}

void unpack_q8_0_panel(const uint8_t* in, int64_t n_rows, int64_t nb, int64_t panel, uint8_t* rows) {
  const int64_t row_bytes = nb * 34;
  const uint8_t* scales = in;
  const uint8_t* quants = in + kQ8ScaleGroup;
  for (int64_t r = 0; r < kQ8Rows && panel * kQ8Rows + r < n_rows; ++r) {
    uint8_t* row = rows + (panel * kQ8Rows + r) * row_bytes;
    for (int64_t b = 0; b < nb; ++b) {
      std::memcpy(row + b * 34, scales + b * kQ8Group + 2 * r, 2);
      const uint8_t* q = quants + b * kQ8Group;
      for (int64_t k = 0; k < 32; ++k) row[b * 34 + 2 + k] = static_cast<uint8_t>(q[q8_quant_at(r, k)] ^ 0x80);
    }
  }
}

// q4_k_x16: per block of 256 columns a 2368-byte group (packing.hpp): 16 d, 16 dmin,
// the 6-bit scales and mins as bytes, then the nibble bytes four columns by sixteen rows.
constexpr int64_t kQ4KRowBlock = 144;   // d, dmin, 12 scale bytes, 128 nibble bytes
constexpr int64_t kQ4KGroup = 148 * 16;  // one block of a panel, packed
constexpr int64_t kQ4KScales = 64, kQ4KMins = 192, kQ4KQuants = 320;  // offsets in the group
// Byte c (0..127) of row r's nibbles: pair g = c / 32, vector j = (c % 32) / 4, lane r.
constexpr int64_t q4k_quant_at(int64_t r, int64_t c) { return (c / 32) * 512 + ((c % 32) / 4) * 64 + r * 4 + c % 4; }

// The eight 6-bit scales and mins of a q4_k block from its 12 bytes, and back (every bit
// of the 12 bytes is one of the 96 bits of the sixteen values, so this is exact).
void q4k_decode_scales(const uint8_t* s, uint8_t* sc, uint8_t* m) {
  for (int j = 0; j < 4; ++j) {
    sc[j] = s[j] & 63;
    m[j] = s[j + 4] & 63;
    sc[j + 4] = static_cast<uint8_t>((s[j + 8] & 0xF) | ((s[j] >> 6) << 4));
    m[j + 4] = static_cast<uint8_t>((s[j + 8] >> 4) | ((s[j + 4] >> 6) << 4));
  }
}
void q4k_encode_scales(const uint8_t* sc, const uint8_t* m, uint8_t* s) {
  for (int j = 0; j < 4; ++j) {
    s[j] = static_cast<uint8_t>((sc[j] & 63) | ((sc[j + 4] >> 4) << 6));
    s[j + 4] = static_cast<uint8_t>((m[j] & 63) | ((m[j + 4] >> 4) << 6));
    s[j + 8] = static_cast<uint8_t>((sc[j + 4] & 0xF) | ((m[j + 4] & 0xF) << 4));
  }
}

void pack_q4_k_panel(const uint8_t* rows, int64_t n_rows, int64_t nb, int64_t panel, uint8_t* out) {
  std::memset(out, 0, static_cast<size_t>(nb * kQ4KGroup));  // padding rows: all zero
  for (int64_t r = 0; r < 16; ++r) {
    const int64_t row = panel * 16 + r;
    if (row >= n_rows) break;
    for (int64_t b = 0; b < nb; ++b) {
      const uint8_t* block = rows + (row * nb + b) * kQ4KRowBlock;
      uint8_t* g = out + b * kQ4KGroup;
      std::memcpy(g + 2 * r, block, 2);           // d
      std::memcpy(g + 32 + 2 * r, block + 2, 2);  // dmin
      uint8_t sc[8], m[8];
      q4k_decode_scales(block + 4, sc, m);
      for (int s = 0; s < 8; ++s) {
        g[kQ4KScales + s * 16 + r] = sc[s];
        g[kQ4KMins + (s / 2) * 32 + r * 2 + s % 2] = m[s];
      }
      for (int64_t c = 0; c < 128; ++c) g[kQ4KQuants + q4k_quant_at(r, c)] = block[16 + c];
    }
  }
}

void unpack_q4_k_panel(const uint8_t* in, int64_t n_rows, int64_t nb, int64_t panel, uint8_t* rows) {
  for (int64_t r = 0; r < 16 && panel * 16 + r < n_rows; ++r) {
    for (int64_t b = 0; b < nb; ++b) {
      uint8_t* block = rows + ((panel * 16 + r) * nb + b) * kQ4KRowBlock;
      const uint8_t* g = in + b * kQ4KGroup;
      std::memcpy(block, g + 2 * r, 2);
      std::memcpy(block + 2, g + 32 + 2 * r, 2);
      uint8_t sc[8], m[8];
      for (int s = 0; s < 8; ++s) {
        sc[s] = g[kQ4KScales + s * 16 + r];
        m[s] = g[kQ4KMins + (s / 2) * 32 + r * 2 + s % 2];
      }
      q4k_encode_scales(sc, m, block + 4);
      for (int64_t c = 0; c < 128; ++c) block[16 + c] = g[kQ4KQuants + q4k_quant_at(r, c)];
    }
  }
}

// q4_0_x16: per block a 288-byte group: the 16 rows' f16 scales, then four vectors of 64
// bytes, vector j holding row r's nibble bytes 4j..4j+3 at bytes 4r..4r+3.
constexpr int64_t kQ40Group = 32 + 4 * 64;

void pack_q4_0_panel(const uint8_t* rows, int64_t n_rows, int64_t nb, int64_t panel, uint8_t* out) {
  for (int64_t b = 0; b < nb; ++b) {
    uint8_t* g = out + b * kQ40Group;
    for (int64_t r = 0; r < 16; ++r) {
      const int64_t row = panel * 16 + r;
      if (row >= n_rows) {  // padding: scale 0, nibbles 8 (the value 0)
        std::memset(g + 2 * r, 0, 2);
        for (int64_t i = 0; i < 16; ++i) g[32 + (i / 4) * 64 + r * 4 + i % 4] = 0x88;
        continue;
      }
      const uint8_t* block = rows + (row * nb + b) * 18;
      std::memcpy(g + 2 * r, block, 2);
      for (int64_t i = 0; i < 16; ++i) g[32 + (i / 4) * 64 + r * 4 + i % 4] = block[2 + i];
    }
  }
}

void unpack_q4_0_panel(const uint8_t* in, int64_t n_rows, int64_t nb, int64_t panel, uint8_t* rows) {
  for (int64_t r = 0; r < 16 && panel * 16 + r < n_rows; ++r) {
    for (int64_t b = 0; b < nb; ++b) {
      uint8_t* block = rows + ((panel * 16 + r) * nb + b) * 18;
      const uint8_t* g = in + b * kQ40Group;
      std::memcpy(block, g + 2 * r, 2);
      for (int64_t i = 0; i < 16; ++i) block[2 + i] = g[32 + (i / 4) * 64 + r * 4 + i % 4];
    }
  }
}

// q6_k_x16: per block a 3360-byte group (packing.hpp): 16 f16 d, the 16 int8 scales
// [group][row], then for each half h and column chunk j three vectors: row r's
// ql[64h + 4j ..], ql[64h + 32 + 4j ..] and qh[32h + 4j ..] at 4r.
constexpr int64_t kQ6KRowBlock = 210;  // ql[128], qh[64], scales[16], d
constexpr int64_t kQ6KGroup = 210 * 16;
constexpr int64_t kQ6KScales = 32, kQ6KChunks = 288;
// Where byte i of a row's ql (0..127) and qh (0..63) go, lane r.
constexpr int64_t q6k_low_at(int64_t r, int64_t i) {
  const int64_t h = i / 64, part = i % 64 / 32, j = i % 32 / 4;
  return kQ6KChunks + ((h * 8 + j) * 3 + part) * 64 + r * 4 + i % 4;
}
constexpr int64_t q6k_high_at(int64_t r, int64_t i) {
  const int64_t h = i / 32, j = i % 32 / 4;
  return kQ6KChunks + ((h * 8 + j) * 3 + 2) * 64 + r * 4 + i % 4;
}

void pack_q6_k_panel(const uint8_t* rows, int64_t n_rows, int64_t nb, int64_t panel, uint8_t* out) {
  std::memset(out, 0, static_cast<size_t>(nb * kQ6KGroup));  // padding rows: all zero
  for (int64_t r = 0; r < 16 && panel * 16 + r < n_rows; ++r) {
    for (int64_t b = 0; b < nb; ++b) {
      const uint8_t* block = rows + ((panel * 16 + r) * nb + b) * kQ6KRowBlock;
      uint8_t* g = out + b * kQ6KGroup;
      std::memcpy(g + 2 * r, block + 208, 2);
      for (int64_t s = 0; s < 16; ++s) g[kQ6KScales + s * 16 + r] = block[192 + s];
      for (int64_t i = 0; i < 128; ++i) g[q6k_low_at(r, i)] = block[i];
      for (int64_t i = 0; i < 64; ++i) g[q6k_high_at(r, i)] = block[128 + i];
    }
  }
}

void unpack_q6_k_panel(const uint8_t* in, int64_t n_rows, int64_t nb, int64_t panel, uint8_t* rows) {
  for (int64_t r = 0; r < 16 && panel * 16 + r < n_rows; ++r) {
    for (int64_t b = 0; b < nb; ++b) {
      uint8_t* block = rows + ((panel * 16 + r) * nb + b) * kQ6KRowBlock;
      const uint8_t* g = in + b * kQ6KGroup;
      std::memcpy(block + 208, g + 2 * r, 2);
      for (int64_t s = 0; s < 16; ++s) block[192 + s] = g[kQ6KScales + s * 16 + r];
      for (int64_t i = 0; i < 128; ++i) block[i] = g[q6k_low_at(r, i)];
      for (int64_t i = 0; i < 64; ++i) block[128 + i] = g[q6k_high_at(r, i)];
    }
  }
}

constexpr std::array<PackingInfo, 5> kPackings{{
    {Packing::none, "none", DType::f32, 1, 1, 0, nullptr, nullptr},
    {Packing::q8_0_x16, "q8_0_x16", DType::q8_0, 16, 32, 34, pack_q8_0_panel, unpack_q8_0_panel},
    {Packing::q4_k_x16, "q4_k_x16", DType::q4_k, 16, 256, 148, pack_q4_k_panel, unpack_q4_k_panel},
    {Packing::q4_0_x16, "q4_0_x16", DType::q4_0, 16, 32, 18, pack_q4_0_panel, unpack_q4_0_panel},
    {Packing::q6_k_x16, "q6_k_x16", DType::q6_k, 16, 256, 210, pack_q6_k_panel, unpack_q6_k_panel},
}};

// Where a packed [rows, cols] matrix's panels lie.
struct Geometry {
  int64_t rows;
  int64_t nb;      // blocks per row
  int64_t panels;
  int64_t stride;  // bytes per panel
};

Geometry geometry(const PackingInfo& info, const Shape& shape) {
  const int64_t nb = shape[1] / info.block_cols;
  return {shape[0], nb, (shape[0] + info.panel_rows - 1) / info.panel_rows, nb * info.block_bytes * info.panel_rows};
}

}  // namespace

const PackingInfo& packing_info(Packing packing) noexcept {
  for (const auto& p : kPackings) {
    if (p.id == packing) return p;
  }
  return kPackings[0];
}

std::optional<Packing> packing_from_name(std::string_view name) noexcept {
  for (const auto& p : kPackings) {
    if (p.name == name) return p.id;
  }
  return std::nullopt;
}

int64_t packed_nbytes(Packing packing, const Shape& shape) {
  if (packing == Packing::none || shape.rank() != 2) return 0;
  const Geometry g = geometry(packing_info(packing), shape);
  return g.panels * g.stride;
}

bool can_pack(const Tensor& t, Packing packing) noexcept {
  const PackingInfo& info = packing_info(packing);
  return packing != Packing::none && t.defined() && t.dtype() == info.dtype && t.shape().rank() == 2 &&
         t.layout() == Layout::row_major && t.is_contiguous() && t.shape()[1] % info.block_cols == 0 &&
         t.shape()[0] > 0 && t.shape()[1] > 0;
}

Tensor pack(const Tensor& t, Packing packing, ThreadPool* pool) {
  if (!can_pack(t, packing)) {
    throw Error(ErrorCode::invalid_argument, "cannot pack " + t.describe() + " as " +
                                                 std::string(packing_info(packing).name));
  }
  const PackingInfo& info = packing_info(packing);
  const Geometry g = geometry(info, t.shape());
  Tensor out = Tensor::packed(Storage::allocate(static_cast<size_t>(g.panels * g.stride)), 0, t.shape(), t.dtype(), packing);
  const auto* src = static_cast<const uint8_t*>(t.raw_data());
  auto* dst = static_cast<uint8_t*>(out.mutable_raw_data());
  auto run = [&](int64_t begin, int64_t end) {
    for (int64_t p = begin; p < end; ++p) info.pack_panel(src, g.rows, g.nb, p, dst + p * g.stride);
  };
  if (pool != nullptr) {
    pool->parallel_for(g.panels, 1, [&](int64_t begin, int64_t end, int) { run(begin, end); });
  } else {
    run(0, g.panels);
  }
  return out;
}

Tensor unpack(const Tensor& t, ThreadPool* pool) {
  if (t.packing() == Packing::none) return t;
  const PackingInfo& info = packing_info(t.packing());
  const Geometry g = geometry(info, t.shape());
  Tensor out = Tensor::empty(t.shape(), t.dtype());
  const auto* src = static_cast<const uint8_t*>(t.raw_data());
  auto* dst = static_cast<uint8_t*>(out.mutable_raw_data());
  auto run = [&](int64_t begin, int64_t end) {
    for (int64_t p = begin; p < end; ++p) info.unpack_panel(src + p * g.stride, g.rows, g.nb, p, dst);
  };
  if (pool != nullptr) {
    pool->parallel_for(g.panels, 1, [&](int64_t begin, int64_t end, int) { run(begin, end); });
  } else {
    run(0, g.panels);
  }
  return out;
}

}  // namespace loom
