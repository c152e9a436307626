#include "strata/executor.h"

#include <algorithm>
#include <cstdlib>
#include <utility>

#include "strata/comm/communication_in_flight.h"
#include "strata/error.h"
#include "strata/op_registry.h"

namespace strata {

namespace {

// Note [Asynchronous errors]: device kernels fail after their launch returned, so an error surfaces at the next
// synchronisation, far from the node that caused it. STRATA_SYNC_EACH_NODE=1 synchronises after every node, so the
// error names its node (slow: for debugging, like CUDA_LAUNCH_BLOCKING=1).
bool syncEachNodeFromEnvironment() {
  const char* value = std::getenv("STRATA_SYNC_EACH_NODE");
  return value != nullptr && value[0] != '\0' && value[0] != '0';
}

}  // namespace

Executor::Executor(Program program, Device device)
    : program_(std::move(program)),
      device_(device),
      stream_(&defaultStream(device)),
      syncEachNode_(device.type != DeviceType::CPU && syncEachNodeFromEnvironment()),
      givesWay_(device.type == DeviceType::CPU) {}

std::vector<Tensor> Executor::runEagerly(const std::vector<Tensor>& inputs) {
  return runNodes(inputs, runCount_++);
}

void Executor::validateInputs(const std::vector<Tensor>& inputs) const {
  if (inputs.size() != program_.inputs.size()) {
    fail("the model takes {} input(s) but {} were given", program_.inputs.size(), inputs.size());
  }
  for (std::size_t i = 0; i < inputs.size(); ++i) {
    const ProgramValue& expected = program_.values[static_cast<std::size_t>(program_.inputs[i])];
    const Tensor& given = inputs[i];
    if (!given.defined()) {
      fail("input {} ('{}') is missing", i, expected.name);
    }
    if (given.dtype() != expected.meta.dtype) {
      fail("input {} ('{}') has dtype {} but the model expects {}", i, expected.name, dtypeName(given.dtype()),
           dtypeName(expected.meta.dtype));
    }
    if (given.device() != device_) {
      fail("input {} ('{}') is on {} but the plan runs on {}", i, expected.name, given.device().toString(),
           device_.toString());
    }
    if (given.shape() != expected.meta.shape) {
      fail("input {} ('{}') has shape {} but the plan was built for {}", i, expected.name, shapeToString(given.shape()),
           shapeToString(expected.meta.shape));
    }
  }
}

void Executor::fire(const std::vector<std::pair<int, NodeHook>>& hooks, std::size_t stepIndex) const {
  const NodeEvent event{stepIndex, program_.steps[stepIndex]};
  for (const auto& [id, hook] : hooks) {
    hook(event);
  }
}

std::vector<Tensor> Executor::run(const std::vector<Tensor>& inputs, bool synchronize) {
  validateInputs(inputs);
  std::vector<Tensor> outputs = recording_.mode == Recording::Off ? runEagerly(inputs) : runRecordingPhase(inputs);
  if (synchronize) {
    this->synchronize();
  }
  return outputs;
}

std::vector<Tensor> Executor::runNodes(const std::vector<Tensor>& inputs, std::uint64_t runIndex,
                                       const std::uint64_t* deviceStep) {
  std::vector<Tensor> slots(program_.values.size());
  for (std::size_t i = 0; i < program_.values.size(); ++i) {
    if (program_.values[i].constant.defined()) {
      slots[i] = program_.values[i].constant;
    }
  }
  for (std::size_t i = 0; i < inputs.size(); ++i) {
    slots[static_cast<std::size_t>(program_.inputs[i])] = inputs[i];
  }

  KernelContext ctx;
  ctx.training = program_.training;
  ctx.step = runIndex;
  ctx.deviceStep = deviceStep;
  ctx.stream = stream_;
  for (std::size_t s = 0; s < program_.steps.size(); ++s) {
    ProgramStep& step = program_.steps[s];
    if (givesWay_) {
      giveWayToCommunication();
    }
    if (!beforeHooks_.empty()) {
      fire(beforeHooks_, s);
    }
    if (step.viewsInput) {  // Note [Views without copies]: a new name for the input's bytes
      const auto out = static_cast<std::size_t>(step.outputs[0]);
      slots[out] = slots[static_cast<std::size_t>(step.inputs[0])].reshape(program_.values[out].meta.shape);
      finishStep(s, slots);
      continue;
    }
    ctx.inputs.assign(step.inputs.size(), nullptr);
    for (std::size_t i = 0; i < step.inputs.size(); ++i) {
      if (step.inputs[i] >= 0) {
        ctx.inputs[i] = &slots[static_cast<std::size_t>(step.inputs[i])];
      }
    }
    ctx.outputs.assign(step.outputs.size(), nullptr);
    bool accumulates = false;
    for (std::size_t i = 0; i < step.outputs.size(); ++i) {
      if (step.outputs[i] >= 0) {
        const auto id = static_cast<std::size_t>(step.outputs[i]);
        const ProgramValue& value = program_.values[id];
        if (value.bound.defined() && !(accumulateGradients_ && value.gradient)) {
          slots[id] = value.bound;
        } else {
          const bool temporaryGradient = value.bound.defined();
          accumulates = accumulates || temporaryGradient;
          slots[id] = Tensor::empty(
              value.meta, temporaryGradient ? MemoryCategory::Gradients : MemoryCategory::Activations, device_);
        }
        ctx.outputs[i] = &slots[id];
      }
    }
    try {
      step.kernel->compute(ctx);
      if (accumulates) {
        accumulateInto(step, slots, ctx);
      }
      if (syncEachNode_) {
        stream_->synchronize();
      }
    } catch (const Error& e) {
      fail("node '{}' ({}): {}", step.nodeName, step.opType, e.what());
    }
    finishStep(s, slots);
  }

  std::vector<Tensor> outputs;
  outputs.reserve(program_.outputs.size());
  for (int id : program_.outputs) {
    outputs.push_back(slots[static_cast<std::size_t>(id)]);
  }
  return outputs;
}

// After step s: its dead values released, the after-node and gradient-ready hooks fired.
void Executor::finishStep(std::size_t s, std::vector<Tensor>& slots) {
  const ProgramStep& step = program_.steps[s];
  for (int id : step.releaseAfter) {
    slots[static_cast<std::size_t>(id)] = Tensor();
  }
  if (!afterHooks_.empty()) {
    fire(afterHooks_, s);
  }
  if (!gradientHooks_.empty()) {
    for (int parameter : step.gradientsReady) {
      for (const auto& [id, hook] : gradientHooks_) {
        hook(parameter);
      }
    }
  }
}

void Executor::accumulateInto(const ProgramStep& step, std::vector<Tensor>& slots, KernelContext& ctx) {
  KernelContext add;
  add.training = ctx.training;
  add.step = ctx.step;
  add.deviceStep = ctx.deviceStep;
  add.stream = ctx.stream;
  for (int output : step.outputs) {
    if (output < 0) {
      continue;
    }
    const auto id = static_cast<std::size_t>(output);
    const ProgramValue& value = program_.values[id];
    if (!value.gradient || !value.bound.defined()) {
      continue;
    }
    Tensor sum = value.bound;
    const Tensor temporary = std::exchange(slots[id], value.bound);
    add.inputs = {&sum, &temporary};
    add.outputs = {&slots[id]};  // in place: the elementwise Add reads each element before writing it
    accumulateKernels_[id]->compute(add);
  }
}

void Executor::setAccumulateGradients(bool on) {
  if (on == accumulateGradients_) {
    return;
  }
  if (on && accumulateKernels_.empty()) {
    const KernelFactory* factory = OpRegistry::instance().kernel("Add", device_.type);
    STRATA_CHECK(factory != nullptr, "gradient accumulation needs the Add kernel on {}, which is not registered",
                 device_.toString());
    accumulateKernels_.resize(program_.values.size());
    const Attributes none;
    for (std::size_t id = 0; id < program_.values.size(); ++id) {
      const ProgramValue& value = program_.values[id];
      if (value.gradient && value.bound.defined()) {
        const std::string name = value.name + "/accumulate";
        const InputInfo operand{true, value.meta, nullptr};
        accumulateKernels_[id] = (*factory)(KernelInit{{operand, operand}, {value.meta}, none, name, false});
      }
    }
  }
  accumulateGradients_ = on;
  setRecording(recording_.mode);  // a recording holds the adds, or their absence
}

void Executor::synchronize() {
  try {
    stream_->synchronize();
  } catch (const Error& e) {
    if (syncEachNode_ || device_.type == DeviceType::CPU) {
      throw;
    }
    fail(
        "{} (a kernel of this plan failed asynchronously on {}; rerun with STRATA_SYNC_EACH_NODE=1 to learn which "
        "node)",
        e.what(), device_.toString());
  }
}

int Executor::addBeforeNodeHook(NodeHook hook) {
  beforeHooks_.emplace_back(nextHookId_, std::move(hook));
  return nextHookId_++;
}

int Executor::addAfterNodeHook(NodeHook hook) {
  afterHooks_.emplace_back(nextHookId_, std::move(hook));
  return nextHookId_++;
}

int Executor::addGradientReadyHook(GradientReadyHook hook) {
  gradientHooks_.emplace_back(nextHookId_, std::move(hook));
  return nextHookId_++;
}

void Executor::removeHook(int id) {
  auto matches = [id](const auto& entry) { return entry.first == id; };
  std::erase_if(beforeHooks_, matches);
  std::erase_if(afterHooks_, matches);
  std::erase_if(gradientHooks_, matches);
}

}  // namespace strata
