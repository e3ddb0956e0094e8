// loom::ThreadPool — the workers that run a session's kernels.
//
// A pool has a fixed number of threads (the calling thread counts as one: a pool of N
// starts N-1 workers). parallel_for splits [0, n) into contiguous ranges, one per
// thread, and returns when all are done; decode kernels rely on that static split to
// stream disjoint slices of each weight matrix from memory. Idle workers spin briefly
// (a decode step issues hundreds of small parallel_for calls) and then sleep.
//
// A worker that cannot be started (no memory for its stack) makes the constructor throw
// Error(out_of_memory) after stopping the others.
//
// Ownership: a Session owns a pool by default; a host may create one and pass it to
// several sessions (std::shared_ptr) to cap the total thread count.
// Thread-safety: parallel_for may be called by one thread at a time per pool; a second
// concurrent caller waits for the first to finish.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>

namespace loom {

class ThreadPool {
 public:
  // n_threads <= 0 means "the number of hardware threads".
  explicit ThreadPool(int n_threads = 0);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int size() const noexcept;
  // Calls fn(begin, end, thread_index) on disjoint ranges covering [0, n), each range a
  // multiple of `grain` long (but the last). Exceptions thrown by fn are rethrown here
  // (the first one) after every range has finished.
  void parallel_for(int64_t n, int64_t grain,
                    const std::function<void(int64_t begin, int64_t end, int thread)>& fn);

  static int hardware_threads() noexcept;

  struct Impl;

 private:
  void stop_workers() noexcept;
  std::unique_ptr<Impl> impl_;
};

}  // namespace loom
