// `loom run --parallel N`: the generation loop of loom::generate (sample, stop at EOS / a
// stop string / max tokens / a full context, stream text as it becomes final), once per
// sequence, driven by the passes of one loom::Batch instead of a Session's steps.
#include "parallel_run.hpp"

#include <algorithm>
#include <chrono>
#include <deque>
#include <map>
#include <string_view>

#include "loom/batch.hpp"
#include "loom/error.hpp"
#include "loom/tokenizer.hpp"

namespace loom::cli {

namespace {

using Clock = std::chrono::steady_clock;

// Writes one sequence's text as whole "[i] line" lines.
class LineWriter {
 public:
  LineWriter(size_t index, std::FILE* out) : prefix_("[" + std::to_string(index) + "] "), out_(out) {}

  void write(std::string_view text) {
    for (size_t nl; (nl = text.find('\n')) != std::string_view::npos; text.remove_prefix(nl + 1)) {
      line_.append(text.substr(0, nl));
      emit();
    }
    line_.append(text);
  }
  // The last line, even when empty: k newlines always give k + 1 lines.
  void finish() { emit(); }

 private:
  void emit() {
    std::fprintf(out_, "%s%s\n", prefix_.c_str(), line_.c_str());
    std::fflush(out_);
    line_.clear();
  }
  std::string prefix_;
  std::FILE* out_;
  std::string line_;
};

struct Live {
  Live(size_t index_, const SamplerParams& sp, std::shared_ptr<const Tokenizer> tok,
       const std::vector<std::string>& stops, std::FILE* out)
      : index(index_), sampler(sp), decoder(std::move(tok), /*skip_special=*/true), matcher(stops), writer(index_, out) {}
  size_t index;
  Sampler sampler;
  Tokenizer::StreamDecoder decoder;
  StopMatcher matcher;
  LineWriter writer;
  int32_t generated = 0;
  Clock::time_point started = Clock::now();
};

struct Finished {
  int64_t prompt_tokens = 0;
  int64_t generated = 0;
  StopReason stop = StopReason::max_tokens;
  double seconds = 0.0;
};

}  // namespace

int parallel_run(std::shared_ptr<const Model> model, const std::vector<std::string>& prompts,
                 const ParallelRunOptions& options, std::FILE* out, std::FILE* err) {
  if (options.parallel < 1) throw Error(ErrorCode::invalid_argument, "--parallel must be at least 1");
  const std::shared_ptr<const Tokenizer>& tok = model->tokenizer();
  if (!tok) throw Error(ErrorCode::unsupported, "the model has no tokenizer to run with");
  const GenerateOptions& go = options.generate;

  // Every prompt is tokenized first: a bad one fails before any work, and the pool can be
  // sized to what the longest sequence can reach.
  std::vector<std::vector<int32_t>> ids;
  ids.reserve(prompts.size());
  int64_t longest = 0;
  for (size_t i = 0; i < prompts.size(); ++i) {
    ids.push_back(tok->encode(prompts[i], go.add_special, go.parse_special));
    if (ids.back().empty()) {
      throw Error(ErrorCode::invalid_argument, "prompt " + std::to_string(i) +
                                                   " encodes to no tokens (give text, or enable add_special for a BOS)");
    }
    longest = std::max<int64_t>(longest, static_cast<int64_t>(ids.back().size()));
  }
  const int64_t live_max = std::min<int64_t>(options.parallel, static_cast<int64_t>(prompts.size()));
  if (live_max == 0) return 0;

  // Room for every live sequence's longest possible run (its prompt, then max_tokens - 1
  // fed tokens), whole blocks each, so feeding never finds the pool full. (The context
  // default is the Batch's: the model's max_positions, capped at 4096.)
  BatchOptions bo;
  bo.max_sequences = live_max;
  bo.context_length = options.context_length;
  bo.n_threads = options.n_threads;
  bo.kv_dtype = options.kv_dtype;
  const int64_t context =
      options.context_length > 0 ? options.context_length : std::min<int64_t>(model->config().max_positions, 4096);
  const int64_t reach = std::max<int64_t>(1, std::min<int64_t>(context, longest + std::max<int32_t>(go.max_tokens, 1)));
  bo.pool_tokens = (reach + bo.block_tokens - 1) / bo.block_tokens * bo.block_tokens * live_max;
  Batch batch(model, bo);

  std::map<SeqId, Live> live;
  std::vector<Finished> done(prompts.size());
  size_t next = 0;
  auto admit = [&] {
    const size_t i = next++;
    SamplerParams sp = options.sampler;
    sp.seed += static_cast<uint64_t>(i);
    const SeqId id = batch.add();
    Live& q = live.try_emplace(id, i, sp, tok, go.stop_strings, out).first->second;
    for (int32_t t : ids[i]) q.sampler.accept(t);
    q.writer.write(prompts[i]);
    done[i].prompt_tokens = static_cast<int64_t>(ids[i].size());
    batch.feed(id, ids[i]);
  };
  auto finish = [&](SeqId id, Live& q, StopReason stop) {
    if (stop != StopReason::stop_string) {
      bool stopped = false;
      std::string tail = q.matcher.push(q.decoder.finish(), stopped);
      if (stopped) {
        stop = StopReason::stop_string;
      } else {
        tail += q.matcher.flush();
      }
      q.writer.write(tail);
    }
    q.writer.finish();
    Finished& f = done[q.index];
    f.generated = q.generated;
    f.stop = stop;
    f.seconds = std::chrono::duration<double>(Clock::now() - q.started).count();
    live.erase(id);
    batch.remove(id);
  };
  // One sampling step of a sequence whose logits are ready: the body of generate's loop.
  auto step = [&](SeqId id, Live& q) {
    if (q.generated >= go.max_tokens) return finish(id, q, StopReason::max_tokens);
    const int32_t token = q.sampler.sample(batch.logits(id));
    if (go.stop_at_eos && tok->is_eos(token)) return finish(id, q, StopReason::end_of_sequence);
    ++q.generated;
    bool stopped = false;
    q.writer.write(q.matcher.push(q.decoder.feed(token), stopped));
    if (stopped) return finish(id, q, StopReason::stop_string);
    if (q.generated == go.max_tokens) return finish(id, q, StopReason::max_tokens);
    if (batch.position(id) >= batch.context_length()) return finish(id, q, StopReason::context_full);
    batch.feed(id, std::span<const int32_t>(&token, 1));
  };

  const auto t0 = Clock::now();
  while (static_cast<int64_t>(live.size()) < live_max) admit();
  while (!live.empty()) {
    const BatchPass pass = batch.decode();
    for (SeqId id : pass.ready) step(id, live.at(id));
    while (next < prompts.size() && static_cast<int64_t>(live.size()) < live_max) admit();
  }
  const double seconds = std::chrono::duration<double>(Clock::now() - t0).count();

  if (options.stats) {
    int64_t prompt_total = 0, generated_total = 0;
    for (size_t i = 0; i < done.size(); ++i) {
      const Finished& f = done[i];
      prompt_total += f.prompt_tokens;
      generated_total += f.generated;
      std::fprintf(err, "loom: [%zu] prompt %lld tokens; generation %lld tokens in %.2f s; stop: %s\n", i,
                   static_cast<long long>(f.prompt_tokens), static_cast<long long>(f.generated), f.seconds,
                   std::string(stop_reason_name(f.stop)).c_str());
    }
    const BatchStats st = batch.stats();
    std::fprintf(err,
                 "loom: %zu sequences, at most %lld at once, in %lld passes: prompt %lld tokens, generation %lld "
                 "tokens, %.1f tok/s together (%.2f s)\n",
                 done.size(), static_cast<long long>(live_max), static_cast<long long>(st.passes),
                 static_cast<long long>(prompt_total), static_cast<long long>(generated_total),
                 seconds > 0 ? static_cast<double>(generated_total) / seconds : 0.0, seconds);
  }
  return 0;
}

}  // namespace loom::cli
