// loom serve's scheduler (examples/server/scheduler.hpp) on the built-in demo model:
// continuous batching equals lone runs, forks for n > 1, cancellation frees the KV pool,
// the bounded queue, draining and embeddings.
#include <catch2/catch.hpp>

#include <chrono>
#include <cmath>
#include <string>
#include <thread>
#include <vector>

#include "loom/generate.hpp"
#include "loom/loader.hpp"
#include "loom/sampler.hpp"
#include "loom/session.hpp"
#include "scheduler.hpp"

namespace s = loom::server;
using namespace std::chrono_literals;

namespace {

std::shared_ptr<const loom::Model> demo() {
  static const auto model = loom::load_model(LOOM_SOURCE_DIR "/examples/models/stories260K/stories260K.bin", {});
  return model;
}

struct Outcome {
  std::vector<std::string> texts;
  std::vector<std::string> finish;
  int64_t prompt_tokens = -1, completion_tokens = -1;
  int status = 0;  // an error's
};

// Reads a channel to its end.
Outcome collect(s::Channel& ch, size_t choices) {
  Outcome o;
  o.texts.resize(choices);
  o.finish.resize(choices);
  const auto deadline = std::chrono::steady_clock::now() + 60s;
  while (std::chrono::steady_clock::now() < deadline) {
    std::vector<s::Event> events;
    ch.wait(events, 100ms);
    for (const s::Event& e : events) {
      switch (e.kind) {
        case s::Event::Kind::text: o.texts.at(static_cast<size_t>(e.choice)) += e.text; break;
        case s::Event::Kind::finish: o.finish.at(static_cast<size_t>(e.choice)) = s::finish_reason_name(e.finish); break;
        case s::Event::Kind::error: o.status = e.error.status; return o;
        case s::Event::Kind::done:
          o.prompt_tokens = e.prompt_tokens;
          o.completion_tokens = e.completion_tokens;
          return o;
        case s::Event::Kind::embedding: break;
      }
    }
  }
  FAIL("the job did not end within 60 s");
  return o;
}

s::GenerationJob greedy_job(const std::string& prompt, int64_t max_tokens) {
  s::GenerationJob job;
  job.prompts.push_back(demo()->tokenizer()->encode(prompt, true, false));
  job.max_tokens = max_tokens;
  job.sampler.temperature = 0.0f;
  return job;
}

loom::GenerateResult lone_run(const std::string& prompt, int32_t max_tokens) {
  loom::Session session(demo(), {});
  loom::SamplerParams sp;
  sp.temperature = 0.0f;
  loom::Sampler sampler(sp);
  loom::GenerateOptions go;
  go.max_tokens = max_tokens;
  return loom::generate(session, sampler, *demo()->tokenizer(), prompt, go);
}

// Runs until shutdown or cancellation in practice: 480 tokens, the end-of-sequence token banned.
s::GenerationJob long_job(const std::string& prompt) {
  s::GenerationJob job = greedy_job(prompt, 480);
  job.sampler.logit_bias = {{2, -INFINITY}};
  return job;
}

std::string lone_greedy(const std::string& prompt, int32_t max_tokens) { return lone_run(prompt, max_tokens).text; }

}  // namespace

TEST_CASE("scheduler: jobs decoded together each equal loom::generate run alone") {
  s::SchedulerOptions so;
  so.parallel = 3;
  s::Scheduler sch(demo(), so);
  const std::vector<std::string> prompts{"Once upon a time", "The cat", "Lily and Tom went to the park", "One day",
                                         "The sun", "A big dog"};
  std::vector<std::shared_ptr<s::Channel>> channels;
  for (size_t i = 0; i < prompts.size(); ++i) {
    s::Scheduler::Admission a{};
    channels.push_back(sch.submit(greedy_job(prompts[i], 12 + static_cast<int64_t>(i) * 5), a));
    REQUIRE(a == s::Scheduler::Admission::accepted);
  }
  for (size_t i = 0; i < prompts.size(); ++i) {
    INFO(prompts[i]);
    const Outcome o = collect(*channels[i], 1);
    REQUIRE(o.status == 0);
    const loom::GenerateResult alone = lone_run(prompts[i], 12 + static_cast<int32_t>(i) * 5);
    CHECK(o.texts[0] == alone.text);
    CHECK(o.finish[0] == (alone.stop == loom::StopReason::max_tokens ? "length" : "stop"));
    CHECK(o.completion_tokens == static_cast<int64_t>(alone.tokens.size()));
  }
  REQUIRE(sch.wait_idle(5s));
  const s::SchedulerStats st = sch.stats();
  CHECK(st.active_sequences == 0);
  CHECK(st.blocks_used == 0);
  CHECK(st.blocks_free == st.blocks_total);
  CHECK(st.jobs_total == 6);
}

