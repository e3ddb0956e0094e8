// Speculative against plain decoding of the same target in the same run, on generated
// Llama-shaped models: tokens/s, the acceptance rate and target passes per token.
//
//   build/bench/loom_speculative_decode [--shape small|1b] [--rows f16-q4_k,f32-q8_0,f16-lookup]
//                                       [--logits random,peaked] [--scale 25] [--prompt 64]
//                                       [--gen 64] [--max-draft 8] [--fixed 0|1] [--reps 1]
//                                       [--threads N] [--json 0|1] [--text repeat|copy]
//                                       [--pass-costs 0|1]
//
// Rows: "TARGET-DRAFT" is a TARGET-dtype model with its DRAFT-dtype copy (quantized in
// memory, loom::make_draft_copy) as the draft; "TARGET-lookup" drafts by prompt lookup.
// Each row runs for each --logits variant: "random" weights give flat logits (the draft's
// argmax often differs: low acceptance), "peaked" multiplies the output projection's
// spread by --scale so the logits are peaked as a trained model's are (high acceptance).
// --text repeat (default): the prompt is a random sequence said twice; greedy decoding of
// these models falls into loops, which lookup drafts well. --text copy: the RAG case, an
// answer that copies its context: the prompt is a seed (the first half of the random
// sequence), the model's own greedy continuation of it (--gen tokens: the "document"),
// then the seed again, so the answer follows the document where the model repeats
// itself (random models mostly do after a few tokens).
// --pass-costs 1 prints, instead, what a verification pass of 1..max_draft+1 tokens
// costs after the prompt (the median of 15), for each row's target.
//
// Each repetition generates --gen tokens greedily, plain (no drafter) and speculative
// (plain first in even repetitions, speculative first in odd ones), from the same prompt
// through loom::speculative_generate_from_tokens; the tokens must be identical (the run
// fails otherwise). Figures are medians over repetitions; the speedup is the median of
// the repetitions' own ratios.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <map>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "common/json_writer.hpp"
#include "loom/cpu.hpp"
#include "loom/speculative.hpp"
#include "loom/thread_pool.hpp"
#include "synthetic_model.hpp"

namespace {

using loom::bench::median;
using loom::bench::split;

struct Row {
  std::string name;
  loom::DType target;
  std::optional<loom::DType> draft;  // nullopt: prompt lookup
};

Row parse_row(const std::string& text) {
  const auto dash = text.find('-');
  if (dash == std::string::npos) throw std::invalid_argument("row '" + text + "' is not TARGET-DRAFT");
  const auto target = loom::dtype_from_name(text.substr(0, dash));
  const std::string d = text.substr(dash + 1);
  if (!target) throw std::invalid_argument("unknown target dtype in row '" + text + "'");
  if (d == "lookup") return {text, *target, std::nullopt};
  const auto draft = loom::dtype_from_name(d);
  if (!draft) throw std::invalid_argument("unknown draft dtype in row '" + text + "'");
  return {text, *target, *draft};
}

struct Measured {
  double seconds = 0.0;
  loom::SpeculativeResult result;
};

Measured generate(loom::Session& session, const std::vector<int32_t>& prompt, loom::Drafter* drafter,
                  const loom::SpeculativeParams& params, int gen) {
  loom::SamplerParams sp;
  sp.temperature = 0.0f;
  loom::Sampler sampler(sp);
  loom::GenerateOptions go;
  go.max_tokens = gen;
  go.stop_at_eos = false;
  Measured m;
  m.result = loom::speculative_generate_from_tokens(session, sampler, nullptr, prompt, drafter, params, go);
  m.seconds = m.result.generation.generate_seconds;
  return m;
}

// What a verification pass costs by its size: the median of 15 passes of n tokens (all
// logits kept, as speculative verification does) after the prompt, n = 1..max_n, each
// rolled back, in plain steps (a pass of 1).
void print_pass_costs(loom::Session& session, const Row& row, const std::string& variant,
                      const std::vector<int32_t>& prompt, int max_n) {
  session.reset();
  session.prefill(std::span<const int32_t>(prompt));
  const int64_t base = session.position();
  double step = 0.0;
  std::printf("%-12s %-7s pass ms by tokens:", row.name.c_str(), variant.c_str());
  for (int n = 1; n <= max_n; ++n) {
    std::vector<int32_t> pass(prompt.begin(), prompt.begin() + std::min<size_t>(static_cast<size_t>(n), prompt.size()));
    std::vector<double> t;
    for (int r = 0; r < 15; ++r) {
      const auto t0 = std::chrono::steady_clock::now();
      session.prefill(pass, /*all_logits=*/true);
      t.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
      session.rollback(base);
    }
    const double ms = 1e3 * median(t);
    if (n == 1) step = ms;
    std::printf(" %d:%.2f (%.2fx)", n, ms, ms / step);
  }
  std::printf("\n");
}

}  // namespace

