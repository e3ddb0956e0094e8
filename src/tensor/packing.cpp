#include "tensor/packing.hpp"

#include <array>
#include <cstring>

#include "loom/error.hpp"
#include "loom/thread_pool.hpp"

namespace loom {

namespace {

constexpr std::array<PackingInfo, 2> kPackings{{
    {Packing::none, "none", DType::f32, 1, 1, 0},
    {Packing::q8_0_x16, "q8_0_x16", DType::q8_0, 16, 32, 34},
}};

// q8_0_x16: the byte of (row r of the panel, column k of block b) and of row r's scale.
constexpr int64_t kQ8Rows = 16;
constexpr int64_t kQ8ScaleGroup = 2 * kQ8Rows;   // 16 f16
constexpr int64_t kQ8QuantGroup = 32 * kQ8Rows;  // 512 bytes
constexpr int64_t q8_quant_at(int64_t r, int64_t k) { return (k / 4) * 64 + r * 4 + k % 4; }

void pack_q8_0_panel(const uint8_t* rows, int64_t n_rows, int64_t nb, int64_t panel, uint8_t* out) {
  const int64_t row_bytes = nb * 34;
  uint8_t* scales = out;
  uint8_t* quants = out + nb * kQ8ScaleGroup;
  for (int64_t r = 0; r < kQ8Rows; ++r) {
    const int64_t row = panel * kQ8Rows + r;
    for (int64_t b = 0; b < nb; ++b) {
      uint8_t* q = quants + b * kQ8QuantGroup;
      if (row >= n_rows) {  // padding: scale 0, quants 0 (stored 128)
        std::memset(scales + b * kQ8ScaleGroup + 2 * r, 0, 2);
        for (int64_t k = 0; k < 32; ++k) q[q8_quant_at(r, k)] = 128;
        continue;
      }
      const uint8_t* block = rows + row * row_bytes + b * 34;
      std::memcpy(scales + b * kQ8ScaleGroup + 2 * r, block, 2);
      for (int64_t k = 0; k < 32; ++k) q[q8_quant_at(r, k)] = static_cast<uint8_t>(block[2 + k] ^ 0x80);
    }
  }
}

void unpack_q8_0_panel(const uint8_t* in, int64_t n_rows, int64_t nb, int64_t panel, uint8_t* rows) {
  const int64_t row_bytes = nb * 34;
  const uint8_t* scales = in;
  const uint8_t* quants = in + nb * kQ8ScaleGroup;
  for (int64_t r = 0; r < kQ8Rows && panel * kQ8Rows + r < n_rows; ++r) {
    uint8_t* row = rows + (panel * kQ8Rows + r) * row_bytes;
    for (int64_t b = 0; b < nb; ++b) {
      std::memcpy(row + b * 34, scales + b * kQ8ScaleGroup + 2 * r, 2);
      const uint8_t* q = quants + b * kQ8QuantGroup;
      for (int64_t k = 0; k < 32; ++k) row[b * 34 + 2 + k] = static_cast<uint8_t>(q[q8_quant_at(r, k)] ^ 0x80);
    }
  }
}

int64_t panel_bytes(const PackingInfo& info, int64_t cols) {
  return cols / info.block_cols * info.block_bytes * info.panel_rows;
}

}  // namespace

const PackingInfo& packing_info(Packing packing) noexcept {
  for (const auto& p : kPackings) {
    if (p.id == packing) return p;
  }
  return kPackings[0];
}

int64_t packed_nbytes(Packing packing, const Shape& shape) {
  const PackingInfo& info = packing_info(packing);
  if (packing == Packing::none || shape.rank() != 2) return 0;
  const int64_t panels = (shape[0] + info.panel_rows - 1) / info.panel_rows;
  return panels * panel_bytes(info, shape[1]);
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
  const int64_t rows = t.shape()[0], nb = t.shape()[1] / info.block_cols;
  const int64_t panels = (rows + info.panel_rows - 1) / info.panel_rows;
  const int64_t stride = panel_bytes(info, t.shape()[1]);
  Tensor out = Tensor::packed(Storage::allocate(static_cast<size_t>(panels * stride)), 0, t.shape(), t.dtype(), packing);
  const auto* src = static_cast<const uint8_t*>(t.raw_data());
  auto* dst = static_cast<uint8_t*>(out.mutable_raw_data());
  auto run = [&](int64_t begin, int64_t end) {
    for (int64_t p = begin; p < end; ++p) pack_q8_0_panel(src, rows, nb, p, dst + p * stride);
  };
  if (pool != nullptr) {
    pool->parallel_for(panels, 1, [&](int64_t begin, int64_t end, int) { run(begin, end); });
  } else {
    run(0, panels);
  }
  return out;
}

Tensor unpack(const Tensor& t) {
  if (t.packing() == Packing::none) return t;
  const PackingInfo& info = packing_info(t.packing());
  const int64_t rows = t.shape()[0], nb = t.shape()[1] / info.block_cols;
  const int64_t panels = (rows + info.panel_rows - 1) / info.panel_rows;
  const int64_t stride = panel_bytes(info, t.shape()[1]);
  Tensor out = Tensor::empty(t.shape(), t.dtype());
  const auto* src = static_cast<const uint8_t*>(t.raw_data());
  auto* dst = static_cast<uint8_t*>(out.mutable_raw_data());
  for (int64_t p = 0; p < panels; ++p) unpack_q8_0_panel(src + p * stride, rows, nb, p, dst);
  return out;
}

}  // namespace loom
