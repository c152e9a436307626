#include "strata/comm/checked_process_group.h"

#include <algorithm>

#include <fmt/format.h>

#include "strata/error.h"

namespace strata {

namespace {

// "float32[3, 4] (cuda:0)": a tensor as argument errors name it.
std::string describeTensor(const Tensor& t) {
  return fmt::format("{} ({})", t.meta().toString(), t.device().toString());
}

std::string dtypeList(const std::vector<DType>& dtypes) {
  std::string out;
  for (std::size_t i = 0; i < dtypes.size(); ++i) {
    out += (i == 0 ? "" : i + 1 == dtypes.size() ? " or " : ", ") + std::string(dtypeName(dtypes[i]));
  }
  return out;
}

}  // namespace

CheckedProcessGroup::CheckedProcessGroup(CollectiveRules rules) : rules_(std::move(rules)) {}

void CheckedProcessGroup::reject(const char* collective, const std::string& problem) const {
  fail("{} {} on rank {} of {}: {}", rules_.backend, collective, rank(), size(), problem);
}

void CheckedProcessGroup::checkTensor(const char* collective, const char* role, const Tensor& t) const {
  if (!t.defined()) {
    reject(collective, fmt::format("{} is undefined", role));
  }
  // Note [Released storage] in storage.h: a released parameter unit has no memory until it is re-materialised.
  if (!t.storage()->materialized()) {
    reject(collective,
           fmt::format("{} {} is a view of released storage; re-materialise it first", role, describeTensor(t)));
  }
  if (t.byteOffset() + t.bytes() > t.storage()->bytes()) {
    reject(collective, fmt::format("{} {} runs past its storage ({} bytes from offset {} in {} bytes)", role,
                                   describeTensor(t), t.bytes(), t.byteOffset(), t.storage()->bytes()));
  }
  if (std::find(rules_.dtypes.begin(), rules_.dtypes.end(), t.dtype()) == rules_.dtypes.end()) {
    reject(collective, fmt::format("{} {} has dtype {}; {} collectives take {}", role, describeTensor(t),
                                   dtypeName(t.dtype()), rules_.backend, dtypeList(rules_.dtypes)));
  }
  const std::string problem = deviceProblem(t.device());
  if (!problem.empty()) {
    reject(collective, fmt::format("{} {} lives on {}: {}", role, describeTensor(t), t.device().toString(), problem));
  }
}

void CheckedProcessGroup::checkParts(const char* collective, const char* wholeRole, const Tensor& whole,
                                     const char* partRole, const Tensor& part) const {
  checkTensor(collective, wholeRole, whole);
  checkTensor(collective, partRole, part);
  if (whole.dtype() != part.dtype()) {
    reject(collective, fmt::format("{} {} and {} {} must have the same dtype", wholeRole, describeTensor(whole),
                                   partRole, describeTensor(part)));
  }
  if (whole.numel() != part.numel() * size()) {
    reject(collective, fmt::format("{} {} must hold {} equal parts the size of {} {}, i.e. {} elements, but has {}",
                                   wholeRole, describeTensor(whole), size(), partRole, describeTensor(part),
                                   part.numel() * size(), whole.numel()));
  }
  // In place is the one overlap every backend supports (NCCL's rule): the part is the whole's part rank().
  if (whole.storage() == part.storage() && whole.bytes() > 0) {
    const std::size_t wholeBegin = whole.byteOffset();
    const std::size_t partBegin = part.byteOffset();
    const std::size_t localBegin = wholeBegin + part.bytes() * static_cast<std::size_t>(rank());
    const bool overlaps = partBegin < wholeBegin + whole.bytes() && wholeBegin < partBegin + part.bytes();
    if (overlaps && partBegin != localBegin) {
      reject(collective, fmt::format("{} overlaps {} at byte offset {} of their storage, but may only be its part {} "
                                     "(offset {}) or lie outside it",
                                     partRole, wholeRole, partBegin, rank(), localBegin));
    }
  }
}

WorkHandle CheckedProcessGroup::allReduce(Tensor tensor, ReduceOp op) {
  checkTensor("allReduce", "tensor", tensor);
  return doAllReduce(std::move(tensor), op);
}

WorkHandle CheckedProcessGroup::reduceScatter(Tensor input, Tensor output, ReduceOp op) {
  checkParts("reduceScatter", "input", input, "output", output);
  return doReduceScatter(std::move(input), std::move(output), op);
}

WorkHandle CheckedProcessGroup::allGather(Tensor input, Tensor output) {
  checkParts("allGather", "output", output, "input", input);
  return doAllGather(std::move(input), std::move(output));
}

WorkHandle CheckedProcessGroup::broadcast(Tensor tensor, int root) {
  checkTensor("broadcast", "tensor", tensor);
  if (root < 0 || root >= size()) {
    reject("broadcast", fmt::format("root {} is not a rank of this group of {}", root, size()));
  }
  return doBroadcast(std::move(tensor), root);
}

WorkHandle CheckedProcessGroup::barrier() {
  return doBarrier();
}

}  // namespace strata
