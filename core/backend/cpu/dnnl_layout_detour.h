#pragma once

// Note [Layout detours]: Strata's activations are plain (NCHW). Some oneDNN primitives are fast only in blocked
// (nChw16c, nChw8c) or channels-last layouts and fall to a reference loop on plain data, and which ones depends on
// the host: on AVX2, max pooling over NCHW runs `simple_nchw` (49% of the bundled CNN's forward) while AVX-512 has a
// JIT kernel for it; batch norm over NCHW runs `ncsp_bnorm` on both. A kernel asks `pickJitLayout` for the first
// layout, in the order `activationLayouts` gives, in which the primitive is JIT-compiled on this host, and runs it
// through a LayoutDetour: the input reordered into that layout, the primitive, the output reordered back, both
// copies in the shared scratchpad. The reorders are JIT kernels too and cost two passes over the data.

#include <cstddef>
#include <functional>
#include <string>
#include <unordered_map>
#include <vector>

#include "dnnl_context.h"

namespace strata::cpu {

// Whether oneDNN's implementation name (primitive_desc::impl_info_str) is a JIT-compiled kernel, not a reference or
// compiler-vectorised loop ("ref:any", "simple_nchw:any", "ncsp_bnorm:any").
bool isJitImplementation(const std::string& implementation);

// The activation layouts to try for a tensor of `rank` dims (3 to 5), after the plain one: 16-channel blocks, 8-channel
// blocks, channels-last.
std::vector<dnnl::memory::format_tag> activationLayouts(std::size_t rank);

// Builds a primitive descriptor for the activation descriptor it is given; throws dnnl::error when oneDNN has none.
template <typename PrimitiveDesc>
using PrimitiveDescBuilder = std::function<PrimitiveDesc(const dnnl::memory::desc& activation)>;

// The primitive descriptor on `plain` when its implementation is JIT, else on the first layout of
// activationLayouts whose implementation is, else on `plain` (a reference kernel beats failing).
template <typename PrimitiveDesc>
PrimitiveDesc pickJitLayout(const dnnl::memory::desc& plain, const PrimitiveDescBuilder<PrimitiveDesc>& build) {
  PrimitiveDesc pd = build(plain);
  if (isJitImplementation(pd.impl_info_str()))
    return pd;
  const dnnl::memory::dims dims = plain.dims();
  for (dnnl::memory::format_tag tag : activationLayouts(dims.size())) {
    try {
      PrimitiveDesc candidate = build(dnnl::memory::desc(dims, plain.data_type(), tag));
      if (isJitImplementation(candidate.impl_info_str()))
        return candidate;
    } catch (const dnnl::error&) {
      // this layout has no implementation for the primitive: try the next
    }
  }
  return pd;
}

// Runs a primitive whose source and destination layouts may differ from Strata's plain tensors, reordering on the
// way in and out (Note [Layout detours]).
class LayoutDetour {
 public:
  LayoutDetour() = default;
  // `plainSrc` and `plainDst` describe Strata's tensors, `src` and `dst` the primitive's; `primitiveScratchpad` is
  // the primitive's own scratchpad size in bytes.
  LayoutDetour(const dnnl::memory::desc& plainSrc, const dnnl::memory::desc& src, const dnnl::memory::desc& plainDst,
               const dnnl::memory::desc& dst, std::size_t primitiveScratchpad);

  // Runs `primitive` with `args` plus `srcArg` bound to x and `dstArg` to y, through the reorders where needed.
  void execute(const dnnl::primitive& primitive, std::unordered_map<int, dnnl::memory> args, const Tensor& x, Tensor& y,
               int srcArg = DNNL_ARG_SRC, int dstArg = DNNL_ARG_DST);

  bool reorders() const { return reorderSrc_ || reorderDst_; }
  // The primitive's source and destination descriptors.
  dnnl::memory::desc sourceDesc() const { return src_.get_desc(); }
  dnnl::memory::desc destinationDesc() const { return dst_.get_desc(); }

 private:
  std::size_t scratchpadBytes_ = 0;    // the largest of the primitive's and the reorders' own scratchpads
  std::size_t totalScratchBytes_ = 0;  // plus the reordered source and destination
  std::size_t srcOffset_ = 0;
  std::size_t dstOffset_ = 0;
  bool reorderSrc_ = false;
  bool reorderDst_ = false;
  dnnl::reorder srcReorder_;
  dnnl::reorder dstReorder_;
  dnnl::memory plainSrc_, src_, plainDst_, dst_;
};

// " on 8-channel blocks, reordered in and out" for a kernel's implementation() when the detour reorders, else empty.
std::string detourNote(const LayoutDetour& detour);
// The same for a primitive that runs on `src` and `dst` layouts with reorders around it.
std::string reorderNote(const dnnl::memory::desc& src, const dnnl::memory::desc& dst);

// Rounds a scratchpad region up to 64 bytes, so that the regions after it stay aligned.
inline std::size_t alignUp(std::size_t bytes) {
  return (bytes + 63) / 64 * 64;
}

// A scratchpad region of `floats` float32 values, aligned as alignUp.
inline std::size_t floatRegionBytes(std::int64_t floats) {
  return alignUp(static_cast<std::size_t>(floats) * sizeof(float));
}

// One operand of a kernel with several (the gradient kernels): a tensor in Strata's plain layout and, when the
// primitive wants another layout, its copy at `offset` in the shared scratchpad, which the kernel lays out.
struct LayoutCopy {
  dnnl::memory plain;      // bound to the tensor at run time
  dnnl::memory converted;  // bound into the scratchpad at run time; only when needed
  dnnl::reorder reorder;
  bool needed = false;
  std::size_t offset = 0;  // of `converted` in the scratchpad
  std::size_t bytes = 0;   // of `converted`

  // Sets up a copy plain -> target (toTarget) or target -> plain; returns the reorder's own scratchpad size.
  std::size_t init(const dnnl::memory::desc& plainDesc, const dnnl::memory::desc& target, bool toTarget);
  // The memory the primitive uses, bound to `tensor` (and converted into the scratchpad when `copyIn`).
  dnnl::memory& bind(const Tensor& tensor, char* scratch, std::size_t scratchBytes, bool copyIn);
  // The same for data outside a tensor (a copy in the scratchpad).
  dnnl::memory& bind(const float* data, char* scratch, std::size_t scratchBytes, bool copyIn);
  // Copies the primitive's result back into the plain tensor (for outputs).
  void copyOut(char* scratch, std::size_t scratchBytes);
};

}  // namespace strata::cpu
