#include "data_movement_plan.h"

#include <algorithm>
#include <numeric>
#include <string>

#include "shape_ops_common.h"

namespace strata::cpu::shape_detail {

std::int64_t productOf(const Shape& shape, std::size_t begin, std::size_t end) {
  std::int64_t p = 1;
  for (std::size_t i = begin; i < end; ++i)
    p *= shape[i];
  return p;
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
    if (p < -rank || p >= rank)
      fail("perm {} is not a permutation of 0..{}", listToString(perm), rank - 1);
    if (p < 0)
      p += rank;
    if (seen[static_cast<std::size_t>(p)])
      fail("perm {} repeats axis {}", listToString(perm), p);
    seen[static_cast<std::size_t>(p)] = true;
  }
  return perm;
}

TransposePlan planTranspose(const Shape& inShape, const std::vector<std::int64_t>& perm) {
  TransposePlan plan;
  const std::size_t rank = inShape.size();
  // Drop unit axes; they do not move data.
  std::vector<std::int64_t> newIndex(rank, -1);
  Shape dims;
  for (std::size_t a = 0; a < rank; ++a) {
    if (inShape[a] != 1) {
      newIndex[a] = static_cast<std::int64_t>(dims.size());
      dims.push_back(inShape[a]);
    }
  }
  std::vector<std::int64_t> p;
  for (std::size_t i = 0; i < rank; ++i) {
    const std::int64_t a = newIndex[static_cast<std::size_t>(perm[i])];
    if (a >= 0)
      p.push_back(a);
  }
  // Merge output axes that are consecutive input axes: (first input axis, axis count) per output group.
  std::vector<std::pair<std::int64_t, std::int64_t>> groups;
  for (std::int64_t a : p) {
    if (!groups.empty() && a == groups.back().first + groups.back().second) {
      ++groups.back().second;
    } else {
      groups.emplace_back(a, 1);
    }
  }
  const std::size_t r = groups.size();
  if (r <= 1) {
    plan.copy = true;
    return plan;
  }
  std::vector<std::size_t> order(r);
  std::iota(order.begin(), order.end(), std::size_t{0});
  std::sort(order.begin(), order.end(),
            [&](std::size_t x, std::size_t y) { return groups[x].first < groups[y].first; });
  Shape gIn(r);
  std::vector<std::int64_t> gPerm(r);
  for (std::size_t j = 0; j < r; ++j) {
    const auto& g = groups[order[j]];
    gIn[j] = 1;
    for (std::int64_t a = g.first; a < g.first + g.second; ++a)
      gIn[j] *= dims[static_cast<std::size_t>(a)];
    gPerm[order[j]] = static_cast<std::int64_t>(j);
  }
  const auto inStrides = contiguousStrides(gIn);
  plan.shape.resize(r);
  plan.srcStrides.resize(r);
  for (std::size_t i = 0; i < r; ++i) {
    plan.shape[i] = gIn[static_cast<std::size_t>(gPerm[i])];
    plan.srcStrides[i] = inStrides[static_cast<std::size_t>(gPerm[i])];
  }
  if (gPerm[r - 1] == static_cast<std::int64_t>(r - 1)) {
    plan.rowsContiguous = true;
    return plan;
  }
  const auto outStrides = contiguousStrides(plan.shape);
  while (gPerm[plan.q] != static_cast<std::int64_t>(r - 1))
    ++plan.q;
  plan.da = gIn[r - 1];
  plan.db = plan.shape[r - 1];
  plan.dstStrideA = outStrides[plan.q];
  plan.srcStrideB = plan.srcStrides[r - 1];
  for (std::size_t i = 0; i + 1 < r; ++i) {
    if (i == plan.q)
      continue;
    plan.batchDims.push_back(plan.shape[i]);
    plan.batchIn.push_back(plan.srcStrides[i]);
    plan.batchOut.push_back(outStrides[i]);
  }
  return plan;
}

BlockPlan planDepthToSpace(const Shape& in, const Attributes& attrs) {
  if (in.size() != 4)
    fail("input must be 4-D (N, C, H, W), not {}", shapeToString(in));
  const std::int64_t b = attrs.getInt("blocksize");
  if (b <= 0)
    fail("blocksize {} must be positive", b);
  const std::string mode = attrs.getString("mode", "DCR");
  const std::int64_t n = in[0], c = in[1], h = in[2], w = in[3];
  if (c % (b * b) != 0)
    fail("channels {} are not divisible by blocksize^2 = {}", c, b * b);
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
  if (in.size() != 4)
    fail("input must be 4-D (N, C, H, W), not {}", shapeToString(in));
  const std::int64_t b = attrs.getInt("blocksize");
  if (b <= 0)
    fail("blocksize {} must be positive", b);
  const std::int64_t n = in[0], c = in[1], h = in[2], w = in[3];
  if (h % b != 0 || w % b != 0)
    fail("height {} and width {} must be divisible by blocksize {}", h, w, b);
  return BlockPlan{{n, c, h / b, b, w / b, b}, {0, 3, 5, 1, 2, 4}, {n, c * b * b, h / b, w / b}};
}

