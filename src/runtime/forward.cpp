// The transformer forward pass over one or more sequences' new tokens, assembled from the
// choices in ModelConfig (norm, FFN, position encoding, biases, sliding window).
#include "runtime/forward.hpp"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <numbers>
#include <string>
#include <utility>

#include "loom/convert.hpp"
#include "loom/error.hpp"
#include "runtime/kernels/attention.hpp"
#include "runtime/kernels/linear.hpp"
#include "runtime/kernels/ops.hpp"
#include "model/joined_products.hpp"
#include "model/rope_frequencies.hpp"

namespace loom::runtime {

namespace {

template <typename T>
void ensure(std::vector<T>& v, int64_t n) {
  if (static_cast<int64_t>(v.size()) < n) v.resize(static_cast<size_t>(n));
}

// An optional bias as kernels::linear takes it: null when the model has none.
const Tensor* bias(const Tensor& b) { return b.defined() ? &b : nullptr; }

// The element-wise and per-row stages between the products (norms, activations, RoPE,
// residual adds, the q/k/v split) run fn(t0, t1) over rows [0, m) of `width` elements:
// on the pool once the pass holds at least `min_elements` of them, else on the calling
// thread, where a parallel section would cost more than it saves (decode). Each row is
// computed alike on either path and by whichever thread: the same bits. On the calling
// thread alone they were about a tenth of a 128-token prefill of the small shape at two
// threads (perf: the worker spinning while the caller ran them).
constexpr int64_t kCheapElements = 32768;  // norms, adds, copies, RoPE: about 0.1 ns an element
constexpr int64_t kActivationElements = 8192;  // exp-based activations: about 1 ns an element

template <class Fn>
void over_rows(ThreadPool& pool, int64_t m, int64_t width, int64_t min_elements, Fn&& fn) {
  if (m <= 1 || m * width < min_elements) {
    fn(int64_t{0}, m);
  } else {
    pool.parallel_for(m, 1, [&](int64_t t0, int64_t t1, int) { fn(t0, t1); });
  }
}

}  // namespace

// Which sequence and position each row of the pass belongs to.
struct Forward::Rows {
  std::vector<SeqKv*> kv;          // [M]
  std::vector<int64_t> position;   // [M]
  int64_t max_position = 0;
};

Forward::Forward(std::shared_ptr<const Model> model, ForwardOptions options, KvPool& pool)
    : model_(std::move(model)), options_(std::move(options)), kv_(pool) {
  if (!model_) throw Error(ErrorCode::invalid_argument, "a forward pass needs a model");
  if (!options_.pool) throw Error(ErrorCode::invalid_argument, "a forward pass needs a thread pool");
  const ModelConfig& c = model_->config();
  if (c.position == PositionKind::rope) {
    inv_freq_ = rope::inverse_frequencies(c, options_.context_length);
    rope_scale_ = rope::magnitude(c);
  }
  for (const LayerWeights& L : model_->weights().layers) {
    qkv_.push_back(joined_view(L, joined_products(Joined::qkv)));
    gate_up_.push_back(joined_view(L, joined_products(Joined::gate_up)));
  }
}

void Forward::trace(std::string_view name, const float* values, int64_t n, int64_t dim) const {
  if (!options_.trace) return;
  double sum = 0.0;
  for (int64_t i = 0; i < n * dim; ++i) sum += values[i];
  options_.trace(TraceEvent{name, n, dim, values, sum});
}

void Forward::rope_angles(int64_t position, float* cos_out, float* sin_out) const {
  const auto half = static_cast<int64_t>(inv_freq_.size());
  for (int64_t i = 0; i < half; ++i) {
    const double angle = static_cast<double>(position) * inv_freq_[static_cast<size_t>(i)];
    cos_out[i] = static_cast<float>(std::cos(angle) * rope_scale_);
    sin_out[i] = static_cast<float>(std::sin(angle) * rope_scale_);
  }
}

void Forward::norm_rows(const Tensor& w, const Tensor& b, const float* in, float* out, int64_t n) const {
  const ModelConfig& c = model_->config();
  const int64_t dim = c.hidden_size;
  const auto eps = static_cast<float>(c.norm_eps);
  over_rows(*options_.pool, n, dim, kCheapElements, [&](int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t) {
      if (c.norm == NormKind::rms_norm) {
        kernels::rms_norm(in + t * dim, w.data<float>(), eps, out + t * dim, dim);
      } else {
        kernels::layer_norm(in + t * dim, w.data<float>(), b.defined() ? b.data<float>() : nullptr, eps,
                            out + t * dim, dim);
      }
    }
  });
}