int main(int argc, char** argv) {
  std::map<std::string, std::string> args{{"--shape", "small"},  {"--rows", "f16-q4_k,f32-q8_0,f16-lookup"},
                                          {"--logits", "random,peaked"}, {"--scale", "25"},
                                          {"--prompt", "64"},     {"--gen", "64"},
                                          {"--max-draft", "8"},   {"--fixed", "0"},
                                          {"--reps", "1"},        {"--threads", "0"},
                                          {"--json", "0"},        {"--text", "repeat"},
                                          {"--pass-costs", "0"}};
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!args.count(argv[i])) {
      std::fprintf(stderr,
                   "unknown flag %s (expected --shape --rows --logits --scale --prompt --gen --max-draft --fixed --reps "
                   "--threads --json --text --pass-costs)\n",
                   argv[i]);
      return 2;
    }
    args[argv[i]] = argv[i + 1];
  }
  std::vector<Row> rows;
  try {
    for (const auto& r : split(args["--rows"])) rows.push_back(parse_row(r));
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return 2;
  }
  const auto config = loom::bench::shape_config(args["--shape"]);
  const int prompt_len = std::stoi(args["--prompt"]);
  const int gen = std::stoi(args["--gen"]);
  const int reps = std::stoi(args["--reps"]);
  const float scale = std::stof(args["--scale"]);
  const bool json = args["--json"] == "1";
  const bool pass_costs = args["--pass-costs"] == "1";
  if (args["--text"] != "repeat" && args["--text"] != "copy") {
    std::fprintf(stderr, "--text takes repeat or copy, got %s\n", args["--text"].c_str());
    return 2;
  }
  loom::SpeculativeParams params;
  params.max_draft = std::stoi(args["--max-draft"]);
  params.adaptive = args["--fixed"] != "1";
  if (prompt_len < 1 || gen < 2 || reps < 1 || params.max_draft < 1 || params.max_draft > 64) {
    std::fprintf(stderr, "--prompt and --reps must be positive, --gen at least 2, --max-draft 1..64\n");
    return 2;
  }
  auto pool = std::make_shared<loom::ThreadPool>(std::stoi(args["--threads"]));
  // A random half, said twice: the second half copies the first.
  std::vector<int32_t> prompt;
  for (int i = 0; i < prompt_len; ++i) {
    const int j = i < (prompt_len + 1) / 2 ? i : i - (prompt_len + 1) / 2;
    prompt.push_back(static_cast<int32_t>((j * 7919 + 13) % config.vocab_size));
  }
  if (!json) {
    std::printf("machine: isa %s, %d thread(s)\n", std::string(loom::isa_name(loom::active_isa())).c_str(),
                pool->size());
    std::printf("model: %s shape, hidden %lld, %lld layers, %lld/%lld heads, ffn %lld, vocab %lld\n",
                args["--shape"].c_str(), static_cast<long long>(config.hidden_size),
                static_cast<long long>(config.n_layers), static_cast<long long>(config.n_heads),
                static_cast<long long>(config.n_kv_heads), static_cast<long long>(config.intermediate_size),
                static_cast<long long>(config.vocab_size));
    std::printf("greedy, %d-token prompt, %d tokens, k <= %d (%s), median of %d reps\n", prompt_len, gen,
                params.max_draft, params.adaptive ? "adaptive" : "fixed", reps);
    std::printf("%-12s %-7s %10s %10s %8s %11s %13s %13s %9s %9s %9s\n", "row", "logits", "spec t/s", "plain t/s",
                "speedup", "acceptance", "passes/token", "tokens/pass", "draft ms", "verify ms", "step ms");
  }
  for (const auto& variant : split(args["--logits"])) {
    if (variant != "random" && variant != "peaked") {
      std::fprintf(stderr, "--logits takes random and/or peaked, got %s\n", variant.c_str());
      return 2;
    }
    std::map<loom::DType, std::shared_ptr<const loom::Model>> targets;  // built once per variant
    for (const auto& row : rows) {
      auto& target = targets[row.target];
      if (!target) target = loom::bench::synthetic_model(config, row.target, variant == "peaked" ? scale : 1.0f);
      std::unique_ptr<loom::Drafter> drafter;
      if (row.draft) {
        drafter = loom::make_model_drafter(loom::make_draft_copy(*target, *row.draft), *target);
      } else {
        drafter = loom::make_lookup_drafter();
      }
      loom::SessionOptions so;
      so.pool = pool;
      so.context_length = prompt_len + gen + 1;
      std::vector<int32_t> row_prompt = prompt;
      if (args["--text"] == "copy") {
        // The seed, its own greedy continuation as the document, then the seed again.
        loom::SessionOptions po = so;
        loom::Session probe(target, po);
        const std::vector<int32_t> seed(prompt.begin(), prompt.begin() + (prompt_len + 1) / 2);
        const Measured doc = generate(probe, seed, nullptr, params, gen);
        row_prompt = seed;
        row_prompt.insert(row_prompt.end(), doc.result.generation.tokens.begin(), doc.result.generation.tokens.end());
        row_prompt.insert(row_prompt.end(), seed.begin(), seed.end());
        so.context_length = static_cast<int64_t>(row_prompt.size()) + gen + 1;
      }
      loom::Session session(target, so);
      if (pass_costs) {
        print_pass_costs(session, row, variant, row_prompt, params.max_draft + 1);
        continue;
      }
      std::vector<double> plain_s, spec_s, ratios;
      loom::SpeculativeResult last;
      for (int r = 0; r < reps; ++r) {
        // The order alternates (plain first in even repetitions): on a machine whose speed
        // drifts by the minute, whichever ran first would otherwise be favoured.
        Measured plain, spec;
        if (r % 2 == 0) {
          plain = generate(session, row_prompt, nullptr, params, gen);
          spec = generate(session, row_prompt, drafter.get(), params, gen);
        } else {
          spec = generate(session, row_prompt, drafter.get(), params, gen);
          plain = generate(session, row_prompt, nullptr, params, gen);
        }
        if (spec.result.generation.tokens != plain.result.generation.tokens) {
          std::fprintf(stderr, "%s (%s): speculative greedy output differs from plain decoding\n", row.name.c_str(),
                       variant.c_str());
          return 1;
        }
        plain_s.push_back(plain.seconds);
        spec_s.push_back(spec.seconds);
        ratios.push_back(plain.seconds / spec.seconds);
        last = spec.result;
      }
      const double n = static_cast<double>(last.generation.tokens.size());
      const double tps = n / median(spec_s);
      const double plain_tps = n / median(plain_s);
      // The speedup is the median of each repetition's own ratio (its two runs minutes
      // apart at most), not the ratio of the medians.
      const double speedup = median(ratios);
      const double passes_per_token = static_cast<double>(last.stats.target_passes) / n;
      if (json) {
        loom::JsonWriter w(false);
        w.begin_object()
            .field("mode", row.draft ? "draft-quantize" : "lookup")
            .field("row", row.name)
            .field("logits", variant)
            .field("shape", args["--shape"])
            .field("threads", pool->size())
            .field("gen_tokens", static_cast<int64_t>(n))
            .field("max_draft", params.max_draft)
            .field("adaptive", params.adaptive)
            .field("tokens_per_s", tps)
            .field("plain_tokens_per_s", plain_tps)
            .field("speedup", speedup)
            .field("acceptance", last.stats.acceptance())
            .field("drafted", last.stats.drafted)
            .field("target_passes_per_token", passes_per_token)
            .field("tokens_per_target_pass", last.tokens_per_target_pass())
            .field("draft_seconds", last.stats.draft_seconds)
            .field("verify_seconds", last.stats.verify_seconds)
            .end_object();
        std::printf("%s\n", w.str().c_str());
      } else {
        // Per target pass: time in the drafter, time in the target's pass (and the
        // acceptance check), and a plain decoding step for scale.
        const double passes = static_cast<double>(std::max<int64_t>(1, last.stats.target_passes));
        std::printf("%-12s %-7s %10.2f %10.2f %7.2fx %10.1f%% %13.3f %13.2f %9.2f %9.2f %9.2f\n", row.name.c_str(),
                    variant.c_str(), tps, plain_tps, speedup, 100.0 * last.stats.acceptance(),
                    passes_per_token, last.tokens_per_target_pass(), 1e3 * last.stats.draft_seconds / passes,
                    1e3 * last.stats.verify_seconds / passes, 1e3 / plain_tps);
      }
      std::fflush(stdout);
    }
  }
  return 0;
}
