// loom speculative decoding — more than one token per pass over the target model's
// weights, with the target's exact output.
//
// A Drafter cheaply proposes the next k tokens; the target scores the last accepted token
// and all k drafts in ONE forward pass (Session::prefill with all_logits, the multi-token
// pass of the batch engine), keeps the longest prefix its own sampler agrees with, adds
// one token of its own (the correction of the first rejected draft, or a bonus token when
// all k were accepted) and rolls the rejected suffix out of its KV cache. One pass thus
// yields 1..k+1 tokens.
//
// Exactness. Greedy: a draft is kept only when it is the target's argmax (after the same
// bias and penalties), so the output is token for token plain greedy decoding's (the
// pass's logits are bit-identical to step-by-step ones: batch invariance). Sampling: the
// rejection scheme of Leviathan et al. 2023 / Chen et al. 2023 — with p and q the target's
// and the draft's distributions after the whole sampler chain (temperature, top-k/p,
// min-p, penalties, logit bias, custom stages), a draft x is kept with probability
// min(1, p(x)/q(x)), and on rejection the token is drawn from max(0, p - q) normalized;
// each generated token then follows p exactly. Deterministic drafters (prompt lookup, a
// host callback) have q one-hot: x is kept with probability p(x), else drawn from p with
// x removed. All draws come from the sampler's RNG: a seed makes a run reproducible.
//
// Ownership: drafters are owned by the caller and used by one generation at a time; a
// model drafter holds a shared_ptr to its model and owns its own session (KV cache).
// Thread-safety: one thread at a time per drafter (as for a Session).
// docs/speculative.md has the expected speedup and the knobs.
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "loom/dtype.hpp"
#include "loom/generate.hpp"
#include "loom/loader.hpp"
#include "loom/model.hpp"
#include "loom/sampler.hpp"
#include "loom/session.hpp"