void Forward::store_kv(int64_t layer, const Rows& rows) {
  const ModelConfig& c = model_->config();
  const int64_t hd = c.head_dim;
  const auto m = static_cast<int64_t>(rows.kv.size());
  for (int64_t t = 0; t < m; ++t) {
    const SeqKv& kv = *rows.kv[static_cast<size_t>(t)];
    const int64_t p = rows.position[static_cast<size_t>(t)];
    const int32_t block = kv.block_of(p);
    const int64_t slot = kv.slot_of(p);
    for (int64_t g = 0; g < c.n_kv_heads; ++g) {
      kv_.store_row(block, slot, layer, 0, g, k_.data() + t * c.kv_dim() + g * hd);
      kv_.store_row(block, slot, layer, 1, g, v_.data() + t * c.kv_dim() + g * hd);
    }
  }
}

void Forward::attention(int64_t layer, const Rows& rows) {
  const ModelConfig& c = model_->config();
  const int64_t hd = c.head_dim;
  const int64_t group = c.n_heads / c.n_kv_heads;
  const kernels::AttentionShape shape{
      .head_dim = hd,
      .scale = 1.0f / std::sqrt(static_cast<float>(c.query_pre_attn_scalar > 0 ? c.query_pre_attn_scalar
                                                                              : static_cast<double>(hd))),
      .softcap = static_cast<float>(c.attn_logit_softcap),
      .f16 = kv_.dtype() == DType::f16,
      .key_stride = kv_.block_tokens()};
  const int64_t window = c.layer_slides(layer) ? c.sliding_window : 0;
  const int64_t bt = kv_.block_tokens();
  const int64_t longest = rows.max_position + 1;
  const auto m = static_cast<int64_t>(rows.kv.size());
  // Runs of up to 4 consecutive rows of one sequence at consecutive positions (a prompt
  // chunk), which attend together: each cached key and value is loaded once for the
  // run's tokens (kernels::attend_tokens). Layers with a sliding window take one token a
  // run (their tokens' first positions differ).
  // (A reference: inside the workers' lambda the thread_local's name would be their own.)
  thread_local std::vector<std::pair<int64_t, int64_t>> run_storage;  // (first row, rows)
  std::vector<std::pair<int64_t, int64_t>>& runs = run_storage;
  runs.clear();
  for (int64_t t = 0; t < m;) {
    int64_t n = 1;
    while (window == 0 && n < 4 && t + n < m && rows.kv[static_cast<size_t>(t + n)] == rows.kv[static_cast<size_t>(t)] &&
           rows.position[static_cast<size_t>(t + n)] == rows.position[static_cast<size_t>(t)] + n) {
      ++n;
    }
    runs.emplace_back(t, n);
    t += n;
  }
  // One work item: a run's tokens x a tile of up to 4 query heads that share a KV head,
  // so each cached row is read once for the tile. Items are handed out from a shared
  // counter, latest runs (the longest key ranges) first, instead of parallel_for's
  // static split, which gave one thread all the long rows of a prompt. Each item's
  // result is the same whichever thread takes it (kernels/attention.hpp).
  const int64_t tiles = (group + 3) / 4;
  const auto n_runs = static_cast<int64_t>(runs.size());
  const int64_t items = n_runs * c.n_kv_heads * tiles;
  std::atomic<int64_t> next{0};
  ThreadPool& pool = *options_.pool;
  pool.parallel_for(pool.size(), 1, [&](int64_t, int64_t, int) {
    thread_local std::vector<float> scores;
    thread_local std::vector<kernels::KvSegment> segments;
    ensure(scores, 16 * longest);
    for (int64_t k = next++; k < items; k = next++) {
      const int64_t item = items - 1 - k;
      const auto [t0, n_tokens] = runs[static_cast<size_t>(item / (c.n_kv_heads * tiles))];
      const int64_t g = item / tiles % c.n_kv_heads;
      const int64_t head0 = g * group + item % tiles * 4;
      const int64_t n_queries = std::min<int64_t>(4, (g + 1) * group - head0);
      const SeqKv& kv = *rows.kv[static_cast<size_t>(t0)];
      const int64_t p0 = rows.position[static_cast<size_t>(t0)];
      const int64_t p = p0 + n_tokens - 1;  // the run's last position
      const int64_t first = window > 0 ? std::max<int64_t>(0, p - window + 1) : 0;
      // Positions first..p, block by block (each block's positions are contiguous).
      segments.clear();
      for (int64_t j = first; j <= p;) {
        const int32_t block = kv.blocks()[static_cast<size_t>(j / bt)];
        const int64_t slot0 = j % bt;
        const int64_t stop = std::min(p + 1, j - slot0 + bt);
        segments.push_back({kv_.keys(block, layer, g, slot0), kv_.values(block, layer, g, slot0), stop - j});
        j = stop;
      }
      int64_t n_keys[4];
      for (int64_t u = 0; u < n_tokens; ++u) n_keys[u] = p0 + u - first + 1;
      kernels::attend_tokens(q_.data() + t0 * c.q_dim() + head0 * hd, c.q_dim(), n_tokens, n_queries, segments,
                             n_keys, shape, scores.data(), attn_.data() + t0 * c.q_dim() + head0 * hd, c.q_dim());
    }
  });
}

