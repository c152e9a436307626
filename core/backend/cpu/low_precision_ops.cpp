// Float16 and bfloat16 on the CPU, for mixed precision (--precision bf16|fp16).
//
// Note [Low precision on the CPU]: the CPU kernels compute in float32 and float64 only. The ops that mixed
// precision runs in 16 bits (graphs/autocast.cpp) get a wrapper here. It widens their 16-bit inputs to float32,
// which is exact. It then runs the float32 kernel and rounds each floating output once to the 16-bit dtype. That
// is what a GPU's 16-bit kernels do when they accumulate in float32, so CPU runs check the GPU's numerics. The
// conversions cost time, so this path is for checking, not for speed. Ops that only move bytes take 16-bit
// tensors as they are.

#include <algorithm>
#include <array>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <fmt/ranges.h>

#include "broadcast.h"
#include "cpu_ops.h"
#include "strata/error.h"

namespace strata::cpu {
namespace {

// Ops mixed precision may run in 16 bits, with the backward ops their gradient rules emit (Sum adds up the
// gradients of a value used twice).
constexpr std::array kEmulatedOps = {
    "Conv", "ConvTranspose", "ConvGrad", "ConvGradInput", "ConvGradWeight", "Gemm",        "MatMul",    "Add",
    "Mul",  "Sum",           "Relu",     "ReluGrad",      "MaxPool",        "MaxPoolGrad", "ReduceSum",
};
// Ops whose CPU kernels take 16-bit tensors as they are: data movement copies elements by size, Cast converts.
constexpr std::array kNativeOps = {"Reshape", "Flatten", "Squeeze", "Unsqueeze", "Identity", "Transpose",
                                   "Concat",  "Split",   "Slice",   "Expand",    "Cast"};

// Batch norm keeps scale, bias and statistics in float32 beside 16-bit data, as cuDNN and PyTorch autocast do.
struct LowPrecisionSlots {
  std::vector<std::size_t> inputs;   // empty: every floating input
  std::vector<std::size_t> outputs;  // empty: every floating output
};
const std::map<std::string, LowPrecisionSlots> kPartlyLowOps = {
    {"BatchNormalization", {{0}, {0}}},         // X -> Y; not the running statistics
    {"BatchNormalizationGrad", {{0, 1}, {0}}},  // dY, X -> dX; not dScale, dB
};

bool isLowPrecision(DType dtype) {
  return dtype == DType::Float16 || dtype == DType::BFloat16;
}

// The 16-bit dtype of a node, or nullopt when none of its floating inputs is 16-bit. `slots` are the inputs that
// take it (empty: every floating one); the node's other floating inputs must then be float32. `fail` reports any
// other mix (mixed precision casts the inputs of each node to what it takes).
template <typename Fail>
std::optional<DType> lowPrecisionOf(const std::vector<std::optional<DType>>& inputs,
                                    const std::vector<std::size_t>& slots, Fail&& fail) {
  std::optional<DType> low;
  std::optional<DType> wide;
  for (std::size_t i = 0; i < inputs.size(); ++i) {
    const std::optional<DType>& dtype = inputs[i];
    if (!dtype || !isFloatingPoint(*dtype)) {
      continue;
    }
    if (!isLowPrecisionSlot(slots, i)) {
      if (isLowPrecision(*dtype)) {
        fail(fmt::format("input {} is {}, but only inputs {} take 16 bits", i, dtypeName(*dtype),
                         fmt::join(slots, ", ")));
      }
      continue;
    }
    if (isLowPrecision(*dtype)) {
      if (low && *low != *dtype) {
        fail(fmt::format("inputs mix {} and {}", dtypeName(*low), dtypeName(*dtype)));
      }
      low = *dtype;
    } else {
      wide = *dtype;
    }
  }
  if (low && wide) {
    fail(fmt::format("inputs mix {} and {}; every floating input{} must have the same 16-bit dtype", dtypeName(*low),
                     dtypeName(*wide), slots.empty() ? "" : fmt::format(" among {}", fmt::join(slots, ", "))));
  }
  for (std::size_t i = 0; low && i < inputs.size(); ++i) {
    if (!isLowPrecisionSlot(slots, i) && inputs[i] && isFloatingPoint(*inputs[i]) && *inputs[i] != DType::Float32) {
      fail(fmt::format("input {} is {}; beside 16-bit data it must be float32", i, dtypeName(*inputs[i])));
    }
  }
  return low;
}

Tensor widened(const Tensor& low) {
  Tensor wide = Tensor::empty(DType::Float32, low.shape(), MemoryCategory::Workspace);
  const auto* in = low.data<std::uint16_t>();
  float* out = wide.data<float>();
  const bool half = low.dtype() == DType::Float16;
  parallelChunks(low.numel(), 2, [&](std::int64_t begin, std::int64_t end) {
    for (std::int64_t i = begin; i < end; ++i) {
      out[i] = half ? halfToFloat(in[i]) : bfloat16ToFloat(in[i]);
    }
  });
  return wide;
}

void narrowInto(const Tensor& wide, Tensor& low) {
  const float* in = wide.data<float>();
  auto* out = low.data<std::uint16_t>();
  const bool half = low.dtype() == DType::Float16;
  parallelChunks(wide.numel(), 2, [&](std::int64_t begin, std::int64_t end) {
    for (std::int64_t i = begin; i < end; ++i) {
      out[i] = half ? floatToHalf(in[i]) : floatToBFloat16(in[i]);
    }
  });
}

// Input infos with 16-bit metas and constants widened to float32; `kept` owns the widened constants.
std::vector<InputInfo> widenedInfos(const std::vector<InputInfo>& inputs, std::vector<std::unique_ptr<Tensor>>& kept) {
  std::vector<InputInfo> wide = inputs;
  for (InputInfo& info : wide) {
    if (!info.present || !isLowPrecision(info.meta.dtype)) {
      continue;
    }
    info.meta.dtype = DType::Float32;
    if (info.constant != nullptr) {
      kept.push_back(std::make_unique<Tensor>(widened(*info.constant)));
      info.constant = kept.back().get();
    }
  }
  return wide;
}

std::vector<std::optional<DType>> dtypesOf(const std::vector<InputInfo>& inputs) {
  std::vector<std::optional<DType>> dtypes;
  for (const InputInfo& info : inputs) {
    dtypes.push_back(info.present ? std::optional<DType>(info.meta.dtype) : std::nullopt);
  }
  return dtypes;
}

// Runs a float32 kernel on widened inputs and rounds its floating outputs to the node's 16-bit dtype.
class WideningKernel final : public OpKernel {
 public:
  WideningKernel(std::unique_ptr<OpKernel> inner, std::vector<std::unique_ptr<Tensor>> constants)
      : inner_(std::move(inner)), constants_(std::move(constants)) {}

