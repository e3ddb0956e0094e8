#include "support/tiny_model.hpp"

#include <cmath>
#include <cstring>
#include <numbers>
#include <random>

#include "loom/convert.hpp"
#include "model/rope_order.hpp"
#include "model/weight_slots.hpp"

namespace loom::test {

ModelConfig tiny_llama_config() {
  ModelConfig c;
  c.architecture = "llama";
  c.vocab_size = 128;
  c.hidden_size = 64;
  c.intermediate_size = 96;
  c.n_layers = 2;
  c.n_heads = 4;
  c.n_kv_heads = 2;
  c.head_dim = 16;
  c.max_positions = 256;
  c.norm_eps = 1e-5;
  c.rope_theta = 10000.0;
  c.rope_dims = 16;
  c.bos_token_id = 1;
  c.eos_token_ids = {2};
  return c;
}

ModelConfig mid_llama_config() {
  ModelConfig c = tiny_llama_config();
  c.hidden_size = 512;
  c.intermediate_size = 1536;
  c.n_heads = 8;
  c.n_kv_heads = 4;
  c.head_dim = 64;
  c.rope_dims = 64;
  c.n_layers = 4;
  return c;
}

ModelConfig tiny_gpt2_config(int64_t max_positions) {
  ModelConfig c = tiny_llama_config();
  c.architecture = "gpt2";
  c.norm = NormKind::layer_norm;
  c.norm_bias = true;
  c.ffn = FfnKind::plain;
  c.activation = Activation::gelu_tanh;
  c.position = PositionKind::learned;
  c.qkv_bias = c.attn_out_bias = c.ffn_bias = true;
  c.n_kv_heads = c.n_heads;
  c.intermediate_size = 4 * c.hidden_size;
  c.tie_word_embeddings = true;
  c.max_positions = max_positions;
  return c;
}

namespace {

Tensor random_tensor(const Shape& shape, DType dtype, std::mt19937& rng, float mean, float std) {
  std::normal_distribution<float> dist(mean, std);
  std::vector<float> values(static_cast<size_t>(shape.numel()));
  for (auto& v : values) v = dist(rng);
  Tensor t = Tensor::empty(shape, dtype);
  convert(DType::f32, values.data(), dtype, t.mutable_raw_data(), values.size());
  return t;
}

std::vector<double> to_double(const Tensor& t) {
  std::vector<float> f(static_cast<size_t>(t.numel()));
  convert(t.dtype(), t.raw_data(), DType::f32, f.data(), f.size());
  return {f.begin(), f.end()};
}

using Vec = std::vector<double>;
using Mat = std::vector<Vec>;  // [rows][cols]

// y = W x (+ b), W [out, in]
Vec matvec(const Vec& w, int64_t out, int64_t in, const Vec& x, const Vec* b) {
  Vec y(static_cast<size_t>(out), 0.0);
  for (int64_t r = 0; r < out; ++r) {
    double acc = 0.0;
    for (int64_t c = 0; c < in; ++c) acc += w[static_cast<size_t>(r * in + c)] * x[static_cast<size_t>(c)];
    y[static_cast<size_t>(r)] = acc + (b ? (*b)[static_cast<size_t>(r)] : 0.0);
  }
  return y;
}

Vec norm(const ModelConfig& c, const Vec& x, const Vec& w, const Vec* b) {
  const auto n = static_cast<double>(x.size());
  Vec out(x.size());
  if (c.norm == NormKind::rms_norm) {
    double ss = 0.0;
    for (double v : x) ss += v * v;
    const double inv = 1.0 / std::sqrt(ss / n + c.norm_eps);
    for (size_t i = 0; i < x.size(); ++i) out[i] = x[i] * inv * w[i];
  } else {
    double mean = 0.0;
    for (double v : x) mean += v;
    mean /= n;
    double var = 0.0;
    for (double v : x) var += (v - mean) * (v - mean);
    var /= n;
    const double inv = 1.0 / std::sqrt(var + c.norm_eps);
    for (size_t i = 0; i < x.size(); ++i) out[i] = (x[i] - mean) * inv * w[i] + (b ? (*b)[i] : 0.0);
  }
  return out;
}

std::vector<double> inv_freqs(const ModelConfig& c) {
  const int64_t half = c.rope_dims / 2;
  std::vector<double> f(static_cast<size_t>(half));
  for (int64_t i = 0; i < half; ++i) {
    f[static_cast<size_t>(i)] = 1.0 / std::pow(c.rope_theta, 2.0 * static_cast<double>(i) / static_cast<double>(c.rope_dims));
  }
  const auto& rs = c.rope_scaling;
  if (rs.kind == RopeScalingKind::linear) {
    for (auto& v : f) v /= rs.factor;
  } else if (rs.kind == RopeScalingKind::llama3) {
    const double orig = static_cast<double>(rs.original_max_positions);
    for (auto& v : f) {
      const double wl = 2 * std::numbers::pi / v;
      if (wl < orig / rs.high_freq_factor) continue;
      if (wl > orig / rs.low_freq_factor) {
        v /= rs.factor;
      } else {
        const double s = (orig / wl - rs.low_freq_factor) / (rs.high_freq_factor - rs.low_freq_factor);
        v = (1 - s) * v / rs.factor + s * v;
      }
    }
  }
  return f;
}

void rope(const ModelConfig& c, double* v, int64_t pos, const std::vector<double>& freqs) {
  const int64_t half = c.rope_dims / 2;
  for (int64_t i = 0; i < half; ++i) {
    const double a = v[i], b = v[i + half];
    const double ang = static_cast<double>(pos) * freqs[static_cast<size_t>(i)];
    v[i] = a * std::cos(ang) - b * std::sin(ang);
    v[i + half] = b * std::cos(ang) + a * std::sin(ang);
  }
}

struct RefWeights {
  Vec tok, pos, out_norm, out_norm_b, out;
  struct Layer {
    Vec an, anb, q, k, v, qb, kb, vb, o, ob, fn, fnb, g, u, ub, d, db, apn, fpn;
  };
  std::vector<Layer> layers;
};

Vec opt(const Tensor& t) { return t.defined() ? to_double(t) : Vec{}; }
const Vec* ptr(const Vec& v) { return v.empty() ? nullptr : &v; }

Mat run_reference(const ModelConfig& c, const ModelWeights& w, std::span<const int32_t> tokens,
                  bool want_logits) {
  RefWeights r;
  r.tok = to_double(w.token_embd);
  r.pos = opt(w.position_embd);
  r.out_norm = to_double(w.output_norm);
  r.out_norm_b = opt(w.output_norm_bias);
  r.out = to_double(w.output);
  for (const auto& L : w.layers) {
    r.layers.push_back({to_double(L.attn_norm), opt(L.attn_norm_bias), to_double(L.attn_q),
                        to_double(L.attn_k), to_double(L.attn_v), opt(L.attn_q_bias),
                        opt(L.attn_k_bias), opt(L.attn_v_bias), to_double(L.attn_out),
                        opt(L.attn_out_bias), opt(L.ffn_norm), opt(L.ffn_norm_bias),
                        opt(L.ffn_gate), to_double(L.ffn_up), opt(L.ffn_up_bias),
                        to_double(L.ffn_down), opt(L.ffn_down_bias), opt(L.attn_post_norm),
                        opt(L.ffn_post_norm)});
  }
  const auto n = static_cast<int64_t>(tokens.size());
  const int64_t H = c.hidden_size, hd = c.head_dim, QD = c.q_dim(), KVD = c.kv_dim(),
                F = c.intermediate_size;
  const auto freqs = inv_freqs(c);
  Mat x(static_cast<size_t>(n), Vec(static_cast<size_t>(H)));
  for (int64_t t = 0; t < n; ++t) {
    for (int64_t i = 0; i < H; ++i) {
      // The embedding scale is applied in f32 by the engines (Gemma's normalizer).
      x[t][i] = r.tok[static_cast<size_t>(tokens[t] * H + i)] * c.embedding_scale +
                (r.pos.empty() ? 0.0 : r.pos[static_cast<size_t>(t * H + i)]);
    }
  }
  for (size_t layer = 0; layer < r.layers.size(); ++layer) {
    const auto& L = r.layers[layer];
    Mat q(n), k(n), v(n);
    for (int64_t t = 0; t < n; ++t) {
      const Vec h = norm(c, x[t], L.an, ptr(L.anb));
      q[t] = matvec(L.q, QD, H, h, ptr(L.qb));
      k[t] = matvec(L.k, KVD, H, h, ptr(L.kb));
      v[t] = matvec(L.v, KVD, H, h, ptr(L.vb));
      if (c.position == PositionKind::rope) {
        for (int64_t hh = 0; hh < c.n_heads; ++hh) rope(c, q[t].data() + hh * hd, t, freqs);
        for (int64_t g = 0; g < c.n_kv_heads; ++g) rope(c, k[t].data() + g * hd, t, freqs);
      }
    }
    const int64_t group = c.n_heads / c.n_kv_heads;
    for (int64_t t = 0; t < n; ++t) {
      Vec att(static_cast<size_t>(QD), 0.0);
      for (int64_t hh = 0; hh < c.n_heads; ++hh) {
        const int64_t g = hh / group;
        const bool slides = c.layer_slides(static_cast<int64_t>(layer));
        const int64_t first = slides ? std::max<int64_t>(0, t - c.sliding_window + 1) : 0;
        std::vector<double> s;
        double mx = -1e300;
        for (int64_t j = first; j <= t; ++j) {
          double d = 0.0;
          for (int64_t i = 0; i < hd; ++i) d += q[t][hh * hd + i] * k[j][g * hd + i];
          d /= std::sqrt(c.query_pre_attn_scalar > 0 ? c.query_pre_attn_scalar : static_cast<double>(hd));
          if (c.attn_logit_softcap > 0) d = c.attn_logit_softcap * std::tanh(d / c.attn_logit_softcap);
          s.push_back(d);
          mx = std::max(mx, d);
        }
        double sum = 0.0;
        for (auto& e : s) sum += (e = std::exp(e - mx));
        for (int64_t j = first; j <= t; ++j) {
          const double p = s[static_cast<size_t>(j - first)] / sum;
          for (int64_t i = 0; i < hd; ++i) att[hh * hd + i] += p * v[j][g * hd + i];
        }
      }
      Vec o = matvec(L.o, H, QD, att, ptr(L.ob));
      if (c.post_norms) o = norm(c, o, L.apn, nullptr);
      // Parallel residual: the FFN reads the layer input (x before the attention is added).
      const Vec ffn_in = c.parallel_residual ? x[t] : Vec{};
      if (!c.parallel_residual) {
        for (int64_t i = 0; i < H; ++i) x[t][i] += o[i];
      }
      const Vec h = c.shared_attn_ffn_norm ? norm(c, ffn_in, L.an, ptr(L.anb))
                                           : norm(c, c.parallel_residual ? ffn_in : x[t], L.fn, ptr(L.fnb));
      auto act = [&](double e) {
        switch (c.activation) {
          case Activation::silu: return e / (1.0 + std::exp(-e));
          case Activation::gelu_tanh:
            return 0.5 * e * (1.0 + std::tanh(std::sqrt(2.0 / std::numbers::pi) * (e + 0.044715 * e * e * e)));
          case Activation::gelu_erf: return 0.5 * e * (1.0 + std::erf(e / std::sqrt(2.0)));
        }
        return e;
      };
      Vec a;
      if (c.ffn == FfnKind::gated) {
        const Vec gg = matvec(L.g, F, H, h, nullptr);
        const Vec uu = matvec(L.u, F, H, h, ptr(L.ub));
        a.resize(static_cast<size_t>(F));
        for (int64_t i = 0; i < F; ++i) a[i] = act(gg[i]) * uu[i];
      } else {
        a = matvec(L.u, F, H, h, ptr(L.ub));
        for (auto& e : a) e = act(e);
      }
      Vec d = matvec(L.d, H, F, a, ptr(L.db));
      if (c.post_norms) d = norm(c, d, L.fpn, nullptr);
      if (c.parallel_residual) {
        for (int64_t i = 0; i < H; ++i) x[t][i] += o[i];
      }
      for (int64_t i = 0; i < H; ++i) x[t][i] += d[i];
    }
  }
  Mat out;
  for (int64_t t = 0; t < n; ++t) {
    const Vec h = norm(c, x[t], r.out_norm, ptr(r.out_norm_b));
    Vec row = want_logits ? matvec(r.out, c.vocab_size, H, h, nullptr) : h;
    if (want_logits && c.final_logit_softcap > 0) {
      for (auto& e : row) e = c.final_logit_softcap * std::tanh(e / c.final_logit_softcap);
    }
    out.push_back(std::move(row));
  }
  return out;
}

}  // namespace

ModelWeights random_weights(const ModelConfig& c, uint32_t seed, DType matrix_dtype, float std) {
  std::mt19937 rng(seed);
  ModelWeights w;
  w.layers.resize(static_cast<size_t>(c.n_layers));
  for (const auto& slot : slots::all_slots()) {
    if (!slot.needed(c)) continue;
    if (slot.name == "output" && c.tie_word_embeddings) continue;
    const int64_t layers = slot.per_layer ? c.n_layers : 1;
    for (int64_t l = 0; l < layers; ++l) {
      const bool is_norm = slot.role == slots::Role::norm;
      const DType dt = slots::is_vector(slot.role) ? DType::f32 : matrix_dtype;
      const float mean = is_norm ? 1.0f : 0.0f;
      const float sd = is_norm ? 0.1f : (slots::is_vector(slot.role) ? 0.05f : std);
      slots::tensor_of(w, slot, l) = random_tensor(slot.shape(c), dt, rng, mean, sd);
    }
  }
  if (c.tie_word_embeddings) w.output = w.token_embd;
  return w;
}

std::shared_ptr<const Model> make_model(const ModelConfig& config, ModelWeights weights) {
  return std::make_shared<const Model>(config, std::move(weights));
}

std::vector<std::vector<double>> reference_logits(const ModelConfig& config,
                                                  const ModelWeights& weights,
                                                  std::span<const int32_t> tokens) {
  return run_reference(config, weights, tokens, true);
}

std::vector<std::vector<double>> reference_hidden(const ModelConfig& config,
                                                  const ModelWeights& weights,
                                                  std::span<const int32_t> tokens) {
  return run_reference(config, weights, tokens, false);
}

Tensor permute_rows_for_interleaved_rope(const Tensor& weight, int64_t n_heads, int64_t head_dim) {
  return rope_order::half_to_interleaved(weight, n_heads, head_dim);
}

double max_abs_diff(std::span<const float> a, const std::vector<double>& b) {
  double m = 0.0;
  for (size_t i = 0; i < a.size() && i < b.size(); ++i) m = std::max(m, std::abs(a[i] - b[i]));
  if (a.size() != b.size()) return INFINITY;
  return m;
}

}  // namespace loom::test