// ---------------------------------------------------------------------------------------------------------------
// Split, Expand, Pad

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
      if (s < 0)
        fail("split {} has a negative size", listToString(sizes));
      sum += s;
    }
    if (sum != dim)
      fail("split {} sums to {}, not to the axis size {}", listToString(sizes), sum, dim);
    return sizes;
  }
  const auto n = static_cast<std::int64_t>(attrs.getInt("num_outputs", static_cast<std::int64_t>(outputCount)));
  if (n <= 0)
    fail("cannot split into {} parts", n);
  if (static_cast<std::size_t>(n) != outputCount)
    fail("num_outputs {} but the node has {} outputs", n, outputCount);
  if (dim % n != 0 && !attrs.has("num_outputs"))
    fail("axis size {} does not split into {} equal parts", dim, n);
  const std::int64_t part = (dim + n - 1) / n;
  for (std::int64_t i = 0; i < n; ++i)
    sizes.push_back(std::clamp<std::int64_t>(dim - i * part, 0, part));
  return sizes;
}

std::vector<std::int64_t> broadcastStrides(const Shape& in, const Shape& outShape) {
  const auto strides = contiguousStrides(in);
  std::vector<std::int64_t> result(outShape.size(), 0);
  const std::size_t offset = outShape.size() - in.size();
  for (std::size_t k = 0; k < in.size(); ++k)
    result[offset + k] = in[k] == 1 ? 0 : strides[k];
  return result;
}

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
    if (axes[i] < -rank || axes[i] >= rank)
      fail("axis {} is out of range for rank {}", axes[i], rank);
    const auto a = static_cast<std::size_t>(axes[i] < 0 ? axes[i] + rank : axes[i]);
    begin[a] = pads[i];
    end[a] = pads[i + axes.size()];
  }
  return {begin, end};
}

// ---------------------------------------------------------------------------------------------------------------
// Gradients

Shape shapeAttr(const Attributes& attrs) {
  Shape shape = attrs.getInts("shape");
  for (std::int64_t d : shape) {
    if (d < 0)
      fail("shape {} has a negative dimension", listToString(shape));
  }
  return shape;
}

PadGradPlan planPadGrad(const Attributes& attrs) {
  PadGradPlan plan;
  plan.shape = shapeAttr(attrs);
  plan.mode = slice_pad::padMode(attrs);
  const auto pads = attrs.getInts("pads");
  const std::size_t rank = plan.shape.size();
  if (pads.size() != 2 * rank) {
    fail("pads {} must have 2 * {} entries for shape {}", listToString(pads), rank, shapeToString(plan.shape));
  }
  plan.begin.assign(pads.begin(), pads.begin() + static_cast<std::ptrdiff_t>(rank));
  plan.end.assign(pads.begin() + static_cast<std::ptrdiff_t>(rank), pads.end());
  plan.outShape = plan.shape;
  for (std::size_t k = 0; k < rank; ++k) {
    plan.outShape[k] += plan.begin[k] + plan.end[k];
    if (plan.outShape[k] < 0)
      fail("pads {} make axis {} of {} negative", listToString(pads), k, shapeToString(plan.shape));
    if (plan.mode != slice_pad::PadMode::Constant && plan.shape[k] == 0 && plan.outShape[k] > 0) {
      fail("cannot pad the empty axis {} in a non-constant mode", k);
    }
  }
  return plan;
}

// ---------------------------------------------------------------------------------------------------------------
// Indexing

void checkElementsShapes(const Shape& data, const Shape& indices, std::size_t axis, const char* op) {
  if (data.size() != indices.size()) {
    fail("{}: indices {} must have the rank of data {}", op, shapeToString(indices), shapeToString(data));
  }
  for (std::size_t k = 0; k < data.size(); ++k) {
    if (k != axis && indices[k] > data[k]) {
      fail("{}: indices {} exceed data {} on axis {}", op, shapeToString(indices), shapeToString(data), k);
    }
  }
}

ScatterReduction scatterReductionOf(const Attributes& attrs) {
  const std::string r = attrs.getString("reduction", "none");
  if (r == "none")
    return ScatterReduction::None;
  if (r == "add")
    return ScatterReduction::Add;
  if (r == "mul")
    return ScatterReduction::Mul;
  if (r == "max")
    return ScatterReduction::Max;
  if (r == "min")
    return ScatterReduction::Min;
  fail("unknown reduction '{}' (expected none, add, mul, max or min)", r);
}

NdPlan planNd(const Shape& data, const Shape& indices, std::int64_t batchDims, const char* op) {
  if (indices.empty())
    fail("{}: indices must have rank >= 1", op);
  if (batchDims < 0 || batchDims >= static_cast<std::int64_t>(std::min(data.size(), indices.size()))) {
    fail("{}: batch_dims {} is out of range", op, batchDims);
  }
  const auto b = static_cast<std::size_t>(batchDims);
  NdPlan plan;
  plan.k = indices.back();
  if (plan.k < 1 || b + static_cast<std::size_t>(plan.k) > data.size()) {
    fail("{}: index tuples of length {} do not fit data {}", op, plan.k, shapeToString(data));
  }
  for (std::size_t i = 0; i < b; ++i) {
    if (data[i] != indices[i])
      fail("{}: batch dims of data {} and indices {} differ", op, shapeToString(data), shapeToString(indices));
    plan.batch *= data[i];
  }
  plan.tuples = productOf(indices, b, indices.size() - 1);
  plan.sliceElems = productOf(data, b + static_cast<std::size_t>(plan.k), data.size());
  plan.out.assign(indices.begin(), indices.end() - 1);
  plan.out.insert(plan.out.end(), data.begin() + static_cast<std::ptrdiff_t>(b) + plan.k, data.end());
  return plan;
}

}  // namespace strata::cpu::shape_detail
