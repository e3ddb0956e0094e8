// libFuzzer harness: loom::Batch. The input bytes are a program of add / feed / fork /
// rollback / trim / remove / decode operations on a batch over a tiny random model with
// a small KV pool (so kv_pool_full and context_full happen). A reference keeps each
// sequence's tokens; after every decode the logits of each ready sequence must be the
// bits of a fresh Session fed that sequence's tokens one by one (skipped for sequences
// that were trimmed: trim re-rotates keys, equal only to f32 rounding). Errors
// kv_pool_full, context_full, invalid_argument and cancelled are expected; any other
// exception, a mismatch or a broken pool count is a crash.
#include <cstdint>
#include <cstring>
#include <iterator>
#include <map>
#include <memory>
#include <utility>
#include <vector>

#include "loom/batch.hpp"
#include "loom/error.hpp"
#include "loom/session.hpp"
#include "loom/thread_pool.hpp"
#include "support/tiny_model.hpp"

namespace {

constexpr int64_t kContext = 24;
constexpr size_t kMaxOps = 48;
constexpr size_t kMaxFeed = 8;

const std::shared_ptr<const loom::Model>& model() {
  static const auto m = [] {
    const auto cfg = loom::test::tiny_llama_config();
    return loom::test::make_model(cfg, loom::test::random_weights(cfg, 5));
  }();
  return m;
}

const std::shared_ptr<loom::ThreadPool>& threads() {
  static const auto p = std::make_shared<loom::ThreadPool>(1);
  return p;
}

// Reads the program: each call takes one byte (0 once the input is spent).
struct Reader {
  const uint8_t* data;
  size_t size;
  size_t at = 0;
  bool done() const { return at >= size; }
  uint8_t byte() { return at < size ? data[at++] : 0; }
};

struct Ref {
  std::vector<int32_t> tokens;  // committed, then pending
  bool trimmed = false;
};

bool expected(const loom::Error& e) {
  switch (e.code()) {
    case loom::ErrorCode::kv_pool_full:
    case loom::ErrorCode::context_full:
    case loom::ErrorCode::invalid_argument:
    case loom::ErrorCode::cancelled:
      return true;
    default:
      return false;
  }
}

void check_logits(const loom::Batch& batch, loom::SeqId id, const Ref& ref) {
  if (ref.trimmed || ref.tokens.empty()) return;
  loom::SessionOptions so;
  so.context_length = kContext;
  so.pool = threads();
  loom::Session s(model(), so);
  for (int32_t t : ref.tokens) s.step(t);
  const auto got = batch.logits(id);
  const auto want = s.logits();
  if (got.size() != want.size() || std::memcmp(got.data(), want.data(), got.size() * sizeof(float)) != 0) {
    __builtin_trap();
  }
}

void check_counts(const loom::Batch& batch, const std::map<loom::SeqId, Ref>& refs) {
  const auto st = batch.stats();
  if (st.blocks_used + st.blocks_free != st.blocks_total) __builtin_trap();
  if (st.sequences != static_cast<int64_t>(refs.size())) __builtin_trap();
  for (const auto& [id, r] : refs) {
    if (batch.position(id) + batch.pending(id) != static_cast<int64_t>(r.tokens.size())) __builtin_trap();
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  Reader in{data, size};
  loom::BatchOptions o;
  o.max_sequences = 4;
  o.context_length = kContext;
  o.block_tokens = 1 + in.byte() % 6;
  o.pool_tokens = 8 + in.byte() % 40;
  o.token_budget = 1 + in.byte() % 16;
  o.pool = threads();
  loom::Batch batch(model(), o);
  const int64_t vocab = model()->config().vocab_size;
  std::map<loom::SeqId, Ref> refs;
  auto pick = [&]() -> loom::SeqId {
    // A live sequence, or now and then an id that is not one.
    const uint8_t b = in.byte();
    if (refs.empty() || b == 255) return 1000 + b;
    auto it = refs.begin();
    std::advance(it, b % refs.size());
    return it->first;
  };
  for (size_t op = 0; op < kMaxOps && !in.done(); ++op) {
    try {
      switch (in.byte() % 8) {
        case 0:
          refs[batch.add()] = Ref{};
          break;
        case 1:
        case 2: {  // feed
          const loom::SeqId id = pick();
          std::vector<int32_t> toks(1 + in.byte() % kMaxFeed);
          for (auto& t : toks) t = static_cast<int32_t>(in.byte() % vocab);
          if (in.byte() == 7) toks[0] = static_cast<int32_t>(vocab);  // outside the vocabulary
          batch.feed(id, toks);
          auto& r = refs.at(id);
          r.tokens.insert(r.tokens.end(), toks.begin(), toks.end());
          break;
        }
        case 3: {  // fork
          const loom::SeqId parent = pick();
          const loom::SeqId child = batch.fork(parent);
          refs[child] = refs.at(parent);
          if (batch.logit_rows(parent) > 0) {
            const auto a = batch.logits(parent);
            const auto b = batch.logits(child);
            if (std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) != 0) __builtin_trap();
          }
          break;
        }
        case 4: {  // rollback
          const loom::SeqId id = pick();
          const int64_t pos = refs.count(id) ? in.byte() % (batch.position(id) + 2) : 0;
          batch.rollback(id, pos);
          refs.at(id).tokens.resize(static_cast<size_t>(pos));
          break;
        }
        case 5: {  // trim
          const loom::SeqId id = pick();
          const int64_t n = refs.count(id) ? batch.position(id) + 1 : 1;
          int64_t begin = in.byte() % n, end = in.byte() % n;
          if (begin > end) std::swap(begin, end);
          batch.trim(id, begin, end);
          auto& r = refs.at(id);
          if (end > begin) {
            r.tokens.erase(r.tokens.begin() + begin, r.tokens.begin() + end);
            r.trimmed = true;
          }
          break;
        }
        case 6: {  // remove
          const loom::SeqId id = pick();
          batch.remove(id);
          refs.erase(id);
          break;
        }
        default: {  // decode, cancelled now and then
          const bool cancel = in.byte() % 8 == 0;
          const auto pass = batch.decode([cancel] { return cancel; });
          for (loom::SeqId id : pass.ready) check_logits(batch, id, refs.at(id));
          break;
        }
      }
    } catch (const loom::Error& e) {
      if (!expected(e)) __builtin_trap();
    }
    check_counts(batch, refs);
  }
  for (const auto& [id, r] : refs) batch.remove(id);
  if (batch.stats().blocks_used != 0) __builtin_trap();
  return 0;
}