// The FFN of one layer over the m rows of h_ (already normalised), into out [m, H]:
// gated, down(act(gate(h)) * up(h)); plain, down(act(up(h) + b) + b); then Gemma 2's
// post-FFN norm. A token's row of ffn_ is [gate | up] (gated) or up (plain); the
// activation is written over the gate, and the down product reads the rows at their
// stride.
void Forward::feed_forward(int64_t layer, int64_t m, float* out) {
  const ModelConfig& c = model_->config();
  const LayerWeights& L = model_->weights().layers[static_cast<size_t>(layer)];
  const int64_t H = c.hidden_size;
  const int64_t F = c.intermediate_size;
  ThreadPool& tp = *options_.pool;
  const bool fast = options_.bf16_activations;
  float* rows = ffn_.data();
  const int64_t stride = ffn_stride();
  if (c.ffn == FfnKind::gated) {
    const Tensor& gate_up = gate_up_[static_cast<size_t>(layer)];
    const Tensor* up_bias = bias(L.ffn_up_bias);
    if (gate_up.defined()) {
      // One product for gate and up: the bits of two, as q, k and v above.
      kernels::linear(gate_up, nullptr, h_.data(), H, m, rows, stride, tp, fast);
    } else {
      kernels::linear(L.ffn_gate, nullptr, h_.data(), H, m, rows, stride, tp, fast);
      kernels::linear(L.ffn_up, up_bias, h_.data(), H, m, rows + F, stride, tp, fast);
    }
    over_rows(tp, m, F, kActivationElements, [&](int64_t t0, int64_t t1) {
      // up's bias after the joined product, as kernels::linear adds it
      if (gate_up.defined() && up_bias) kernels::add_bias(up_bias, 0, F, t1 - t0, rows + t0 * stride + F, stride);
      for (int64_t t = t0; t < t1; ++t) {
        kernels::activate_mul(c.activation, rows + t * stride, rows + t * stride + F, F);
      }
    });
  } else {
    kernels::linear(L.ffn_up, bias(L.ffn_up_bias), h_.data(), H, m, rows, stride, tp, fast);
    over_rows(tp, m, F, kActivationElements,
              [&](int64_t t0, int64_t t1) { kernels::activate(c.activation, rows + t0 * F, (t1 - t0) * F); });
  }
  kernels::linear(L.ffn_down, bias(L.ffn_down_bias), rows, stride, m, out, H, tp, fast);
  if (c.post_norms) norm_rows(L.ffn_post_norm, Tensor{}, out, out, m);
}

