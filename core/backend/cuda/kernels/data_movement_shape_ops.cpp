// CUDA kernels of the shape ops Reshape, Flatten, Squeeze, Unsqueeze, Shape, Size, Constant, ConstantOfShape and
// Range (core/backend/cpu/shape_ops.cpp), and the host-side operand helpers every data-movement op shares.

#include <algorithm>
#include <cstring>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "cuda_check.h"
#include "data_movement_host.h"

namespace strata::cuda::dm {

HostConstants::HostConstants(const KernelInit& init, std::initializer_list<std::size_t> inputs)
    : values_(init.inputs.size()) {
  for (std::size_t i : inputs) {
    const Tensor* constant = i < init.inputs.size() ? init.inputs[i].constant : nullptr;
    if (constant != nullptr) {
      values_[i] = constant->device().type == DeviceType::CPU ? *constant : constant->to(Device::cpu());
    }
  }
}

const Tensor& HostConstants::constant(std::size_t i) const {
  static const Tensor kNone;
  return i < values_.size() ? values_[i] : kNone;
}

Tensor HostConstants::get(const KernelContext& ctx, std::size_t i) const {
  if (i < values_.size() && values_[i].defined()) {
    return values_[i];
  }
  if (!ctx.hasInput(i)) {
    return Tensor();
  }
  const Tensor& in = ctx.input(i);
  if (in.device().type == DeviceType::CPU) {
    return in;
  }
  Tensor host = Tensor::empty(in.meta(), MemoryCategory::Workspace);
  if (host.bytes() > 0) {
    const cudaStream_t stream = streamOf(ctx);
    STRATA_CUDA_CHECK(cudaMemcpyAsync(host.rawData(), in.rawData(), in.bytes(), cudaMemcpyDeviceToHost, stream));
    STRATA_CUDA_CHECK(cudaStreamSynchronize(stream));
  }
  return host;
}

std::vector<Tensor> HostConstants::all(const KernelContext& ctx) const {
  std::vector<Tensor> hosts(ctx.inputs.size());
  for (std::size_t i = 0; i < ctx.inputs.size(); ++i) {
    hosts[i] = i == 0 ? (ctx.hasInput(0) ? ctx.input(0) : Tensor()) : get(ctx, i);
  }
  return hosts;
}

std::vector<const Tensor*> pointersTo(const std::vector<Tensor>& tensors) {
  std::vector<const Tensor*> pointers(tensors.size(), nullptr);
  for (std::size_t i = 0; i < tensors.size(); ++i) {
    if (tensors[i].defined()) {
      pointers[i] = &tensors[i];
    }
  }
  return pointers;
}

namespace {

// ---------------------------------------------------------------------------------------------------------------
// Reshape, Flatten, Squeeze, Unsqueeze: the output holds the input's bytes.

void computeCopyInput(KernelContext& ctx) {
  if (!ctx.hasOutput(0)) {
    return;
  }
  const Tensor& in = ctx.input(0);
  Tensor& out = ctx.output(0);
  if (in.bytes() != out.bytes()) {
    fail("{} bytes cannot be copied into an output of {} bytes", in.bytes(), out.bytes());
  }
  copyBytes(out.rawData(), in.rawData(), in.bytes(), streamOf(ctx));
}

// ---------------------------------------------------------------------------------------------------------------
// Shape, Size, Constant, ConstantOfShape, Range

// Opset 15's start/end: negative counts from the back, then both clamp to [0, rank].
std::pair<std::int64_t, std::int64_t> shapeRange(const Attributes& attrs, std::int64_t rank) {
  auto clampAxis = [rank](std::int64_t v) {
    if (v < 0) {
      v += rank;
    }
    return std::clamp<std::int64_t>(v, 0, rank);
  };
  const std::int64_t start = clampAxis(attrs.getInt("start", 0));
  const std::int64_t end = clampAxis(attrs.getInt("end", rank));
  return {start, std::max(start, end)};
}

ComputeFn makeShape(const KernelInit& init) {
  const Attributes attrs = init.attrs;
  return [attrs](KernelContext& ctx) {
    if (!ctx.hasOutput(0)) {
      return;
    }
    const Shape& shape = ctx.input(0).shape();
    const auto [start, end] = shapeRange(attrs, static_cast<std::int64_t>(shape.size()));
    const std::vector<std::int64_t> values(shape.begin() + start, shape.begin() + end);
    writeFromHost(ctx.output(0).rawData(), values.data(), values.size() * sizeof(std::int64_t), streamOf(ctx));
  };
}

void computeSize(KernelContext& ctx) {
  if (!ctx.hasOutput(0)) {
    return;
  }
  const std::int64_t n = ctx.input(0).numel();
  writeFromHost(ctx.output(0).rawData(), &n, sizeof(n), streamOf(ctx));
}

// Constant's value as a host tensor, from whichever value attribute is set (as the CPU kernel).
Tensor constantValue(const Attributes& attrs) {
  if (attrs.has("value")) {
    return attrs.getTensor("value").to(Device::cpu());
  }
  if (attrs.has("value_float")) {
    return Tensor::scalar(attrs.getFloat("value_float"));
  }
  if (attrs.has("value_int")) {
    return Tensor::scalar(attrs.getInt("value_int"));
  }
  if (attrs.has("value_floats")) {
    const auto values = attrs.getFloats("value_floats");
    Tensor t = Tensor::empty(DType::Float32, {static_cast<std::int64_t>(values.size())});
    if (!values.empty()) {
      std::memcpy(t.rawData(), values.data(), values.size() * sizeof(float));
    }
    return t;
  }
  if (attrs.has("value_ints")) {
    const auto values = attrs.getInts("value_ints");
    Tensor t = Tensor::empty(DType::Int64, {static_cast<std::int64_t>(values.size())});
    if (!values.empty()) {
      std::memcpy(t.rawData(), values.data(), values.size() * sizeof(std::int64_t));
    }
    return t;
  }
  for (const char* unsupported : {"value_string", "value_strings", "sparse_value"}) {
    if (attrs.has(unsupported)) {
      fail("Constant: attribute {} is not supported (no string or sparse tensors)", unsupported);
    }
  }
  fail("Constant: needs one of the attributes value, value_float(s), value_int(s)");
}

// Uploads the value once (from host memory the kernel owns, so the asynchronous copy may outlive the call), then
// copies it on the device at every run.
class ConstantKernel final : public OpKernel {
 public:
  explicit ConstantKernel(Tensor value) : value_(std::move(value)) {}

