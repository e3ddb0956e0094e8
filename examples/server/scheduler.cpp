#include "scheduler.hpp"

#include <algorithm>
#include <cmath>
#include <map>
#include <numeric>

#include "loom/batch.hpp"
#include "loom/error.hpp"
#include "loom/generate.hpp"
#include "loom/session.hpp"
#include "loom/thread_pool.hpp"
#include "loom/tokenizer.hpp"

namespace loom::server {

const char* finish_reason_name(FinishReason reason) noexcept {
  return reason == FinishReason::stop ? "stop" : "length";
}

bool Channel::wait(std::vector<Event>& out, std::chrono::milliseconds timeout) {
  std::unique_lock lock(mutex_);
  if (!cv_.wait_for(lock, timeout, [&] { return !events_.empty(); })) return false;
  for (Event& e : events_) out.push_back(std::move(e));
  events_.clear();
  return true;
}

void Channel::push(Event event) {
  {
    std::lock_guard lock(mutex_);
    events_.push_back(std::move(event));
  }
  cv_.notify_one();
}

namespace {

using Clock = std::chrono::steady_clock;

Event error_event(const ApiError& error) {
  Event e;
  e.kind = Event::Kind::error;
  e.error = error;
  return e;
}

ApiError server_error(int status, std::string message, std::string type = "server_error") {
  ApiError e;
  e.status = status;
  e.message = std::move(message);
  e.type = std::move(type);
  return e;
}

// log P(token) and the best alternatives from one row of raw logits.
TokenLogprob token_logprob(std::span<const float> logits, int32_t token, int64_t top) {
  const float max = *std::max_element(logits.begin(), logits.end());
  double sum = 0.0;
  for (float l : logits) sum += std::exp(static_cast<double>(l) - max);
  const double lse = max + std::log(sum);
  TokenLogprob lp;
  lp.token = token;
  lp.logprob = static_cast<float>(logits[static_cast<size_t>(token)] - lse);
  const auto k = static_cast<size_t>(std::min<int64_t>(top, static_cast<int64_t>(logits.size())));
  if (k > 0) {
    std::vector<int32_t> ids(logits.size());
    std::iota(ids.begin(), ids.end(), 0);
    std::partial_sort(ids.begin(), ids.begin() + static_cast<std::ptrdiff_t>(k), ids.end(), [&](int32_t a, int32_t b) {
      const float la = logits[static_cast<size_t>(a)], lb = logits[static_cast<size_t>(b)];
      return la != lb ? la > lb : a < b;
    });
    for (size_t i = 0; i < k; ++i) {
      lp.top.emplace_back(ids[i], static_cast<float>(logits[static_cast<size_t>(ids[i])] - lse));
    }
  }
  return lp;
}

}  // namespace

// A queued or running job.
struct JobState {
  std::shared_ptr<Channel> channel;
  bool embedding = false;
  GenerationJob gen;
  EmbeddingJob emb;
  size_t next_prompt = 0;     // prompts admitted so far
  int64_t choices_left = 0;   // choices not finished yet
  int64_t prompt_tokens = 0;
  int64_t completion_tokens = 0;
  bool ended = false;         // done or error sent
};

// One choice being generated: the body of loom::generate's loop, per sequence.
struct Live {
  Live(std::shared_ptr<JobState> j, int64_t c, std::shared_ptr<const Tokenizer> tok)
      : job(std::move(j)), choice(c), sampler(sampler_params(*job, c)), decoder(std::move(tok), /*skip_special=*/true),
        matcher(job->gen.stop) {}
  static SamplerParams sampler_params(const JobState& job, int64_t choice) {
    SamplerParams sp = job.gen.sampler;
    sp.seed += static_cast<uint64_t>(choice);
    return sp;
  }
  std::shared_ptr<JobState> job;
  int64_t choice;
  Sampler sampler;
  Tokenizer::StreamDecoder decoder;
  StopMatcher matcher;
  int64_t generated = 0;
  int64_t forks_pending = 0;  // a prompt's first sequence: forks to make once its logits are ready
};

struct Scheduler::Impl {
  // Shared with the other threads (under `mutex`).
  std::mutex mutex;
  std::condition_variable wake;  // work arrived, stop or cancel_all
  std::condition_variable idle;  // the scheduler went idle, or a cancel_all was done
  std::deque<std::shared_ptr<JobState>> queue;
  bool stop = false;
  bool cancel_pending = false;
  ApiError cancel_error;
  bool is_idle = true;

