// `loom run` / `loom bench` with speculative decoding (speculative_cli.hpp).
#include "speculative_cli.hpp"

#include <algorithm>
#include <chrono>

#include "common/json_writer.hpp"
#include "common/median.hpp"
#include "loom/error.hpp"
#include "loom/session.hpp"

namespace loom::cli {

namespace {

DType dtype_named(const std::string& name) {
  const auto d = dtype_from_name(name);
  if (!d) throw Error(ErrorCode::invalid_argument, "--draft-quantize: unknown dtype '" + name + "' (e.g. q4_k, q8_0, gq4_32, f16)");
  return *d;
}

}  // namespace

std::vector<CliDrafter> make_drafters(const DraftFlags& flags, const std::shared_ptr<const Model>& target,
                                      const std::shared_ptr<const Model>& draft, ThreadPool& pool) {
  std::vector<CliDrafter> out;
  DraftModelOptions dmo;
  dmo.min_confidence = flags.min_confidence;
  if (draft) {
    out.push_back({"draft-model", flags.draft_path, make_model_drafter(draft, *target, dmo)});
  }
  if (!flags.draft_quantize.empty()) {
    auto copy = make_draft_copy(*target, dtype_named(flags.draft_quantize), &pool);
    out.push_back({"draft-quantize", flags.draft_quantize, make_model_drafter(copy, *target, dmo)});
  }
  if (flags.lookup > 0) {
    LookupOptions lo;
    lo.max_ngram = static_cast<int32_t>(flags.lookup);
    out.push_back({"lookup", std::to_string(flags.lookup), make_lookup_drafter(lo)});
  }
  return out;
}

void print_speculative_stats(const std::string& mode, const SpeculativeResult& r, std::FILE* err) {
  for (const auto& w : r.stats.warnings) std::fprintf(err, "loom: warning: %s\n", w.c_str());
  std::fprintf(err, "loom: speculative (%s): drafted %lld, accepted %lld (%.1f%%), %lld target passes, %.2f tokens per pass\n",
               mode.c_str(), static_cast<long long>(r.stats.drafted), static_cast<long long>(r.stats.accepted),
               100.0 * r.stats.acceptance(), static_cast<long long>(r.stats.target_passes), r.tokens_per_target_pass());
}

void speculative_bench(const std::shared_ptr<const Model>& target, const std::shared_ptr<const Model>& draft,
                       const SpeculativeBenchOptions& o, std::FILE* out) {
  SessionOptions so;
  so.n_threads = o.n_threads;
  so.context_length = static_cast<int64_t>(o.prompt.size()) + o.gen_tokens + 1;
  so.kv_dtype = o.kv_dtype;
  Session session(target, so);
  auto drafters = make_drafters(o.flags, target, draft, session.pool());
  if (drafters.empty()) throw Error(ErrorCode::invalid_argument, "--speculative needs --draft, --draft-quantize or --lookup");
  SamplerParams sp;
  sp.temperature = 0.0f;
  GenerateOptions go;
  go.max_tokens = o.gen_tokens;
  go.stop_at_eos = false;  // every run generates the same number of tokens
  const Tokenizer* tok = target->tokenizer().get();
  {
    // One unmeasured plain run first (as llama-bench warms up): it touches every mapped
    // weight page of the target, which is load time, not decoding time.
    Sampler warm(sp);
    speculative_generate_from_tokens(session, warm, tok, o.prompt, nullptr, o.flags.params, go);
  }
  for (auto& d : drafters) {
    std::vector<double> plain_s, spec_s;
    SpeculativeResult last;
    for (int r = 0; r < o.reps; ++r) {
      Sampler a(sp);
      const auto plain = speculative_generate_from_tokens(session, a, tok, o.prompt, nullptr, o.flags.params, go);
      plain_s.push_back(plain.generation.generate_seconds);
      Sampler b(sp);
      last = speculative_generate_from_tokens(session, b, tok, o.prompt, d.drafter.get(), o.flags.params, go);
      spec_s.push_back(last.generation.generate_seconds);
      if (last.generation.tokens != plain.generation.tokens) {
        throw Error(ErrorCode::internal, "speculative greedy output differs from plain decoding (" + d.mode + ")");
      }
    }
    const double n = static_cast<double>(last.generation.tokens.size());
    const double tps = n / median(spec_s);
    const double plain_tps = n / median(plain_s);
    if (o.json) {
      JsonWriter w(false);
      w.begin_object()
          .field("mode", d.mode)
          .field("draft", d.detail)
          .field("model", o.model_name)
          .field("threads", session.pool().size())
          .field("prompt_tokens", static_cast<int64_t>(o.prompt.size()))
          .field("gen_tokens", static_cast<int64_t>(last.generation.tokens.size()))
          .field("reps", o.reps)
          .field("max_draft", o.flags.params.max_draft)
          .field("adaptive", o.flags.params.adaptive)
          .field("tokens_per_s", tps)
          .field("plain_tokens_per_s", plain_tps)
          .field("speedup", tps / plain_tps)
          .field("acceptance", last.stats.acceptance())
          .field("drafted", last.stats.drafted)
          .field("accepted", last.stats.accepted)
          .field("target_passes", last.stats.target_passes)
          .field("tokens_per_target_pass", last.tokens_per_target_pass())
          .end_object();
      std::fprintf(out, "%s\n", w.str().c_str());
    } else {
      std::fprintf(out,
                   "%-15s %-10s %7.1f tok/s  plain %7.1f tok/s  x%.2f   acceptance %5.1f%%  %.2f tokens per target pass\n",
                   d.mode.c_str(), d.detail.c_str(), tps, plain_tps, tps / plain_tps, 100.0 * last.stats.acceptance(),
                   last.tokens_per_target_pass());
    }
    for (const auto& w : last.stats.warnings) std::fprintf(stderr, "loom: warning: %s\n", w.c_str());
    std::fflush(out);
  }
}

}  // namespace loom::cli
