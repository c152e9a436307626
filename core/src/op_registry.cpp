#include "strata/op_registry.h"

#include <algorithm>
#include <mutex>

#include "cpu_ops.h"
#include "strata/channels_last.h"

namespace strata {

const InputInfo& ShapeContext::input(std::size_t i) const {
  if (!hasInput(i)) {
    error(fmt::format("input {} is required but absent", i));
  }
  return inputs[i];
}

const Tensor& ShapeContext::constantInput(std::size_t i) const {
  const InputInfo& info = input(i);
  if (info.constant == nullptr) {
    error(
        fmt::format("input {} must be known when the plan is built (a constant or shape arithmetic on "
                    "static shapes), but it depends on run-time data",
                    i));
  }
  return *info.constant;
}

void ShapeContext::error(const std::string& why) const {
  fail("node '{}' ({}): {}", nodeName, opType, why);
}

const Tensor& KernelContext::input(std::size_t i) const {
  STRATA_CHECK(hasInput(i), "kernel input {} is absent", i);
  return *inputs[i];
}

Tensor& KernelContext::output(std::size_t i) const {
  STRATA_CHECK(hasOutput(i), "kernel output {} is not allocated", i);
  return *outputs[i];
}

namespace {

class FunctionKernel final : public OpKernel {
 public:
  explicit FunctionKernel(std::function<void(KernelContext&)> fn) : fn_(std::move(fn)) {}
  void compute(KernelContext& ctx) override { fn_(ctx); }

 private:
  std::function<void(KernelContext&)> fn_;
};

}  // namespace

bool isLowPrecisionSlot(const std::vector<std::size_t>& slots, std::size_t i) {
  return slots.empty() || std::find(slots.begin(), slots.end(), i) != slots.end();
}

std::unique_ptr<OpKernel> makeFunctionKernel(std::function<void(KernelContext&)> fn) {
  return std::make_unique<FunctionKernel>(std::move(fn));
}

OpRegistry& OpRegistry::instance() {
  static OpRegistry registry;
  static std::once_flag once;
  std::call_once(once, [] {
    cpu::registerElementwiseOps(registry);
    cpu::registerReductionOps(registry);
    cpu::registerShapeOps(registry);
    cpu::registerDnnlOps(registry);
    cpu::registerAttentionOps(registry);
    cpu::registerResizeOps(registry);
    cpu::registerEinsumOps(registry);
    cpu::registerElementwiseGradOps(registry);
    cpu::registerReductionGradOps(registry);
    cpu::registerShapeGradOps(registry);
    cpu::registerNnGradOps(registry);
    cpu::registerLowPrecisionOps(registry);
  });
  return registry;
}

void OpRegistry::addSchema(OpSchema schema) {
  std::string type = schema.type;
  if (isChannelsLastOp(type)) {
    schema.inferShapes = channelsLastShapes(std::move(schema.inferShapes));
  }
  schemas_[type] = std::move(schema);
}

void OpRegistry::addKernel(const std::string& type, DeviceType device, KernelFactory factory,
                           std::function<bool(const KernelInit&)> nativeChannelsLast) {
  if (isChannelsLastOp(type)) {
    nativeChannelsLast_[{type, device}] = nativeChannelsLast;
    factory = channelsLastByTransposing(std::move(factory), device, std::move(nativeChannelsLast));
  }
  kernels_[{type, device}] = std::move(factory);
}

void OpRegistry::addCpuOp(const std::string& type, ShapeFn infer, std::function<void(KernelContext&)> compute,
                          bool foldable) {
  addSchema(OpSchema{type, std::move(infer), foldable});
  addKernel(type, DeviceType::CPU,
            [compute = std::move(compute)](const KernelInit&) { return makeFunctionKernel(compute); });
}

const OpSchema* OpRegistry::schema(std::string_view type) const {
  auto it = schemas_.find(type);
  return it == schemas_.end() ? nullptr : &it->second;
}

const KernelFactory* OpRegistry::kernel(std::string_view type, DeviceType device) const {
  auto it = kernels_.find({std::string(type), device});
  return it == kernels_.end() ? nullptr : &it->second;
}

std::function<bool(const KernelInit&)> OpRegistry::nativeChannelsLast(std::string_view type, DeviceType device) const {
  auto it = nativeChannelsLast_.find({std::string(type), device});
  return it == nativeChannelsLast_.end() ? nullptr : it->second;
}

std::vector<std::string> OpRegistry::opTypes() const {
  std::vector<std::string> types;
  for (const auto& [type, schema] : schemas_) {
    types.push_back(type);
  }
  return types;
}

std::vector<Tensor> runOpEagerly(const std::string& type, const std::vector<const Tensor*>& inputs,
                                 const Attributes& attrs, std::size_t outputCount, bool training, Device device) {
  const OpRegistry& registry = OpRegistry::instance();
  const OpSchema* schema = registry.schema(type);
  const KernelFactory* factory = registry.kernel(type, device.type);
  STRATA_CHECK(schema != nullptr && factory != nullptr, "operator {} has no kernel for {}", type, device.toString());

  std::vector<InputInfo> infos;
  for (const Tensor* t : inputs) {
    infos.push_back(t == nullptr ? InputInfo{} : InputInfo{true, t->meta(), t});
  }
  const std::string nodeName = "eager " + type;
  const std::vector<TensorMeta> metas = schema->inferShapes(ShapeContext{infos, attrs, outputCount, nodeName, type});
  STRATA_CHECK(metas.size() >= outputCount, "operator {} inferred {} outputs, {} requested", type, metas.size(),
               outputCount);

  std::unique_ptr<OpKernel> kernel = (*factory)(KernelInit{infos, metas, attrs, nodeName, training});
  // Kernels read their inputs where they run: host inputs are copied to the device first.
  std::vector<Tensor> onDevice;
  onDevice.reserve(inputs.size());
  KernelContext ctx;
  for (const Tensor* t : inputs) {
    onDevice.push_back(t == nullptr ? Tensor() : t->to(device));
    ctx.inputs.push_back(t == nullptr ? nullptr : &onDevice.back());
  }
  ctx.training = training;
  ctx.stream = &defaultStream(device);
  std::vector<Tensor> outputs;
  outputs.reserve(outputCount);
  for (std::size_t i = 0; i < outputCount; ++i) {
    outputs.push_back(Tensor::empty(metas[i], MemoryCategory::Activations, device));
  }
  for (Tensor& t : outputs) {
    ctx.outputs.push_back(&t);
  }
  kernel->compute(ctx);
  for (Tensor& t : outputs) {
    t = t.to(Device::cpu());  // complete on return
  }
  return outputs;
}

}  // namespace strata
