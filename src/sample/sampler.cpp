#include "loom/sampler.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <unordered_map>
#include <unordered_set>

#include "loom/error.hpp"

namespace loom {

// ---- CandidateList ----

namespace {
bool better(const Candidate& a, const Candidate& b) {
  return a.logit > b.logit || (a.logit == b.logit && a.id < b.id);
}
}  // namespace

void CandidateList::sort_descending() {
  if (sorted) return;
  std::sort(items.begin(), items.end(), better);
  sorted = true;
}

void CandidateList::normalize() {
  if (items.empty()) return;
  float max = -std::numeric_limits<float>::infinity();
  for (const auto& c : items) max = std::max(max, c.logit);
  double sum = 0.0;
  for (auto& c : items) {
    c.p = std::exp(c.logit - max);
    sum += c.p;
  }
  const double inv = 1.0 / sum;
  for (auto& c : items) c.p = static_cast<float>(c.p * inv);
  normalized = true;
}

// ---- Rng: xoshiro256** seeded through splitmix64 (public-domain algorithms) ----

void Rng::reseed(uint64_t seed) {
  uint64_t x = seed;
  for (auto& s : s_) {
    x += 0x9E3779B97F4A7C15ull;
    uint64_t z = x;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    s = z ^ (z >> 31);
  }
}

uint64_t Rng::next_u64() {
  auto rotl = [](uint64_t v, int k) { return (v << k) | (v >> (64 - k)); };
  const uint64_t result = rotl(s_[1] * 5, 7) * 9;
  const uint64_t t = s_[1] << 17;
  s_[2] ^= s_[0];
  s_[3] ^= s_[1];
  s_[1] ^= s_[2];
  s_[0] ^= s_[3];
  s_[2] ^= t;
  s_[3] = rotl(s_[3], 45);
  return result;
}

double Rng::next_double() { return static_cast<double>(next_u64() >> 11) * 0x1p-53; }

// ---- built-in stages ----

namespace {

class LogitBias final : public SamplerStage {
 public:
  // The first bias given for an id wins (as a map built from the list would keep it).
  explicit LogitBias(const std::vector<std::pair<int32_t, float>>& bias) {
    std::unordered_set<int32_t> seen;
    for (const auto& [id, value] : bias) {
      if (seen.insert(id).second) bias_.emplace_back(id, value);
    }
  }
  std::string name() const override { return "logit_bias"; }
  void apply(CandidateList& list, SamplerContext&) override {
    if (bias_.empty()) return;
    // This stage runs first, on the list run_chain builds: token i at index i, every
    // logit finite. So each bias is one add (this runs for every token of every sequence
    // a server samples: a lookup per vocabulary entry cost it 2-3% of a batched pass),
    // ids outside the vocabulary change nothing, and only a biased logit can have
    // become -inf.
    bool banned = false;
    for (const auto& [id, value] : bias_) {
      const auto at = static_cast<size_t>(id);
      if (id < 0 || at >= list.items.size()) continue;
      Candidate& c = list.items[at];
      if (c.id != id) {
        throw Error(ErrorCode::internal, "logit bias: the candidates are not in token order (the stage must run first)");
      }
      c.logit += value;
      banned = banned || (std::isinf(c.logit) && c.logit < 0);
    }
    if (banned) {
      // -inf bans: drop the token altogether.
      std::erase_if(list.items, [](const Candidate& c) { return std::isinf(c.logit) && c.logit < 0; });
      if (list.items.empty()) {
        throw Error(ErrorCode::invalid_argument, "logit bias banned every token");
      }
    }
    list.sorted = list.normalized = false;
  }

 private:
  std::vector<std::pair<int32_t, float>> bias_;
};

class Penalties final : public SamplerStage {
 public:
  Penalties(int32_t last_n, float repeat, float frequency, float presence)
      : last_n_(last_n), repeat_(repeat), frequency_(frequency), presence_(presence) {}
  std::string name() const override { return "penalties"; }
  void apply(CandidateList& list, SamplerContext& ctx) override {
    if (last_n_ == 0 || (repeat_ == 1.0f && frequency_ == 0.0f && presence_ == 0.0f)) return;
    auto history = ctx.history;
    if (last_n_ > 0 && history.size() > static_cast<size_t>(last_n_)) {
      history = history.last(static_cast<size_t>(last_n_));
    }
    if (history.empty()) return;
    std::unordered_map<int32_t, int> counts;
    for (int32_t t : history) ++counts[t];
    for (auto& c : list.items) {
      auto it = counts.find(c.id);
      if (it == counts.end()) continue;
      c.logit = c.logit > 0.0f ? c.logit / repeat_ : c.logit * repeat_;
      c.logit -= static_cast<float>(it->second) * frequency_ + presence_;
    }
    list.sorted = list.normalized = false;
  }

