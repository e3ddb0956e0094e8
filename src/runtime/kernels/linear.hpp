// Internal: the products of activations with weight matrices.
//
// A weight W has logical shape [rows, cols] (out features x in features), stored
// row-major in f32, f16, bf16 or a block-quantized dtype. Activations are f32.
#pragma once

#include <algorithm>
#include <atomic>
#include <cstdint>

#include "loom/tensor.hpp"
#include "loom/thread_pool.hpp"
#include "tensor/kernel_registry.hpp"

namespace loom::kernels {

// y[r - r0] = dot(W[r, :], x) for r in [r0, r1). Single-threaded; plain dtypes only.
void matvec_rows(const Tensor& w, const float* x, float* y, int64_t r0, int64_t r1);

// Y[t, r] = dot(W[r, :], X[t, :]) + (bias ? bias[r] : 0) for t < n_tokens, r < rows.
// X is [n_tokens, cols] with row stride x_stride, Y is [n_tokens, rows] with row stride
// y_stride. Rows are split across the pool's threads. n_tokens == 1 streams W once
// (decode); larger batches use register-blocked matrix-matrix products (prefill).
//
// Batch invariant (docs/runtime.md, "Batch invariance"): for every dtype, ISA level and
// thread count, row t of Y is bit-identical to the product of X[t] alone (n_tokens = 1),
// whatever the other tokens and n_tokens, bias included.
// The one exception is the opt-in `bf16_activations`: for bf16 weights in prefill, round
// the activations to bf16 and use the CPU's bf16 dot-product instructions (AVX512-BF16
// only; twice the f32 rate; ~3 significant digits of the activations kept, as llama.cpp
// does for bf16 weights). Decode does not round, so with it on a prefilled token's
// outputs differ from the same token decoded alone. Off: f32 activations, invariant.
void linear(const Tensor& w, const Tensor* bias, const float* x, int64_t x_stride,
            int64_t n_tokens, float* y, int64_t y_stride, ThreadPool& pool,
            bool bf16_activations = false);

// Runs rows(t0, t1, thread) over the tokens [0, n_tokens) of a product's activation
// quantization: on the pool, except for one or two tokens (or no pool), which stay on
// this thread: a row quantizes in about a microsecond, less than waking the pool costs,
// and decode would otherwise pay two parallel sections per product.
template <class Rows>
void quantize_token_rows(ThreadPool* pool, int64_t n_tokens, Rows&& rows) {
  if (pool == nullptr || n_tokens <= 2) {
    rows(0, n_tokens, 0);
  } else {
    pool->parallel_for(n_tokens, 1, rows);
  }
}

// Runs fn(begin, end) over the output rows [0, n) of a product of n_tokens tokens, on the
// pool, in pieces that are multiples of `grain`.
//   * Decode (one token): chunks of about a kChunksPerThread-th of a thread's even share,
//     handed out from a shared counter, so a thread the VM deschedules, or a slower one,
//     leaves its later chunks to the others instead of holding everyone at the end of the
//     section. perf, share of decode time in the pool's waits (loom_batched_decode, small
//     shape, 2 threads, 2026-12-03): f16 17% -> 8%, packed q4_k 19% -> 12%.
//   * Several tokens: one contiguous even share per thread (parallel_for's split), so the
//     kernels' L2 blocks of rows stay whole: with chunks, packed q8_0 prefill of 128
//     tokens ran 15-20% slower (blocks cut at chunk edges each cost a full pass of the
//     activations).
// Which thread runs a row changes no bit: each output row is computed by one call,
// whatever its range.
inline constexpr int64_t kChunksPerThread = 4;
template <class Fn>
void split_rows(ThreadPool& pool, int64_t n, int64_t grain, int64_t n_tokens, Fn&& fn) {
  if (n <= 0) return;
  grain = std::max<int64_t>(grain, 1);
  const int64_t threads = pool.size();
  const int64_t units = (n + grain - 1) / grain;
  if (n_tokens != 1 || threads == 1 || units == 1) {
    pool.parallel_for(n, grain, [&](int64_t begin, int64_t end, int) { fn(begin, end); });
    return;
  }
  const int64_t chunk = std::max<int64_t>(1, units / (threads * kChunksPerThread)) * grain;
  std::atomic<int64_t> next{0};
  pool.parallel_for(threads, 1, [&](int64_t, int64_t, int) {
    for (int64_t begin = next.fetch_add(chunk); begin < n; begin = next.fetch_add(chunk)) {
      fn(begin, std::min(n, begin + chunk));
    }
  });
}

// y[t * y_stride + r] += bias[r] for rows [r0, r1) of n_tokens (nothing when bias is
// null): each kernel's share of the rows, inside its parallel section.
void add_bias(const Tensor* bias, int64_t r0, int64_t r1, int64_t n_tokens, float* y, int64_t y_stride);
// The packing (kernel-native layout) linear() runs fastest on for weights of `dtype` on
// this CPU at the current ISA cap, or Packing::none. Packed weights (w.packing()) go to
// their own kernels (runtime/kernels/packed_blocks32.hpp, packed_kquants.hpp).
Packing preferred_packing(DType dtype) noexcept;
// The products linear() runs for weights packed as `packing` (the packed-kernel files'
// tables, runtime/kernels/packed_panels.hpp), or nullptr when none reads it.
struct PackedProducts;
const PackedProducts* packed_products(Packing packing) noexcept;
// True when linear() has a kernel for weights of this dtype.
bool linear_supports(DType dtype) noexcept;

// The runtime's entries of the kernel registry (matrix_supports = linear_supports), which
// lower layers ask instead of calling into the runtime. Called by src/compose.cpp.
void register_kernels(KernelRegistry& registry) noexcept;

// Copies row `row` of an embedding table [vocab, dim] (any dtype) into out as f32.
void embedding_row(const Tensor& table, int64_t row, float* out);

}  // namespace loom::kernels
