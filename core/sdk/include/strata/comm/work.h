#pragma once

#include <chrono>
#include <memory>

namespace strata {

// A handle to an asynchronous operation (a collective). wait() blocks until it completes and rethrows its error
// as strata::Error; a timeout throws Error naming the operation and what is known about the ranks that did not
// join. wait() may be called more than once.
class Work {
 public:
  virtual ~Work() = default;
  virtual void wait(std::chrono::milliseconds timeout) = 0;
  // Whether the operation has finished (succeeded or failed), without blocking: polling it lets a strategy overlap
  // communication with computation and call wait() only when it needs the result. wait() still reports a failure.
  virtual bool isCompleted() const = 0;
  // Seconds the caller spent blocked in wait() so far (communication time that was not hidden).
  virtual double waitedSeconds() const = 0;
  // Seconds the operation itself took on the communication thread, once completed (0 before): with
  // waitedSeconds() it tells how much of the communication overlapped with computation.
  virtual double runSeconds() const = 0;
};

using WorkHandle = std::shared_ptr<Work>;

}  // namespace strata
