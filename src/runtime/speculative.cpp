// The speculative generation loop: draft, verify in one target pass, keep the agreed
// prefix and one token of the target's own, roll the rest back (loom/speculative.hpp).
//
// The target's KV cache holds every settled token but the newest one (`last`): each round
// feeds [last, drafts...] with all logits, so row i scores draft i and row k gives the
// token after the last draft. A round without drafts is exactly a plain decode step.
#include "loom/speculative.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <string>

#include "loom/error.hpp"
#include "runtime/draft_length.hpp"
#include "runtime/token_stream.hpp"

namespace loom {

namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

void check_params(const SpeculativeParams& p) {
  if (p.max_draft < 1 || p.max_draft > SpeculativeParams::kMaxDraft) {
    throw Error(ErrorCode::invalid_argument, "speculative max_draft (k) must be 1.." +
                                                 std::to_string(SpeculativeParams::kMaxDraft) + ", got " +
                                                 std::to_string(p.max_draft));
  }
  if (!(p.smoothing > 0.0f && p.smoothing <= 1.0f)) {
    throw Error(ErrorCode::invalid_argument,
                "speculative smoothing must be in (0, 1], got " + std::to_string(p.smoothing));
  }
  if (p.probe_interval < 1) {
    throw Error(ErrorCode::invalid_argument,
                "speculative probe_interval must be at least 1, got " + std::to_string(p.probe_interval));
  }
}

// A drafter's proposal must be usable before the target sees it: at most `asked`
// tokens, ids in the vocabulary, and a distribution per token when it gave any.
void check_draft(const Draft& d, const Drafter& drafter, int32_t asked, int64_t vocab) {
  if (d.tokens.size() > static_cast<size_t>(asked)) {
    throw Error(ErrorCode::invalid_argument, "drafter '" + drafter.name() + "' proposed " +
                                                 std::to_string(d.tokens.size()) + " tokens, asked for at most " +
                                                 std::to_string(asked));
  }
  for (size_t i = 0; i < d.tokens.size(); ++i) {
    if (d.tokens[i] < 0 || d.tokens[i] >= vocab) {
      throw Error(ErrorCode::invalid_argument, "drafter '" + drafter.name() + "' proposed token id " +
                                                   std::to_string(d.tokens[i]) + " at draft position " +
                                                   std::to_string(i) + ", outside the vocabulary [0, " +
                                                   std::to_string(vocab) + ")");
    }
  }
  if (!d.q.empty()) {
    bool ok = d.q.size() == d.tokens.size();
    for (const auto& q : d.q) ok = ok && q.size() == static_cast<size_t>(vocab);
    if (!ok) {
      throw Error(ErrorCode::invalid_argument,
                  "drafter '" + drafter.name() + "' gave draft distributions that are not one per token over the " +
                      std::to_string(vocab) + "-token vocabulary");
    }
  }
}

double prob_of(const CandidateList& list, int32_t id) {
  for (const auto& c : list.items) {
    if (c.id == id) return c.p;
  }
  return 0.0;  // filtered out by the chain: the target never picks it
}

// On rejection of draft x: a draw from max(0, p - q) normalized (q one-hot at x when
// `q` is null). p == q leaves no residual (and no rejection can happen then, but for
// rounding): draw from p.
int32_t draw_residual(const CandidateList& p, const std::vector<float>* q, int32_t x, Rng& rng) {
  auto residual = [&](const Candidate& c) {
    // (A custom stage may write any id: those outside the vocabulary have no q.)
    const bool in_q = q != nullptr && c.id >= 0 && static_cast<size_t>(c.id) < q->size();
    const double qi = q != nullptr ? (in_q ? (*q)[static_cast<size_t>(c.id)] : 0.0) : (c.id == x ? 1.0 : 0.0);
    return std::max(0.0, static_cast<double>(c.p) - qi);
  };
  double sum = 0.0;
  for (const auto& c : p.items) sum += residual(c);
  if (!(sum > 0.0)) return Sampler::draw(p, rng);
  const double u = rng.next_double() * sum;
  double cum = 0.0;
  int32_t last = -1;
  for (const auto& c : p.items) {
    const double r = residual(c);
    if (r <= 0.0) continue;
    cum += r;
    last = c.id;
    if (u < cum) return c.id;
  }
  return last;
}

// Restores the sampler's history on every way out of a drafter's propose().
struct HistoryGuard {
  Sampler& sampler;
  size_t size;
  ~HistoryGuard() { sampler.truncate_history(size); }
};

}  // namespace

