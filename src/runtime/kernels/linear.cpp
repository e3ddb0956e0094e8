#include "runtime/kernels/linear.hpp"

#include <algorithm>
#include <array>
#include <span>
#include <vector>

#include "loom/convert.hpp"
#include "loom/cpu.hpp"
#include "loom/error.hpp"
#include "runtime/kernels/gemm_kernels.hpp"
#include "runtime/kernels/matvec_kernels.hpp"
#include "runtime/kernels/packed_kquants.hpp"
#include "runtime/kernels/packed_panels.hpp"
#include "runtime/kernels/packed_blocks32.hpp"
#include "runtime/kernels/packed_plain.hpp"
#include "runtime/kernels/quant_dot.hpp"
#include "tensor/packing.hpp"
#include "tensor/quant/quant.hpp"

namespace loom::kernels {

// ---- portable fallbacks ----

void matvec_f32_scalar(const float* w, int64_t stride, const float* x, float* y, int64_t n_rows,
                       int64_t cols) {
  for (int64_t r = 0; r < n_rows; ++r) {
    const float* row = w + r * stride;
    float acc = 0.0f;
    for (int64_t c = 0; c < cols; ++c) acc += row[c] * x[c];
    y[r] = acc;
  }
}

void matvec_f16_scalar(const uint16_t* w, int64_t stride, const float* x, float* y, int64_t n_rows,
                       int64_t cols) {
  for (int64_t r = 0; r < n_rows; ++r) {
    const uint16_t* row = w + r * stride;
    float acc = 0.0f;
    for (int64_t c = 0; c < cols; ++c) acc += f16_to_f32_scalar(row[c]) * x[c];
    y[r] = acc;
  }
}

void matvec_bf16_scalar(const uint16_t* w, int64_t stride, const float* x, float* y,
                        int64_t n_rows, int64_t cols) {
  for (int64_t r = 0; r < n_rows; ++r) {
    const uint16_t* row = w + r * stride;
    float acc = 0.0f;
    for (int64_t c = 0; c < cols; ++c) acc += bf16_to_f32_scalar(row[c]) * x[c];
    y[r] = acc;
  }
}

// The scalar level's products: one token at a time through the matvec, so each output
// is the same sequential sum (k ascending) for any batch.
void gemm_f32_scalar(const float* w, int64_t stride, const float* x, int64_t x_stride,
                     int64_t n_tokens, float* y, int64_t y_stride, int64_t n_rows, int64_t cols) {
  for (int64_t t = 0; t < n_tokens; ++t) matvec_f32_scalar(w, stride, x + t * x_stride, y + t * y_stride, n_rows, cols);
}
void gemm_f16_scalar(const uint16_t* w, int64_t stride, const float* x, int64_t x_stride,
                     int64_t n_tokens, float* y, int64_t y_stride, int64_t n_rows, int64_t cols) {
  for (int64_t t = 0; t < n_tokens; ++t) matvec_f16_scalar(w, stride, x + t * x_stride, y + t * y_stride, n_rows, cols);
}
void gemm_bf16_scalar(const uint16_t* w, int64_t stride, const float* x, int64_t x_stride,
                      int64_t n_tokens, float* y, int64_t y_stride, int64_t n_rows, int64_t cols) {
  for (int64_t t = 0; t < n_tokens; ++t) matvec_bf16_scalar(w, stride, x + t * x_stride, y + t * y_stride, n_rows, cols);
}

namespace {

using F32Kernel = void (*)(const float*, int64_t, const float*, float*, int64_t, int64_t);
using U16Kernel = void (*)(const uint16_t*, int64_t, const float*, float*, int64_t, int64_t);
using F32Gemm = void (*)(const float*, int64_t, const float*, int64_t, int64_t, float*, int64_t,
                         int64_t, int64_t);
using U16Gemm = void (*)(const uint16_t*, int64_t, const float*, int64_t, int64_t, float*,
                         int64_t, int64_t, int64_t);

// One ISA's matvec and gemm: they sum each output in the same order (batch invariance).
struct PlainTable {
  F32Kernel f32;
  U16Kernel f16;
  U16Kernel bf16;
  F32Gemm gemm_f32;
  U16Gemm gemm_f16;
  U16Gemm gemm_bf16;
};

// Indexed by loom::Isa.
constexpr PlainTable kPlain[] = {
    {matvec_f32_scalar, matvec_f16_scalar, matvec_bf16_scalar, gemm_f32_scalar, gemm_f16_scalar,
     gemm_bf16_scalar},
    {matvec_f32_avx2, matvec_f16_avx2, matvec_bf16_avx2, gemm_f32_avx2, gemm_f16_avx2,
     gemm_bf16_avx2},
    {matvec_f32_avx512, matvec_f16_avx512, matvec_bf16_avx512, gemm_f32_avx512, gemm_f16_avx512,
     gemm_bf16_avx512},
};

// Y[t, r] for rows [r0, r1) of a plain-dtype weight, every token.
void gemm_rows(const Tensor& w, int64_t r0, int64_t r1, const float* x, int64_t x_stride,
               int64_t n_tokens, float* y, int64_t y_stride) {
  const int64_t cols = w.shape()[1];
  const PlainTable& k = kPlain[static_cast<int>(active_isa())];
  float* yr = y + r0;
  switch (w.dtype()) {
    case DType::f32:
      return k.gemm_f32(w.data<float>() + r0 * cols, cols, x, x_stride, n_tokens, yr, y_stride, r1 - r0, cols);
    case DType::f16:
      return k.gemm_f16(w.data<uint16_t>() + r0 * cols, cols, x, x_stride, n_tokens, yr, y_stride, r1 - r0, cols);
    case DType::bf16:
      return k.gemm_bf16(w.data<uint16_t>() + r0 * cols, cols, x, x_stride, n_tokens, yr, y_stride, r1 - r0, cols);
    default: break;
  }
  throw Error(ErrorCode::unsupported,
              "no matrix-matrix kernel for weight dtype " + std::string(dtype_name(w.dtype())));
}

void check_weight(const Tensor& w) {
  if (w.shape().rank() != 2 || !w.is_contiguous() || w.layout() != Layout::row_major) {
    throw Error(ErrorCode::internal,
                "linear needs a contiguous row-major 2-D weight, got " + w.describe());
  }
}


void linear_quantized(const Tensor& w, const float* x, int64_t x_stride, int64_t n_tokens,
                      float* y, int64_t y_stride, ThreadPool& pool, const Tensor* bias) {
  const int64_t rows = w.shape()[0];
  const int64_t cols = w.shape()[1];
  const DType act = quant::activation_dtype(w.dtype());
  const auto act_row_bytes = static_cast<size_t>(dtype_bytes(act, cols, cols));
  thread_local std::vector<std::byte> activations;
  activations.resize(act_row_bytes * static_cast<size_t>(n_tokens));
  std::byte* act_data = activations.data();
  auto quantize = [&](int64_t t0, int64_t t1, int) {
    for (int64_t t = t0; t < t1; ++t) {
      quant::quantize_activations(act, x + t * x_stride, act_data + static_cast<size_t>(t) * act_row_bytes, cols);
    }
  };
  quantize_token_rows(&pool, n_tokens, quantize);
  const auto row_bytes = static_cast<size_t>(dtype_bytes(w.dtype(), cols, cols));
  const auto* base = static_cast<const std::byte*>(w.raw_data());
  split_rows(pool, rows, 16, n_tokens, [&](int64_t r0, int64_t r1) {
    quant::dot_rows_token_major(w.dtype(), base + static_cast<size_t>(r0) * row_bytes, row_bytes, r1 - r0, cols,
                                act_data, act_row_bytes, n_tokens, y + r0, y_stride);
    add_bias(bias, r0, r1, n_tokens, y, y_stride);
  });
}

}  // namespace

void add_bias(const Tensor* bias, int64_t r0, int64_t r1, int64_t n_tokens, float* y, int64_t y_stride) {
  if (bias == nullptr) return;
  const float* b = bias->data<float>();
  for (int64_t t = 0; t < n_tokens; ++t) {
    float* row = y + t * y_stride;
    for (int64_t r = r0; r < r1; ++r) row[r] += b[r];
  }
}

void matvec_rows(const Tensor& w, const float* x, float* y, int64_t r0, int64_t r1) {
  const int64_t cols = w.shape()[1];
  const PlainTable& k = kPlain[static_cast<int>(active_isa())];
  switch (w.dtype()) {
    case DType::f32: return k.f32(w.data<float>() + r0 * cols, cols, x, y, r1 - r0, cols);
    case DType::f16: return k.f16(w.data<uint16_t>() + r0 * cols, cols, x, y, r1 - r0, cols);
    case DType::bf16: return k.bf16(w.data<uint16_t>() + r0 * cols, cols, x, y, r1 - r0, cols);
    default: break;
  }
  throw Error(ErrorCode::unsupported,
              "no matrix-vector kernel for weight dtype " + std::string(dtype_name(w.dtype())));
}

void linear(const Tensor& w, const Tensor* bias, const float* x, int64_t x_stride,
            int64_t n_tokens, float* y, int64_t y_stride, ThreadPool& pool, bool bf16_activations) {
  if (w.packing() != Packing::none) {
    const PackedProducts* products = packed_products(w.packing());
    if (products == nullptr) {
      throw Error(ErrorCode::internal, "no packed kernel reads " + w.describe());
    }
    products->run(w, bias, x, x_stride, n_tokens, y, y_stride, pool);
    return;
  }
  check_weight(w);
  if (n_tokens <= 0) return;
  const int64_t rows = w.shape()[0];
  if (is_quantized(w.dtype())) {
    linear_quantized(w, x, x_stride, n_tokens, y, y_stride, pool, bias);
    return;
  }
  if (n_tokens == 1) {
    split_rows(pool, rows, 16, 1, [&](int64_t r0, int64_t r1) {
      matvec_rows(w, x, y + r0, r0, r1);
      add_bias(bias, r0, r1, 1, y, y_stride);
    });
    return;
  }
  // Opt-in, not batch-invariant: only prefill rounds the activations (see linear.hpp).
  if (bf16_activations && w.dtype() == DType::bf16 && gemm_bf16_dot_supported(w.shape()[1])) {
    // The calling thread's buffer, named through a local reference: inside the lambda
    // a thread_local would name each worker's own (empty) instance.
    thread_local PackedActivationsBf16 packed_storage;
    PackedActivationsBf16& packed = packed_storage;
    pack_activations_bf16(x, x_stride, n_tokens, w.shape()[1], packed);
    split_rows(pool, rows, 16, n_tokens, [&](int64_t r0, int64_t r1) {
      gemm_bf16_dot(w, r0, r1, packed, y, y_stride);
      add_bias(bias, r0, r1, n_tokens, y, y_stride);
    });
    return;
  }
  split_rows(pool, rows, 16, n_tokens, [&](int64_t r0, int64_t r1) {
    gemm_rows(w, r0, r1, x, x_stride, n_tokens, y, y_stride);
    add_bias(bias, r0, r1, n_tokens, y, y_stride);
  });
}

namespace {
// The packed-kernel files' tables: one entry per packing a kernel reads.
std::array<std::span<const PackedProducts>, 3> packed_tables() noexcept {
  return {packed_blocks32_products(), packed_kquants_products(), packed_plain_products()};
}
}  // namespace

const PackedProducts* packed_products(Packing packing) noexcept {
  for (const auto table : packed_tables()) {
    if (const PackedProducts* e = find_products(table, packing)) return e;
  }
  return nullptr;
}

bool linear_supports(DType dtype) noexcept {
  if (dtype == DType::f32 || dtype == DType::f16 || dtype == DType::bf16) return true;
  return is_quantized(dtype) && quant::has_kernels(dtype);
}

// The layout each dtype's packed kernel reads, where that kernel runs natively: the
// packing of that dtype (tensor/packing.cpp's table says which dtype a packing holds)
// whose products' native() holds. docs/quantization.md, "Packed weights": sixteen rows
// per VPDPBUSD (VNNI); 1.5-6x the row-major prefill; q8_0, q3_k and q6_k decode a little
// slower packed, q4_0 and q4_k faster. docs/runtime.md, "Plain-dtype panels": the
// f32/f16/bf16 broadcast GEMM (AVX-512). Elsewhere the scalar family's packed products
// are slower than the row-major ones.
Packing preferred_packing(DType dtype) noexcept {
  for (const auto table : packed_tables()) {
    for (const PackedProducts& e : table) {
      if (packing_info(e.packing).dtype == dtype && e.native()) return e.packing;
    }
  }
  return Packing::none;
}

void register_kernels(KernelRegistry& registry) noexcept {
  registry.matrix_supports = &linear_supports;
  registry.preferred_packing = &preferred_packing;
}

void embedding_row(const Tensor& table, int64_t row, float* out) {
  const int64_t rows = table.shape()[0];
  const int64_t cols = table.shape()[1];
  if (row < 0 || row >= rows) {
    throw Error(ErrorCode::invalid_argument,
                "token id " + std::to_string(row) + " is outside the vocabulary of " +
                    std::to_string(rows));
  }
  const int64_t row_bytes = dtype_bytes(table.dtype(), cols, cols);
  if (table.packing() != Packing::none) {  // a tied table packed for the output product
    thread_local std::vector<std::byte> bytes;
    bytes.resize(static_cast<size_t>(row_bytes));
    unpack_row(table, row, bytes.data());
    convert(table.dtype(), bytes.data(), DType::f32, out, static_cast<size_t>(cols));
    return;
  }
  convert(table.dtype(), static_cast<const std::byte*>(table.raw_data()) + row * row_bytes,
          DType::f32, out, static_cast<size_t>(cols));
}

}  // namespace loom::kernels
