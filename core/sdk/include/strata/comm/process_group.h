#pragma once

#include <chrono>
#include <string>
#include <vector>

#include "strata/comm/work.h"
#include "strata/tensor.h"

namespace strata {

enum class ReduceOp { Sum, Average };

struct ProcessGroupOptions {
  // A collective that does not complete within this time ends the job (the watchdog), naming the collective, the
  // step and the ranks that did not join.
  std::chrono::milliseconds timeout{std::chrono::minutes(5)};
};

// Collectives over the ranks of one job. All calls are asynchronous and must be issued in the same order on every
// rank; tensors must stay alive and untouched until the returned work completes. Contiguous float32/float64
// tensors (views of flat buffers included), in host or device memory; NCCL groups also take float16/bfloat16.
class ProcessGroup {
 public:
  virtual ~ProcessGroup() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;

  virtual WorkHandle allReduce(Tensor tensor, ReduceOp op) = 0;
  // input has size() equal parts; part rank() of the reduction lands in output.
  virtual WorkHandle reduceScatter(Tensor input, Tensor output, ReduceOp op) = 0;
  // output has size() equal parts; part r comes from rank r's input.
  virtual WorkHandle allGather(Tensor input, Tensor output) = 0;
  virtual WorkHandle broadcast(Tensor tensor, int root) = 0;
  virtual WorkHandle barrier() = 0;
};

}  // namespace strata