 private:
  int32_t last_n_;
  float repeat_, frequency_, presence_;
};

class Temperature final : public SamplerStage {
 public:
  explicit Temperature(float t) : t_(t) {}
  std::string name() const override { return "temperature"; }
  void apply(CandidateList& list, SamplerContext&) override {
    if (t_ <= 0.0f || t_ == 1.0f) return;  // greedy is decided by the pick
    // A temperature near zero can push logits past the float range; clamping keeps
    // the softmax finite (the largest logit still takes all the mass).
    const float inv = 1.0f / t_;
    constexpr float kMax = std::numeric_limits<float>::max();
    for (auto& c : list.items) c.logit = std::clamp(c.logit * inv, -kMax, kMax);
    list.normalized = false;
  }

 private:
  float t_;
};

class TopK final : public SamplerStage {
 public:
  explicit TopK(int32_t k) : k_(k) {}
  std::string name() const override { return "top_k"; }
  void apply(CandidateList& list, SamplerContext&) override {
    if (k_ <= 0 || static_cast<size_t>(k_) >= list.items.size()) return;
    const auto k = static_cast<size_t>(k_);
    if (!list.sorted) {
      std::nth_element(list.items.begin(), list.items.begin() + static_cast<std::ptrdiff_t>(k - 1),
                       list.items.end(), better);
      list.items.resize(k);
      std::sort(list.items.begin(), list.items.end(), better);
      list.sorted = true;
    } else {
      list.items.resize(k);
    }
    list.normalized = false;
  }

 private:
  int32_t k_;
};

class TopP final : public SamplerStage {
 public:
  explicit TopP(float p) : p_(p) {}
  std::string name() const override { return "top_p"; }
  void apply(CandidateList& list, SamplerContext&) override {
    if (p_ >= 1.0f || list.items.size() <= 1) return;
    list.normalize();
    // Sort only as far as needed: the nucleus is usually a small prefix, so grow a
    // partially sorted prefix until it holds mass p.
    size_t prefix = std::min<size_t>(64, list.items.size());
    for (;;) {
      if (!list.sorted) {
        std::partial_sort(list.items.begin(), list.items.begin() + static_cast<std::ptrdiff_t>(prefix),
                          list.items.end(), better);
      }
      double cum = 0.0;
      for (size_t i = 0; i < prefix; ++i) {
        cum += list.items[i].p;
        if (cum >= p_) {
          list.items.resize(i + 1);  // keeps at least one candidate (p_ == 0 keeps the best)
          list.sorted = true;
          list.normalized = false;
          return;
        }
      }
      if (prefix == list.items.size()) return;  // rounding: the whole list is the nucleus
      prefix = std::min(list.items.size(), prefix * 4);
    }
  }

 private:
  float p_;
};

class MinP final : public SamplerStage {
 public:
  explicit MinP(float p) : p_(p) {}
  std::string name() const override { return "min_p"; }
  void apply(CandidateList& list, SamplerContext&) override {
    if (p_ <= 0.0f || list.items.size() <= 1) return;
    // p_i >= min_p * p_max  <=>  logit_i >= logit_max + log(min_p)
    float max = -std::numeric_limits<float>::infinity();
    for (const auto& c : list.items) max = std::max(max, c.logit);
    const float threshold = max + std::log(p_);
    std::erase_if(list.items, [&](const Candidate& c) { return c.logit < threshold; });
    list.normalized = false;
  }

 private:
  float p_;
};

class FunctionStage final : public SamplerStage {
 public:
  FunctionStage(std::string name, std::function<void(CandidateList&, SamplerContext&)> fn)
      : name_(std::move(name)), fn_(std::move(fn)) {}
  std::string name() const override { return name_; }
  void apply(CandidateList& list, SamplerContext& ctx) override { fn_(list, ctx); }