  void compute(KernelContext& ctx) override {
    std::vector<Tensor> wideInputs;
    wideInputs.reserve(ctx.inputs.size());
    KernelContext wide{.inputs = ctx.inputs,
                       .outputs = ctx.outputs,
                       .training = ctx.training,
                       .step = ctx.step,
                       .stream = ctx.stream,
                       .deviceStep = ctx.deviceStep};
    for (const Tensor*& input : wide.inputs) {
      if (input != nullptr && isLowPrecision(input->dtype())) {
        wideInputs.push_back(widened(*input));
        input = &wideInputs.back();
      }
    }
    std::vector<Tensor> wideOutputs;
    wideOutputs.reserve(ctx.outputs.size());
    for (Tensor*& output : wide.outputs) {
      if (output != nullptr && isLowPrecision(output->dtype())) {
        wideOutputs.push_back(Tensor::empty(DType::Float32, output->shape(), MemoryCategory::Workspace));
        output = &wideOutputs.back();
      }
    }
    inner_->compute(wide);
    for (std::size_t i = 0; i < ctx.outputs.size(); ++i) {
      if (ctx.outputs[i] != nullptr && wide.outputs[i] != ctx.outputs[i]) {
        narrowInto(*wide.outputs[i], *ctx.outputs[i]);
      }
    }
  }

