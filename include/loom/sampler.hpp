// loom::Sampler — turns a row of logits into the next token through a chain of stages.
//
// The built-in chain, in order: logit bias, repetition / frequency / presence penalties
// over the last N accepted tokens, temperature (0 means greedy), top-k, top-p, min-p,
// then host-added custom stages, then the pick: a draw from a seeded RNG (same seed and
// same logits give the same tokens on every run and thread count), or, for greedy, the
// exact argmax with ties going to the lowest token id.
//
// Every stage sees a CandidateList (id, logit, probability) and may rewrite or shrink
// it; the list is never left empty (filters always keep the best candidate). Logits
// with NaN or +-Inf are rejected with loom::Error(numeric) instead of producing a
// token.
//
// Ownership: a Sampler owns its stages. Thread-safety: one thread at a time (it holds
// the RNG and the penalty history).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <utility>
#include <vector>

namespace loom {

struct Candidate {
  int32_t id = 0;
  float logit = 0.0f;
  float p = 0.0f;  // valid after a stage that computes probabilities (see `normalized`)
};

struct CandidateList {
  std::vector<Candidate> items;
  bool sorted = false;      // items in descending logit order (ties: ascending id)
  bool normalized = false;  // p holds softmax(logit) over items

  // Sorts (if needed) and computes p = softmax(logit) over the current items.
  void sort_descending();
  void normalize();
};

// Seeded, portable RNG (splitmix64-seeded xoshiro256**): the same sequence everywhere.
class Rng {
 public:
  explicit Rng(uint64_t seed = 0) { reseed(seed); }
  void reseed(uint64_t seed);
  uint64_t next_u64();
  double next_double();  // uniform in [0, 1), 53 random bits

 private:
  uint64_t s_[4]{};
};

struct SamplerContext {
  std::span<const int32_t> history;  // accepted tokens, oldest first
  Rng& rng;
};

class SamplerStage {
 public:
  virtual ~SamplerStage() = default;
  virtual std::string name() const = 0;
  virtual void apply(CandidateList& candidates, SamplerContext& context) = 0;
};

struct SamplerParams {
  float temperature = 0.8f;  // <= 0: greedy
  int32_t top_k = 40;        // <= 0 or >= vocab: off
  float top_p = 0.95f;       // >= 1: off; 0 keeps only the best candidate
  float min_p = 0.05f;       // <= 0: off
  float repeat_penalty = 1.0f;     // 1: off (llama.cpp semantics: divide positive logits)
  float frequency_penalty = 0.0f;  // subtracted once per occurrence
  float presence_penalty = 0.0f;   // subtracted once if present
  int32_t penalty_last_n = 64;     // history window for penalties (0: off, -1: all)
  uint64_t seed = 0x5EED;
  std::vector<std::pair<int32_t, float>> logit_bias;  // -INFINITY bans a token
};

class Sampler {
 public:
  explicit Sampler(const SamplerParams& params = {});
  ~Sampler();
  Sampler(Sampler&&) noexcept;
  Sampler& operator=(Sampler&&) noexcept;

  // Appends a custom stage; it runs after the built-in filters, before the pick.
  void add_stage(std::unique_ptr<SamplerStage> stage);
  // Picks a token from `logits` (one per vocabulary entry), records it in the history
  // and returns it. Throws Error(numeric) for non-finite logits.
  int32_t sample(std::span<const float> logits);
  // Records a token the host chose itself (e.g. the prompt) for the penalties.
  void accept(int32_t token);
  // Clears the history and reseeds the RNG with the params' seed.
  void reset();

  const SamplerParams& params() const noexcept;
  std::vector<std::string> stage_names() const;
  // The candidates as they were just before the last pick (for inspection and tests).
  const CandidateList& last_candidates() const noexcept;

  // ---- for speculative decoding (loom/speculative.hpp) ----
  // The chain without the pick: what sample() would choose among for these logits and
  // the current history, with p normalized over the remaining candidates. For a greedy
  // sampler (temperature <= 0) p is the softmax after bias and penalties, and the pick is
  // the candidate best() returns. Records nothing and draws nothing (a custom stage may
  // still use the RNG). Borrowed: valid until the next distribution() or sample().
  // normalize = false skips the softmax (a greedy caller needs only best()).
  const CandidateList& distribution(std::span<const float> logits, bool normalize = true);
  // The greedy pick of a list: the highest logit, ties to the lowest id.
  static int32_t best(const CandidateList& candidates);
  // The sampled pick of a normalized list: one uniform draw from `rng` against the
  // cumulative probabilities in list order (what sample() does at temperature > 0).
  static int32_t draw(const CandidateList& candidates, Rng& rng);
  bool greedy() const noexcept;
  // The RNG the picks draw from (speculative verification draws from it too, so one seed
  // makes a whole speculative run reproducible).
  Rng& rng() noexcept;
  // The penalty history: its length, and forgetting what came after a length (drafted
  // tokens that were tried and rejected).
  size_t history_size() const noexcept;
  void truncate_history(size_t size);

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

// A stage from a plain function, for hosts that don't want to subclass.
std::unique_ptr<SamplerStage> make_stage(
    std::string name, std::function<void(CandidateList&, SamplerContext&)> fn);

}  // namespace loom
