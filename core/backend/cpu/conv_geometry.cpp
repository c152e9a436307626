#include "conv_geometry.h"

#include <algorithm>
#include <string>

namespace strata::cpu {

std::vector<std::int64_t> spatialOf(const Shape& shape) {
  return {shape.begin() + 2, shape.end()};
}

std::vector<std::int64_t> kernelShapeOf(const Attributes& attrs, const Shape& weight) {
  std::vector<std::int64_t> fromWeight(weight.begin() + 2, weight.end());
  if (!attrs.has("kernel_shape"))
    return fromWeight;
  std::vector<std::int64_t> kernel = attrs.getInts("kernel_shape");
  if (kernel != fromWeight) {
    fail("kernel_shape {} does not match the weight's spatial dims {}", shapeToString(kernel),
         shapeToString(fromWeight));
  }
  return kernel;
}

DeconvWindow resolveDeconvWindow(const Attributes& attrs, const Shape& x, const Shape& w) {
  DeconvWindow s;
  const std::size_t n = x.size() - 2;
  s.kernel = kernelShapeOf(attrs, w);
  s.strides = attrs.getInts("strides", std::vector<std::int64_t>(n, 1));
  s.dilations = attrs.getInts("dilations", std::vector<std::int64_t>(n, 1));
  s.outputPadding = attrs.getInts("output_padding", std::vector<std::int64_t>(n, 0));
  if (s.strides.size() != n || s.dilations.size() != n || s.outputPadding.size() != n) {
    fail("strides, dilations and output_padding need {} values each", n);
  }
  const std::vector<std::int64_t> in = spatialOf(x);
  std::vector<std::int64_t>& outSpatial = s.output;
  outSpatial.assign(n, 0);
  const std::string autoPad = attrs.getString("auto_pad", "NOTSET");
  s.padBegin.assign(n, 0);
  s.padEnd.assign(n, 0);
  auto extentOf = [&](std::size_t i) { return (s.kernel[i] - 1) * s.dilations[i] + 1; };
  if (attrs.has("output_shape")) {
    std::vector<std::int64_t> requested = attrs.getInts("output_shape");
    if (requested.size() == n + 2)
      requested.erase(requested.begin(), requested.begin() + 2);
    if (requested.size() != n)
      fail("output_shape needs {} spatial values, got {}", n, requested.size());
    for (std::size_t i = 0; i < n; ++i) {
      const std::int64_t total = s.strides[i] * (in[i] - 1) + s.outputPadding[i] + extentOf(i) - requested[i];
      if (total < 0) {
        // A larger output_shape than the full result: the extra positions at the end only get the bias (ONNX's
        // reference pads the end with zeros).
        s.padBegin[i] = 0;
        s.padEnd[i] = total;
      } else {
        // The ONNX spec's split: SAME_UPPER puts the odd pad at the end, otherwise at the beginning.
        s.padBegin[i] = autoPad == "SAME_UPPER" ? total / 2 : total - total / 2;
        s.padEnd[i] = total - s.padBegin[i];
      }
      outSpatial[i] = requested[i];
    }
  } else if (autoPad == "SAME_UPPER" || autoPad == "SAME_LOWER") {
    for (std::size_t i = 0; i < n; ++i) {
      outSpatial[i] = in[i] * s.strides[i];
      const std::int64_t total =
          std::max<std::int64_t>(0, s.strides[i] * (in[i] - 1) + s.outputPadding[i] + extentOf(i) - outSpatial[i]);
      s.padBegin[i] = autoPad == "SAME_UPPER" ? total / 2 : total - total / 2;
      s.padEnd[i] = total - s.padBegin[i];
    }
  } else {
    if (autoPad != "NOTSET" && autoPad != "VALID" && !autoPad.empty()) {
      fail("auto_pad '{}' is not one of NOTSET, SAME_UPPER, SAME_LOWER, VALID", autoPad);
    }
    if (autoPad != "VALID") {
      std::vector<std::int64_t> pads = attrs.getInts("pads", std::vector<std::int64_t>(2 * n, 0));
      if (pads.size() != 2 * n)
        fail("pads has {} values, expected {}", pads.size(), 2 * n);
      for (std::size_t i = 0; i < n; ++i) {
        s.padBegin[i] = pads[i];
        s.padEnd[i] = pads[n + i];
      }
    }
    for (std::size_t i = 0; i < n; ++i) {
      outSpatial[i] = s.strides[i] * (in[i] - 1) + s.outputPadding[i] + extentOf(i) - s.padBegin[i] - s.padEnd[i];
      if (outSpatial[i] < 1)
        fail("output spatial dim {} would be {}", i, outSpatial[i]);
    }
  }
  return s;
}

ConvGradOperands convGradOperands(ConvGradMode mode, const KernelInit& init) {
  ConvGradOperands io;
  switch (mode) {
    case ConvGradMode::Input:
      io.x = init.attrs.getInts("input_shape");
      io.w = init.inputs.at(1).meta.shape;
      io.wIndex = 1;
      io.dxOut = 0;
      break;
    case ConvGradMode::Weight:
      io.x = init.inputs.at(1).meta.shape;
      io.w = init.attrs.getInts("weight_shape");
      io.xIndex = 1;
      io.dwOut = 0;
      io.dbOut = init.outputs.size() > 1 ? 1 : -1;
      break;
    case ConvGradMode::Both:
      io.x = init.inputs.at(1).meta.shape;
      io.w = init.inputs.at(2).meta.shape;
      io.xIndex = 1;
      io.wIndex = 2;
      io.dxOut = 0;
      io.dwOut = 1;
      io.dbOut = init.outputs.size() > 2 ? 2 : -1;
      break;
  }
  return io;
}

std::string perGroupGemmNote(const std::string& oneDnn, std::int64_t group) {
  return group > 1 && oneDnn.find("gemm") != std::string::npos ? " (a GEMM per image and group)" : "";
}

}  // namespace strata::cpu
