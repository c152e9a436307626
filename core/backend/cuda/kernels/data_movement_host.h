#pragma once

// Host-side helpers of the CUDA shape and data-movement ops (data_movement*_ops.cpp only: this header reaches into
// the CPU backend's helpers, which .cu files must not).

#include <cstdint>
#include <functional>
#include <initializer_list>
#include <string>
#include <utility>
#include <vector>

#include "../../cpu/data_movement_plan.h"
#include "../../cpu/shape_ops_common.h"
#include "../../cpu/slice_pad_plan.h"
#include "cuda_stream.h"
#include "data_movement.h"
#include "kernel_utils.cuh"
#include "strata/op_registry.h"

namespace strata::cuda::dm {

// Plan-time constant operands (shape operands, indices), copied to the host once: they may live on the device.
// Only the inputs listed are kept (other constant inputs may be large device tensors such as weights).
class HostConstants {
 public:
  HostConstants(const KernelInit& init, std::initializer_list<std::size_t> inputs);
  // The plan-time constant of input i on the host, or an undefined tensor.
  const Tensor& constant(std::size_t i) const;
  // Input i on the host: its plan-time constant, else a synchronous copy of the run-time tensor (for small operands
  // such as Slice's starts); undefined when the input is absent.
  Tensor get(const KernelContext& ctx, std::size_t i) const;
  // Every input on the host (index 0 stays the device tensor: operand readers never look at it), for the CPU's
  // operand helpers that take a list of inputs.
  std::vector<Tensor> all(const KernelContext& ctx) const;

 private:
  std::vector<Tensor> values_;
};

// Pointers to `tensors`, nullptr where undefined.
std::vector<const Tensor*> pointersTo(const std::vector<Tensor>& tensors);

// Runs launch(bad) with index validation (Note [Index validation] in data_movement.h). `axisOf(position)` gives
// the (axis, axis size) that the index at a flat position of `indices` addresses. Plan-time constant indices
// (`hostIndices` defined) are checked on the host before the launch, which then gets bad == nullptr; run-time ones
// are checked by the kernels and read back after the launch.
template <typename AxisOf, typename Launch>
void withIndexCheck(const KernelContext& ctx, const Tensor& hostIndices, const Tensor& indices, const char* op,
                    AxisOf&& axisOf, Launch&& launch) {
  auto report = [&](std::int64_t position, std::int64_t value) {
    const std::pair<std::int64_t, std::int64_t> axis = axisOf(position);
    fail("{}: index {} is out of bounds for axis {} of size {}", op, value, axis.first, axis.second);
  };
  if (hostIndices.defined()) {
    const auto values = cpu::shape_detail::toInt64Vector(hostIndices);
    for (std::size_t p = 0; p < values.size(); ++p) {
      const std::int64_t dim = axisOf(static_cast<std::int64_t>(p)).second;
      if (values[p] < -dim || values[p] >= dim) {
        report(static_cast<std::int64_t>(p), values[p]);
      }
    }
    launch(static_cast<unsigned long long*>(nullptr));
    return;
  }
  const cudaStream_t stream = streamOf(ctx);
  IndexFlag flag(indices.device(), stream);
  launch(flag.device());
  const std::int64_t bad = flag.firstBad();
  if (bad >= 0) {
    report(bad, readIndex(indices, bad, stream));
  }
}

using cpu::shape_detail::productOf;

inline std::size_t elemSizeOf(const Tensor& t) {
  return dtypeSize(t.dtype());
}

inline PadKind padKind(cpu::slice_pad::PadMode mode) {
  switch (mode) {
    case cpu::slice_pad::PadMode::Constant:
      return PadKind::Constant;
    case cpu::slice_pad::PadMode::Reflect:
      return PadKind::Reflect;
    case cpu::slice_pad::PadMode::Edge:
      return PadKind::Edge;
    case cpu::slice_pad::PadMode::Wrap:
      return PadKind::Wrap;
  }
  return PadKind::Constant;
}

using ComputeFn = std::function<void(KernelContext&)>;

// Registers a CUDA kernel whose compute function `make` builds at plan time (capturing attributes and constants).
template <typename Make>
void addComputeFactory(OpRegistry& registry, const std::string& type, Make make) {
  addCudaKernelFactory(registry, type, [make](const KernelInit& init) { return makeFunctionKernel(make(init)); });
}

void registerShapeKernels(OpRegistry& registry);     // data_movement_shape_ops.cpp
void registerIndexingKernels(OpRegistry& registry);  // data_movement_indexing_ops.cpp

}  // namespace strata::cuda::dm