TEST_CASE("scheduler: an f16 KV cache holds twice the blocks in the same bytes, and jobs equal f16 lone runs") {
  s::SchedulerOptions so;
  so.parallel = 2;
  so.pool_bytes = 1 << 20;
  const int64_t f32_blocks = s::Scheduler(demo(), so).stats().blocks_total;
  so.kv_dtype = loom::DType::f16;
  s::Scheduler sch(demo(), so);
  CHECK(sch.stats().blocks_total == 2 * f32_blocks);
  s::Scheduler::Admission a{};
  auto ch = sch.submit(greedy_job("Once upon a time", 24), a);
  REQUIRE(a == s::Scheduler::Admission::accepted);
  const Outcome o = collect(*ch, 1);
  REQUIRE(o.status == 0);
  loom::SessionOptions lone_options;
  lone_options.kv_dtype = loom::DType::f16;
  loom::Session session(demo(), lone_options);
  loom::SamplerParams sp;
  sp.temperature = 0.0f;
  loom::Sampler sampler(sp);
  loom::GenerateOptions go;
  go.max_tokens = 24;
  CHECK(o.texts[0] == loom::generate(session, sampler, *demo()->tokenizer(), "Once upon a time", go).text);
}

TEST_CASE("scheduler: n choices fork one prompt, each sampled with seed + choice") {
  s::SchedulerOptions so;
  so.parallel = 4;
  s::Scheduler sch(demo(), so);
  s::GenerationJob job = greedy_job("Once upon a time", 20);
  job.n = 4;
  job.sampler.temperature = 1.0f;
  job.sampler.top_k = 0;
  job.sampler.top_p = 1.0f;
  job.sampler.min_p = 0.0f;
  job.sampler.seed = 7;
  s::Scheduler::Admission a{};
  auto ch = sch.submit(job, a);
  const Outcome together = collect(*ch, 4);
  REQUIRE(together.status == 0);
  CHECK(together.prompt_tokens == 5);  // the prompt is counted (and fed) once
  // Choice j equals the same prompt sampled alone with seed 7 + j.
  for (int64_t j = 0; j < 4; ++j) {
    s::GenerationJob alone = job;
    alone.n = 1;
    alone.sampler.seed = 7 + static_cast<uint64_t>(j);
    auto c = sch.submit(alone, a);
    const Outcome o = collect(*c, 1);
    CHECK(o.texts[0] == together.texts[static_cast<size_t>(j)]);
  }
  CHECK(together.texts[0] != together.texts[1]);
}

TEST_CASE("scheduler: a cancelled job's sequences are removed and its blocks freed before the next pass") {
  s::SchedulerOptions so;
  so.parallel = 2;
  s::Scheduler sch(demo(), so);
  s::GenerationJob job = long_job("Once upon a time");
  job.n = 2;
  s::Scheduler::Admission a{};
  auto ch = sch.submit(job, a);
  std::vector<s::Event> events;
  while (events.empty()) ch->wait(events, 100ms);
  // (the stats are published after each pass: wait for the one that made the events)
  const auto deadline = std::chrono::steady_clock::now() + 2s;
  while (sch.stats().active_sequences != 2 && std::chrono::steady_clock::now() < deadline) std::this_thread::yield();
  CHECK(sch.stats().active_sequences == 2);
  ch->cancel();
  REQUIRE(sch.wait_idle(5s));
  const s::SchedulerStats st = sch.stats();
  CHECK(st.cancelled_total == 1);
  CHECK(st.active_sequences == 0);
  CHECK(st.blocks_used == 0);
  CHECK(st.generated_tokens_total < 2 * 480);
  // The scheduler goes on serving.
  auto next = sch.submit(greedy_job("One day", 8), a);
  CHECK(collect(*next, 1).texts[0] == lone_greedy("One day", 8));
}

TEST_CASE("scheduler: a full queue refuses jobs, a draining scheduler refuses all and finishes the rest") {
  s::SchedulerOptions so;
  so.parallel = 1;
  so.queue_capacity = 1;
  s::Scheduler sch(demo(), so);
  s::Scheduler::Admission a{};
  auto running = sch.submit(long_job("Once upon a time"), a);
  std::vector<s::Event> events;
  while (events.empty()) running->wait(events, 100ms);  // admitted: the queue is empty again
  auto queued = sch.submit(greedy_job("The cat", 4), a);
  REQUIRE(a == s::Scheduler::Admission::accepted);
  CHECK(sch.submit(greedy_job("One day", 4), a) == nullptr);
  CHECK(a == s::Scheduler::Admission::queue_full);
  CHECK(sch.stats().queue_depth == 1);
  sch.begin_drain();
  CHECK(sch.submit(greedy_job("One day", 4), a) == nullptr);
  CHECK(a == s::Scheduler::Admission::shutting_down);
  CHECK(collect(*queued, 1).texts[0] == lone_greedy("The cat", 4));
  CHECK(collect(*running, 1).finish[0] == "length");
  CHECK(sch.wait_idle(5s));
}

