// The drafters of loom/speculative.hpp: a draft model, prompt lookup, a host function;
// and the vocabulary check a draft model must pass.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <string>

#include "loom/error.hpp"
#include "loom/speculative.hpp"
#include "loom/tokenizer.hpp"

namespace loom {

namespace {

std::string quoted(const std::string& s) {
  std::string out = "'";
  for (char c : s) {
    if (static_cast<unsigned char>(c) < 0x20) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\x%02x", static_cast<unsigned>(static_cast<unsigned char>(c)));
      out += buf;
    } else {
      out += c;
    }
  }
  return out + "'";
}

std::string megabytes(int64_t bytes) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f MB", static_cast<double>(bytes) / 1e6);
  return buf;
}

// ---- a draft model ----

class ModelDrafter final : public Drafter {
 public:
  ModelDrafter(std::shared_ptr<const Model> draft, const Model& target, DraftModelOptions options)
      : model_(std::move(draft)), options_(options) {
    if (!model_) throw Error(ErrorCode::invalid_argument, "draft model is null");
    check_same_vocabulary(target, *model_);
    if (model_->weight_bytes() > target.weight_bytes()) {
      warnings_.push_back("the draft model (" + megabytes(model_->weight_bytes()) +
                          " of weights) is bigger than the target (" + megabytes(target.weight_bytes()) +
                          "): drafting may cost more than it saves");
    }
    if (!(options_.min_confidence >= 0.0f && options_.min_confidence <= 1.0f)) {
      throw Error(ErrorCode::invalid_argument,
                  "draft min_confidence must be in [0, 1], got " + std::to_string(options_.min_confidence));
    }
    if (options_.context_length < 0) throw Error(ErrorCode::invalid_argument, "draft context_length is negative");
  }

  std::string name() const override { return "draft-model"; }
  std::vector<std::string> warnings() const override { return warnings_; }

  void begin(Session& target) override {
    if (target.model().config().vocab_size != model_->config().vocab_size) {
      check_same_vocabulary(target.model(), *model_);
    }
    synced_ = false;  // a new generation: the first draft feeds its whole prompt
    target_ = &target;
    if (session_) return;  // later generations sync from the common prefix
    SessionOptions so;
    so.context_length = options_.context_length > 0
                            ? options_.context_length
                            : std::min(target.context_length(), model_->config().max_positions);
    so.kv_dtype = options_.kv_dtype;
    so.pool = target.shared_pool();  // the draft runs between the target's passes
    session_ = std::make_unique<Session>(model_, std::move(so));
  }

  void propose(std::span<const int32_t> context, int32_t max_tokens, Sampler& sampler, Draft& out) override {
    if (!session_) {
      SessionOptions so;
      so.context_length = options_.context_length;
      so.kv_dtype = options_.kv_dtype;
      session_ = std::make_unique<Session>(model_, std::move(so));
    }
    if (context.empty() || max_tokens <= 0) return;
    const int64_t limit = session_->context_length();
    // The session holds context[offset_, offset_ + fed_.size()). Keep the common prefix
    // and feed the rest (at least the newest token, whose logits start the draft) in one
    // pass. When that is far behind — many plain rounds since the last draft — or past
    // the draft's context, restart on the most recent tokens instead: catching up would
    // cost a draft pass per token, the price of drafting every one of them; a draft that
    // sees a window is still a valid draft (the target verifies), only a weaker one.
    // A draft that can take the target's cache takes it whenever it would otherwise feed
    // more than the two tokens of a drafting round: at the start, and after plain rounds
    // (the adaptive length's probes), where catching up would cost a draft pass over
    // every token decoded meanwhile.
    if (seed_from_target_) {
      const size_t settled = synced_ && offset_ == 0
                                 ? static_cast<size_t>(std::mismatch(fed_.begin(), fed_.end(), context.begin(),
                                                                     context.end()).first - fed_.begin())
                                 : 0;
      if (!synced_ || offset_ != 0 || context.size() - settled > 2) seed_from_target(context, limit, settled);
    }
    if (!synced_ || offset_ > context.size()) {
      offset_ = 0;
    }
    auto view = context.subspan(offset_);
    size_t common = static_cast<size_t>(
        std::mismatch(fed_.begin(), fed_.end(), view.begin(), view.end()).first - fed_.begin());
    const bool far_behind = synced_ && view.size() - common > kMaxCatchUp;
    if (far_behind || static_cast<int64_t>(view.size()) >= limit) {
      const size_t window = std::min<size_t>(kWindow, static_cast<size_t>(std::max<int64_t>(1, limit / 2)));
      offset_ = context.size() - std::min(window, context.size());
      view = context.subspan(offset_);
      common = 0;
    }
    synced_ = true;
    const size_t keep = std::min(common, view.size() - 1);
    if (keep < fed_.size()) {
      session_->rollback(static_cast<int64_t>(keep));
      fed_.resize(keep);
    }
    const auto rest = view.subspan(keep);
    // A round that kept every draft leaves two tokens to feed (the last draft, never fed,
    // and the target's bonus token): that is the price of drafting. More is catching up.
    const auto t0 = std::chrono::steady_clock::now();
    session_->prefill(rest);
    if (rest.size() > 2) {
      out.catch_up_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    }
    fed_.insert(fed_.end(), rest.begin(), rest.end());

    const bool greedy = sampler.greedy();
    const bool need_p = !greedy || options_.min_confidence > 0.0f;
    const int64_t vocab = model_->config().vocab_size;
    for (int32_t j = 0; j < max_tokens; ++j) {
      const CandidateList& q = sampler.distribution(session_->logits(), need_p);
      if (options_.min_confidence > 0.0f) {
        float top = 0.0f;
        for (const auto& c : q.items) top = std::max(top, c.p);
        if (top < options_.min_confidence) break;
      }
      const int32_t token = greedy ? Sampler::best(q) : Sampler::draw(q, sampler.rng());
      if (token < 0 || token >= vocab) break;  // a custom stage's id: nothing to draft on
      if (!greedy) {
        std::vector<float> dense(static_cast<size_t>(vocab), 0.0f);
        for (const auto& c : q.items) {
          if (c.id >= 0 && c.id < vocab) dense[static_cast<size_t>(c.id)] = c.p;  // custom stages may write any id
        }
        out.q.push_back(std::move(dense));
      }
      out.tokens.push_back(token);
      sampler.accept(token);  // the next draft's penalties see it (the caller restores)
      if (j + 1 == max_tokens || static_cast<int64_t>(fed_.size()) >= limit) break;
      session_->step(token);
      fed_.push_back(token);
    }
  }

