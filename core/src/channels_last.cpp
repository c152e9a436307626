#include "strata/channels_last.h"

#include <array>
#include <cstdint>
#include <memory>
#include <optional>
#include <utility>

#include "strata/error.h"

namespace strata {
namespace {

constexpr std::array<std::string_view, 12> kChannelsLastOps = {"Conv",
                                                               "ConvGrad",
                                                               "ConvGradInput",
                                                               "ConvGradWeight",
                                                               "BatchNormalization",
                                                               "BatchNormalizationGrad",
                                                               "MaxPool",
                                                               "MaxPoolGrad",
                                                               "AveragePool",
                                                               "AveragePoolGrad",
                                                               "Resize",
                                                               "ResizeGrad"};

// Gradient nodes carry channels-last shapes of X or W as attributes (Note [Channels-last]).
constexpr std::array<const char*, 2> kShapeAttributes = {"input_shape", "weight_shape"};

bool isLayoutOperand(const TensorMeta& meta) {
  return meta.shape.size() >= 3;
}

// The node's attributes as its channels-first kernel reads them.
Attributes channelsFirstAttributes(const Attributes& attrs) {
  Attributes out;
  for (const auto& [name, value] : attrs.all()) {
    if (name != "channels_last")
      out.set(name, value);
  }
  for (const char* name : kShapeAttributes) {
    if (attrs.has(name))
      out.set(name, toChannelsFirst(attrs.getInts(name)));
  }
  return out;
}

std::vector<InputInfo> channelsFirstInputs(const std::vector<InputInfo>& inputs) {
  std::vector<InputInfo> out = inputs;
  for (InputInfo& info : out) {
    if (info.present && isLayoutOperand(info.meta)) {
      info.meta.shape = toChannelsFirst(info.meta.shape);
      info.constant = nullptr;  // a constant's bytes stay channels-last
    }
  }
  return out;
}

Shape permuted(const Shape& shape, const std::vector<std::int64_t>& perm) {
  Shape out(shape.size());
  for (std::size_t i = 0; i < perm.size(); ++i)
    out[i] = shape[static_cast<std::size_t>(perm[i])];
  return out;
}

void checkChannelsLastNode(const std::vector<InputInfo>& inputs, std::size_t outputCount, std::string_view opType,
                           const std::function<void(const std::string&)>& error) {
  if (inputs.empty() || !inputs[0].present || !isLayoutOperand(inputs[0].meta)) {
    error("channels_last = 1 needs a first input of rank 3 or more ([N, spatial..., C])");
  }
  if (opType == "MaxPool" && outputCount > 1) {
    error("MaxPool's Indices output counts channels-first positions, so it is not available with channels_last = 1");
  }
}

// Transposes one operand between layouts with the device's own Transpose kernel.
class OperandTranspose {
 public:
  OperandTranspose(DeviceType device, const TensorMeta& from, const std::vector<std::int64_t>& perm,
                   const std::string& nodeName)
      : to_{from.dtype, permuted(from.shape, perm)} {
    Attributes attrs;
    attrs.set("perm", perm);
    const KernelFactory* factory = OpRegistry::instance().kernel("Transpose", device);
    STRATA_CHECK(factory != nullptr, "node '{}': no Transpose kernel to change its operands' layout", nodeName);
    const std::vector<InputInfo> inputs{InputInfo{true, from, nullptr}};
    kernel_ = (*factory)(KernelInit{inputs, {to_}, attrs, nodeName, false});
  }

  const TensorMeta& result() const { return to_; }

  void run(const KernelContext& outer, const Tensor& in, Tensor& out) const {
    KernelContext ctx;
    ctx.inputs = {&in};
    ctx.outputs = {&out};
    ctx.stream = outer.stream;
    ctx.step = outer.step;
    kernel_->compute(ctx);
  }