namespace loom {

// What a drafter proposed for one round.
struct Draft {
  std::vector<int32_t> tokens;
  // Drafters that sample (a draft model with a sampling sampler): q[i] is the
  // distribution tokens[i] was drawn from, dense over the vocabulary, after the sampler
  // chain. Empty: deterministic proposals (q is one-hot at each token).
  std::vector<std::vector<float>> q;
  // Seconds of the proposal spent catching up on the context (a draft model feeding what
  // it has not seen) rather than drafting: the adaptive length prices drafted tokens
  // without it.
  double catch_up_seconds = 0.0;
  void clear() {
    tokens.clear();
    q.clear();
    catch_up_seconds = 0.0;
  }
};

// The interface a drafter implements (a host's own drafter too).
class Drafter {
 public:
  virtual ~Drafter() = default;
  virtual std::string name() const = 0;
  // Once per generation, before the first propose(): the target's session (its
  // vocabulary, context length and threads). May throw to refuse the target.
  virtual void begin(Session& target) { (void)target; }
  // Up to `max_tokens` (>= 1) tokens that may follow `context` (the prompt and every
  // token generated so far, oldest first) into `out` (cleared by the caller). Fewer, or
  // none, is fine. A drafter that samples may use `sampler` (distribution(), rng(), and
  // accept() for its own drafted tokens: the caller restores the history afterwards).
  virtual void propose(std::span<const int32_t> context, int32_t max_tokens, Sampler& sampler, Draft& out) = 0;
  // The target kept the first `accepted` of the `drafted` tokens last proposed (the next
  // context is the old one, those tokens and one of the target's own).
  virtual void accepted(int32_t accepted, int32_t drafted) {
    (void)accepted;
    (void)drafted;
  }
  // Remarks for the caller (e.g. a draft model bigger than its target).
  virtual std::vector<std::string> warnings() const { return {}; }
};

// Throws Error(invalid_argument) unless the draft shares the target's vocabulary: the
// same vocab_size (the message names both) and, when both have tokenizers, the same
// token text for every id (the message names the first id that differs and both texts).
void check_same_vocabulary(const Model& target, const Model& draft);

struct DraftModelOptions {
  // The draft's KV cache: 0 follows the target's context length (capped by the draft's
  // max_positions). When it runs out the drafter proposes nothing (plain decoding).
  int64_t context_length = 0;
  DType kv_dtype = DType::f32;
  // Stop drafting when the draft's most likely candidate (after the sampler chain) has
  // less than this probability: an unsure draft is usually rejected and costs a pass.
  float min_confidence = 0.0f;
};

// A smaller model of the same vocabulary (or a quantized copy of the target) drafts with
// the target's sampler chain; its own session follows the accepted context (rolled back
// to the common prefix, the rest fed in one pass). Throws what check_same_vocabulary
// throws; a draft with more weight bytes than the target is allowed, with a warning.
std::unique_ptr<Drafter> make_model_drafter(std::shared_ptr<const Model> draft, const Model& target,
                                            DraftModelOptions options = {});

// The quantized copy of a target as its draft, in one call, without a second model
// file: every projection and embedding matrix converted to `dtype` in memory (e.g. q4_k
// or gq4_32 for an f16 target, q8_0 for f32; a matrix whose rows are not whole blocks of
// the type stays as it is), norms, config and tokenizer shared with the target. The
// conversion runs on `pool`'s threads when given (a session's, say: the same copy at any
// thread count), else on the calling thread.
std::shared_ptr<const Model> make_draft_copy(const Model& target, DType dtype, ThreadPool* pool = nullptr);
// The same from the target's file: loaded again with `dtype` in memory (float dtypes
// through LoadOptions::target_dtype, block types through make_draft_copy). `load` is
// the target's load options (its logger, I/O mode...).
std::shared_ptr<const Model> load_draft_copy(const std::filesystem::path& target_path, DType dtype,
                                             LoadOptions load = {});

struct LookupOptions {
  int32_t max_ngram = 3;  // the longest suffix of the context searched for (>= min_ngram)
  int32_t min_ngram = 1;  // the shortest (>= 1)
};

// Prompt lookup: the longest recent suffix of the context (max_ngram down to min_ngram
// tokens) that appeared before is matched, most recent occurrence first, and the tokens
// that followed it are proposed (continued into the draft's own tokens where they reach
// the end of the context: a repeating run drafts as many as asked). No model: free to
// run, strong where the answer copies spans of the prompt (RAG, quoting, code edits).
std::unique_ptr<Drafter> make_lookup_drafter(LookupOptions options = {});

// A host function as a drafter: writes up to out.size() tokens continuing `context` and
// returns how many (a value outside 0..out.size() fails the generation with
// Error(invalid_argument)). Ids are checked against the vocabulary before the target
// sees them. `on_accepted` (optional) hears how many were kept.
using DraftFunction = std::function<int64_t(std::span<const int32_t> context, std::span<int32_t> out)>;
std::unique_ptr<Drafter> make_callback_drafter(std::string name, DraftFunction draft,
                                               std::function<void(int32_t accepted, int32_t drafted)> on_accepted = {});

// The knobs of the draft length.
struct SpeculativeParams {
  int32_t max_draft = 8;   // k: drafted tokens per target pass at most, 1..kMaxDraft
  // Adaptive: k for each round is chosen from the recent acceptance rate and the
  // measured cost of drafting and of verification passes so that tokens per second is
  // highest — down to 0 (a plain decode step) when drafting does not pay, with a probe
  // of 1 draft every probe_interval plain rounds to notice when it starts to. Off: k is
  // always max_draft (clamped by the context left).
  bool adaptive = true;
  int32_t probe_interval = 16;
  // Weight of the newest round in the running estimates (acceptance, costs), in (0, 1].
  float smoothing = 0.1f;
  static constexpr int32_t kMaxDraft = 64;
};

struct SpeculativeStats {
  int64_t drafted = 0;        // tokens proposed and verified
  int64_t accepted = 0;       // of those, kept
  int64_t target_passes = 0;  // forward passes of the target during generation
  int64_t rounds_drafting = 0;  // passes that verified at least one draft
  double draft_seconds = 0.0;   // in the drafter (a draft model's passes)
  double verify_seconds = 0.0;  // in the target's passes
  int32_t last_draft_length = 0;  // k the adaptive choice had reached
  std::vector<std::string> warnings;
  double acceptance() const { return drafted > 0 ? static_cast<double>(accepted) / static_cast<double>(drafted) : 0.0; }
};

struct SpeculativeResult {
  GenerateResult generation;
  SpeculativeStats stats;
  // Generated tokens per target pass (the quantity speculation raises above 1).
  double tokens_per_target_pass() const {
    return stats.target_passes > 0
               ? static_cast<double>(generation.tokens.size()) / static_cast<double>(stats.target_passes)
               : 0.0;
  }
};

// generate() with a drafter: the same options, stop rules, streaming and stop reasons,
// and — for a greedy sampler — the same tokens. `drafter` may be null (plain decoding,
// counted the same way). Throws Error(invalid_argument) for a max_draft outside
// 1..kMaxDraft or smoothing outside (0, 1], or when a drafter proposes an id outside the
// vocabulary or more tokens than asked (the session then holds the accepted prefix:
// nothing else was fed). When the context runs out the accepted tokens are kept and the
// stop reason is context_full. Afterwards the session holds what plain generate() would
// leave (its logits are not kept: the next call prefills).
SpeculativeResult speculative_generate(Session& session, Sampler& sampler, const Tokenizer& tokenizer,
                                       std::string_view prompt, Drafter* drafter,
                                       const SpeculativeParams& params = {}, const GenerateOptions& options = {});
// From tokens; `tokenizer` may be null (no text is decoded or streamed, stop strings
// never match, and stop_at_eos uses the model config's eos ids): benchmarks on generated
// models without a vocabulary.
SpeculativeResult speculative_generate_from_tokens(Session& session, Sampler& sampler, const Tokenizer* tokenizer,
                                                   std::span<const int32_t> prompt, Drafter* drafter,
                                                   const SpeculativeParams& params = {},
                                                   const GenerateOptions& options = {});

// The expected tokens per target pass with per-token acceptance alpha and k drafts,
// (1 - alpha^(k+1)) / (1 - alpha), and the speedup over plain decoding when a draft token
// costs c target passes: that / (k c + 1). (docs/speculative.md)
double expected_tokens_per_pass(double alpha, int32_t k);
double expected_speedup(double alpha, int32_t k, double c);

}  // namespace loom