 private:
  // A draft with the target's attention shape (a quantized copy of it, above all) starts
  // from the target's cache of the prompt instead of computing its own: the prompt is
  // the costly part of starting to draft (a quantized copy's prefill is slower than the
  // target's own), and the target's keys and values are, if anything, the better ones.
  // The draft's proposals stay proposals, verified by the target: exactness is not at
  // stake, only how often they are right. A draft of another shape prefills as before.
  // `settled` positions of the draft's cache already hold context's tokens (its own keys
  // and values of the tokens it saw, or an earlier copy's): only the rest is copied.
  void seed_from_target(std::span<const int32_t> context, int64_t limit, size_t settled) {
    if (target_ == nullptr) return;
    // The target's cache holds every settled token but the newest: context[0, position).
    const int64_t n = std::min<int64_t>(target_->position(), static_cast<int64_t>(context.size()) - 1);
    if (n <= 0 || n >= limit) return;
    try {
      session_->copy_cache_from(*target_, n, std::min<int64_t>(static_cast<int64_t>(settled), n));
    } catch (const Error& e) {
      if (e.code() != ErrorCode::invalid_argument) throw;
      seed_from_target_ = false;  // another shape (checked before anything changed): never try again
      return;
    }
    fed_.assign(context.begin(), context.begin() + n);
    offset_ = 0;
    synced_ = true;
  }

  std::shared_ptr<const Model> model_;
  DraftModelOptions options_;
  std::unique_ptr<Session> session_;
  Session* target_ = nullptr;     // the generation's target session (begin)
  bool seed_from_target_ = true;  // until a copy is refused for the models' shapes
  static constexpr size_t kMaxCatchUp = 64;  // tokens fed to resync before a window is cheaper
  static constexpr size_t kWindow = 32;      // recent tokens a restarted draft sees
  std::vector<int32_t> fed_;  // the tokens in session_'s KV cache: context[offset_, ...)
  size_t offset_ = 0;
  bool synced_ = false;       // proposed at least once in this generation
  std::vector<std::string> warnings_;
};

// ---- prompt lookup ----

class LookupDrafter final : public Drafter {
 public:
  explicit LookupDrafter(LookupOptions o) : options_(o) {
    if (o.min_ngram < 1 || o.max_ngram < o.min_ngram || o.max_ngram > 64) {
      throw Error(ErrorCode::invalid_argument, "prompt lookup n-gram sizes must satisfy 1 <= min_ngram (" +
                                                   std::to_string(o.min_ngram) + ") <= max_ngram (" +
                                                   std::to_string(o.max_ngram) + ") <= 64");
    }
  }
  std::string name() const override { return "lookup"; }

