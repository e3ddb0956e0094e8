#include "runtime/kernels/attention.hpp"

#include <algorithm>

#include "loom/convert.hpp"
#include "loom/cpu.hpp"
#include "loom/error.hpp"
#include "runtime/kernels/ops.hpp"

namespace loom::kernels {

namespace {

// The portable level: per query, the sequential dot product, libm's exp through softmax()
// and axpy() in position order, exactly the loop the forward pass had before the SIMD
// kernels (so the scalar ISA level's outputs did not move).
void attend_scalar(const float* q, int64_t n_queries, std::span<const KvSegment> segments, int64_t n_keys,
                   const AttentionShape& shape, float* scores, float* out) {
  const int64_t hd = shape.head_dim;
  std::vector<float> row(static_cast<size_t>(hd));
  auto cached = [&](const void* base, int64_t i) -> const float* {
    if (!shape.f16) return static_cast<const float*>(base) + i * hd;
    f16_to_f32(static_cast<const uint16_t*>(base) + i * hd, row.data(), static_cast<size_t>(hd));
    return row.data();
  };
  // Key i of a segment, gathered from its dimension-major panel.
  auto key = [&](const void* base, int64_t i) -> const float* {
    for (int64_t d = 0; d < hd; ++d) {
      const int64_t at = d * shape.key_stride + i;
      row[static_cast<size_t>(d)] = shape.f16 ? f16_to_f32_scalar(static_cast<const uint16_t*>(base)[at])
                                              : static_cast<const float*>(base)[at];
    }
    return row.data();
  };
  for (int64_t h = 0; h < n_queries; ++h) {
    const float* qv = q + h * hd;
    float* s = scores + h * n_keys;
    int64_t i = 0;
    for (const auto& seg : segments) {
      for (int64_t j = 0; j < seg.n; ++j) s[i++] = dot(qv, key(seg.keys, j), hd) * shape.scale;
    }
    if (shape.softcap > 0) softcap(s, n_keys, shape.softcap);
    softmax(s, n_keys);
    float* o = out + h * hd;
    std::fill(o, o + hd, 0.0f);
    i = 0;
    for (const auto& seg : segments) {
      for (int64_t j = 0; j < seg.n; ++j) axpy(s[i++], cached(seg.values, j), o, hd);
    }
  }
}

void check(int64_t n_queries, int64_t n_keys, const AttentionShape& shape) {
  if (n_queries < 1 || n_queries > 4 || n_keys < 1 || shape.head_dim < 1 || shape.key_stride < 1) {
    throw Error(ErrorCode::internal, "attend: " + std::to_string(n_queries) + " queries over " +
                                         std::to_string(n_keys) + " keys of head_dim " +
                                         std::to_string(shape.head_dim) + ", key stride " +
                                         std::to_string(shape.key_stride));
  }
}

}  // namespace

void attend(const float* q, int64_t n_queries, std::span<const KvSegment> segments, int64_t n_keys,
            const AttentionShape& shape, float* scores, float* out) {
  check(n_queries, n_keys, shape);
  if (active_isa() == Isa::scalar) return attend_scalar(q, n_queries, segments, n_keys, shape, scores, out);
  if (active_isa() == Isa::avx512) return attend_avx512(q, n_queries, segments, n_keys, shape, scores, out);
  attend_avx2(q, n_queries, segments, n_keys, shape, scores, out);
}

void attend_tokens(const float* q, int64_t q_token_stride, int64_t n_tokens, int64_t n_queries,
                   std::span<const KvSegment> segments, const int64_t* n_keys, const AttentionShape& shape,
                   float* scores, float* out, int64_t out_token_stride) {
  if (n_tokens < 1 || n_tokens > 4) {
    throw Error(ErrorCode::internal, "attend_tokens: " + std::to_string(n_tokens) + " tokens (1..4)");
  }
  for (int64_t u = 0; u < n_tokens; ++u) {
    check(n_queries, n_keys[u], shape);
    if (u > 0 && n_keys[u] < n_keys[u - 1]) throw Error(ErrorCode::internal, "attend_tokens: key counts decrease");
  }
  // The segments hold n_keys[n_tokens - 1] positions: the last token's own.
  if (n_tokens == 1) return attend(q, n_queries, segments, n_keys[0], shape, scores, out);
  if (active_isa() == Isa::avx512) {
    return attend_tokens_avx512(q, q_token_stride, n_tokens, n_queries, segments, n_keys, shape, scores, out,
                                out_token_stride);
  }
  if (active_isa() == Isa::avx2) {
    return attend_tokens_avx2(q, q_token_stride, n_tokens, n_queries, segments, n_keys, shape, scores, out,
                              out_token_stride);
  }
  // The scalar level: token u alone, over its own prefix of the segments.
  std::vector<KvSegment> own;
  for (int64_t u = 0; u < n_tokens; ++u) {
    own.clear();
    for (int64_t at = 0; const KvSegment& seg : segments) {
      if (at >= n_keys[u]) break;
      own.push_back({seg.keys, seg.values, std::min(seg.n, n_keys[u] - at)});
      at += seg.n;
    }
    attend(q + u * q_token_stride, n_queries, own, n_keys[u], shape, scores, out + u * out_token_stride);
  }
}

}  // namespace loom::kernels