void Forward::run(std::span<const PassSequence> seqs) {
  const ModelConfig& c = model_->config();
  const ModelWeights& w = model_->weights();
  int64_t m = 0;
  for (const auto& s : seqs) {
    const auto n = static_cast<int64_t>(s.tokens.size());
    if (n == 0) throw Error(ErrorCode::invalid_argument, "no tokens to process");
    if (s.kv->length() + n > options_.context_length) {
      throw Error(ErrorCode::context_full,
                  "context full: " + std::to_string(s.kv->length()) + " tokens in the cache + " + std::to_string(n) +
                      " new exceed the context length " + std::to_string(options_.context_length));
    }
    for (int32_t id : s.tokens) {
      if (id < 0 || id >= c.vocab_size) {
        throw Error(ErrorCode::invalid_argument, "token id " + std::to_string(id) +
                                                     " is outside the vocabulary (0.." +
                                                     std::to_string(c.vocab_size - 1) + ")");
      }
    }
    m += n;
  }
  if (m == 0) throw Error(ErrorCode::invalid_argument, "no tokens to process");

  Rows rows;
  rows.kv.reserve(static_cast<size_t>(m));
  rows.position.reserve(static_cast<size_t>(m));
  for (const auto& s : seqs) {
    for (size_t i = 0; i < s.tokens.size(); ++i) {
      rows.kv.push_back(s.kv);
      rows.position.push_back(s.kv->length() + static_cast<int64_t>(i));
      rows.max_position = std::max(rows.max_position, rows.position.back());
    }
  }

  const int64_t H = c.hidden_size;
  const int64_t QD = c.q_dim();
  const int64_t KVD = c.kv_dim();
  ensure(x_, m * H);
  ensure(h_, m * H);
  ensure(q_, m * QD);
  ensure(k_, m * KVD);
  ensure(v_, m * KVD);
  ensure(attn_, m * QD);
  ensure(proj_, m * H);
  ensure(ffn_, m * ffn_stride());
  if (c.parallel_residual) ensure(ffn_out_, m * H);

  {
    int64_t t = 0;
    for (const auto& s : seqs) {
      for (int32_t id : s.tokens) kernels::embedding_row(w.token_embd, id, x_.data() + (t++) * H);
    }
    if (c.embedding_scale != 1.0) kernels::scale_inplace(x_.data(), m * H, static_cast<float>(c.embedding_scale));
  }
  if (c.position == PositionKind::learned) {
    std::vector<float> row(static_cast<size_t>(H));
    for (int64_t t = 0; t < m; ++t) {
      kernels::embedding_row(w.position_embd, rows.position[static_cast<size_t>(t)], row.data());
      kernels::add_inplace(x_.data() + t * H, row.data(), H);
    }
  }
  trace("embd", x_.data(), m, H);

  // cos/sin for each row's position (shared by every layer and head).
  const int64_t half = c.rope_dims / 2;
  if (c.position == PositionKind::rope) {
    ensure(cos_, m * half);
    ensure(sin_, m * half);
    for (int64_t t = 0; t < m; ++t) rope_angles(rows.position[static_cast<size_t>(t)], cos_.data() + t * half, sin_.data() + t * half);
  }
  ThreadPool& tp = *options_.pool;
  const bool fast = options_.bf16_activations;
  std::string name;
  // x_ += src, the residual stream's update, row by row.
  auto add_to_x = [&](const float* src) {
    over_rows(tp, m, H, kCheapElements,
              [&](int64_t t0, int64_t t1) { kernels::add_inplace(x_.data() + t0 * H, src + t0 * H, (t1 - t0) * H); });
  };

  for (int64_t l = 0; l < c.n_layers; ++l) {
    const LayerWeights& L = w.layers[static_cast<size_t>(l)];
    norm_rows(L.attn_norm, L.attn_norm_bias, x_.data(), h_.data(), m);
    if (const Tensor& qkv = qkv_[static_cast<size_t>(l)]; qkv.defined()) {
      // One product for the three (same bits as three: each output row is computed as in
      // its own matrix's product), then each token's row split into q, k and v, the
      // biases added as kernels::linear adds them.
      const int64_t QKV = QD + 2 * KVD;
      ensure(qkv_out_, m * QKV);
      kernels::linear(qkv, nullptr, h_.data(), H, m, qkv_out_.data(), QKV, tp, fast);
      over_rows(tp, m, QKV, kCheapElements, [&](int64_t t0, int64_t t1) {
        auto split = [&](float* dst, int64_t dim, int64_t offset, const Tensor& b) {
          for (int64_t t = t0; t < t1; ++t) std::copy_n(qkv_out_.data() + t * QKV + offset, dim, dst + t * dim);
          if (const Tensor* bp = bias(b)) kernels::add_bias(bp, 0, dim, t1 - t0, dst + t0 * dim, dim);
        };
        split(q_.data(), QD, 0, L.attn_q_bias);
        split(k_.data(), KVD, QD, L.attn_k_bias);
        split(v_.data(), KVD, QD + KVD, L.attn_v_bias);
      });
    } else {
      kernels::linear(L.attn_q, bias(L.attn_q_bias), h_.data(), H, m, q_.data(), QD, tp, fast);
      kernels::linear(L.attn_k, bias(L.attn_k_bias), h_.data(), H, m, k_.data(), KVD, tp, fast);
      kernels::linear(L.attn_v, bias(L.attn_v_bias), h_.data(), H, m, v_.data(), KVD, tp, fast);
    }
    if (c.position == PositionKind::rope) {
      auto rope = w.rope_interleaved ? kernels::rope_interleaved : kernels::rope_half;
      over_rows(tp, m, QD + KVD, kCheapElements, [&](int64_t t0, int64_t t1) {
        for (int64_t t = t0; t < t1; ++t) {
          const float* cs = cos_.data() + t * half;
          const float* sn = sin_.data() + t * half;
          for (int64_t hh = 0; hh < c.n_heads; ++hh) rope(q_.data() + t * QD + hh * c.head_dim, cs, sn, c.rope_dims);
          for (int64_t g = 0; g < c.n_kv_heads; ++g) rope(k_.data() + t * KVD + g * c.head_dim, cs, sn, c.rope_dims);
        }
      });
    }
    store_kv(l, rows);
    attention(l, rows);
    kernels::linear(L.attn_out, bias(L.attn_out_bias), attn_.data(), QD, m, proj_.data(), H, tp, fast);
    if (c.post_norms) norm_rows(L.attn_post_norm, Tensor{}, proj_.data(), proj_.data(), m);
    if (c.parallel_residual) {
      // x + attn(n1(x)) + ffn(n2(x)): the FFN reads the layer input (or the attention's
      // own norm output, when they share one), so x is updated once both are done.
      if (options_.trace) {
        // The same stage as a sequential block's: the residual plus the attention branch.
        std::vector<float> after_attention(x_.begin(), x_.begin() + m * H);
        kernels::add_inplace(after_attention.data(), proj_.data(), m * H);
        name = "blk." + std::to_string(l) + ".attn_out";
        trace(name, after_attention.data(), m, H);
      }
      if (!c.shared_attn_ffn_norm) norm_rows(L.ffn_norm, L.ffn_norm_bias, x_.data(), h_.data(), m);
      feed_forward(l, m, ffn_out_.data());
      add_to_x(proj_.data());
      add_to_x(ffn_out_.data());
      if (options_.trace) {
        name = "blk." + std::to_string(l) + ".ffn_out";
        trace(name, x_.data(), m, H);
      }
      continue;
    }
    add_to_x(proj_.data());
    if (options_.trace) {
      name = "blk." + std::to_string(l) + ".attn_out";
      trace(name, x_.data(), m, H);
    }

    norm_rows(L.ffn_norm, L.ffn_norm_bias, x_.data(), h_.data(), m);
    feed_forward(l, m, proj_.data());
    add_to_x(proj_.data());
    if (options_.trace) {
      name = "blk." + std::to_string(l) + ".ffn_out";
      trace(name, x_.data(), m, H);
    }
  }

  // Only the rows whose outputs are wanted go through the final norm and the (large)
  // output projection: per sequence every row (all_logits, hidden) or its last.
  Results& r = next_;
  r.logit_first.assign(seqs.size(), 0);
  r.logit_count.assign(seqs.size(), 0);
  r.hidden_first.assign(seqs.size(), 0);
  r.hidden_count.assign(seqs.size(), 0);
  std::vector<int64_t> norm_src;  // pass rows that get the final norm, in order
  std::vector<int64_t> logit_src; // indices into norm_src whose logits are computed
  {
    int64_t row0 = 0;
    for (size_t i = 0; i < seqs.size(); ++i) {
      const auto& s = seqs[i];
      const auto n = static_cast<int64_t>(s.tokens.size());
      const bool every = s.all_logits || s.hidden;
      const int64_t first = every ? row0 : row0 + n - 1;
      const auto norm0 = static_cast<int64_t>(norm_src.size());
      if (s.want_logits || s.hidden) {
        for (int64_t t = first; t < row0 + n; ++t) norm_src.push_back(t);
      }
      if (s.hidden) {
        r.hidden_first[i] = norm0;
        r.hidden_count[i] = n;
      }
      if (s.want_logits) {
        const int64_t lfirst = s.all_logits ? norm0 : static_cast<int64_t>(norm_src.size()) - 1;
        r.logit_first[i] = static_cast<int64_t>(logit_src.size());
        for (int64_t k = lfirst; k < static_cast<int64_t>(norm_src.size()); ++k) logit_src.push_back(k);
        r.logit_count[i] = static_cast<int64_t>(logit_src.size()) - r.logit_first[i];
      }
      row0 += n;
    }
  }
  const auto n_norm = static_cast<int64_t>(norm_src.size());
  ensure(out_rows_, std::max<int64_t>(1, n_norm) * H);
  for (int64_t k = 0; k < n_norm; ++k) {
    norm_rows(w.output_norm, w.output_norm_bias, x_.data() + norm_src[static_cast<size_t>(k)] * H,
              out_rows_.data() + k * H, 1);
  }
  trace("output_norm", out_rows_.data(), n_norm, H);
  r.hidden.assign(out_rows_.begin(), out_rows_.begin() + n_norm * H);
  const auto n_logits = static_cast<int64_t>(logit_src.size());
  // The rows to project, gathered contiguously (h_ is free again here).
  for (int64_t k = 0; k < n_logits; ++k) {
    std::memcpy(h_.data() + k * H, out_rows_.data() + logit_src[static_cast<size_t>(k)] * H,
                static_cast<size_t>(H) * sizeof(float));
  }
  r.logits.resize(static_cast<size_t>(n_logits * c.vocab_size));
  if (n_logits > 0) {
    kernels::linear(w.output, nullptr, h_.data(), H, n_logits, r.logits.data(), c.vocab_size, tp, fast);
    if (c.final_logit_softcap > 0) {
      kernels::softcap(r.logits.data(), n_logits * c.vocab_size, static_cast<float>(c.final_logit_softcap));
    }
  }
  trace("logits", r.logits.data(), n_logits, c.vocab_size);
  // Commit: a trace hook that throws above leaves the last pass's results readable.
  std::swap(results_, next_);
}