  void propose(std::span<const int32_t> context, int32_t max_tokens, Sampler&, Draft& out) override {
    const size_t n = context.size();
    for (size_t g = std::min<size_t>(static_cast<size_t>(options_.max_ngram), n > 0 ? n - 1 : 0);
         g >= static_cast<size_t>(options_.min_ngram); --g) {
      const auto suffix = context.subspan(n - g);
      // The most recent earlier occurrence (it may overlap the suffix: a repeating run).
      for (size_t s = n - g; s-- > 0;) {
        if (!std::equal(suffix.begin(), suffix.end(), context.begin() + static_cast<std::ptrdiff_t>(s))) continue;
        // What followed, continued into the draft's own tokens once it reaches the end
        // of the context (an overlapping copy, as lookup run again on the extended
        // context would propose): a run repeating every p tokens drafts k tokens, not p.
        // Greedy decoding that loops has periods of 1-3 tokens; capped at the period,
        // the drafts of the random benchmark models averaged 2 tokens.
        const size_t from = s + g;
        out.tokens.clear();
        out.tokens.reserve(static_cast<size_t>(max_tokens));  // the loop reads its own tokens
        for (size_t j = 0; j < static_cast<size_t>(max_tokens); ++j) {
          const size_t at = from + j;
          out.tokens.push_back(at < n ? context[at] : out.tokens[at - n]);
        }
        return;
      }
    }
  }

 private:
  LookupOptions options_;
};

// ---- a host function ----

class CallbackDrafter final : public Drafter {
 public:
  CallbackDrafter(std::string name, DraftFunction fn, std::function<void(int32_t, int32_t)> on_accepted)
      : name_(std::move(name)), fn_(std::move(fn)), on_accepted_(std::move(on_accepted)) {
    if (!fn_) throw Error(ErrorCode::invalid_argument, "callback drafter needs a function");
  }
  std::string name() const override { return name_; }

  void propose(std::span<const int32_t> context, int32_t max_tokens, Sampler&, Draft& out) override {
    buffer_.assign(static_cast<size_t>(max_tokens), -1);
    const int64_t n = fn_(context, buffer_);
    if (n < 0 || n > max_tokens) {
      throw Error(ErrorCode::invalid_argument, "drafter '" + name_ + "' returned " + std::to_string(n) +
                                                   " tokens, allowed 0.." + std::to_string(max_tokens));
    }
    out.tokens.assign(buffer_.begin(), buffer_.begin() + n);
  }

  void accepted(int32_t accepted, int32_t drafted) override {
    if (on_accepted_) on_accepted_(accepted, drafted);
  }

 private:
  std::string name_;
  DraftFunction fn_;
  std::function<void(int32_t, int32_t)> on_accepted_;
  std::vector<int32_t> buffer_;
};

}  // namespace

void check_same_vocabulary(const Model& target, const Model& draft) {
  const int64_t tv = target.config().vocab_size;
  const int64_t dv = draft.config().vocab_size;
  if (tv != dv) {
    throw Error(ErrorCode::invalid_argument, "the draft model's vocabulary has " + std::to_string(dv) +
                                                 " tokens, the target's " + std::to_string(tv) +
                                                 ": a draft must share the target's vocabulary");
  }
  const auto& tt = target.tokenizer();
  const auto& dt = draft.tokenizer();
  if (!tt || !dt) return;  // nothing to compare beyond the size
  if (tt->vocab_size() != dt->vocab_size()) {
    throw Error(ErrorCode::invalid_argument, "the draft model's tokenizer has " + std::to_string(dt->vocab_size()) +
                                                 " tokens, the target's " + std::to_string(tt->vocab_size()) +
                                                 ": a draft must share the target's tokenizer");
  }
  for (int32_t id = 0; id < tt->vocab_size(); ++id) {
    const std::string& a = tt->token_text(id);
    const std::string& b = dt->token_text(id);
    if (a != b) {
      throw Error(ErrorCode::invalid_argument, "the draft model's tokenizer differs from the target's at token id " +
                                                   std::to_string(id) + ": " + quoted(a) + " in the target, " +
                                                   quoted(b) + " in the draft");
    }
  }
}

std::unique_ptr<Drafter> make_model_drafter(std::shared_ptr<const Model> draft, const Model& target,
                                            DraftModelOptions options) {
  return std::make_unique<ModelDrafter>(std::move(draft), target, options);
}

std::unique_ptr<Drafter> make_lookup_drafter(LookupOptions options) {
  return std::make_unique<LookupDrafter>(options);
}

std::unique_ptr<Drafter> make_callback_drafter(std::string name, DraftFunction draft,
                                               std::function<void(int32_t accepted, int32_t drafted)> on_accepted) {
  return std::make_unique<CallbackDrafter>(std::move(name), std::move(draft), std::move(on_accepted));
}

}  // namespace loom
