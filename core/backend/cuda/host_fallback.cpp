// Note [Host fallback]: every op with a CPU kernel also runs in a CUDA plan. Ops without a native CUDA kernel run
// their CPU kernel on host copies: the stream is synchronised, inputs are copied to the host, the CPU kernel runs,
// and its outputs are copied back. This is correct (the CPU kernels are the tested reference) but slow, so the
// ops that take this path are listed at plan time (hostFallbackOps) and none of the paper models' hot ops do.

#include <algorithm>
#include <functional>
#include <mutex>
#include <set>

#include "cuda_ops.h"
#include "strata/cuda/backend.h"
#include "strata/error.h"

namespace strata::cuda {
namespace {

std::mutex& fallbackMutex() {
  static std::mutex mutex;
  return mutex;
}

std::set<std::string>& fallbackOps() {
  static std::set<std::string> ops;
  return ops;
}

class HostStagedKernel final : public OpKernel {
 public:
  explicit HostStagedKernel(std::unique_ptr<OpKernel> cpu) : cpu_(std::move(cpu)) {}

  void compute(KernelContext& ctx) override {
    ctx.stream->synchronize();
    std::vector<Tensor> hostInputs(ctx.inputs.size());
    KernelContext host;
    host.training = ctx.training;
    host.step = ctx.step;
    host.stream = &defaultStream(Device::cpu());
    host.inputs.assign(ctx.inputs.size(), nullptr);
    for (std::size_t i = 0; i < ctx.inputs.size(); ++i) {
      if (ctx.inputs[i] != nullptr) {
        hostInputs[i] = ctx.inputs[i]->to(Device::cpu(), MemoryCategory::Workspace);
        host.inputs[i] = &hostInputs[i];
      }
    }
    std::vector<Tensor> hostOutputs(ctx.outputs.size());
    host.outputs.assign(ctx.outputs.size(), nullptr);
    for (std::size_t o = 0; o < ctx.outputs.size(); ++o) {
      if (ctx.outputs[o] != nullptr) {
        // Outputs bound to existing storage (running statistics updated in place) start from their values.
        hostOutputs[o] = ctx.outputs[o]->to(Device::cpu(), MemoryCategory::Workspace);
        host.outputs[o] = &hostOutputs[o];
      }
    }
    cpu_->compute(host);
    for (std::size_t o = 0; o < ctx.outputs.size(); ++o) {
      if (ctx.outputs[o] != nullptr) {
        ctx.outputs[o]->copyFrom(hostOutputs[o]);
      }
    }
  }

 private:
  std::unique_ptr<OpKernel> cpu_;
};

}  // namespace

void registerHostFallbackKernels(OpRegistry& registry) {
  for (const std::string& type : registry.opTypes()) {
    const KernelFactory* cpuFactory = registry.kernel(type, DeviceType::CPU);
    if (cpuFactory == nullptr || registry.supports(type, DeviceType::CUDA)) {
      continue;
    }
    {
      std::lock_guard lock(fallbackMutex());
      fallbackOps().insert(type);
    }
    // A layout-aware op whose CPU kernel reads channels-last operands itself (Resize) gets them as they are; the
    // others are transposed on the device first (Note [Channels-last]).
    std::function<bool(const KernelInit&)> cpuNative = registry.nativeChannelsLast(type, DeviceType::CPU);
    registry.addKernel(
        type, DeviceType::CUDA,
        [cpuFactory = *cpuFactory](const KernelInit& init) {
          // Plan-time constants that live on the device are trainable parameters (views of the device flat buffer):
          // the CPU kernel sees them as run-time inputs, so it never caches values derived from a snapshot.
          std::vector<InputInfo> inputs = init.inputs;
          for (InputInfo& input : inputs) {
            if (input.constant != nullptr && input.constant->device().type != DeviceType::CPU) {
              input.constant = nullptr;
            }
          }
          KernelInit hostInit{inputs, init.outputs, init.attrs, init.nodeName, init.training};
          return std::make_unique<HostStagedKernel>(cpuFactory(hostInit));
        },
        std::move(cpuNative));
  }
}

std::string hostFallbackOps() {
  std::lock_guard lock(fallbackMutex());
  std::string list;
  for (const std::string& type : fallbackOps()) {
    list += list.empty() ? type : ", " + type;
  }
  return list;
}

}  // namespace strata::cuda