double expected_tokens_per_pass(double alpha, int32_t k) {
  if (k < 0) return 0.0;
  if (alpha >= 1.0) return k + 1.0;
  return (1.0 - std::pow(alpha, k + 1)) / (1.0 - alpha);
}

double expected_speedup(double alpha, int32_t k, double c) {
  return expected_tokens_per_pass(alpha, k) / (k * c + 1.0);
}

SpeculativeResult speculative_generate(Session& session, Sampler& sampler, const Tokenizer& tokenizer,
                                       std::string_view prompt, Drafter* drafter, const SpeculativeParams& params,
                                       const GenerateOptions& options) {
  const auto ids = tokenizer.encode(prompt, options.add_special, options.parse_special);
  return speculative_generate_from_tokens(session, sampler, &tokenizer, ids, drafter, params, options);
}

SpeculativeResult speculative_generate_from_tokens(Session& session, Sampler& sampler, const Tokenizer* tokenizer,
                                                   std::span<const int32_t> prompt, Drafter* drafter,
                                                   const SpeculativeParams& params, const GenerateOptions& options) {
  check_params(params);
  if (prompt.empty()) {
    throw Error(ErrorCode::invalid_argument,
                "the prompt encodes to no tokens (give text, or enable add_special for a BOS)");
  }
  if (options.max_tokens < 0) throw Error(ErrorCode::invalid_argument, "max_tokens is negative");
  SpeculativeResult out;
  GenerateResult& result = out.generation;
  SpeculativeStats& stats = out.stats;
  const int64_t vocab = session.model().config().vocab_size;
  for (int32_t t : prompt) {
    if (t < 0 || t >= vocab) {
      throw Error(ErrorCode::invalid_argument, "prompt token id " + std::to_string(t) + " is outside the vocabulary [0, " +
                                                   std::to_string(vocab) + ")");
    }
  }
  if (!options.continue_session) session.reset();
  const int64_t start = session.position();
  const int64_t context_length = session.context_length();
  const auto n_prompt = static_cast<int64_t>(prompt.size());
  if (start + n_prompt > context_length) {
    throw Error(ErrorCode::context_full,
                "context full: " + std::to_string(start) + " tokens in the cache + " + std::to_string(n_prompt) +
                    " new exceed the context length " + std::to_string(context_length));
  }
  if (drafter != nullptr) {
    drafter->begin(session);
    stats.warnings = drafter->warnings();
  }
  result.prompt_tokens = n_prompt;
  for (int32_t t : prompt) sampler.accept(t);

  // context: this call's prompt and every settled token (the drafter's view); the
  // session holds context[0 .. size-1) after `start`.
  std::vector<int32_t> context(prompt.begin(), prompt.end());
  runtime::TokenStream stream(tokenizer, session.model().config().eos_token_ids, options, result);
  auto t0 = Clock::now();
  if (n_prompt > 1) session.prefill(prompt.first(prompt.size() - 1));
  result.prompt_seconds = seconds_since(t0);
  t0 = Clock::now();
  result.stop = StopReason::max_tokens;

  runtime::DraftLength length(params);
  const bool greedy = sampler.greedy();
  Draft draft;
  std::vector<int32_t> pass;
  bool done = options.max_tokens == 0;
  while (!done) {
    const int64_t base = session.position();
    const int64_t room = context_length - base - 1;  // drafts that fit after `last`
    if (room < 0) {
      result.stop = StopReason::context_full;
      break;
    }
    const int64_t remaining = options.max_tokens - static_cast<int64_t>(result.tokens.size());
    int32_t k = drafter != nullptr ? length.next() : 0;
    k = static_cast<int32_t>(std::min<int64_t>({k, room, remaining - 1}));
    draft.clear();
    const size_t history_at_round = sampler.history_size();
    double draft_seconds = 0.0;
    if (k > 0) {
      const auto td = Clock::now();
      {
        HistoryGuard restore{sampler, history_at_round};
        drafter->propose(context, k, sampler, draft);
      }
      draft_seconds = seconds_since(td);
      check_draft(draft, *drafter, k, vocab);
    }
    const auto d = static_cast<int32_t>(draft.tokens.size());
    pass.assign(1, context.back());
    pass.insert(pass.end(), draft.tokens.begin(), draft.tokens.end());

    const auto tv = Clock::now();
    session.prefill(pass, /*all_logits=*/true);
    ++stats.target_passes;
    int32_t accepted = 0;
    int32_t next = -1;
    try {
      for (int32_t i = 0; i <= d && next < 0; ++i) {
        const CandidateList& p = sampler.distribution(session.logits_at(i), /*normalize=*/!greedy);
        if (i == d) {
          next = greedy ? Sampler::best(p) : Sampler::draw(p, sampler.rng());
          break;
        }
        const int32_t x = draft.tokens[static_cast<size_t>(i)];
        bool keep = false;
        if (greedy) {
          const int32_t t = Sampler::best(p);
          keep = t == x;
          if (!keep) next = t;
        } else {
          const std::vector<float>* q = draft.q.empty() ? nullptr : &draft.q[static_cast<size_t>(i)];
          const double px = prob_of(p, x);
          const double qx = q != nullptr ? (*q)[static_cast<size_t>(x)] : 1.0;
          const double u = sampler.rng().next_double();
          // min(1, p/q) > u, without dividing; a q of 0 (a drafter that reported a
          // token it could not have drawn) keeps x whenever the target can pick it.
          keep = qx > 0.0 ? u * qx < px : px > 0.0;
          if (!keep) next = draw_residual(p, q, x, sampler.rng());
        }
        if (keep) {
          sampler.accept(x);
          ++accepted;
        }
      }
    } catch (...) {
      // A sampler stage that throws (a custom stage, non-finite logits): the round is
      // undone, the session and the history are as they were before it.
      session.rollback(base);
      sampler.truncate_history(history_at_round);
      throw;
    }
    sampler.accept(next);
    // The session keeps `last` and the accepted drafts; the rejected ones go.
    session.rollback(base + 1 + accepted);
    const double verify_seconds = seconds_since(tv);
    stats.verify_seconds += verify_seconds;
    stats.draft_seconds += draft_seconds;
    if (d > 0) {
      stats.drafted += d;
      stats.accepted += accepted;
      ++stats.rounds_drafting;
      drafter->accepted(accepted, d);
    }
    if (drafter != nullptr) {
      length.observe(k, d, accepted, std::max(0.0, draft_seconds - draft.catch_up_seconds), verify_seconds);
    }
    stats.last_draft_length = k;

    // Settle the round's tokens one by one, as the plain loop would.
    for (int32_t j = 0; j <= accepted; ++j) {
      const int32_t token = j < accepted ? draft.tokens[static_cast<size_t>(j)] : next;
      context.push_back(token);
      if (!stream.push(token) || static_cast<int64_t>(result.tokens.size()) == options.max_tokens) {
        // What plain sampling would have recorded: up to the token that stopped it.
        sampler.truncate_history(history_at_round + static_cast<size_t>(j) + 1);
        done = true;
        break;
      }
    }
  }

  // Leave the session as plain generate() does: the prompt and the generated tokens,
  // but for the last one unless generation ended at an end-of-sequence token.
  const auto generated = static_cast<int64_t>(result.tokens.size());
  const int64_t fed =
      result.stop == StopReason::end_of_sequence ? generated : std::max<int64_t>(0, generated - 1);
  const int64_t want = start + n_prompt + fed;
  if (session.position() > want) {
    session.rollback(want);
  } else if (session.position() < want) {
    const auto from = static_cast<size_t>(session.position() - start);
    session.prefill(std::span<const int32_t>(context).subspan(from, static_cast<size_t>(want - session.position())));
  }
  stream.finish();
  result.generate_seconds = seconds_since(t0);
  return out;
}

}  // namespace loom
