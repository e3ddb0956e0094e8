#include "loom/thread_pool.hpp"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <exception>
#include <mutex>
#include <string>
#include <system_error>
#include <thread>
#include <vector>

#include "loom/error.hpp"

namespace loom {

namespace {
inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#endif
}
// About 0.1-0.3 ms of pause instructions before a worker sleeps on the condition variable.
constexpr int kSpinIterations = 4000;

// parallel_for_balanced: shares sized by the threads' measured speeds once a call has at
// least this many units a thread (fewer leave no room to move a boundary by a fraction of
// a share), learning from shares that took at least kMinTimedNs (shorter ones measure the
// wake-up more than the work), each call moving the weights kStep of the way to what it
// measured, within [kMinWeight, kMaxWeight] of an even share.
constexpr int64_t kMinUnitsPerThread = 8;
constexpr uint64_t kMinTimedNs = 4000;
constexpr double kStep = 0.125, kMinWeight = 0.5, kMaxWeight = 1.5;

uint64_t now_ns() {
  return static_cast<uint64_t>(
      std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
          .count());
}
}  // namespace

struct ThreadPool::Impl {
  int n_threads = 1;
  std::vector<std::thread> workers;

  // One job at a time: the caller publishes it by bumping `generation`.
  std::mutex call_mutex;  // serialises parallel_for callers
  std::mutex mutex;
  std::condition_variable wake;
  std::atomic<uint64_t> generation{0};
  std::atomic<int> pending{0};
  bool stopping = false;

  const std::function<void(int64_t, int64_t, int)>* job = nullptr;
  int64_t n = 0;
  int64_t grain = 1;
  std::vector<int64_t> bounds;  // thread t's share is [bounds[t], bounds[t + 1])
  std::exception_ptr error;
  std::mutex error_mutex;

  // The balanced calls' state, touched by the caller only (under call_mutex) but for
  // `finished`, where each thread writes its own entry before it reports done.
  bool timed = false;         // the current call measures its shares
  uint64_t published_ns = 0;  // when the current call was handed out
  // weights[kind][t]: thread t's share of a balanced call of that kind, relative to an
  // even one.
  std::vector<std::vector<double>> weights;
  struct alignas(64) Finish {
    uint64_t ns = 0;  // when the thread's share of the current call ended
  };
  std::vector<Finish> finished;
  std::vector<double> speed;  // learn()'s scratch

  void run_share(int thread) {
    const int64_t begin = bounds[static_cast<size_t>(thread)];
    const int64_t end = bounds[static_cast<size_t>(thread) + 1];
    if (begin < end) {
      try {
        (*job)(begin, end, thread);
      } catch (...) {
        std::lock_guard lock(error_mutex);
        if (!error) error = std::current_exception();
      }
    }
    if (timed) finished[static_cast<size_t>(thread)].ns = now_ns();
  }

  // Even shares of whole grains: ceil(units / threads) each, the last ones shorter.
  void split_evenly(int64_t units) {
    const int64_t chunk = (units + n_threads - 1) / n_threads * grain;
    for (int t = 0; t <= n_threads; ++t) bounds[static_cast<size_t>(t)] = std::min<int64_t>(n, chunk * t);
  }

  // Shares of whole grains in proportion to the weights, at least one grain each.
  void split_by_weight(int64_t units, const std::vector<double>& weight) {
    double total = 0;
    for (double w : weight) total += w;
    double before = 0;
    bounds[0] = 0;
    for (int t = 0; t < n_threads; ++t) {
      before += weight[static_cast<size_t>(t)];
      auto end_unit = static_cast<int64_t>(static_cast<double>(units) * before / total + 0.5);
      const int64_t first = bounds[static_cast<size_t>(t)] / grain + 1;  // at least one grain
      const int64_t last = units - (n_threads - 1 - t);                  // one left for each after
      end_unit = t + 1 == n_threads ? units : std::clamp(end_unit, first, last);
      bounds[static_cast<size_t>(t) + 1] = std::min<int64_t>(n, end_unit * grain);
    }
  }

  // After a timed call: each thread's speed (units a nanosecond since the call was handed
  // out, so a late start counts against it) against the mean, and the weights a step
  // toward it. A share descheduled by the host reads slow once and moves the weights one
  // clamped step.
  void learn(std::vector<double>& weight) {
    double mean = 0;
    for (int t = 0; t < n_threads; ++t) {
      const auto i = static_cast<size_t>(t);
      const uint64_t took = finished[i].ns - published_ns;
      if (took < kMinTimedNs) return;
      speed[i] = static_cast<double>(bounds[i + 1] - bounds[i]) / static_cast<double>(took);
      mean += speed[i] / n_threads;
    }
    for (int t = 0; t < n_threads; ++t) {
      const auto i = static_cast<size_t>(t);
      const double target = std::clamp(speed[i] / mean, kMinWeight, kMaxWeight);
      weight[i] += kStep * (target - weight[i]);
    }
  }

