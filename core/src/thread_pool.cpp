#include "strata/thread_pool.h"

#include <omp.h>

#include <algorithm>
#include <thread>

namespace strata {

ThreadPool& ThreadPool::instance() {
  static ThreadPool pool;
  return pool;
}

ThreadPool::ThreadPool() {
  setThreads(static_cast<int>(std::max(1u, std::thread::hardware_concurrency())));
}

void ThreadPool::setThreads(int threads) {
  threads_ = std::max(1, threads);
  omp_set_num_threads(threads_);  // oneDNN's primitives use the same team
}

void ThreadPool::parallelFor(std::int64_t begin, std::int64_t end, std::int64_t grain,
                             const std::function<void(std::int64_t, std::int64_t)>& fn) const {
  const std::int64_t n = end - begin;
  if (n <= 0) {
    return;
  }
  const std::int64_t maxChunks = std::max<std::int64_t>(1, n / std::max<std::int64_t>(grain, 1));
  const int workers = static_cast<int>(std::min<std::int64_t>(threads_, maxChunks));
  if (workers <= 1 || omp_in_parallel()) {
    fn(begin, end);
    return;
  }
  // Static, equal chunks: one per worker keeps scheduling overhead to a single fork/join.
#pragma omp parallel num_threads(workers)
  {
    const std::int64_t t = omp_get_thread_num();
    const std::int64_t chunkBegin = begin + n * t / workers;
    const std::int64_t chunkEnd = begin + n * (t + 1) / workers;
    if (chunkBegin < chunkEnd) {
      fn(chunkBegin, chunkEnd);
    }
  }
}

void parallelFor(std::int64_t begin, std::int64_t end, std::int64_t grain,
                 const std::function<void(std::int64_t, std::int64_t)>& fn) {
  ThreadPool::instance().parallelFor(begin, end, grain, fn);
}

}  // namespace strata
