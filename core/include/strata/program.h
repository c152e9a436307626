#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "strata/op_registry.h"
#include "strata/sdk/hooks.h"
#include "strata/tensor.h"

namespace strata {

// One value slot of a static plan.
struct ProgramValue {
  std::string name;
  TensorMeta meta;
  Tensor constant;        // defined for initializers and folded constants
  Tensor bound;           // defined when a step writes this value into external storage (a flat gradient view)
  bool isInput = false;   // bound by the caller at each run
  bool gradient = false;  // `bound` is a parameter's gradient: accumulate mode adds into it (Executor)
  // Note [Views without copies]: >= 0 when this value is a view of that value's storage (a Reshape, Flatten,
  // Squeeze or Unsqueeze of an activation on the CPU): it allocates nothing, and memory estimates count its bytes 0.
  int viewOf = -1;
};

// One kernel invocation of a static plan.
struct ProgramStep {
  std::string nodeName;
  std::string opType;
  std::vector<int> inputs;          // value ids; -1 for absent optional inputs
  std::vector<int> outputs;         // value ids; -1 for outputs nobody reads
  std::vector<int> releaseAfter;    // intermediate values whose last use is this step
  std::vector<int> gradientsReady;  // parameter indices whose gradient is final after this step
  NodePhase phase = NodePhase::Forward;
  int sourceNode = -1;  // forward nodes: their own index; backward nodes: the forward node they differentiate
  std::vector<int> parametersRead;  // parameter indices whose values this step reads (LowerOptions::parameters)
  bool viewsInput = false;          // output 0 is a view of input 0 (Note [Views without copies]): no kernel runs
  std::unique_ptr<OpKernel> kernel;
};

// The bytes a value's own storage holds: 0 for a view (Note [Views without copies]).
inline std::int64_t storageBytes(const ProgramValue& value) {
  return value.viewOf >= 0 ? 0 : static_cast<std::int64_t>(value.meta.bytes());
}

// A static execution plan: shapes fixed, kernels created, liveness known. Built by graphs/, run by Executor.
struct Program {
  std::vector<ProgramValue> values;
  std::vector<ProgramStep> steps;
  std::vector<int> inputs;
  std::vector<int> outputs;
  std::int64_t peakActivationBytes = 0;  // the most intermediate bytes alive at once under this plan
  bool training = false;
};

}  // namespace strata