std::span<const float> Forward::logits(size_t seq) const {
  const int64_t v = model_->config().vocab_size;
  return {results_.logits.data() + results_.logit_first[seq] * v, static_cast<size_t>(results_.logit_count[seq] * v)};
}

int64_t Forward::logit_rows(size_t seq) const {
  return seq < results_.logit_count.size() ? results_.logit_count[seq] : 0;
}

std::span<const float> Forward::hidden(size_t seq) const {
  const int64_t dim = model_->config().hidden_size;
  return {results_.hidden.data() + results_.hidden_first[seq] * dim,
          static_cast<size_t>(results_.hidden_count[seq] * dim)};
}

void Forward::rerotate_keys(SeqKv& kv, int64_t begin, int64_t end, int64_t delta) {
  const ModelConfig& c = model_->config();
  if (c.position != PositionKind::rope || delta == 0 || begin >= end) return;
  const int64_t half = c.rope_dims / 2;
  const int64_t hd = c.head_dim;
  // A pure rotation by `delta` positions (no LongRoPE magnitude: the keys already carry it).
  std::vector<float> cs(static_cast<size_t>(half)), sn(static_cast<size_t>(half));
  for (int64_t i = 0; i < half; ++i) {
    const double angle = static_cast<double>(delta) * inv_freq_[static_cast<size_t>(i)];
    cs[static_cast<size_t>(i)] = static_cast<float>(std::cos(angle));
    sn[static_cast<size_t>(i)] = static_cast<float>(std::sin(angle));
  }
  auto rope = model_->weights().rope_interleaved ? kernels::rope_interleaved : kernels::rope_half;
  std::vector<float> row(static_cast<size_t>(hd));
  for (int64_t p = begin; p < end; ++p) {
    for (int64_t l = 0; l < c.n_layers; ++l) {
      for (int64_t g = 0; g < c.n_kv_heads; ++g) {
        kv_.load_row(kv.block_of(p), kv.slot_of(p), l, 0, g, row.data());
        rope(row.data(), cs.data(), sn.data(), c.rope_dims);
        kv_.store_row(kv.block_of(p), kv.slot_of(p), l, 0, g, row.data());
      }
    }
  }
}

}  // namespace loom::runtime