  void worker_loop(int thread) {
    uint64_t seen = 0;
    for (;;) {
      // Spin first: the next job usually arrives within microseconds during decode.
      int spins = 0;
      while (generation.load(std::memory_order_acquire) == seen && spins < kSpinIterations) {
        cpu_relax();
        ++spins;
      }
      if (generation.load(std::memory_order_acquire) == seen) {
        std::unique_lock lock(mutex);
        wake.wait(lock, [&] { return stopping || generation.load() != seen; });
        if (stopping) return;
      }
      seen = generation.load(std::memory_order_acquire);
      run_share(thread);
      pending.fetch_sub(1, std::memory_order_acq_rel);
    }
  }
};

ThreadPool::ThreadPool(int n_threads) : impl_(std::make_unique<Impl>()) {
  impl_->n_threads = n_threads > 0 ? n_threads : hardware_threads();
  impl_->bounds.assign(static_cast<size_t>(impl_->n_threads) + 1, 0);
  impl_->weights.assign(kBalanceKinds, std::vector<double>(static_cast<size_t>(impl_->n_threads), 1.0));
  impl_->finished.resize(static_cast<size_t>(impl_->n_threads));
  impl_->speed.resize(static_cast<size_t>(impl_->n_threads));
  impl_->workers.reserve(static_cast<size_t>(impl_->n_threads - 1));
  try {
    for (int t = 1; t < impl_->n_threads; ++t) {
      impl_->workers.emplace_back([this, t] { impl_->worker_loop(t); });
    }
  } catch (const std::system_error& e) {
    // No memory (or thread quota) for another worker: stop the ones started, since a
    // joinable std::thread destroyed with the half-built pool would terminate the host.
    stop_workers();
    throw Error(ErrorCode::out_of_memory, "cannot start thread pool worker " +
                                              std::to_string(impl_->workers.size() + 1) + " of " +
                                              std::to_string(impl_->n_threads - 1) + ": " + e.what());
  }
}

void ThreadPool::stop_workers() noexcept {
  {
    std::lock_guard lock(impl_->mutex);
    impl_->stopping = true;
  }
  impl_->wake.notify_all();
  for (auto& w : impl_->workers) w.join();
}

ThreadPool::~ThreadPool() { stop_workers(); }

int ThreadPool::size() const noexcept { return impl_->n_threads; }

int ThreadPool::hardware_threads() noexcept {
  const unsigned n = std::thread::hardware_concurrency();
  return n == 0 ? 1 : static_cast<int>(n);
}

void ThreadPool::parallel_for(int64_t n, int64_t grain,
                              const std::function<void(int64_t, int64_t, int)>& fn) {
  run(n, grain, fn, -1);
}

void ThreadPool::parallel_for_balanced(int64_t n, int64_t grain, int kind,
                                       const std::function<void(int64_t, int64_t, int)>& fn) {
  if (kind < 0 || kind >= kBalanceKinds) {
    throw Error(ErrorCode::invalid_argument, "parallel_for_balanced: kind " + std::to_string(kind) +
                                                 " outside 0.." + std::to_string(kBalanceKinds - 1));
  }
  run(n, grain, fn, kind);
}

void ThreadPool::run(int64_t n, int64_t grain, const std::function<void(int64_t, int64_t, int)>& fn,
                     int kind) {
  if (n <= 0) return;
  grain = std::max<int64_t>(grain, 1);
  Impl& p = *impl_;
  const int64_t units = (n + grain - 1) / grain;
  if (p.n_threads == 1 || units == 1) {
    fn(0, n, 0);
    return;
  }
  std::lock_guard call_lock(p.call_mutex);
  p.job = &fn;
  p.n = n;
  p.grain = grain;
  p.timed = kind >= 0 && units >= kMinUnitsPerThread * p.n_threads;
  if (p.timed) {
    p.split_by_weight(units, p.weights[static_cast<size_t>(kind)]);
  } else {
    p.split_evenly(units);
  }
  p.error = nullptr;
  p.pending.store(p.n_threads - 1, std::memory_order_release);
  {
    std::lock_guard lock(p.mutex);
    if (p.timed) p.published_ns = now_ns();
    p.generation.fetch_add(1, std::memory_order_acq_rel);
  }
  p.wake.notify_all();
  p.run_share(0);
  for (int spins = 0; p.pending.load(std::memory_order_acquire) != 0; ++spins) {
    if (spins < kSpinIterations) {
      cpu_relax();
    } else {
      std::this_thread::yield();  // a worker was descheduled: give it the core
    }
  }
  p.job = nullptr;
  if (p.error) std::rethrow_exception(p.error);
  if (p.timed) p.learn(p.weights[static_cast<size_t>(kind)]);
}

}  // namespace loom
