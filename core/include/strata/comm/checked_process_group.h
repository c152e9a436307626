#pragma once

#include <string>
#include <vector>

#include "strata/comm/process_group.h"

namespace strata {

// What a process group's collectives accept, named in its argument errors.
struct CollectiveRules {
  std::string backend;        // "gloo", "nccl", "staged gloo": says whose rules a rejected call broke
  std::vector<DType> dtypes;  // the element types the backend reduces and moves
};

// The argument checks of every collective, written once (a non-virtual interface): the public calls check their
// tensors (defined, materialised, inside their storage, an accepted dtype, a device the group can reach, matching
// dtypes, size() equal parts) and the root, then hand over to the backend's do*() with arguments it may trust.
// Errors say what, where and why:
//   "gloo reduceScatter on rank 1 of 4: input float32[12] (cpu) must hold 4 equal parts the size of output
//    float32[5] (cpu), i.e. 20 elements, but has 12"
// The checks run on the caller's thread, before a collective is queued, so a bad call never desynchronises the
// ranks' collective order.
class CheckedProcessGroup : public ProcessGroup {
 public:
  WorkHandle allReduce(Tensor tensor, ReduceOp op) final;
  WorkHandle reduceScatter(Tensor input, Tensor output, ReduceOp op) final;
  WorkHandle allGather(Tensor input, Tensor output) final;
  WorkHandle broadcast(Tensor tensor, int root) final;
  WorkHandle barrier() final;

  const CollectiveRules& rules() const { return rules_; }

 protected:
  explicit CheckedProcessGroup(CollectiveRules rules);

  // Why this group cannot reach a tensor on `device` ("Gloo reads host memory only: ..."), or "" when it can.
  virtual std::string deviceProblem(Device device) const = 0;

  virtual WorkHandle doAllReduce(Tensor tensor, ReduceOp op) = 0;
  virtual WorkHandle doReduceScatter(Tensor input, Tensor output, ReduceOp op) = 0;
  virtual WorkHandle doAllGather(Tensor input, Tensor output) = 0;
  virtual WorkHandle doBroadcast(Tensor tensor, int root) = 0;
  virtual WorkHandle doBarrier() = 0;

 private:
  void checkTensor(const char* collective, const char* role, const Tensor& t) const;
  // Checks that `whole` holds size() parts the size of `part`, of the same dtype.
  void checkParts(const char* collective, const char* wholeRole, const Tensor& whole, const char* partRole,
                  const Tensor& part) const;
  [[noreturn]] void reject(const char* collective, const std::string& problem) const;

  const CollectiveRules rules_;
};

}  // namespace strata
