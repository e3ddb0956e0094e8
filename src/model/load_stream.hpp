// Internal: the streaming half of a load. The calling thread reads each conversion
// job's stored rows in chunks (at most chunk_bytes, into at most queue_depth staging
// buffers), releasing the mapped pages it has copied; the other threads of a ThreadPool
// convert the chunks into the jobs' destinations. Extra memory stays under
// queue_depth x chunk_bytes whatever the model's size. Jobs come from load_plan.hpp.
#pragma once

#include <cstdint>
#include <functional>
#include <string_view>

#include "loom/format.hpp"
#include "loom/loader.hpp"
#include "loom/thread_pool.hpp"
#include "model/load_plan.hpp"

namespace loom::load {

// Called after each chunk is staged with the stored bytes submitted so far (zero-copy
// ones included) and the tensor being read; returning false cancels the load.
using StreamProgress = std::function<bool(uint64_t submitted, std::string_view tensor)>;

struct StreamResult {
  int64_t transient_peak_bytes = 0;  // staging buffers at their most
  bool cancelled = false;
};

// Runs every job of `plan` on `pool` (size 1: all on the calling thread). Not from inside
// a parallel_for of the same pool. Rethrows the first error of a reader or converter,
// after every thread has stopped.
StreamResult stream_conversions(Plan& plan, const WeightSource& source, const LoadOptions& options, ThreadPool& pool,
                                const StreamProgress& progress);

}  // namespace loom::load