  std::atomic<int64_t> queue_depth{0}, active{0}, blocks_total{0}, blocks_used{0}, blocks_free{0};
  std::atomic<int64_t> prompt_tokens{0}, generated{0}, passes{0}, jobs{0}, cancelled{0}, embeddings{0};
  std::atomic<int64_t> busy_us{0};

  // The scheduler thread's own.
  std::shared_ptr<ThreadPool> pool;
  std::unique_ptr<Batch> batch;
  std::unique_ptr<Session> session;  // embeddings, made on first use
  std::map<SeqId, Live> live;
  int64_t reserved = 0;  // sequences promised to forks not made yet
};

Scheduler::Scheduler(std::shared_ptr<const Model> model, SchedulerOptions options)
    : model_(std::move(model)), options_(options), impl_(std::make_unique<Impl>()) {
  if (options_.parallel < 1) throw Error(ErrorCode::invalid_argument, "the scheduler needs at least 1 sequence");
  if (!model_->tokenizer()) throw Error(ErrorCode::unsupported, "the model has no tokenizer to serve with");
  impl_->pool = std::make_shared<ThreadPool>(options_.n_threads);
  BatchOptions bo;
  bo.max_sequences = options_.parallel;
  bo.context_length = options_.context_length;
  bo.kv_dtype = options_.kv_dtype;
  bo.pool = impl_->pool;
  context_length_ = options_.context_length > 0 ? options_.context_length
                                                : std::min<int64_t>(model_->config().max_positions, 4096);
  // The default pool holds every sequence's full context, so a running choice never
  // finds it full (forks only share blocks, and each copies at most its last one).
  bo.pool_tokens = options_.pool_tokens;
  bo.pool_bytes = options_.pool_bytes;
  if (bo.pool_tokens <= 0 && bo.pool_bytes <= 0) bo.pool_tokens = (context_length_ + bo.block_tokens) * options_.parallel;
  impl_->batch = std::make_unique<Batch>(model_, bo);
  const BatchStats st = impl_->batch->stats();
  impl_->blocks_total = st.blocks_total;
  impl_->blocks_free = st.blocks_free;
  thread_ = std::thread([this] { run(); });
}

Scheduler::~Scheduler() {
  {
    std::lock_guard lock(impl_->mutex);
    impl_->stop = true;
  }
  impl_->wake.notify_all();
  thread_.join();
}

namespace {

template <typename JobT>
std::shared_ptr<Channel> enqueue(Scheduler::Impl& s, bool draining, int64_t capacity, JobT&& job,
                                 Scheduler::Admission& admission) {
  auto state = std::make_shared<JobState>();
  state->channel = std::make_shared<Channel>();
  if constexpr (std::is_same_v<std::decay_t<JobT>, EmbeddingJob>) {
    state->embedding = true;
    state->emb = std::forward<JobT>(job);
  } else {
    state->gen = std::forward<JobT>(job);
    state->choices_left = static_cast<int64_t>(state->gen.prompts.size()) * state->gen.n;
  }
  {
    std::lock_guard lock(s.mutex);
    if (draining || s.stop) {
      admission = Scheduler::Admission::shutting_down;
      return nullptr;
    }
    if (static_cast<int64_t>(s.queue.size()) >= capacity) {
      admission = Scheduler::Admission::queue_full;
      return nullptr;
    }
    s.queue.push_back(state);
    s.queue_depth = static_cast<int64_t>(s.queue.size());
    s.is_idle = false;
  }
  s.wake.notify_all();
  admission = Scheduler::Admission::accepted;
  return state->channel;
}

}  // namespace

std::shared_ptr<Channel> Scheduler::submit(GenerationJob job, Admission& admission) {
  return enqueue(*impl_, draining_.load(), options_.queue_capacity, std::move(job), admission);
}

std::shared_ptr<Channel> Scheduler::submit(EmbeddingJob job, Admission& admission) {
  return enqueue(*impl_, draining_.load(), options_.queue_capacity, std::move(job), admission);
}

void Scheduler::begin_drain() { draining_.store(true); }

bool Scheduler::wait_idle(std::chrono::milliseconds timeout) {
  std::unique_lock lock(impl_->mutex);
  return impl_->idle.wait_for(lock, timeout, [&] { return impl_->is_idle; });
}

void Scheduler::cancel_all(const ApiError& error) {
  std::unique_lock lock(impl_->mutex);
  impl_->cancel_pending = true;
  impl_->cancel_error = error;
  impl_->wake.notify_all();
  impl_->idle.wait(lock, [&] { return !impl_->cancel_pending || impl_->stop; });
}

SchedulerStats Scheduler::stats() const {
  const Impl& s = *impl_;
  SchedulerStats st;
  st.queue_depth = s.queue_depth;
  st.active_sequences = s.active;
  st.blocks_total = s.blocks_total;
  st.blocks_used = s.blocks_used;
  st.blocks_free = s.blocks_free;
  st.prompt_tokens_total = s.prompt_tokens;
  st.generated_tokens_total = s.generated;
  st.passes_total = s.passes;
  st.jobs_total = s.jobs;
  st.cancelled_total = s.cancelled;
  st.embeddings_total = s.embeddings;
  st.busy_seconds = static_cast<double>(s.busy_us.load()) / 1e6;
  return st;
}

void Scheduler::run() {
  Impl& s = *impl_;
  Batch& batch = *s.batch;
  const std::shared_ptr<const Tokenizer>& tok = model_->tokenizer();

  auto end_job = [&](JobState& job, Event last) {
    if (job.ended) return;
    job.ended = true;
    ++s.jobs;
    job.channel->push(std::move(last));
  };
  // Removes every sequence of `job` (its KV blocks go back to the pool).
  auto drop_sequences = [&](const JobState& job) {
    for (auto it = s.live.begin(); it != s.live.end();) {
      if (it->second.job.get() == &job) {
        s.reserved -= it->second.forks_pending;
        batch.remove(it->first);
        it = s.live.erase(it);
      } else {
        ++it;
      }
    }
  };
  // By value: dropping the job's sequences may drop the last other reference to it.
  auto fail_job = [&](std::shared_ptr<JobState> job, const ApiError& error) {
    drop_sequences(*job);
    end_job(*job, error_event(error));
  };
  auto finish = [&](SeqId id, Live& q, FinishReason reason, bool stop_string) {
    JobState& job = *q.job;
    if (!stop_string) {
      bool stopped = false;
      std::string tail = q.matcher.push(q.decoder.finish(), stopped);
      if (stopped) {
        reason = FinishReason::stop;
      } else {
        tail += q.matcher.flush();
      }
      if (!tail.empty()) {
        Event e;
        e.choice = q.choice;
        e.text = std::move(tail);
        job.channel->push(std::move(e));
      }
    }
    Event f;
    f.kind = Event::Kind::finish;
    f.choice = q.choice;
    f.finish = reason;
    job.channel->push(std::move(f));
    std::shared_ptr<JobState> keep = q.job;
    s.reserved -= q.forks_pending;
    batch.remove(id);
    s.live.erase(id);
    if (--keep->choices_left == 0 && keep->next_prompt == keep->gen.prompts.size()) {
      Event d;
      d.kind = Event::Kind::done;
      d.prompt_tokens = keep->prompt_tokens;
      d.completion_tokens = keep->completion_tokens;
      end_job(*keep, std::move(d));
    }
  };
  // One sampling step of a sequence whose logits are ready.
  auto step = [&](SeqId id, Live& q) {
    JobState& job = *q.job;
    const std::span<const float> logits = batch.logits(id);
    const int32_t token = q.sampler.sample(logits);
    Event e;
    e.choice = q.choice;
    if (job.gen.logprobs) e.logprobs.push_back(token_logprob(logits, token, job.gen.top_logprobs));
    if (tok->is_eos(token)) return finish(id, q, FinishReason::stop, false);
    ++q.generated;
    ++job.completion_tokens;
    ++s.generated;
    bool stopped = false;
    e.text = q.matcher.push(q.decoder.feed(token), stopped);
    if (!e.text.empty() || !e.logprobs.empty()) job.channel->push(std::move(e));
    if (stopped) return finish(id, q, FinishReason::stop, true);
    if (q.generated >= job.gen.max_tokens || batch.position(id) >= batch.context_length()) {
      return finish(id, q, FinishReason::length, false);
    }
    try {
      batch.feed(id, std::span<const int32_t>(&token, 1));
    } catch (const Error& err) {
      // Only a --kv-pool smaller than parallel full contexts gets here.
      if (err.code() != ErrorCode::kv_pool_full) throw;
      finish(id, q, FinishReason::length, false);
    }
  };
  auto run_embedding = [&](JobState& job) {
    if (!s.session) {
      SessionOptions so;
      so.context_length = context_length_;
      so.kv_dtype = options_.kv_dtype;
      so.pool = s.pool;
      s.session = std::make_unique<Session>(model_, so);
    }
    try {
      for (size_t i = 0; i < job.emb.inputs.size(); ++i) {
        if (job.channel->cancelled()) {
          ++s.cancelled;
          return end_job(job, error_event(server_error(499, "the client closed the request")));
        }
        Event e;
        e.kind = Event::Kind::embedding;
        e.choice = static_cast<int64_t>(i);
        e.embedding = s.session->embed(job.emb.inputs[i], Pooling::mean, /*normalize=*/true);
        job.prompt_tokens += static_cast<int64_t>(job.emb.inputs[i].size());
        job.channel->push(std::move(e));
      }
      s.prompt_tokens += job.prompt_tokens;
      ++s.embeddings;
      Event d;
      d.kind = Event::Kind::done;
      d.prompt_tokens = job.prompt_tokens;
      end_job(job, std::move(d));
    } catch (const Error& err) {
      end_job(job, error_event(invalid_request(err.what())));
    }
  };
  auto pop_front = [&] {
    std::lock_guard lock(s.mutex);
    s.queue.pop_front();
    s.queue_depth = static_cast<int64_t>(s.queue.size());
  };
  // Starts queued jobs, in order, while there are free sequences and KV blocks.
  auto admit = [&] {
    for (;;) {
      std::shared_ptr<JobState> job;
      {
        std::lock_guard lock(s.mutex);
        if (s.queue.empty()) return;
        job = s.queue.front();
      }
      if (job->channel->cancelled() || job->ended) {
        if (!job->ended) ++s.cancelled;
        drop_sequences(*job);
        job->ended = true;
        pop_front();
        continue;
      }
      if (job->embedding) {
        pop_front();
        const auto t0 = Clock::now();
        run_embedding(*job);
        s.busy_us += std::chrono::duration_cast<std::chrono::microseconds>(Clock::now() - t0).count();
        continue;
      }
      const int64_t n = job->gen.n;
      while (job->next_prompt < job->gen.prompts.size()) {
        if (static_cast<int64_t>(s.live.size()) + s.reserved + n > options_.parallel) return;
        const std::vector<int32_t>& prompt = job->gen.prompts[job->next_prompt];
        const SeqId id = batch.add();
        try {
          batch.feed(id, prompt);
        } catch (const Error& err) {
          batch.remove(id);
          if (err.code() == ErrorCode::kv_pool_full && !s.live.empty()) return;  // wait for blocks
          fail_job(job, invalid_request(std::string("the prompt cannot be served: ") + err.what(), "prompt"));
          break;
        }
        Live& q = s.live.try_emplace(id, job, static_cast<int64_t>(job->next_prompt) * n, tok).first->second;
        q.forks_pending = n - 1;
        s.reserved += n - 1;
        job->prompt_tokens += static_cast<int64_t>(prompt.size());
        s.prompt_tokens += static_cast<int64_t>(prompt.size());
        ++job->next_prompt;
      }
      pop_front();
    }
  };
  auto publish = [&] {
    const BatchStats st = batch.stats();
    s.active = static_cast<int64_t>(s.live.size());
    s.blocks_used = st.blocks_used;
    s.blocks_free = st.blocks_free;
    s.passes = st.passes;
  };

  for (;;) {
    bool cancel = false;
    ApiError cancel_error;
    std::deque<std::shared_ptr<JobState>> cancelled_queue;
    {
      std::unique_lock lock(s.mutex);
      if (s.live.empty() && s.queue.empty() && !s.cancel_pending) {
        s.is_idle = true;
        s.idle.notify_all();
      }
      s.wake.wait(lock, [&] { return s.stop || s.cancel_pending || !s.queue.empty() || !s.live.empty(); });
      if (s.stop) break;
      s.is_idle = false;
      if (s.cancel_pending) {
        cancel = true;
        cancel_error = s.cancel_error;
        cancelled_queue.swap(s.queue);
        s.queue_depth = 0;
      }
    }
    if (cancel) {
      for (auto& job : cancelled_queue) fail_job(job, cancel_error);
      while (!s.live.empty()) fail_job(s.live.begin()->second.job, cancel_error);
      publish();
      std::lock_guard lock(s.mutex);
      s.cancel_pending = false;
      s.idle.notify_all();
      continue;
    }
    // Readers that went away: their sequences go now, before the next pass.
    for (auto it = s.live.begin(); it != s.live.end();) {
      if (it->second.job->channel->cancelled()) {
        std::shared_ptr<JobState> job = it->second.job;
        ++s.cancelled;
        fail_job(job, server_error(499, "the client closed the request"));
        it = s.live.begin();
      } else {
        ++it;
      }
    }
    admit();
    if (s.live.empty()) {
      publish();
      continue;
    }
    const auto t0 = Clock::now();
    try {
      const BatchPass pass = batch.decode();
      std::vector<SeqId> ready = pass.ready;
      for (size_t i = 0; i < ready.size(); ++i) {
        const auto it = s.live.find(ready[i]);
        if (it == s.live.end()) continue;
        Live& q = it->second;
        // A prompt's logits are ready: its other choices fork from here (sharing its blocks).
        for (; q.forks_pending > 0; --q.forks_pending, --s.reserved) {
          const SeqId child = batch.fork(ready[i]);
          s.live.try_emplace(child, q.job, q.choice + (q.job->gen.n - q.forks_pending), tok);
          ready.push_back(child);
        }
        std::shared_ptr<JobState> job = q.job;
        try {
          step(ready[i], q);
        } catch (const Error& err) {
          fail_job(job, server_error(500, std::string("generation failed: ") + err.what()));
        }
      }
    } catch (const Error& err) {
      // A failed pass changes nothing; every running job gets the error rather than a hang.
      while (!s.live.empty()) fail_job(s.live.begin()->second.job, server_error(500, std::string("decode failed: ") + err.what()));
    }
    s.busy_us += std::chrono::duration_cast<std::chrono::microseconds>(Clock::now() - t0).count();
    publish();
  }

  // Shutting down: whatever is left ends with an error, so no reader waits forever.
  const ApiError gone = server_error(503, "the server is shutting down", "server_error");
  std::deque<std::shared_ptr<JobState>> left;
  {
    std::lock_guard lock(s.mutex);
    left.swap(s.queue);
  }
  for (auto& job : left) fail_job(job, gone);
  while (!s.live.empty()) fail_job(s.live.begin()->second.job, gone);
  std::lock_guard lock(s.mutex);
  s.is_idle = true;
  s.idle.notify_all();
}

}  // namespace loom::server
