#pragma once

// Shared oneDNN plumbing for the CPU kernels in dnnl_*.cpp: the engine and stream, the scratchpad, descriptor
// helpers and the geometry of sliding windows (Conv, pooling).

#include <cstdint>
#include <string>
#include <unordered_map>
#include <vector>

#include <oneapi/dnnl/dnnl.hpp>

#include "strata/attributes.h"
#include "strata/op_registry.h"
#include "strata/tensor.h"

namespace strata::cpu {

void registerDnnlConvOps(OpRegistry& registry);
void registerDnnlPoolOps(OpRegistry& registry);
void registerNormOps(OpRegistry& registry);  // batch_norm_ops.cpp: no oneDNN (Note [Batch-norm loops])
void registerDnnlMatmulOps(OpRegistry& registry);

// The process-wide CPU engine.
dnnl::engine& dnnlEngine();
// The calling thread's stream on dnnlEngine() (streams are not meant to be shared between threads).
dnnl::stream& dnnlStream();

// Plain row-major f32 (or other type) descriptor for `dims`.
dnnl::memory::desc plainDesc(const std::vector<std::int64_t>& dims,
                             dnnl::memory::data_type type = dnnl::memory::data_type::f32);

// Primitive attributes with the scratchpad in user mode, so that its memory is a Strata tensor.
dnnl::primitive_attr userScratchpadAttr();

// Executes `primitive` on the thread's stream and waits. When `scratchpadBytes` is non-zero a Workspace tensor of at
// least that size is bound as DNNL_ARG_SCRATCHPAD.
// Note [Shared scratchpad]: one scratchpad tensor per thread, grown on demand and reused by every oneDNN node that
// runs on it (nodes of one executor run one after another), instead of one per node: peak memory stays the largest
// single scratchpad, and it is accounted as Workspace like any other tensor.
void executeDnnl(const dnnl::primitive& primitive, std::unordered_map<int, dnnl::memory>& args,
                 std::size_t scratchpadBytes);
// Like executeDnnl, with the scratchpad (when bytes > 0) at `scratchpad`, a pointer from dnnlScratchpad.
void executeDnnlAt(const dnnl::primitive& primitive, std::unordered_map<int, dnnl::memory>& args, void* scratchpad,
                   std::size_t scratchpadBytes);
// The calling thread's scratchpad, grown to at least `bytes`; valid until the next call that grows it.
void* dnnlScratchpad(std::size_t bytes);
// Releases the calling thread's scratchpad (for tests of memory accounting).
void releaseDnnlScratchpad();

// Binds `tensor`'s data to `memory` (oneDNN only reads through const inputs, hence the const_cast inside).
void bindDnnl(dnnl::memory& memory, const Tensor& tensor);

// Runs `fn` and turns dnnl::error into strata::Error naming the node.
template <typename Fn>
auto withDnnlErrors(const std::string& nodeName, const char* what, Fn&& fn) -> decltype(fn()) {
  try {
    return fn();
  } catch (const dnnl::error& e) {
    fail("{}: oneDNN could not {}: {}", nodeName, what, e.what());
  }
}

// The resolved geometry of a sliding window over the spatial dims (everything after N and C).
struct WindowGeometry {
  std::vector<std::int64_t> kernel;
  std::vector<std::int64_t> strides;
  std::vector<std::int64_t> dilations;
  std::vector<std::int64_t> padBegin;
  std::vector<std::int64_t> padEnd;
  std::vector<std::int64_t> output;  // output spatial sizes
};

// Resolves kernel/strides/dilations/pads/auto_pad (and ceil_mode, for pooling) against the input's spatial sizes.
// Throws strata::Error with the reason (without node name) on inconsistent attributes.
WindowGeometry resolveWindow(const Attributes& attrs, const std::vector<std::int64_t>& inputSpatial,
                             const std::vector<std::int64_t>& kernel, bool ceilMode);

// The right padding that makes oneDNN's output-size formula (floor) yield geometry.output along dim i.
std::int64_t dnnlPadEnd(const WindowGeometry& geometry, const std::vector<std::int64_t>& inputSpatial, std::size_t i);

// ---- Float64 kernels: oneDNN has no f64, so these are plain loops (see Note [Float64 kernels]) ----

// Conv in float64 (dnnl_conv_f64.cpp): x [N, C, in...], w [M, C/group, k...] in ONNX layout, bias [M] or null,
// y [N, M, geometry.output...]; 1 to 3 spatial dims. Uses the calling thread's dnnlScratchpad for im2col.
void convForwardF64(const WindowGeometry& geometry, const Shape& xShape, const Shape& wShape, std::int64_t group,
                    const double* x, const double* w, const double* bias, double* y);

}  // namespace strata::cpu