 private:
  TensorMeta to_;
  std::unique_ptr<OpKernel> kernel_;
};

// Runs a channels_last = 1 node on its channels-first kernel: layout operands in, through scratch tensors, and the
// layout results back out.
class TransposingKernel final : public OpKernel {
 public:
  TransposingKernel(const KernelFactory& channelsFirst, DeviceType device, const KernelInit& init)
      : attrs_(channelsFirstAttributes(init.attrs)), nodeName_(init.nodeName) {
    const std::vector<InputInfo> inputs = channelsFirstInputs(init.inputs);
    std::vector<TensorMeta> outputs = init.outputs;
    for (std::size_t i = 0; i < init.inputs.size(); ++i) {
      const InputInfo& info = init.inputs[i];
      if (info.present && isLayoutOperand(info.meta)) {
        inputTransposes_.emplace_back(
            i, OperandTranspose(device, info.meta, channelsFirstPerm(info.meta.shape.size()), nodeName_));
      }
    }
    for (std::size_t i = 0; i < outputs.size(); ++i) {
      if (isLayoutOperand(outputs[i])) {
        outputs[i].shape = toChannelsFirst(outputs[i].shape);
        outputTransposes_.emplace_back(
            i, OperandTranspose(device, outputs[i], channelsLastPerm(outputs[i].shape.size()), nodeName_));
      }
    }
    channelsFirstOutputs_ = outputs;
    inner_ = channelsFirst(KernelInit{inputs, outputs, attrs_, nodeName_, init.training});
  }

  void compute(KernelContext& ctx) override {
    STRATA_CHECK(ctx.stream != nullptr, "node '{}': a kernel was run without a stream", nodeName_);
    const Device device = ctx.stream->device();
    KernelContext inner = ctx;
    std::vector<Tensor> inputs;
    inputs.reserve(inputTransposes_.size());
    for (const auto& [slot, transpose] : inputTransposes_) {
      if (!ctx.hasInput(slot))
        continue;
      inputs.push_back(Tensor::empty(transpose.result(), MemoryCategory::Workspace, device));
      transpose.run(ctx, ctx.input(slot), inputs.back());
      inner.inputs[slot] = &inputs.back();
    }
    std::vector<Tensor> outputs;
    outputs.reserve(outputTransposes_.size());
    for (const auto& [slot, transpose] : outputTransposes_) {
      if (!ctx.hasOutput(slot))
        continue;
      outputs.push_back(Tensor::empty(channelsFirstOutputs_[slot], MemoryCategory::Workspace, device));
      inner.outputs[slot] = &outputs.back();
    }
    inner_->compute(inner);
    for (const auto& [slot, transpose] : outputTransposes_) {
      if (ctx.hasOutput(slot))
        transpose.run(ctx, *inner.outputs[slot], ctx.output(slot));
    }
  }

  bool readsDeviceStep() const override { return inner_->readsDeviceStep(); }
  std::string implementation() const override {
    const std::string inner = inner_->implementation();
    return inner.empty() ? "" : inner + ", transposed from channels-last";
  }

