// Internal: scaled dot-product attention of query heads over one sequence's cached keys
// and values (the KV cache's f32 or f16 panels), the inner loop of Forward::attention.
//
// One call handles a tile of 1..4 query heads that read the same cached positions (heads
// of one token that share a KV head under grouped-query attention), so each cached key
// and value is loaded once for the whole tile. The positions come as segments of
// consecutive positions (the cache is paged: positions are consecutive within a block).
// Keys are dimension-major (element d of a segment's key i at keys[d * key_stride + i]),
// so the vector kernels hold 8 or 16 consecutive keys in one register's lanes; values
// are rows of head_dim.
//
// Batch invariant: each query head's output is computed in a fixed order that depends
// only on its own query, the cached rows and the number of keys — never on the tile's
// size, the segments' boundaries, the other tokens of the pass or the thread count:
//   score_i = dot(q, k_i) as one fused multiply-add chain over d ascending (from 0),
//             times the scale — each key its own lane, so the AVX2 and AVX-512 kernels
//             (8 or 16 keys a vector) give the same bits;
//   softcap (when asked), then p = softmax(score) (max, exp, sum in fixed lanes);
//   out[d] = sum over i ascending of p_i * v_i[d], one fused multiply-add per step.
// The scalar level keeps the portable loop (sequential dot, libm exp, double sum).
//
// Single-threaded and reentrant; touches only its arguments.
#pragma once

#include <cstdint>
#include <span>

namespace loom::kernels {

// `n` consecutive cached positions (f32, or f16 bits): keys dimension-major with the
// shape's key_stride, values as rows of head_dim.
struct KvSegment {
  const void* keys = nullptr;
  const void* values = nullptr;
  int64_t n = 0;
};

struct AttentionShape {
  int64_t head_dim = 0;
  float scale = 1.0f;    // applied to every q.k
  float softcap = 0.0f;  // > 0: score = cap * tanh(score / cap) before the softmax
  bool f16 = false;      // the cached keys and values are f16
  int64_t key_stride = 0;  // elements between a key's consecutive dimensions (>= every segment's n)
};

// out[h * head_dim + d] for the n_queries (1..4) query rows q[h * head_dim ...]: attention
// over the positions of `segments` in order (n_keys = their total, >= 1). `scores` is
// scratch of n_queries * n_keys floats.
void attend(const float* q, int64_t n_queries, std::span<const KvSegment> segments, int64_t n_keys,
            const AttentionShape& shape, float* scores, float* out);

// attend() for n_tokens (1..4) consecutive tokens of one sequence at once, each with
// n_queries (1..4) query heads of one KV head: token u's heads at q + u * q_token_stride
// (h * head_dim apart), over the first n_keys[u] positions of `segments` (n_keys
// non-decreasing, >= 1; the segments hold n_keys[n_tokens - 1]), into out + u *
// out_token_stride. Token u's output is bit for bit attend()'s for it alone: one tile
// loads each cached key and value once for all the tokens' heads (a prompt's tokens read
// the same positions, so this divides the cache reads of a long prefill by up to 4), up
// to 16 query rows on AVX-512 and 8 on AVX2 (longer runs go in parts); the scalar level
// runs the tokens one by one. `scores` is scratch of n_tokens * n_queries *
// n_keys[n_tokens - 1] floats.
void attend_tokens(const float* q, int64_t q_token_stride, int64_t n_tokens, int64_t n_queries,
                   std::span<const KvSegment> segments, const int64_t* n_keys, const AttentionShape& shape,
                   float* scores, float* out, int64_t out_token_stride);

// The AVX2 family (attention_x86.cpp); attend() calls it on the AVX2 level.
void attend_avx2(const float* q, int64_t n_queries, std::span<const KvSegment> segments, int64_t n_keys,
                 const AttentionShape& shape, float* scores, float* out);
// The AVX-512 family: bit for bit attend_avx2's outputs, with 512-bit scores (two keys
// per vector) and weighted sums (16 lanes); attend() calls it on the AVX-512 level.
void attend_avx512(const float* q, int64_t n_queries, std::span<const KvSegment> segments, int64_t n_keys,
                   const AttentionShape& shape, float* scores, float* out);

// attend_tokens() on the AVX2 level, n_tokens 2..4 (in parts of at most 8 query rows).
void attend_tokens_avx2(const float* q, int64_t q_token_stride, int64_t n_tokens, int64_t n_queries,
                        std::span<const KvSegment> segments, const int64_t* n_keys, const AttentionShape& shape,
                        float* scores, float* out, int64_t out_token_stride);
// attend_tokens() on the AVX-512 level, n_tokens 2..4 (at most 16 query rows: one part).
void attend_tokens_avx512(const float* q, int64_t q_token_stride, int64_t n_tokens, int64_t n_queries,
                          std::span<const KvSegment> segments, const int64_t* n_keys, const AttentionShape& shape,
                          float* scores, float* out, int64_t out_token_stride);

// exp(x) for n floats in place, as attend's AVX2 softmax computes it (for tests): within
// 2 ulp of libm's expf for x >= -87, exactly 0 below -87.3 and for -inf.
void exp_avx2(float* x, int64_t n);

}  // namespace loom::kernels