 private:
  std::string name_;
  std::function<void(CandidateList&, SamplerContext&)> fn_;
};

}  // namespace

std::unique_ptr<SamplerStage> make_stage(std::string name,
                                         std::function<void(CandidateList&, SamplerContext&)> fn) {
  return std::make_unique<FunctionStage>(std::move(name), std::move(fn));
}

// ---- Sampler ----

struct Sampler::Impl {
  SamplerParams params;
  std::vector<std::unique_ptr<SamplerStage>> stages;  // built-ins, then custom stages
  std::vector<int32_t> history;
  Rng rng;
  CandidateList candidates;
};

Sampler::Sampler(const SamplerParams& params) : impl_(std::make_unique<Impl>()) {
  if (params.repeat_penalty <= 0.0f) {
    throw Error(ErrorCode::invalid_argument, "repeat_penalty must be positive");
  }
  if (params.top_p < 0.0f || params.min_p > 1.0f) {
    throw Error(ErrorCode::invalid_argument, "top_p must be >= 0 and min_p <= 1");
  }
  impl_->params = params;
  impl_->rng.reseed(params.seed);
  auto& s = impl_->stages;
  s.push_back(std::make_unique<LogitBias>(params.logit_bias));
  s.push_back(std::make_unique<Penalties>(params.penalty_last_n, params.repeat_penalty,
                                          params.frequency_penalty, params.presence_penalty));
  s.push_back(std::make_unique<Temperature>(params.temperature));
  if (params.temperature > 0.0f) {  // greedy ignores the truncating filters
    s.push_back(std::make_unique<TopK>(params.top_k));
    s.push_back(std::make_unique<TopP>(params.top_p));
    s.push_back(std::make_unique<MinP>(params.min_p));
  }
}

Sampler::~Sampler() = default;
Sampler::Sampler(Sampler&&) noexcept = default;
Sampler& Sampler::operator=(Sampler&&) noexcept = default;

void Sampler::add_stage(std::unique_ptr<SamplerStage> stage) {
  if (!stage) throw Error(ErrorCode::invalid_argument, "null sampler stage");
  impl_->stages.push_back(std::move(stage));
}

namespace {

// Every stage of the chain over `logits`, into `list` (the pick comes after).
void run_chain(Sampler::Impl& s, std::span<const float> logits);

}  // namespace

int32_t Sampler::sample(std::span<const float> logits) {
  Impl& s = *impl_;
  run_chain(s, logits);
  auto& list = s.candidates;
  int32_t token = 0;
  if (s.params.temperature <= 0.0f) {
    token = best(list);
  } else {
    list.normalize();
    token = draw(list, s.rng);
  }
  s.history.push_back(token);
  return token;
}

const CandidateList& Sampler::distribution(std::span<const float> logits, bool normalize) {
  run_chain(*impl_, logits);
  if (normalize) impl_->candidates.normalize();
  return impl_->candidates;
}

int32_t Sampler::best(const CandidateList& candidates) {
  if (candidates.items.empty()) throw Error(ErrorCode::invalid_argument, "no candidates to pick from");
  return std::min_element(candidates.items.begin(), candidates.items.end(), better)->id;
}

int32_t Sampler::draw(const CandidateList& candidates, Rng& rng) {
  if (candidates.items.empty()) throw Error(ErrorCode::invalid_argument, "no candidates to pick from");
  const double u = rng.next_double();
  double cum = 0.0;
  for (const auto& c : candidates.items) {
    cum += c.p;
    if (u < cum) return c.id;
  }
  return candidates.items.back().id;  // rounding can leave cum a hair under 1
}

bool Sampler::greedy() const noexcept { return impl_->params.temperature <= 0.0f; }
Rng& Sampler::rng() noexcept { return impl_->rng; }
size_t Sampler::history_size() const noexcept { return impl_->history.size(); }

void Sampler::truncate_history(size_t size) {
  if (size < impl_->history.size()) impl_->history.resize(size);
}

namespace {

void run_chain(Sampler::Impl& s, std::span<const float> logits) {
  if (logits.empty()) throw Error(ErrorCode::invalid_argument, "no logits to sample from");
  auto& list = s.candidates;
  list.items.resize(logits.size());
  list.sorted = list.normalized = false;
  for (size_t i = 0; i < logits.size(); ++i) {
    if (!std::isfinite(logits[i])) {
      throw Error(ErrorCode::numeric, "logit of token " + std::to_string(i) + " is " +
                                          (std::isnan(logits[i]) ? "NaN" : "infinite") +
                                          "; refusing to sample");
    }
    list.items[i] = Candidate{static_cast<int32_t>(i), logits[i], 0.0f};
  }
  SamplerContext ctx{s.history, s.rng};
  for (auto& stage : s.stages) {
    stage->apply(list, ctx);
    if (list.items.empty()) {
      throw Error(ErrorCode::invalid_argument,
                  "sampler stage '" + stage->name() + "' removed every candidate");
    }
  }
}

}  // namespace

void Sampler::accept(int32_t token) { impl_->history.push_back(token); }

void Sampler::reset() {
  impl_->history.clear();
  impl_->rng.reseed(impl_->params.seed);
}

const SamplerParams& Sampler::params() const noexcept { return impl_->params; }

std::vector<std::string> Sampler::stage_names() const {
  std::vector<std::string> names;
  for (const auto& s : impl_->stages) names.push_back(s->name());
  return names;
}

const CandidateList& Sampler::last_candidates() const noexcept { return impl_->candidates; }

}  // namespace loom
