#include "runtime/kernels/quant_dot.hpp"

#include <algorithm>
#include <array>
#include <string>

#include "loom/cpu.hpp"
#include "loom/error.hpp"
#include "runtime/kernels/quant_dot_kernels.hpp"
#include "tensor/quant/blocks.hpp"
#include "tensor/quant/quant.hpp"

namespace loom::quant {

namespace {

// Weights of this many bytes (a chunk of rows) are multiplied against every activation
// tile before moving on, so in prefill each weight byte comes from memory once and
// then from L2 (the activation tile stays in L1).
constexpr size_t kRowChunkBytes = 256 * 1024;

const kernels::KernelSet& kernel_set(DotFamily family) noexcept {
  switch (family) {
    case DotFamily::avx512_vnni: return kernels::avx512_vnni_kernels();
    case DotFamily::avx2: return kernels::avx2_kernels();
    case DotFamily::scalar: break;
  }
  return kernels::scalar_kernels();
}

bool family_supported(DotFamily family) noexcept {
  switch (family) {
    case DotFamily::scalar: return true;
    case DotFamily::avx2: return best_supported_isa() >= Isa::avx2;
    case DotFamily::avx512_vnni:
      return best_supported_isa() >= Isa::avx512 && cpu_features().avx512_vnni;
  }
  return false;
}

void require_supported(DotFamily family) {
  if (!family_supported(family)) {
    throw Error(
        ErrorCode::unsupported,
        "this CPU cannot run the " + std::string(dot_family_name(family)) + " quantized kernels");
  }
}

std::string name_of(DType dtype) { return std::string(dtype_name(dtype)); }

void check_cols(DType dtype, int64_t cols) {
  const auto block = dtype_traits(dtype).block_elems;
  if (cols <= 0 || cols % block != 0) {
    throw Error(ErrorCode::invalid_argument,
                "row of " + std::to_string(cols) + " elements is not a whole number of " +
                    name_of(dtype) + " blocks of " + std::to_string(block));
  }
}

size_t row_bytes_of(DType dtype, int64_t cols) {
  const auto& t = dtype_traits(dtype);
  return static_cast<size_t>(cols / t.block_elems) * static_cast<size_t>(t.block_bytes);
}

}  // namespace

namespace {
// The activation type of each weight type with kernels; f32 marks "no kernels".
DType activation_of(DType weight) noexcept {
  switch (weight) {
    case DType::q8_0:
    case DType::q4_0:
    case DType::q4_1:
    case DType::q5_0:
    case DType::q5_1:
    case DType::gq8_32:
    case DType::gq8_64:
    case DType::gq8_128:
    case DType::gq4_32:
    case DType::gq4_64:
    case DType::gq4_128: return DType::q8_0;
    case DType::q2_k:
    case DType::q3_k:
    case DType::q4_k:
    case DType::q5_k:
    case DType::q6_k: return DType::q8_k;
    default: return DType::f32;
  }
}
}  // namespace

bool has_kernels(DType weight) noexcept { return activation_of(weight) != DType::f32; }

DType activation_dtype(DType weight) {
  const DType act = activation_of(weight);
  if (act == DType::f32) {
    throw Error(ErrorCode::unsupported, "no quantized dot kernel for " + name_of(weight));
  }
  return act;
}

size_t activation_row_bytes(DType act, int64_t cols) {
  if (act != DType::q8_0 && act != DType::q8_k) {
    throw Error(ErrorCode::invalid_argument,
                name_of(act) + " is not an activation type (q8_0 or q8_k)");
  }
  check_cols(act, cols);
  return row_bytes_of(act, cols);
}

std::string_view dot_family_name(DotFamily family) noexcept {
  switch (family) {
    case DotFamily::scalar: return "scalar";
    case DotFamily::avx2: return "avx2";
    case DotFamily::avx512_vnni: return "avx512_vnni";
  }
  return "unknown";
}

DotFamily active_dot_family() noexcept {
  const Isa isa = active_isa();
  if (isa >= Isa::avx512 && cpu_features().avx512_vnni) return DotFamily::avx512_vnni;
  if (isa >= Isa::avx2) return DotFamily::avx2;
  return DotFamily::scalar;
}

std::vector<DotFamily> supported_dot_families() {
  std::vector<DotFamily> out;
  for (auto f : {DotFamily::scalar, DotFamily::avx2, DotFamily::avx512_vnni}) {
    if (family_supported(f)) out.push_back(f);
  }
  return out;
}

void quantize_activations_on(DotFamily family, DType act, const float* x, void* dst, int64_t n) {
  require_supported(family);
  activation_row_bytes(act, n);  // validates act and n
  const auto& set = kernel_set(family);
  auto* out = static_cast<uint8_t*>(dst);
  if (act == DType::q8_0) {
    set.quantize_q8_0(x, out, n);
  } else {
    set.quantize_q8_k(x, out, n);
  }
}

void quantize_activations(DType act, const float* x, void* dst, int64_t n) {
  quantize_activations_on(active_dot_family(), act, x, dst, n);
}

namespace {

// dot_rows with out[r * row_stride + t * token_stride]; the public entry points check
// that distinct outputs do not overlap.
void dot_rows_strided(DotFamily family, DType weight, const void* w, size_t row_bytes, int64_t rows,
                      int64_t cols, const void* act, size_t act_row_bytes, int64_t n_act, float* out,
                      int64_t row_stride, int64_t token_stride) {
  require_supported(family);
  const DType act_dtype = activation_dtype(weight);
  check_cols(weight, cols);
  check_cols(act_dtype, cols);
  if (rows < 0 || n_act < 0) {
    throw Error(ErrorCode::invalid_argument, "negative row or activation count");
  }
  if (rows == 0 || n_act == 0) return;
  if (row_bytes < row_bytes_of(weight, cols) || act_row_bytes < row_bytes_of(act_dtype, cols)) {
    throw Error(ErrorCode::invalid_argument,
                "row stride smaller than a row of " + std::to_string(cols) + " elements");
  }
  const auto& set = kernel_set(family);
  const auto& tiles = set.dot[static_cast<size_t>(weight)];
  const auto& groups = set.dot_group[static_cast<size_t>(weight)];
  const auto& preparation = set.prepare[static_cast<size_t>(weight)];
  const int64_t blocks = cols / dtype_traits(weight).block_elems;
  const auto* wbytes = static_cast<const uint8_t*>(w);
  const auto* abytes = static_cast<const uint8_t*>(act);

  const int64_t chunk_rows =
      n_act <= kernels::kMaxTile
          ? rows
          : std::max<int64_t>(1, static_cast<int64_t>(kRowChunkBytes / row_bytes));
  // q8_0 activations: their f16 block scales as f32, converted once here rather than once
  // per weight row in the kernels. Indexed by activation block (a group type's weight
  // block spans several).
  const int64_t act_blocks = cols / dtype_traits(act_dtype).block_elems;
  thread_local std::vector<float> act_scales;
  if (act_dtype == DType::q8_0) {
    act_scales.resize(static_cast<size_t>(n_act * act_blocks));
    for (int64_t t = 0; t < n_act; ++t) {
      const uint8_t* row = abytes + static_cast<size_t>(t) * act_row_bytes;
      float* dst = act_scales.data() + t * act_blocks;
      for (int64_t b = 0; b < act_blocks; ++b) {
        dst[b] = load_f16(row + static_cast<size_t>(b) * sizeof(BlockQ8_0));
      }
    }
  }

  thread_local std::vector<uint8_t> prepared;
  const size_t prepared_bytes = preparation.run ? preparation.bytes(blocks) : 0;
  if (preparation.run) {
    prepared.resize(static_cast<size_t>(n_act) * prepared_bytes);
    for (int64_t t = 0; t < n_act; ++t) {
      const float* scales = act_dtype == DType::q8_0 ? act_scales.data() + t * act_blocks : nullptr;
      preparation.run(abytes + static_cast<size_t>(t) * act_row_bytes, scales, blocks,
                      prepared.data() + static_cast<size_t>(t) * prepared_bytes);
    }
  }

  kernels::ActTile tile;
  std::array<float, kernels::kMaxTile> results{};
  for (int64_t r0 = 0; r0 < rows; r0 += chunk_rows) {
    const int64_t r1 = std::min(rows, r0 + chunk_rows);
    for (int64_t t0 = 0; t0 < n_act; t0 += kernels::kMaxTile) {
      const int nt = static_cast<int>(std::min<int64_t>(kernels::kMaxTile, n_act - t0));
      for (int t = 0; t < nt; ++t) {
        const auto i = static_cast<size_t>(t);
        tile.rows[i] = abytes + static_cast<size_t>(t0 + t) * act_row_bytes;
        tile.scales[i] = act_dtype == DType::q8_0 ? act_scales.data() + (t0 + t) * act_blocks : nullptr;
        tile.prepared[i] = preparation.run
                               ? prepared.data() + static_cast<size_t>(t0 + t) * prepared_bytes
                               : nullptr;
      }
      const kernels::RowDotFn fn = tiles[static_cast<size_t>(nt - 1)];
      int64_t r = r0;
      if (const kernels::RowGroupDotFn group = groups[static_cast<size_t>(nt - 1)]) {
        // Group i: row i of each of kRowGroup equal parts of the chunk.
        constexpr int64_t kG = kernels::kRowGroup;
        const int64_t part = (r1 - r0) / kG;
        std::array<float, kG * kernels::kMaxTile> group_results{};
        for (int64_t i = 0; i < part; ++i) {
          group(wbytes + static_cast<size_t>(r0 + i) * row_bytes, static_cast<size_t>(part) * row_bytes, tile,
                blocks, group_results.data());
          for (int64_t g = 0; g < kG; ++g) {
            float* dst = out + (r0 + i + g * part) * row_stride + t0 * token_stride;
            for (int t = 0; t < nt; ++t) {
              dst[t * token_stride] = group_results[static_cast<size_t>(g * kernels::kMaxTile + t)];
            }
          }
        }
        r = r0 + part * kG;
      }
      for (; r < r1; ++r) {
        fn(wbytes + static_cast<size_t>(r) * row_bytes, tile, blocks, results.data());
        float* dst = out + r * row_stride + t0 * token_stride;
        for (int t = 0; t < nt; ++t) dst[t * token_stride] = results[static_cast<size_t>(t)];
      }
    }
  }
}

}  // namespace

void dot_rows_on(DotFamily family, DType weight, const void* w, size_t row_bytes, int64_t rows,
                 int64_t cols, const void* act, size_t act_row_bytes, int64_t n_act, float* out,
                 int64_t out_stride) {
  if (rows > 1 && n_act > 0 && out_stride < n_act) {
    throw Error(ErrorCode::invalid_argument, "output stride smaller than the activation count");
  }
  dot_rows_strided(family, weight, w, row_bytes, rows, cols, act, act_row_bytes, n_act, out, out_stride, 1);
}

void dot_rows_token_major(DType weight, const void* w, size_t row_bytes, int64_t rows, int64_t cols,
                          const void* act, size_t act_row_bytes, int64_t n_act, float* out,
                          int64_t out_stride) {
  if (n_act > 1 && rows > 0 && out_stride < rows) {
    throw Error(ErrorCode::invalid_argument, "output stride smaller than the row count");
  }
  dot_rows_strided(active_dot_family(), weight, w, row_bytes, rows, cols, act, act_row_bytes, n_act, out, 1,
                   out_stride);
}

void dot_rows(DType weight, const void* w, size_t row_bytes, int64_t rows, int64_t cols,
              const void* act, size_t act_row_bytes, int64_t n_act, float* out,
              int64_t out_stride) {
  dot_rows_on(active_dot_family(), weight, w, row_bytes, rows, cols, act, act_row_bytes, n_act, out,
              out_stride);
}

void dequantize_rows(DType weight, const void* w, size_t row_bytes, int64_t rows,
                     const int64_t* row_ids, int64_t n, int64_t cols, float* out) {
  if (!can_dequantize(weight)) {
    throw Error(ErrorCode::unsupported, "cannot dequantize " + name_of(weight));
  }
  check_cols(weight, cols);
  if (row_bytes < row_bytes_of(weight, cols) || n < 0 || rows < 0) {
    throw Error(ErrorCode::invalid_argument, "inconsistent quantized table geometry");
  }
  for (int64_t i = 0; i < n; ++i) {
    if (row_ids[i] < 0 || row_ids[i] >= rows) {
      throw Error(ErrorCode::invalid_argument, "row id " + std::to_string(row_ids[i]) +
                                                   " outside a table of " + std::to_string(rows) +
                                                   " rows");
    }
  }
  const auto* base = static_cast<const uint8_t*>(w);
  for (int64_t i = 0; i < n; ++i) {
    dequantize(weight, base + static_cast<size_t>(row_ids[i]) * row_bytes, out + i * cols,
               static_cast<size_t>(cols));
  }
}

}  // namespace loom::quant