TEST_CASE("scheduler: cancel_all ends running and queued jobs with the error") {
  s::SchedulerOptions so;
  so.parallel = 1;
  s::Scheduler sch(demo(), so);
  s::Scheduler::Admission a{};
  auto running = sch.submit(long_job("Once upon a time"), a);
  auto queued = sch.submit(long_job("The cat"), a);
  std::vector<s::Event> events;
  while (events.empty()) running->wait(events, 100ms);
  s::ApiError e;
  e.status = 503;
  e.message = "bye";
  sch.cancel_all(e);
  CHECK(collect(*running, 1).status == 503);
  CHECK(collect(*queued, 1).status == 503);
  CHECK(sch.stats().blocks_used == 0);
}

TEST_CASE("scheduler: stop strings end a choice with finish stop and are not emitted") {
  s::Scheduler sch(demo(), {});
  const std::string full = lone_greedy("Once upon a time", 30);
  const size_t cut = full.find(" little");
  REQUIRE(cut != std::string::npos);
  s::GenerationJob job = greedy_job("Once upon a time", 30);
  job.stop = {" little"};
  s::Scheduler::Admission a{};
  const Outcome o = collect(*sch.submit(job, a), 1);
  CHECK(o.texts[0] == full.substr(0, cut));
  CHECK(o.finish[0] == "stop");
}

TEST_CASE("scheduler: embeddings equal Session::embed with mean pooling, normalized") {
  s::Scheduler sch(demo(), {});
  s::EmbeddingJob job;
  const auto tok = demo()->tokenizer();
  job.inputs = {tok->encode("Once upon a time", true), tok->encode("The cat", true)};
  s::Scheduler::Admission a{};
  auto ch = sch.submit(job, a);
  std::vector<std::vector<float>> got(2);
  int64_t prompt_tokens = -1;
  for (bool done = false; !done;) {
    std::vector<s::Event> events;
    ch->wait(events, 100ms);
    for (auto& e : events) {
      REQUIRE(e.kind != s::Event::Kind::error);
      if (e.kind == s::Event::Kind::embedding) got.at(static_cast<size_t>(e.choice)) = e.embedding;
      if (e.kind == s::Event::Kind::done) {
        done = true;
        prompt_tokens = e.prompt_tokens;
      }
    }
  }
  loom::Session session(demo(), {});
  for (size_t i = 0; i < 2; ++i) CHECK(got[i] == session.embed(job.inputs[i], loom::Pooling::mean, true));
  CHECK(prompt_tokens == static_cast<int64_t>(job.inputs[0].size() + job.inputs[1].size()));
}

TEST_CASE("scheduler: a small KV pool makes jobs wait for blocks, and each still equals its lone run") {
  s::SchedulerOptions so;
  so.parallel = 4;
  so.pool_tokens = 96;  // 6 blocks of 16: room for about two of these at once
  s::Scheduler sch(demo(), so);
  const std::vector<std::string> prompts{"Once upon a time", "The cat", "One day", "A big dog", "The sun"};
  std::vector<std::shared_ptr<s::Channel>> channels;
  s::Scheduler::Admission a{};
  for (const auto& p : prompts) channels.push_back(sch.submit(greedy_job(p, 20), a));
  for (size_t i = 0; i < prompts.size(); ++i) {
    INFO(prompts[i]);
    const Outcome o = collect(*channels[i], 1);
    REQUIRE(o.status == 0);
    const loom::GenerateResult alone = lone_run(prompts[i], 20);
    // A choice that cannot grow in a full pool ends early with "length": its text is then
    // a prefix of the lone run's.
    CHECK(alone.text.rfind(o.texts[0], 0) == 0);
  }
  CHECK(sch.wait_idle(5s));
  CHECK(sch.stats().blocks_used == 0);
  // A prompt larger than the whole pool fails at once instead of waiting forever.
  s::GenerationJob big;
  big.prompts.push_back(std::vector<int32_t>(200, 403));
  big.max_tokens = 4;
  const Outcome o = collect(*sch.submit(big, a), 1);
  CHECK(o.status == 400);
}