  void compute(KernelContext& ctx) override {
    if (!ctx.hasOutput(0)) {
      return;
    }
    Tensor& out = ctx.output(0);
    if (out.bytes() != value_.bytes()) {
      fail("Constant: a value of {} bytes for an output of {} bytes", value_.bytes(), out.bytes());
    }
    const cudaStream_t stream = streamOf(ctx);
    if (!device_.defined() || device_.device() != out.device()) {
      device_ = Tensor::empty(value_.meta(), MemoryCategory::Other, out.device());
      if (value_.bytes() > 0) {
        STRATA_CUDA_CHECK(
            cudaMemcpyAsync(device_.rawData(), value_.rawData(), value_.bytes(), cudaMemcpyHostToDevice, stream));
      }
    }
    copyBytes(out.rawData(), device_.rawData(), out.bytes(), stream);
  }

 private:
  Tensor value_;   // host
  Tensor device_;  // the value on the output's device
};

// ConstantOfShape's fill value: the `value` attribute (a one-element tensor) or float 0.
Tensor fillValue(const Attributes& attrs) {
  if (attrs.has("value")) {
    return attrs.getTensor("value").to(Device::cpu());
  }
  return Tensor::scalar(0.0F);
}

ComputeFn makeConstantOfShape(const KernelInit& init) {
  const Tensor value = fillValue(init.attrs);
  return [value](KernelContext& ctx) {
    if (!ctx.hasOutput(0)) {
      return;
    }
    Tensor& out = ctx.output(0);
    STRATA_CHECK(value.dtype() == out.dtype() && value.numel() >= 1, "ConstantOfShape: value {} for an output of {}",
                 value.meta().toString(), out.meta().toString());
    fillElements(out.rawData(), out.numel(), elemSizeOf(out), value.rawData(), streamOf(ctx));
  };
}

void computeRange(KernelContext& ctx) {
  if (!ctx.hasOutput(0)) {
    return;
  }
  Tensor& out = ctx.output(0);
  STRATA_CHECK(ctx.input(0).dtype() == out.dtype() && ctx.input(2).dtype() == out.dtype(),
               "Range: start, delta and the output must have the same type");
  range(out.rawData(), out.dtype(), out.numel(), ctx.input(0).rawData(), ctx.input(2).rawData(), streamOf(ctx));
}

}  // namespace

void registerShapeKernels(OpRegistry& registry) {
  for (const char* type : {"Reshape", "Flatten", "Squeeze", "Unsqueeze"}) {
    addCudaKernel(registry, type, computeCopyInput);
  }
  addComputeFactory(registry, "Shape", makeShape);
  addCudaKernel(registry, "Size", computeSize);
  addCudaKernelFactory(registry, "Constant", [](const KernelInit& init) -> std::unique_ptr<OpKernel> {
    return std::make_unique<ConstantKernel>(constantValue(init.attrs));
  });
  addComputeFactory(registry, "ConstantOfShape", makeConstantOfShape);
  addCudaKernel(registry, "Range", computeRange);
}

}  // namespace strata::cuda::dm
