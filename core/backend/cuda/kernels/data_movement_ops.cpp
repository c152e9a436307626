// CUDA kernels of the data-movement ops Transpose, Concat, Split, Slice, Expand, Tile, Pad, DepthToSpace,
// SpaceToDepth and Trilu (core/backend/cpu/data_movement_ops.cpp). Attributes, operands and errors follow the CPU
// kernels, whose Slice / Pad plan helpers (slice_pad_plan.h) this file shares; the device work is in
// data_movement.cu. registerDataMovementKernels also registers the shape and indexing families.

#include <algorithm>
#include <numeric>
#include <string>

#include "cuda_ops.h"
#include "data_movement_host.h"

namespace strata::cuda {

namespace dm {

namespace {

using cpu::shape_detail::listToString;
using cpu::shape_detail::toInt64Vector;
namespace slice_pad = cpu::slice_pad;

char* bytesOf(Tensor& t) {
  return static_cast<char*>(t.rawData());
}
const char* bytesOf(const Tensor& t) {
  return static_cast<const char*>(t.rawData());
}

// ---------------------------------------------------------------------------------------------------------------
// Transpose, DepthToSpace, SpaceToDepth

std::vector<std::int64_t> transposePerm(const Attributes& attrs, std::int64_t rank) {
  std::vector<std::int64_t> perm = attrs.getInts("perm", {});
  if (perm.empty() && rank > 0) {
    perm.resize(static_cast<std::size_t>(rank));
    std::iota(perm.rbegin(), perm.rend(), std::int64_t{0});
  }
  if (static_cast<std::int64_t>(perm.size()) != rank) {
    fail("perm {} does not match the input rank {}", listToString(perm), rank);
  }
  std::vector<bool> seen(perm.size(), false);
  for (auto& p : perm) {
    if (p < -rank || p >= rank) {
      fail("perm {} is not a permutation of 0..{}", listToString(perm), rank - 1);
    }
    if (p < 0) {
      p += rank;
    }
    if (seen[static_cast<std::size_t>(p)]) {
      fail("perm {} repeats axis {}", listToString(perm), p);
    }
    seen[static_cast<std::size_t>(p)] = true;
  }
  return perm;
}

ComputeFn makeTranspose(const KernelInit& init) {
  const Attributes attrs = init.attrs;
  return [attrs](KernelContext& ctx) {
    if (!ctx.hasOutput(0)) {
      return;
    }
    const Tensor& in = ctx.input(0);
    transpose(ctx.output(0).rawData(), in.rawData(), in.shape(), transposePerm(attrs, in.rank()), elemSizeOf(in),
              streamOf(ctx));
  };
}

struct BlockPlan {
  Shape view;                      // the input as 6-D
  std::vector<std::int64_t> perm;  // transpose of the view
  Shape out;
};

BlockPlan planDepthToSpace(const Shape& in, const Attributes& attrs) {
  if (in.size() != 4) {
    fail("input must be 4-D (N, C, H, W), not {}", shapeToString(in));
  }
  const std::int64_t b = attrs.getInt("blocksize");
  if (b <= 0) {
    fail("blocksize {} must be positive", b);
  }
  const std::string mode = attrs.getString("mode", "DCR");
  const std::int64_t n = in[0], c = in[1], h = in[2], w = in[3];
  if (c % (b * b) != 0) {
    fail("channels {} are not divisible by blocksize^2 = {}", c, b * b);
  }
  const std::int64_t oc = c / (b * b);
  BlockPlan plan;
  if (mode == "DCR") {
    plan.view = {n, b, b, oc, h, w};
    plan.perm = {0, 3, 4, 1, 5, 2};
  } else if (mode == "CRD") {
    plan.view = {n, oc, b, b, h, w};
    plan.perm = {0, 1, 4, 2, 5, 3};
  } else {
    fail("unknown mode '{}' (expected DCR or CRD)", mode);
  }
  plan.out = {n, oc, h * b, w * b};
  return plan;
}

BlockPlan planSpaceToDepth(const Shape& in, const Attributes& attrs) {
  if (in.size() != 4) {
    fail("input must be 4-D (N, C, H, W), not {}", shapeToString(in));
  }
  const std::int64_t b = attrs.getInt("blocksize");
  if (b <= 0) {
    fail("blocksize {} must be positive", b);
  }
  const std::int64_t n = in[0], c = in[1], h = in[2], w = in[3];
  if (h % b != 0 || w % b != 0) {
    fail("height {} and width {} must be divisible by blocksize {}", h, w, b);
  }
  return BlockPlan{{n, c, h / b, b, w / b, b}, {0, 3, 5, 1, 2, 4}, {n, c * b * b, h / b, w / b}};
}

using BlockPlanner = BlockPlan (*)(const Shape&, const Attributes&);

void addBlockKernel(OpRegistry& registry, const std::string& type, BlockPlanner planner) {
  addComputeFactory(registry, type, [planner](const KernelInit& init) -> ComputeFn {
    const Attributes attrs = init.attrs;
    return [planner, attrs](KernelContext& ctx) {
      if (!ctx.hasOutput(0)) {
        return;
      }
      const Tensor& in = ctx.input(0);
      const BlockPlan plan = planner(in.shape(), attrs);
      transpose(ctx.output(0).rawData(), in.rawData(), plan.view, plan.perm, elemSizeOf(in), streamOf(ctx));
    };
  });
}

// ---------------------------------------------------------------------------------------------------------------
// Concat and Split: one row copy per input (output), rows of the outer axes.

ComputeFn makeConcat(const KernelInit& init) {
  const std::int64_t axisAttr = init.attrs.getInt("axis");
  return [axisAttr](KernelContext& ctx) {
    if (!ctx.hasOutput(0)) {
      return;
    }
    Tensor& out = ctx.output(0);
    const auto axis = static_cast<std::size_t>(normalizeAxis(axisAttr, out.rank()));
    const std::size_t es = elemSizeOf(out);
    const std::int64_t outer = productOf(out.shape(), 0, axis);
    const auto inner = static_cast<std::size_t>(productOf(out.shape(), axis + 1, out.shape().size())) * es;
    const std::size_t rowBytes = static_cast<std::size_t>(out.shape()[axis]) * inner;
    if (rowBytes == 0 || outer == 0) {
      return;
    }
    const cudaStream_t stream = streamOf(ctx);
    std::size_t offset = 0;
    for (std::size_t j = 0; j < ctx.inputs.size(); ++j) {
      const Tensor& in = ctx.input(j);
      const std::size_t chunk = static_cast<std::size_t>(in.shape()[axis]) * inner;
      copyRows(bytesOf(out) + offset, rowBytes, in.rawData(), chunk, chunk, outer, stream);
      offset += chunk;
    }
  };
}

// Split's part sizes along the axis: the `split` input (opset 13), the `split` attribute (older opsets), or equal
// parts (opset 18's num_outputs allows a smaller last part).
std::vector<std::int64_t> splitSizes(std::int64_t dim, const Tensor* splitInput, const Attributes& attrs,
                                     std::size_t outputCount) {
  std::vector<std::int64_t> sizes;
  if (splitInput != nullptr) {
    sizes = toInt64Vector(*splitInput);
  } else if (attrs.has("split")) {
    sizes = attrs.getInts("split");
  }
  if (!sizes.empty()) {
    if (sizes.size() != outputCount) {
      fail("split {} has {} parts but the node has {} outputs", listToString(sizes), sizes.size(), outputCount);
    }
    std::int64_t sum = 0;
    for (std::int64_t s : sizes) {
      if (s < 0) {
        fail("split {} has a negative size", listToString(sizes));
      }
      sum += s;
    }
    if (sum != dim) {
      fail("split {} sums to {}, not to the axis size {}", listToString(sizes), sum, dim);
    }
    return sizes;
  }
  const auto n = static_cast<std::int64_t>(attrs.getInt("num_outputs", static_cast<std::int64_t>(outputCount)));
  if (n <= 0) {
    fail("cannot split into {} parts", n);
  }
  if (static_cast<std::size_t>(n) != outputCount) {
    fail("num_outputs {} but the node has {} outputs", n, outputCount);
  }
  if (dim % n != 0 && !attrs.has("num_outputs")) {
    fail("axis size {} does not split into {} equal parts", dim, n);
  }
  const std::int64_t part = (dim + n - 1) / n;
  for (std::int64_t i = 0; i < n; ++i) {
    sizes.push_back(std::clamp<std::int64_t>(dim - i * part, 0, part));
  }
  return sizes;
}

ComputeFn makeSplit(const KernelInit& init) {
  const Attributes attrs = init.attrs;
  // The declared output count, even if the executor leaves trailing unused outputs out of ctx.outputs.
  const std::size_t declaredOutputs = init.outputs.size();
  const HostConstants constants(init, {1});
  return [attrs, declaredOutputs, constants](KernelContext& ctx) {
    const Tensor& in = ctx.input(0);
    const auto axis = static_cast<std::size_t>(normalizeAxis(attrs.getInt("axis", 0), in.rank()));
    const std::size_t outputCount = declaredOutputs > 0 ? declaredOutputs : ctx.outputs.size();
    const Tensor split = constants.get(ctx, 1);
    const auto sizes = splitSizes(in.shape()[axis], split.defined() ? &split : nullptr, attrs, outputCount);
    const std::size_t es = elemSizeOf(in);
    const std::int64_t outer = productOf(in.shape(), 0, axis);
    const auto inner = static_cast<std::size_t>(productOf(in.shape(), axis + 1, in.shape().size())) * es;
    const std::size_t rowBytes = static_cast<std::size_t>(in.shape()[axis]) * inner;
    const cudaStream_t stream = streamOf(ctx);
    std::size_t offset = 0;
    for (std::size_t j = 0; j < sizes.size(); ++j) {
      const std::size_t chunk = static_cast<std::size_t>(sizes[j]) * inner;
      if (ctx.hasOutput(j)) {
        copyRows(ctx.output(j).rawData(), chunk, bytesOf(in) + offset, rowBytes, chunk, outer, stream);
      }
      offset += chunk;
    }
  };
}

// ---------------------------------------------------------------------------------------------------------------
// Slice, Expand, Tile: strided copies.

ComputeFn makeSlice(const KernelInit& init) {
  const Attributes attrs = init.attrs;
  const HostConstants constants(init, {1, 2, 3, 4});
  return [attrs, constants](KernelContext& ctx) {
    if (!ctx.hasOutput(0)) {
      return;
    }
    const Tensor& in = ctx.input(0);
    const std::vector<Tensor> hosts = constants.all(ctx);
    const auto ops = slice_pad::sliceOperands(pointersTo(hosts), attrs);
    const slice_pad::SlicePlan plan = slice_pad::planSlice(in.shape(), ops.starts, ops.ends, ops.axes, ops.steps);
    if (numElements(plan.outShape) == 0) {
      return;
    }
    const slice_pad::SliceView view = slice_pad::sliceView(in.shape(), plan);
    const std::size_t es = elemSizeOf(in);
    stridedCopy(ctx.output(0).rawData(), bytesOf(in) + static_cast<std::size_t>(view.offset) * es, plan.outShape,
                view.strides, es, streamOf(ctx));
  };
}

// Strides (in elements) that read `in` broadcast to outShape: 0 along broadcast axes.
std::vector<std::int64_t> broadcastStrides(const Shape& in, const Shape& outShape) {
  const auto strides = contiguousStrides(in);
  std::vector<std::int64_t> result(outShape.size(), 0);
  const std::size_t offset = outShape.size() - in.size();
  for (std::size_t k = 0; k < in.size(); ++k) {
    result[offset + k] = in[k] == 1 ? 0 : strides[k];
  }
  return result;
}

void computeExpand(KernelContext& ctx) {
  if (!ctx.hasOutput(0)) {
    return;
  }
  const Tensor& in = ctx.input(0);
  Tensor& out = ctx.output(0);
  STRATA_CHECK(in.shape().size() <= out.shape().size(), "Expand: input {} has a higher rank than the output {}",
               shapeToString(in.shape()), shapeToString(out.shape()));
  stridedCopy(out.rawData(), in.rawData(), out.shape(), broadcastStrides(in.shape(), out.shape()), elemSizeOf(in),
              streamOf(ctx));
}

void computeTile(KernelContext& ctx) {
  if (!ctx.hasOutput(0)) {
    return;
  }
  const Tensor& in = ctx.input(0);
  Tensor& out = ctx.output(0);
  if (out.numel() == 0) {
    return;
  }
  // The output as a (repeat, dim) pair per axis, reading the input with stride 0 along the repeats.
  const auto strides = contiguousStrides(in.shape());
  Shape shape;
  std::vector<std::int64_t> srcStrides;
  for (std::size_t k = 0; k < strides.size(); ++k) {
    shape.push_back(out.shape()[k] / in.shape()[k]);
    srcStrides.push_back(0);
    shape.push_back(in.shape()[k]);
    srcStrides.push_back(strides[k]);
  }
  stridedCopy(out.rawData(), in.rawData(), shape, srcStrides, elemSizeOf(in), streamOf(ctx));
}

// ---------------------------------------------------------------------------------------------------------------
// Pad

// Per-axis (begin, end) pads, from the pads input (opset 11+; optional axes input from opset 18) or attribute.
std::pair<std::vector<std::int64_t>, std::vector<std::int64_t>> padAmounts(const Shape& shape, const Tensor* padsInput,
                                                                           const Tensor* axesInput,
                                                                           const Attributes& attrs) {
  const auto rank = static_cast<std::int64_t>(shape.size());
  const auto pads = padsInput != nullptr ? toInt64Vector(*padsInput) : attrs.getInts("pads");
  std::vector<std::int64_t> axes;
  if (axesInput != nullptr) {
    axes = toInt64Vector(*axesInput);
  } else {
    axes.resize(shape.size());
    std::iota(axes.begin(), axes.end(), std::int64_t{0});
  }
  if (pads.size() != 2 * axes.size()) {
    fail("pads {} must have 2 * {} entries for input {}", listToString(pads), axes.size(), shapeToString(shape));
  }
  std::vector<std::int64_t> begin(shape.size(), 0), end(shape.size(), 0);
  for (std::size_t i = 0; i < axes.size(); ++i) {
    if (axes[i] < -rank || axes[i] >= rank) {
      fail("axis {} is out of range for rank {}", axes[i], rank);
    }
    const auto a = static_cast<std::size_t>(axes[i] < 0 ? axes[i] + rank : axes[i]);
    begin[a] = pads[i];
    end[a] = pads[i + axes.size()];
  }
  return {begin, end};
}

ComputeFn makePad(const KernelInit& init) {
  const Attributes attrs = init.attrs;
  const HostConstants constants(init, {1, 3});
  return [attrs, constants](KernelContext& ctx) {
    if (!ctx.hasOutput(0)) {
      return;
    }
    const Tensor& in = ctx.input(0);
    Tensor& out = ctx.output(0);
    const std::size_t es = elemSizeOf(in);
    if (out.numel() == 0) {
      return;
    }
    const cudaStream_t stream = streamOf(ctx);
    const PadKind mode = padKind(slice_pad::padMode(attrs));
    const Tensor pads = constants.get(ctx, 1);
    const Tensor axes = constants.get(ctx, 3);
    const auto [begin, end] =
        padAmounts(in.shape(), pads.defined() ? &pads : nullptr, axes.defined() ? &axes : nullptr, attrs);
    std::vector<char> value(es, 0);
    const void* deviceValue = nullptr;
    if (ctx.hasInput(2) && ctx.input(2).numel() > 0) {
      STRATA_CHECK(ctx.input(2).dtype() == in.dtype(), "Pad: constant_value has type {}, data has {}",
                   dtypeName(ctx.input(2).dtype()), dtypeName(in.dtype()));
      deviceValue = ctx.input(2).rawData();
    } else if (!ctx.hasInput(1) && attrs.has("value")) {
      cpu::shape_detail::storeFromDouble(in.dtype(), value.data(), attrs.getFloat("value"));
    }
    if (out.rank() == 0) {
      copyBytes(out.rawData(), in.rawData(), es, stream);
      return;
    }
    pad(out.rawData(), in.rawData(), in.shape(), out.shape(), begin, mode, es, deviceValue, value.data(), stream);
  };
}

// ---------------------------------------------------------------------------------------------------------------
// Trilu

ComputeFn makeTrilu(const KernelInit& init) {
  const bool upper = init.attrs.getInt("upper", 1) != 0;
  const HostConstants constants(init, {1});
  return [upper, constants](KernelContext& ctx) {
    if (!ctx.hasOutput(0)) {
      return;
    }
    const Tensor& in = ctx.input(0);
    Tensor& out = ctx.output(0);
    if (out.numel() == 0) {
      return;
    }
    // k: a plan-time constant, read by the kernel when int64 on the device, else copied to the host.
    std::int64_t k = 0;
    const std::int64_t* deviceK = nullptr;
    if (ctx.hasInput(1)) {
      const Tensor& kInput = ctx.input(1);
      if (constants.constant(1).defined() || kInput.dtype() != DType::Int64 || kInput.numel() == 0) {
        const auto values = toInt64Vector(constants.get(ctx, 1));
        if (values.empty()) {
          fail("Trilu: k must hold one value");
        }
        k = values[0];
      } else {
        deviceK = kInput.data<std::int64_t>();
      }
    }
    const std::size_t rank = in.shape().size();
    const std::int64_t cols = in.shape()[rank - 1];
    trilu(out.rawData(), in.rawData(), in.numel() / cols, in.shape()[rank - 2], cols, upper, k, deviceK, elemSizeOf(in),
          streamOf(ctx));
  };
}

}  // namespace

}  // namespace dm

void registerDataMovementKernels(OpRegistry& registry) {
  using namespace dm;
  addComputeFactory(registry, "Transpose", makeTranspose);
  addComputeFactory(registry, "Concat", makeConcat);
  addComputeFactory(registry, "Split", makeSplit);
  addComputeFactory(registry, "Slice", makeSlice);
  addCudaKernel(registry, "Expand", computeExpand);
  addCudaKernel(registry, "Tile", computeTile);
  addComputeFactory(registry, "Pad", makePad);
  addBlockKernel(registry, "DepthToSpace", planDepthToSpace);
  addBlockKernel(registry, "SpaceToDepth", planSpaceToDepth);
  addComputeFactory(registry, "Trilu", makeTrilu);
  registerShapeKernels(registry);
  registerIndexingKernels(registry);
}

}  // namespace strata::cuda
