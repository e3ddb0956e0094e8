// The transformer forward pass: prefill (a batch of tokens) and decode (one token),
// assembled from the choices in ModelConfig (norm, FFN, position encoding, biases,
// sliding window) over one set of kernels.
#include "loom/session.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numbers>
#include <string>

#include "loom/convert.hpp"
#include "loom/error.hpp"
#include "runtime/kernels/linear.hpp"
#include "runtime/kernels/ops.hpp"

namespace loom {

namespace {

constexpr int64_t kDefaultContextCap = 4096;

// Rotary frequencies (one per rotated pair), with the config's scaling applied.
std::vector<double> rope_inverse_frequencies(const ModelConfig& c, int64_t context_length) {
  const int64_t half = c.rope_dims / 2;
  std::vector<double> inv(static_cast<size_t>(half));
  for (int64_t i = 0; i < half; ++i) {
    inv[static_cast<size_t>(i)] =
        1.0 / std::pow(c.rope_theta, static_cast<double>(2 * i) / static_cast<double>(c.rope_dims));
  }
  const RopeScaling& rs = c.rope_scaling;
  switch (rs.kind) {
    case RopeScalingKind::none: break;
    case RopeScalingKind::linear:
      for (auto& f : inv) f /= rs.factor;
      break;
    case RopeScalingKind::llama3: {
      // Llama 3.1: long wavelengths are slowed by `factor`, short ones kept, and the
      // band between blended smoothly.
      const double orig = static_cast<double>(rs.original_max_positions);
      const double low_wavelen = orig / rs.low_freq_factor;
      const double high_wavelen = orig / rs.high_freq_factor;
      for (auto& f : inv) {
        const double wavelen = 2.0 * std::numbers::pi / f;
        if (wavelen < high_wavelen) continue;
        if (wavelen > low_wavelen) {
          f /= rs.factor;
          continue;
        }
        const double smooth =
            (orig / wavelen - rs.low_freq_factor) / (rs.high_freq_factor - rs.low_freq_factor);
        f = (1.0 - smooth) * f / rs.factor + smooth * f;
      }
      break;
    }
    case RopeScalingKind::longrope: {
      // Phi-3 LongRoPE: per-frequency divisors, the long set when the session's context
      // exceeds the original training length (llama.cpp's static choice).
      const auto& factors =
          context_length > rs.original_max_positions ? rs.long_factor : rs.short_factor;
      for (size_t i = 0; i < inv.size(); ++i) inv[i] /= factors[i];
      break;
    }
  }
  return inv;
}

// LongRoPE scales cos/sin by this "attention factor" when the model was extended.
double rope_magnitude(const ModelConfig& c) {
  if (c.rope_scaling.kind != RopeScalingKind::longrope) return 1.0;
  const double scale = static_cast<double>(c.max_positions) /
                       static_cast<double>(c.rope_scaling.original_max_positions);
  if (scale <= 1.0) return 1.0;
  return std::sqrt(1.0 + std::log(scale) / std::log(static_cast<double>(c.rope_scaling.original_max_positions)));
}

}  // namespace

struct Session::State {
  std::shared_ptr<const Model> model;
  SessionOptions options;
  std::shared_ptr<ThreadPool> pool;
  int64_t context = 0;
  int64_t position = 0;
  DType kv_dtype = DType::f32;
  // Per layer, [n_kv_heads, context, head_dim]: one head's keys are contiguous, so
  // attention for a head streams them in order.
  std::vector<Tensor> k_cache;
  std::vector<Tensor> v_cache;
  std::vector<double> inv_freq;
  double rope_scale = 1.0;

  // Scratch, sized for the largest batch seen so far.
  std::vector<float> x, h, q, k, v, attn, proj, gate, up;
  std::vector<float> cos_table, sin_table;  // [n_tokens, rope_dims/2]
  std::vector<float> logits;
  std::vector<float> traced_logits;  // the next logits while a trace hook looks at them
  int64_t logit_rows = 0;
  std::vector<float> final_hidden;  // [n_tokens, hidden] when an embedding was asked for

  const ModelConfig& cfg() const { return model->config(); }

  void trace(std::string_view name, const float* values, int64_t n_tokens, int64_t dim) const {
    if (!options.trace) return;
    double sum = 0.0;
    for (int64_t i = 0; i < n_tokens * dim; ++i) sum += values[i];
    options.trace(TraceEvent{name, n_tokens, dim, values, sum});
  }

