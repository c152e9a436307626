#pragma once

#include <cstdint>
#include <functional>

namespace strata {

// The CPU backend's worker threads.
// Note [One thread team]: oneDNN (as Debian builds it) runs its primitives on OpenMP threads. A second pool of our
// own would compete with OpenMP's spinning workers for the same cores, so Strata's own kernels run on the same
// OpenMP team, sized once by --threads.
class ThreadPool {
 public:
  static ThreadPool& instance();

  void setThreads(int threads);
  int threads() const { return threads_; }

  // Calls fn(begin, end) on disjoint chunks covering [begin, end). Chunks are at least `grain` long, so small loops
  // stay on the calling thread. Nested calls run serially.
  void parallelFor(std::int64_t begin, std::int64_t end, std::int64_t grain,
                   const std::function<void(std::int64_t, std::int64_t)>& fn) const;

 private:
  ThreadPool();
  int threads_ = 1;
};

// Shorthand for ThreadPool::instance().parallelFor.
void parallelFor(std::int64_t begin, std::int64_t end, std::int64_t grain,
                 const std::function<void(std::int64_t, std::int64_t)>& fn);

}  // namespace strata
