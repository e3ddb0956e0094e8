// loom serve — the scheduler: one thread that owns a loom::Batch and answers every
// request through it (continuous batching). HTTP handler threads submit jobs into a
// bounded queue and read their results from a per-job Channel.
//
// A generation job holds one or more prompts, each answered n times: the prompt is fed
// once to one sequence and, when its logits are ready, forked n - 1 times (the forks share
// the prompt's KV blocks); each choice then samples with its own Sampler (seed + choice
// index), stream decoder and stop-string matcher. Choices run together with those of other
// jobs; a job waits in the queue until it has room (free sequences and KV blocks). An
// embedding job runs on a Session that shares the batch's thread pool, between passes.
//
// Cancellation: Channel::cancel() (a client that went away) makes the scheduler remove
// the job's sequences before its next pass, so their KV blocks are free at once.
//
// Ownership: the Scheduler shares the Model; each Channel is shared by the scheduler and
// the one handler that reads it. Thread-safety: submit(), the drain calls and stats() may
// be called from any thread; a Channel's reading side by one thread at a time.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "loom/model.hpp"
#include "loom/sampler.hpp"
#include "request.hpp"

namespace loom::server {

enum class FinishReason : uint8_t { stop, length };
const char* finish_reason_name(FinishReason reason) noexcept;

struct TokenLogprob {
  int32_t token = 0;
  float logprob = 0.0f;                            // log softmax of the model's logits
  std::vector<std::pair<int32_t, float>> top;      // the most likely alternatives, best first
};

struct Event {
  enum class Kind : uint8_t { text, finish, embedding, error, done } kind = Kind::text;
  int64_t choice = 0;                  // text, finish, embedding: which choice / input
  std::string text;                    // text: final text of this step (may be empty)
  std::vector<TokenLogprob> logprobs;  // text: the step's token, when asked for
  FinishReason finish = FinishReason::stop;
  std::vector<float> embedding;
  ApiError error;                      // error: the job failed (nothing more follows)
  int64_t prompt_tokens = 0;           // done: usage
  int64_t completion_tokens = 0;
};

// One job's results, in order; the last event is `done` or `error`.
class Channel {
 public:
  // Waits up to `timeout` for events and moves them all into `out`; false when none came.
  bool wait(std::vector<Event>& out, std::chrono::milliseconds timeout);
  // The reader is gone: the scheduler drops the job's sequences before its next pass.
  void cancel() noexcept { cancelled_.store(true, std::memory_order_relaxed); }
  bool cancelled() const noexcept { return cancelled_.load(std::memory_order_relaxed); }

  void push(Event event);  // scheduler side

 private:
  std::mutex mutex_;
  std::condition_variable cv_;
  std::deque<Event> events_;
  std::atomic<bool> cancelled_{false};
};

struct GenerationJob {
  std::vector<std::vector<int32_t>> prompts;  // each non-empty, shorter than the context
  int64_t n = 1;                              // choices per prompt (choice = prompt * n + j)
  int64_t max_tokens = 16;                    // >= 1
  SamplerParams sampler;                      // seed + choice for each choice
  std::vector<std::string> stop;
  bool logprobs = false;
  int64_t top_logprobs = 0;
};

struct EmbeddingJob {
  std::vector<std::vector<int32_t>> inputs;  // each non-empty, at most the context
};

struct SchedulerOptions {
  int64_t parallel = 4;        // sequences decoded together at most
  int64_t context_length = 0;  // per sequence; 0: the model's max_positions, at most 4096
  int64_t pool_tokens = 0;     // KV pool in tokens, or else
  int64_t pool_bytes = 0;      // in bytes; both 0: parallel full contexts
  int64_t queue_capacity = 64; // jobs waiting at most; more are refused
  int n_threads = 0;           // compute threads; 0: hardware threads
  DType kv_dtype = DType::f32; // KV cache entries: f32 or f16
};

// Counters and gauges for /metrics, readable from any thread.
struct SchedulerStats {
  int64_t queue_depth = 0;
  int64_t active_sequences = 0;
  int64_t blocks_total = 0;
  int64_t blocks_used = 0;
  int64_t blocks_free = 0;
  int64_t prompt_tokens_total = 0;
  int64_t generated_tokens_total = 0;
  int64_t passes_total = 0;
  int64_t jobs_total = 0;
  int64_t cancelled_total = 0;     // jobs dropped because their reader went away
  int64_t embeddings_total = 0;
  double busy_seconds = 0.0;       // time spent in decode passes and embeddings
};

class Scheduler {
 public:
  Scheduler(std::shared_ptr<const Model> model, SchedulerOptions options);
  ~Scheduler();  // cancels whatever is left and joins the thread
  Scheduler(const Scheduler&) = delete;
  Scheduler& operator=(const Scheduler&) = delete;

  enum class Admission : uint8_t { accepted, queue_full, shutting_down };
  // The channel of the queued job; null (with `admission` saying why) when refused.
  std::shared_ptr<Channel> submit(GenerationJob job, Admission& admission);
  std::shared_ptr<Channel> submit(EmbeddingJob job, Admission& admission);

  // Refuse new jobs from now on (shutting_down); queued and running ones go on.
  void begin_drain();
  bool draining() const noexcept { return draining_.load(); }
  // Waits until no job is queued or running; false on timeout.
  bool wait_idle(std::chrono::milliseconds timeout);
  // Ends every queued and running job with `error`.
  void cancel_all(const ApiError& error);

  SchedulerStats stats() const;
  int64_t context_length() const noexcept { return context_length_; }
  int64_t max_sequences() const noexcept { return options_.parallel; }

  struct Impl;

 private:
  void run();

  std::shared_ptr<const Model> model_;
  SchedulerOptions options_;
  int64_t context_length_ = 0;
  std::unique_ptr<Impl> impl_;
  std::atomic<bool> draining_{false};
  std::thread thread_;
};

}  // namespace loom::server
