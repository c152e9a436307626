#pragma once

#include <cstdint>

namespace strata {

class ProcessGroup;

// Note [The step in collective errors]: a collective that times out names the training step it belonged to ("allReduce
// #17 (4.0 MB) at step 3 failed ..."). Which step runs is the trainer's to say, not a strategy's, so Strata's own
// groups (Gloo, the staging group, NCCL) take it through this interface rather than through the SDK's ProcessGroup.
class StepLabelledGroup {
 public:
  virtual ~StepLabelledGroup() = default;
  virtual void setStep(std::int64_t step) = 0;
};

// Tells `group` the step when it is one of Strata's groups; any other group (a plugin's own) is left alone.
void labelStep(ProcessGroup& group, std::int64_t step);

}  // namespace strata
