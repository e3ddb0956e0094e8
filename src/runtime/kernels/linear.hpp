// Internal: the products of activations with weight matrices.
//
// A weight W has logical shape [rows, cols] (out features x in features), stored
// row-major in f32, f16, bf16 or a block-quantized dtype. Activations are f32.
#pragma once

#include <algorithm>
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

// Runs fn(begin, end) over the output rows [0, n) of a product on the pool: one
// contiguous share per thread, in pieces that are multiples of `grain`. Contiguous
// shares keep the kernels' L2 blocks of rows whole (with chunks, packed q8_0 prefill of
// 128 tokens ran 15-20% slower: blocks cut at chunk edges each cost a full pass of the
// activations) and start each thread's weight streams once.
// Decode took chunks of a quarter of a thread's share from a shared counter for a while
// (Zen 4, 2026-12-03), so that a thread the VM deschedules leaves its later chunks to the
// others: the pool's waits fell from 17% to 8% of f16 decode's perf samples. On the Zen 5
// machines every chunk starting its streams cold cost more than that saved:
// `loom_ab_builds --batch 1 --repack auto`, decode one share over four chunks per thread,
// small q4_k pack 1.154 / 1.175x, small q8_0 GGUF 1.101 / 1.093x, small f16 GGUF 1.041 /
// 1.047x, 1B q8_0 GGUF 0.997 / 0.995x; two chunks per thread, or chunks of at least 2
// MiB, read 0.95-1.00x of one share (docs/runtime.md).
// The shares' sizes follow each thread's measured speed (ThreadPool::
// parallel_for_balanced), learnt apart for one token (bound by memory), batches of up
// to 16 and longer passes (bound by arithmetic): on the 2-vCPU Zen 5 machines one core
// of the two ran its even decode share 5-15% slower than the other, which then waited
// (a scratch timing of the pool over small q4_0 decode, 2026-12-07: a share about 25 us,
// the two 3-6 us apart on average; the slower core changed from run to run, and learnt
// shares brought the gap to 2 us). Which thread runs a row changes no bit: each output
// row is computed by one call, whatever its range.
inline int split_kind(int64_t n_tokens) { return n_tokens == 1 ? 0 : n_tokens <= 16 ? 1 : 2; }
template <class Fn>
void split_rows(ThreadPool& pool, int64_t n, int64_t grain, int64_t n_tokens, Fn&& fn) {
  if (n <= 0) return;
  pool.parallel_for_balanced(n, std::max<int64_t>(grain, 1), split_kind(n_tokens),
                             [&](int64_t begin, int64_t end, int) { fn(begin, end); });
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

// Copies row `row` of an embedding table [vocab, dim] (any dtype; row-major, or packed
// when it is a tied output's table) into out as f32.
void embedding_row(const Tensor& table, int64_t row, float* out);

}  // namespace loom::kernels
