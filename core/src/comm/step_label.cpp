#include "strata/comm/step_label.h"

#include "strata/comm/process_group.h"

namespace strata {

void labelStep(ProcessGroup& group, std::int64_t step) {
  if (auto* labelled = dynamic_cast<StepLabelledGroup*>(&group)) {
    labelled->setStep(step);
  }
}

}  // namespace strata