  void forward(std::span<const int32_t> tokens, bool keep_all_logits, bool keep_hidden);
  void attention(int64_t layer, int64_t n_tokens);
  void store_kv(int64_t layer, int64_t n_tokens);
  void norm_rows(const Tensor& w, const Tensor& b, const float* in, float* out, int64_t n_tokens) const;
};

namespace {
template <typename T>
void ensure(std::vector<T>& v, int64_t n) {
  if (static_cast<int64_t>(v.size()) < n) v.resize(static_cast<size_t>(n));
}
}  // namespace

Session::Session(std::shared_ptr<const Model> model, SessionOptions options)
    : state_(std::make_unique<State>()) {
  if (!model) throw Error(ErrorCode::invalid_argument, "session needs a model");
  State& s = *state_;
  s.model = std::move(model);
  s.options = std::move(options);
  const ModelConfig& c = s.cfg();
  s.pool = s.options.pool ? s.options.pool : std::make_shared<ThreadPool>(s.options.n_threads);
  if (s.options.kv_dtype != DType::f32 && s.options.kv_dtype != DType::f16) {
    throw Error(ErrorCode::invalid_argument,
                "KV cache dtype must be f32 or f16, got " +
                    std::string(dtype_name(s.options.kv_dtype)));
  }
  s.kv_dtype = s.options.kv_dtype;
  s.context = s.options.context_length > 0 ? s.options.context_length
                                           : std::min(c.max_positions, kDefaultContextCap);
  if (s.context <= 0) throw Error(ErrorCode::invalid_argument, "context length must be positive");
  if (c.position == PositionKind::learned && s.context > c.max_positions) {
    throw Error(ErrorCode::invalid_argument,
                "context length " + std::to_string(s.context) +
                    " exceeds the model's learned positions (" + std::to_string(c.max_positions) +
                    ")");
  }
  s.k_cache.reserve(static_cast<size_t>(c.n_layers));
  s.v_cache.reserve(static_cast<size_t>(c.n_layers));
  const Shape cache_shape{c.n_kv_heads, s.context, c.head_dim};
  for (int64_t l = 0; l < c.n_layers; ++l) {
    s.k_cache.push_back(Tensor::zeros(cache_shape, s.kv_dtype));
    s.v_cache.push_back(Tensor::zeros(cache_shape, s.kv_dtype));
  }
  if (c.position == PositionKind::rope) {
    s.inv_freq = rope_inverse_frequencies(c, s.context);
    s.rope_scale = rope_magnitude(c);
  }
}

Session::~Session() = default;

void Session::State::norm_rows(const Tensor& w, const Tensor& b, const float* in, float* out,
                               int64_t n_tokens) const {
  const ModelConfig& c = cfg();
  const int64_t n = c.hidden_size;
  const auto eps = static_cast<float>(c.norm_eps);
  for (int64_t t = 0; t < n_tokens; ++t) {
    if (c.norm == NormKind::rms_norm) {
      kernels::rms_norm(in + t * n, w.data<float>(), eps, out + t * n, n);
    } else {
      kernels::layer_norm(in + t * n, w.data<float>(), b.defined() ? b.data<float>() : nullptr,
                          eps, out + t * n, n);
    }
  }
}

void Session::State::store_kv(int64_t layer, int64_t n_tokens) {
  const ModelConfig& c = cfg();
  const int64_t hd = c.head_dim;
  for (int64_t t = 0; t < n_tokens; ++t) {
    const int64_t p = position + t;
    for (int64_t g = 0; g < c.n_kv_heads; ++g) {
      const float* ksrc = k.data() + t * c.kv_dim() + g * hd;
      const float* vsrc = v.data() + t * c.kv_dim() + g * hd;
      const int64_t at = (g * context + p) * hd;
      if (kv_dtype == DType::f32) {
        std::memcpy(k_cache[static_cast<size_t>(layer)].mutable_data<float>() + at, ksrc,
                    static_cast<size_t>(hd) * sizeof(float));
        std::memcpy(v_cache[static_cast<size_t>(layer)].mutable_data<float>() + at, vsrc,
                    static_cast<size_t>(hd) * sizeof(float));
      } else {
        f32_to_f16(ksrc, k_cache[static_cast<size_t>(layer)].mutable_data<uint16_t>() + at,
                   static_cast<size_t>(hd));
        f32_to_f16(vsrc, v_cache[static_cast<size_t>(layer)].mutable_data<uint16_t>() + at,
                   static_cast<size_t>(hd));
      }
    }
  }
}

void Session::State::attention(int64_t layer, int64_t n_tokens) {
  const ModelConfig& c = cfg();
  const int64_t hd = c.head_dim;
  const int64_t group = c.n_heads / c.n_kv_heads;
  const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
  const Tensor& kc = k_cache[static_cast<size_t>(layer)];
  const Tensor& vc = v_cache[static_cast<size_t>(layer)];
  const bool f16 = kv_dtype == DType::f16;
  const int64_t ctx = context;
  const int64_t pos0 = position;
  const int64_t window = c.sliding_window;
  pool->parallel_for(n_tokens * c.n_heads, 1, [&](int64_t begin, int64_t end, int) {
    thread_local std::vector<float> scores;
    thread_local std::vector<float> row;
    ensure(scores, ctx);
    ensure(row, hd);
    for (int64_t item = begin; item < end; ++item) {
      const int64_t t = item / c.n_heads;
      const int64_t head = item % c.n_heads;
      const int64_t g = head / group;
      const int64_t p = pos0 + t;
      const int64_t first = window > 0 ? std::max<int64_t>(0, p - window + 1) : 0;
      const float* qv = q.data() + t * c.q_dim() + head * hd;
      float* out = attn.data() + t * c.q_dim() + head * hd;
      const int64_t n_keys = p - first + 1;
      for (int64_t j = 0; j < n_keys; ++j) {
        const int64_t at = (g * ctx + first + j) * hd;
        const float* key = kc.data<float>() + at;
        if (f16) {
          f16_to_f32(kc.data<uint16_t>() + at, row.data(), static_cast<size_t>(hd));
          key = row.data();
        }
        scores[static_cast<size_t>(j)] = kernels::dot(qv, key, hd) * scale;
      }
      kernels::softmax(scores.data(), n_keys);
      std::fill(out, out + hd, 0.0f);
      for (int64_t j = 0; j < n_keys; ++j) {
        const int64_t at = (g * ctx + first + j) * hd;
        const float* val = vc.data<float>() + at;
        if (f16) {
          f16_to_f32(vc.data<uint16_t>() + at, row.data(), static_cast<size_t>(hd));
          val = row.data();
        }
        kernels::axpy(scores[static_cast<size_t>(j)], val, out, hd);
      }
    }
  });
}

void Session::State::forward(std::span<const int32_t> tokens, bool keep_all_logits,
                             bool keep_hidden) {
  const ModelConfig& c = cfg();
  const ModelWeights& w = model->weights();
  const auto n = static_cast<int64_t>(tokens.size());
  if (n == 0) throw Error(ErrorCode::invalid_argument, "no tokens to process");
  if (position + n > context) {
    throw Error(ErrorCode::context_full,
                "context full: " + std::to_string(position) + " tokens in the cache + " +
                    std::to_string(n) + " new exceed the context length " +
                    std::to_string(context));
  }
  for (int32_t id : tokens) {
    if (id < 0 || id >= c.vocab_size) {
      throw Error(ErrorCode::invalid_argument,
                  "token id " + std::to_string(id) + " is outside the vocabulary (0.." +
                      std::to_string(c.vocab_size - 1) + ")");
    }
  }
  const int64_t H = c.hidden_size;
  const int64_t QD = c.q_dim();
  const int64_t KVD = c.kv_dim();
  const int64_t F = c.intermediate_size;
  ensure(x, n * H);
  ensure(h, n * H);
  ensure(q, n * QD);
  ensure(k, n * KVD);
  ensure(v, n * KVD);
  ensure(attn, n * QD);
  ensure(proj, n * H);
  ensure(gate, n * F);
  ensure(up, n * F);

  for (int64_t t = 0; t < n; ++t) {
    kernels::embedding_row(w.token_embd, tokens[static_cast<size_t>(t)], x.data() + t * H);
  }
  if (c.position == PositionKind::learned) {
    std::vector<float> row(static_cast<size_t>(H));
    for (int64_t t = 0; t < n; ++t) {
      kernels::embedding_row(w.position_embd, position + t, row.data());
      kernels::add_inplace(x.data() + t * H, row.data(), H);
    }
  }
  trace("embd", x.data(), n, H);

  // cos/sin for each new position (shared by every layer and head).
  const int64_t half = c.rope_dims / 2;
  if (c.position == PositionKind::rope) {
    ensure(cos_table, n * half);
    ensure(sin_table, n * half);
    for (int64_t t = 0; t < n; ++t) {
      for (int64_t i = 0; i < half; ++i) {
        const double angle = static_cast<double>(position + t) * inv_freq[static_cast<size_t>(i)];
        cos_table[static_cast<size_t>(t * half + i)] = static_cast<float>(std::cos(angle) * rope_scale);
        sin_table[static_cast<size_t>(t * half + i)] = static_cast<float>(std::sin(angle) * rope_scale);
      }
    }
  }
  auto bias = [](const Tensor& b) { return b.defined() ? &b : nullptr; };
  ThreadPool& tp = *pool;
  const bool fast = options.bf16_activations;
  std::string name;

  for (int64_t l = 0; l < c.n_layers; ++l) {
    const LayerWeights& L = w.layers[static_cast<size_t>(l)];
    norm_rows(L.attn_norm, L.attn_norm_bias, x.data(), h.data(), n);
    kernels::linear(L.attn_q, bias(L.attn_q_bias), h.data(), H, n, q.data(), QD, tp, fast);
    kernels::linear(L.attn_k, bias(L.attn_k_bias), h.data(), H, n, k.data(), KVD, tp, fast);
    kernels::linear(L.attn_v, bias(L.attn_v_bias), h.data(), H, n, v.data(), KVD, tp, fast);
    if (c.position == PositionKind::rope) {
      auto rope = w.rope_interleaved ? kernels::rope_interleaved : kernels::rope_half;
      for (int64_t t = 0; t < n; ++t) {
        const float* cs = cos_table.data() + t * half;
        const float* sn = sin_table.data() + t * half;
        for (int64_t hh = 0; hh < c.n_heads; ++hh) rope(q.data() + t * QD + hh * c.head_dim, cs, sn, c.rope_dims);
        for (int64_t g = 0; g < c.n_kv_heads; ++g) rope(k.data() + t * KVD + g * c.head_dim, cs, sn, c.rope_dims);
      }
    }
    store_kv(l, n);
    attention(l, n);
    kernels::linear(L.attn_out, bias(L.attn_out_bias), attn.data(), QD, n, proj.data(), H, tp, fast);
    kernels::add_inplace(x.data(), proj.data(), n * H);
    if (options.trace) {
      name = "blk." + std::to_string(l) + ".attn_out";
      trace(name, x.data(), n, H);
    }

    norm_rows(L.ffn_norm, L.ffn_norm_bias, x.data(), h.data(), n);
    if (c.ffn == FfnKind::swiglu) {
      kernels::linear(L.ffn_gate, nullptr, h.data(), H, n, gate.data(), F, tp, fast);
      kernels::linear(L.ffn_up, bias(L.ffn_up_bias), h.data(), H, n, up.data(), F, tp, fast);
      kernels::silu_mul(gate.data(), up.data(), n * F);
    } else {
      kernels::linear(L.ffn_up, bias(L.ffn_up_bias), h.data(), H, n, gate.data(), F, tp, fast);
      kernels::gelu_tanh(gate.data(), n * F);
    }
    kernels::linear(L.ffn_down, bias(L.ffn_down_bias), gate.data(), F, n, proj.data(), H, tp, fast);
    kernels::add_inplace(x.data(), proj.data(), n * H);
    if (options.trace) {
      name = "blk." + std::to_string(l) + ".ffn_out";
      trace(name, x.data(), n, H);
    }
  }

  // Only the rows whose outputs are wanted go through the final norm and the (large)
  // output projection.
  const bool all_rows = keep_all_logits || keep_hidden;
  const int64_t first_row = all_rows ? 0 : n - 1;
  const int64_t rows = n - first_row;
  norm_rows(w.output_norm, w.output_norm_bias, x.data() + first_row * H, h.data(), rows);
  trace("output_norm", h.data(), rows, H);
  if (keep_hidden) final_hidden.assign(h.begin(), h.begin() + rows * H);
  const int64_t logit_first = keep_all_logits ? 0 : rows - 1;
  const int64_t new_logit_rows = rows - logit_first;
  // A trace hook may throw (the C API's callback cancels that way) after it has seen the
  // new logits: they go to a second buffer then, so that the last pass's logits survive.
  std::vector<float>& out = options.trace ? traced_logits : logits;
  out.resize(static_cast<size_t>(new_logit_rows * c.vocab_size));
  kernels::linear(w.output, nullptr, h.data() + logit_first * H, H, new_logit_rows, out.data(),
                  c.vocab_size, tp, fast);
  trace("logits", out.data(), new_logit_rows, c.vocab_size);
  if (options.trace) logits.swap(traced_logits);
  // Commit: nothing above changed what the session exposes (KV entries at and past
  // `position` are not part of its context until `position` moves).
  logit_rows = new_logit_rows;
  position += n;
}

void Session::prefill(std::span<const int32_t> tokens) {
  state_->forward(tokens, state_->options.all_logits, false);
}

void Session::step(int32_t token) {
  const int32_t one[1] = {token};
  state_->forward(one, false, false);
}

std::span<const float> Session::logits() const {
  const State& s = *state_;
  if (s.logit_rows == 0) throw Error(ErrorCode::invalid_argument, "no logits yet: prefill first");
  const int64_t v = s.cfg().vocab_size;
  return {s.logits.data() + (s.logit_rows - 1) * v, static_cast<size_t>(v)};
}

std::span<const float> Session::logits_at(int64_t i) const {
  const State& s = *state_;
  if (i < 0 || i >= s.logit_rows) {
    throw Error(ErrorCode::invalid_argument,
                "logit row " + std::to_string(i) + " out of range (" +
                    std::to_string(s.logit_rows) + " rows kept)");
  }
  const int64_t v = s.cfg().vocab_size;
  return {s.logits.data() + i * v, static_cast<size_t>(v)};
}

int64_t Session::logit_rows() const noexcept { return state_->logit_rows; }
int64_t Session::position() const noexcept { return state_->position; }
int64_t Session::context_length() const noexcept { return state_->context; }

void Session::reset() noexcept {
  state_->position = 0;
  state_->logit_rows = 0;
}

void Session::rollback(int64_t position) {
  if (position < 0 || position > state_->position) {
    throw Error(ErrorCode::invalid_argument,
                "cannot roll back to position " + std::to_string(position) + " (current " +
                    std::to_string(state_->position) + ")");
  }
  state_->position = position;
  state_->logit_rows = 0;
}

std::vector<float> Session::embed(std::span<const int32_t> tokens, Pooling pooling,
                                  bool normalize) {
  reset();
  state_->forward(tokens, false, true);
  const int64_t H = state_->cfg().hidden_size;
  const auto n = static_cast<int64_t>(tokens.size());
  std::vector<float> out(static_cast<size_t>(H), 0.0f);
  const float* hidden = state_->final_hidden.data();
  if (pooling == Pooling::last) {
    std::copy(hidden + (n - 1) * H, hidden + n * H, out.begin());
  } else {
    std::vector<double> sum(static_cast<size_t>(H), 0.0);
    for (int64_t t = 0; t < n; ++t) {
      for (int64_t i = 0; i < H; ++i) sum[static_cast<size_t>(i)] += hidden[t * H + i];
    }
    for (int64_t i = 0; i < H; ++i) {
      out[static_cast<size_t>(i)] = static_cast<float>(sum[static_cast<size_t>(i)] / static_cast<double>(n));
    }
  }
  if (normalize) {
    double norm = 0.0;
    for (float f : out) norm += static_cast<double>(f) * f;
    norm = std::sqrt(norm);
    if (norm > 0.0) {
      for (float& f : out) f = static_cast<float>(f / norm);
    }
  }
  return out;
}

std::vector<double> Session::score(std::span<const int32_t> tokens) {
  reset();
  if (tokens.size() < 2) return {};
  state_->forward(tokens, true, false);
  const int64_t v = state_->cfg().vocab_size;
  std::vector<double> out;
  out.reserve(tokens.size() - 1);
  for (size_t i = 1; i < tokens.size(); ++i) {
    const float* row = state_->logits.data() + static_cast<int64_t>(i - 1) * v;
    const float max = *std::max_element(row, row + v);
    double sum = 0.0;
    for (int64_t j = 0; j < v; ++j) sum += std::exp(static_cast<double>(row[j]) - max);
    out.push_back(static_cast<double>(row[tokens[i]]) - max - std::log(sum));
  }
  return out;
}

int64_t Session::kv_cache_bytes() const noexcept {
  int64_t total = 0;
  for (const auto& t : state_->k_cache) total += t.nbytes();
  for (const auto& t : state_->v_cache) total += t.nbytes();
  return total;
}

const Model& Session::model() const noexcept { return *state_->model; }
ThreadPool& Session::pool() noexcept { return *state_->pool; }

int64_t kv_cache_bytes_for(const ModelConfig& config, int64_t context_length, DType kv_dtype) {
  // Checked: a config's sizes come from a file, and the product must not wrap into a
  // small (or negative) allocation.
  int64_t bytes = 2;
  for (const int64_t factor : {config.n_layers, config.n_kv_heads, context_length, config.head_dim,
                               static_cast<int64_t>(dtype_size(kv_dtype))}) {
    if (factor < 0 || __builtin_mul_overflow(bytes, factor, &bytes)) {
      throw Error(ErrorCode::out_of_memory,
                  "a KV cache of " + std::to_string(context_length) + " positions for this model exceeds 2^63 bytes");
    }
  }
  return bytes;
}

}  // namespace loom
