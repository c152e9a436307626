#include "dnnl_context.h"

#include <algorithm>

namespace strata::cpu {

dnnl::engine& dnnlEngine() {
  static dnnl::engine engine(dnnl::engine::kind::cpu, 0);
  return engine;
}

dnnl::stream& dnnlStream() {
  thread_local dnnl::stream stream(dnnlEngine());
  return stream;
}

dnnl::memory::desc plainDesc(const std::vector<std::int64_t>& dims, dnnl::memory::data_type type) {
  dnnl::memory::dims d(dims.begin(), dims.end());
  dnnl::memory::dims strides(d.size(), 1);
  for (std::size_t i = d.size(); i-- > 1;) {
    strides[i - 1] = strides[i] * std::max<dnnl::memory::dim>(d[i], 1);
  }
  return dnnl::memory::desc(d, type, strides);
}

dnnl::primitive_attr userScratchpadAttr() {
  dnnl::primitive_attr attr;
  attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
  return attr;
}

namespace {

struct Scratchpad {
  Tensor tensor;
  std::size_t bytes = 0;
};

Scratchpad& threadScratchpad() {
  thread_local Scratchpad scratchpad;
  return scratchpad;
}

}  // namespace

void* dnnlScratchpad(std::size_t bytes) {
  Scratchpad& scratchpad = threadScratchpad();
  if (scratchpad.bytes < bytes) {
    scratchpad.tensor = Tensor();  // free the old one first so that peak memory does not hold both
    scratchpad.tensor = Tensor::empty(DType::UInt8, {static_cast<std::int64_t>(bytes)}, MemoryCategory::Workspace);
    scratchpad.bytes = bytes;
  }
  return scratchpad.bytes > 0 ? scratchpad.tensor.rawData() : nullptr;
}

void executeDnnlAt(const dnnl::primitive& primitive, std::unordered_map<int, dnnl::memory>& args, void* scratchpad,
                   std::size_t scratchpadBytes) {
  if (scratchpadBytes > 0) {
    dnnl::memory::desc desc({static_cast<dnnl::memory::dim>(scratchpadBytes)}, dnnl::memory::data_type::u8,
                            dnnl::memory::format_tag::a);
    args[DNNL_ARG_SCRATCHPAD] = dnnl::memory(desc, dnnlEngine(), scratchpad);
  }
  dnnl::stream& stream = dnnlStream();
  primitive.execute(stream, args);
  stream.wait();
}

void executeDnnl(const dnnl::primitive& primitive, std::unordered_map<int, dnnl::memory>& args,
                 std::size_t scratchpadBytes) {
  executeDnnlAt(primitive, args, scratchpadBytes > 0 ? dnnlScratchpad(scratchpadBytes) : nullptr, scratchpadBytes);
}

void releaseDnnlScratchpad() {
  Scratchpad& scratchpad = threadScratchpad();
  scratchpad.tensor = Tensor();
  scratchpad.bytes = 0;
}

void bindDnnl(dnnl::memory& memory, const Tensor& tensor) {
  memory.set_data_handle(tensor.rawData());
}

WindowGeometry resolveWindow(const Attributes& attrs, const std::vector<std::int64_t>& inputSpatial,
                             const std::vector<std::int64_t>& kernel, bool ceilMode) {
  const std::size_t n = inputSpatial.size();
  WindowGeometry g;
  g.kernel = kernel;
  if (g.kernel.size() != n) {
    fail("kernel_shape has {} dims but the input has {} spatial dims", g.kernel.size(), n);
  }
  g.strides = attrs.getInts("strides", std::vector<std::int64_t>(n, 1));
  g.dilations = attrs.getInts("dilations", std::vector<std::int64_t>(n, 1));
  if (g.strides.size() != n)
    fail("strides has {} values, expected {}", g.strides.size(), n);
  if (g.dilations.size() != n)
    fail("dilations has {} values, expected {}", g.dilations.size(), n);
  for (std::size_t i = 0; i < n; ++i) {
    if (g.kernel[i] < 1)
      fail("kernel_shape[{}] is {}, must be positive", i, g.kernel[i]);
    if (g.strides[i] < 1)
      fail("strides[{}] is {}, must be positive", i, g.strides[i]);
    if (g.dilations[i] < 1)
      fail("dilations[{}] is {}, must be positive", i, g.dilations[i]);
  }
  const std::string autoPad = attrs.getString("auto_pad", "NOTSET");
  g.padBegin.assign(n, 0);
  g.padEnd.assign(n, 0);
  g.output.assign(n, 0);
  if (autoPad == "NOTSET" || autoPad.empty()) {
    std::vector<std::int64_t> pads = attrs.getInts("pads", std::vector<std::int64_t>(2 * n, 0));
    if (pads.size() != 2 * n)
      fail("pads has {} values, expected {} (begins then ends)", pads.size(), 2 * n);
    for (std::size_t i = 0; i < n; ++i) {
      g.padBegin[i] = pads[i];
      g.padEnd[i] = pads[n + i];
      if (g.padBegin[i] < 0 || g.padEnd[i] < 0)
        fail("pads must not be negative, got {} and {}", pads[i], pads[n + i]);
      const std::int64_t extent = (g.kernel[i] - 1) * g.dilations[i] + 1;
      const std::int64_t span = inputSpatial[i] + g.padBegin[i] + g.padEnd[i] - extent;
      if (span < 0) {
        fail("window extent {} along spatial dim {} exceeds the padded input size {}", extent, i,
             inputSpatial[i] + g.padBegin[i] + g.padEnd[i]);
      }
      std::int64_t out = (ceilMode ? (span + g.strides[i] - 1) / g.strides[i] : span / g.strides[i]) + 1;
      // Like PyTorch (and ONNX from opset 19 on): the last window must start inside the input or the left padding.
      if (ceilMode && out > 1 && (out - 1) * g.strides[i] >= inputSpatial[i] + g.padBegin[i])
        --out;
      g.output[i] = out;
    }
  } else if (autoPad == "SAME_UPPER" || autoPad == "SAME_LOWER") {
    for (std::size_t i = 0; i < n; ++i) {
      const std::int64_t extent = (g.kernel[i] - 1) * g.dilations[i] + 1;
      const std::int64_t out = (inputSpatial[i] + g.strides[i] - 1) / g.strides[i];
      const std::int64_t total = std::max<std::int64_t>(0, (out - 1) * g.strides[i] + extent - inputSpatial[i]);
      const std::int64_t small = total / 2;
      g.padBegin[i] = autoPad == "SAME_UPPER" ? small : total - small;
      g.padEnd[i] = total - g.padBegin[i];
      g.output[i] = out;
    }
  } else if (autoPad == "VALID") {
    for (std::size_t i = 0; i < n; ++i) {
      const std::int64_t extent = (g.kernel[i] - 1) * g.dilations[i] + 1;
      if (inputSpatial[i] < extent) {
        fail("window extent {} along spatial dim {} exceeds the input size {} (auto_pad VALID)", extent, i,
             inputSpatial[i]);
      }
      g.output[i] = (inputSpatial[i] - extent) / g.strides[i] + 1;
    }
  } else {
    fail("auto_pad '{}' is not one of NOTSET, SAME_UPPER, SAME_LOWER, VALID", autoPad);
  }
  return g;
}

std::int64_t dnnlPadEnd(const WindowGeometry& geometry, const std::vector<std::int64_t>& inputSpatial, std::size_t i) {
  const std::int64_t extent = (geometry.kernel[i] - 1) * geometry.dilations[i] + 1;
  return (geometry.output[i] - 1) * geometry.strides[i] + extent - inputSpatial[i] - geometry.padBegin[i];
}

}  // namespace strata::cpu