 private:
  Attributes attrs_;
  std::string nodeName_;
  std::vector<std::pair<std::size_t, OperandTranspose>> inputTransposes_, outputTransposes_;
  std::vector<TensorMeta> channelsFirstOutputs_;
  std::unique_ptr<OpKernel> inner_;
};

}  // namespace

bool isChannelsLastOp(std::string_view opType) {
  for (std::string_view type : kChannelsLastOps) {
    if (type == opType)
      return true;
  }
  return false;
}

bool channelsLastOf(const Attributes& attrs) {
  const std::int64_t value = attrs.getInt("channels_last", 0);
  if (value != 0 && value != 1)
    fail("channels_last must be 0 or 1, got {}", value);
  return value == 1;
}

std::vector<std::int64_t> channelsLastPerm(std::size_t rank) {
  std::vector<std::int64_t> perm{0};
  for (std::size_t i = 2; i < rank; ++i)
    perm.push_back(static_cast<std::int64_t>(i));
  perm.push_back(1);
  return perm;
}

std::vector<std::int64_t> channelsFirstPerm(std::size_t rank) {
  std::vector<std::int64_t> perm{0, static_cast<std::int64_t>(rank) - 1};
  for (std::size_t i = 1; i + 1 < rank; ++i)
    perm.push_back(static_cast<std::int64_t>(i));
  return perm;
}

Shape toChannelsLast(const Shape& shape) {
  return shape.size() < 3 ? shape : permuted(shape, channelsLastPerm(shape.size()));
}

Shape toChannelsFirst(const Shape& shape) {
  return shape.size() < 3 ? shape : permuted(shape, channelsFirstPerm(shape.size()));
}

namespace {

template <typename Element>
void swapInnerAxes(const Element* from, Element* to, std::int64_t outer, std::int64_t b, std::int64_t inner) {
  for (std::int64_t a = 0; a < outer; ++a) {
    const std::int64_t base = a * b * inner;
    for (std::int64_t j = 0; j < b; ++j) {
      for (std::int64_t k = 0; k < inner; ++k)
        to[base + k * b + j] = from[base + j * inner + k];
    }
  }
}

// [A, B, inner] -> [A, inner, B] (B the channels and inner the spatial positions, or the reverse).
Tensor swapInnerAxes(const Tensor& tensor, std::int64_t b, Shape shape, MemoryCategory category) {
  STRATA_CHECK(tensor.device().type == DeviceType::CPU, "a layout change of a {} tensor on {}: host tensors only",
               tensor.meta().toString(), tensor.device().toString());
  Tensor out = Tensor::empty(tensor.dtype(), std::move(shape), category);
  if (tensor.numel() == 0)
    return out;
  const std::int64_t outer = tensor.dim(0);
  const std::int64_t inner = tensor.numel() / (outer * b);
  switch (dtypeSize(tensor.dtype())) {
    case 2:
      swapInnerAxes(tensor.data<std::uint16_t>(), out.data<std::uint16_t>(), outer, b, inner);
      break;
    case 4:
      swapInnerAxes(tensor.data<std::uint32_t>(), out.data<std::uint32_t>(), outer, b, inner);
      break;
    case 8:
      swapInnerAxes(tensor.data<std::uint64_t>(), out.data<std::uint64_t>(), outer, b, inner);
      break;
    default:
      swapInnerAxes(tensor.data<std::uint8_t>(), out.data<std::uint8_t>(), outer, b, inner);
  }
  return out;
}

}  // namespace

Tensor toChannelsLast(const Tensor& tensor, MemoryCategory category) {
  if (tensor.rank() < 3)
    return tensor.to(Device::cpu()).clone(category);
  return swapInnerAxes(tensor, tensor.dim(1), toChannelsLast(tensor.shape()), category);
}

Tensor toChannelsFirst(const Tensor& tensor, MemoryCategory category) {
  if (tensor.rank() < 3)
    return tensor.to(Device::cpu()).clone(category);
  const std::int64_t channels = tensor.dim(tensor.rank() - 1);
  const std::int64_t positions = tensor.numel() == 0 ? 0 : tensor.numel() / (tensor.dim(0) * channels);
  return swapInnerAxes(tensor, positions, toChannelsFirst(tensor.shape()), category);
}

ShapeFn channelsLastShapes(ShapeFn channelsFirst) {
  return [channelsFirst = std::move(channelsFirst)](const ShapeContext& ctx) -> std::vector<TensorMeta> {
    bool channelsLast = false;
    try {
      channelsLast = channelsLastOf(ctx.attrs);
    } catch (const Error& e) {
      ctx.error(e.what());
    }
    if (!channelsLast)
      return channelsFirst(ctx);
    checkChannelsLastNode(ctx.inputs, ctx.outputCount, ctx.opType, [&](const std::string& why) { ctx.error(why); });
    const std::vector<InputInfo> inputs = channelsFirstInputs(ctx.inputs);
    const Attributes attrs = channelsFirstAttributes(ctx.attrs);
    std::vector<TensorMeta> outputs;
    try {
      outputs = channelsFirst(ShapeContext{inputs, attrs, ctx.outputCount, ctx.nodeName, ctx.opType});
    } catch (const Error& e) {
      fail("{} (channels_last = 1: the shapes named are the channels-first views of the operands)", e.what());
    }
    for (TensorMeta& meta : outputs) {
      meta.shape = toChannelsLast(meta.shape);
    }
    return outputs;
  };
}

KernelFactory channelsLastByTransposing(KernelFactory channelsFirst, DeviceType device,
                                        std::function<bool(const KernelInit&)> nativeWhen) {
  return [channelsFirst = std::move(channelsFirst), device,
          nativeWhen = std::move(nativeWhen)](const KernelInit& init) -> std::unique_ptr<OpKernel> {
    if (!channelsLastOf(init.attrs) || (nativeWhen && nativeWhen(init)))
      return channelsFirst(init);
    return std::make_unique<TransposingKernel>(channelsFirst, device, init);
  };
}

}  // namespace strata