 private:
  std::unique_ptr<OpKernel> inner_;
  std::vector<std::unique_ptr<Tensor>> constants_;  // widened plan-time constants the inner kernel may point at
};

void emulateLowPrecision(OpRegistry& registry, const std::string& type, const LowPrecisionSlots& slots = {}) {
  const OpSchema* schema = registry.schema(type);
  const KernelFactory* factory = registry.kernel(type, DeviceType::CPU);
  STRATA_CHECK(schema != nullptr && factory != nullptr, "low precision: op {} is not registered", type);
  OpSchema wrapped = *schema;
  wrapped.lowPrecision = true;
  wrapped.lowPrecisionInputs = slots.inputs;
  wrapped.lowPrecisionOutputs = slots.outputs;
  wrapped.inferShapes = [infer = schema->inferShapes, slots](const ShapeContext& ctx) {
    const std::optional<DType> low =
        lowPrecisionOf(dtypesOf(ctx.inputs), slots.inputs, [&ctx](const std::string& why) { ctx.error(why); });
    if (!low) {
      return infer(ctx);
    }
    std::vector<std::unique_ptr<Tensor>> kept;
    const std::vector<InputInfo> wide = widenedInfos(ctx.inputs, kept);
    std::vector<TensorMeta> metas = infer(ShapeContext{wide, ctx.attrs, ctx.outputCount, ctx.nodeName, ctx.opType});
    for (std::size_t o = 0; o < metas.size(); ++o) {
      if (metas[o].dtype == DType::Float32 && isLowPrecisionSlot(slots.outputs, o)) {
        metas[o].dtype = *low;
      }
    }
    return metas;
  };
  registry.addSchema(std::move(wrapped));
  // Float32 channels-last nodes the inner kernel runs itself stay native (Note [CPU channels-last]); 16-bit ones
  // are transposed around the widening.
  std::function<bool(const KernelInit&)> native = registry.nativeChannelsLast(type, DeviceType::CPU);
  if (native) {
    native = [inner = std::move(native), slots](const KernelInit& init) {
      const std::optional<DType> low = lowPrecisionOf(dtypesOf(init.inputs), slots.inputs, [](const std::string&) {});
      return !low && inner(init);
    };
  }
  registry.addKernel(
      type, DeviceType::CPU,
      [inner = *factory, slots](const KernelInit& init) -> std::unique_ptr<OpKernel> {
        const std::optional<DType> low =
            lowPrecisionOf(dtypesOf(init.inputs), slots.inputs,
                           [&init](const std::string& why) { fail("node '{}': {}", init.nodeName, why); });
        if (!low) {
          return inner(init);
        }
        std::vector<std::unique_ptr<Tensor>> kept;
        KernelInit wide{.inputs = widenedInfos(init.inputs, kept),
                        .outputs = init.outputs,
                        .attrs = init.attrs,
                        .nodeName = init.nodeName,
                        .training = init.training};
        for (TensorMeta& meta : wide.outputs) {
          if (meta.dtype == *low) {
            meta.dtype = DType::Float32;
          }
        }
        return std::make_unique<WideningKernel>(inner(wide), std::move(kept));
      },
      std::move(native));
}

}  // namespace

void registerLowPrecisionOps(OpRegistry& registry) {
  for (const char* type : kEmulatedOps) {
    emulateLowPrecision(registry, type);
  }
  for (const auto& [type, slots] : kPartlyLowOps) {
    emulateLowPrecision(registry, type, slots);
  }
  for (const char* type : kNativeOps) {
    const OpSchema* schema = registry.schema(type);
    STRATA_CHECK(schema != nullptr, "low precision: op {} is not registered", type);
    OpSchema marked = *schema;
    marked.lowPrecision = true;
    registry.addSchema(std::move(marked));
  }
}

}  // namespace strata::cpu
