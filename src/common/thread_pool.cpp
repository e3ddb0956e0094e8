#include "loom/thread_pool.hpp"

#include <algorithm>
#include <atomic>
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
  int64_t chunk = 0;  // elements per thread, a multiple of grain
  std::exception_ptr error;
  std::mutex error_mutex;

  void run_share(int thread) {
    const int64_t begin = std::min<int64_t>(n, chunk * thread);
    const int64_t end = std::min<int64_t>(n, begin + chunk);
    if (begin >= end) return;
    try {
      (*job)(begin, end, thread);
    } catch (...) {
      std::lock_guard lock(error_mutex);
      if (!error) error = std::current_exception();
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
  p.chunk = (units + p.n_threads - 1) / p.n_threads * grain;
  p.error = nullptr;
  p.pending.store(p.n_threads - 1, std::memory_order_release);
  {
    std::lock_guard lock(p.mutex);
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
}

}  // namespace loom
