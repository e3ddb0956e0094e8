// loom::ThreadPool — the workers that run a session's kernels.
//
// A pool has a fixed number of threads (the calling thread counts as one: a pool of N
// starts N-1 workers). parallel_for splits [0, n) into contiguous ranges, one per
// thread, and returns when all are done; decode kernels rely on one range a thread to
// stream disjoint slices of each weight matrix from memory. parallel_for's ranges are
// even; parallel_for_balanced sizes them by each thread's measured speed. Idle workers
// spin briefly (a decode step issues hundreds of small parallel_for calls) and then
// sleep.
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
  // The same, but the contiguous shares are sized by how fast each thread finished its
  // share of the recent balanced calls of the same kind (a core that the host slows, or
  // serves memory more slowly, gets less), where the call has enough grains to move a
  // boundary. Kinds (0 .. kBalanceKinds - 1) learn apart: work bound by memory and work
  // bound by arithmetic see different speeds. For work whose results do not depend on
  // where the shares end, since they move between calls. Throws Error(invalid_argument)
  // for a kind outside the range.
  static constexpr int kBalanceKinds = 4;
  void parallel_for_balanced(int64_t n, int64_t grain, int kind,
                             const std::function<void(int64_t begin, int64_t end, int thread)>& fn);

  static int hardware_threads() noexcept;

  struct Impl;

 private:
  void stop_workers() noexcept;
  void run(int64_t n, int64_t grain, const std::function<void(int64_t, int64_t, int)>& fn, int kind);
  std::unique_ptr<Impl> impl_;
};

}  // namespace loom
