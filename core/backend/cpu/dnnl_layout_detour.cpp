#include "dnnl_layout_detour.h"

#include <algorithm>

#include <fmt/format.h>

namespace strata::cpu {

using dnnl::memory;

bool isJitImplementation(const std::string& implementation) {
  return implementation.find("jit") != std::string::npos || implementation.rfind("brg", 0) == 0;
}

std::vector<memory::format_tag> activationLayouts(std::size_t rank) {
  using tag = memory::format_tag;
  switch (rank) {
    case 3:
      return {tag::nCw16c, tag::nCw8c, tag::nwc};
    case 4:
      return {tag::nChw16c, tag::nChw8c, tag::nhwc};
    case 5:
      return {tag::nCdhw16c, tag::nCdhw8c, tag::ndhwc};
    default:
      return {};
  }
}

LayoutDetour::LayoutDetour(const memory::desc& plainSrc, const memory::desc& src, const memory::desc& plainDst,
                           const memory::desc& dst, std::size_t primitiveScratchpad)
    : scratchpadBytes_(primitiveScratchpad),
      plainSrc_(plainSrc, dnnlEngine(), nullptr),
      src_(src, dnnlEngine(), nullptr),
      plainDst_(plainDst, dnnlEngine(), nullptr),
      dst_(dst, dnnlEngine(), nullptr) {
  if (src != plainSrc) {
    dnnl::reorder::primitive_desc rpd(dnnlEngine(), plainSrc, dnnlEngine(), src, userScratchpadAttr());
    srcReorder_ = dnnl::reorder(rpd);
    scratchpadBytes_ = std::max(scratchpadBytes_, rpd.scratchpad_desc().get_size());
    reorderSrc_ = true;
  }
  if (dst != plainDst) {
    dnnl::reorder::primitive_desc rpd(dnnlEngine(), dst, dnnlEngine(), plainDst, userScratchpadAttr());
    dstReorder_ = dnnl::reorder(rpd);
    scratchpadBytes_ = std::max(scratchpadBytes_, rpd.scratchpad_desc().get_size());
    reorderDst_ = true;
  }
  // Scratchpad layout: [the largest own scratchpad | reordered src | reordered dst].
  std::size_t offset = alignUp(scratchpadBytes_);
  if (reorderSrc_) {
    srcOffset_ = offset;
    offset += alignUp(src.get_size());
  }
  if (reorderDst_) {
    dstOffset_ = offset;
    offset += alignUp(dst.get_size());
  }
  totalScratchBytes_ = offset;
}

void LayoutDetour::execute(const dnnl::primitive& primitive, std::unordered_map<int, memory> args, const Tensor& x,
                           Tensor& y, int srcArg, int dstArg) {
  bindDnnl(plainSrc_, x);
  bindDnnl(plainDst_, y);
  char* scratch = static_cast<char*>(dnnlScratchpad(totalScratchBytes_));
  if (reorderSrc_) {
    src_.set_data_handle(scratch + srcOffset_);
    std::unordered_map<int, memory> reorderArgs{{DNNL_ARG_FROM, plainSrc_}, {DNNL_ARG_TO, src_}};
    executeDnnlAt(srcReorder_, reorderArgs, scratch, scratchpadBytes_);
  }
  if (reorderDst_)
    dst_.set_data_handle(scratch + dstOffset_);
  args[srcArg] = reorderSrc_ ? src_ : plainSrc_;
  args[dstArg] = reorderDst_ ? dst_ : plainDst_;
  executeDnnlAt(primitive, args, scratch, scratchpadBytes_);
  if (reorderDst_) {
    std::unordered_map<int, memory> reorderArgs{{DNNL_ARG_FROM, dst_}, {DNNL_ARG_TO, plainDst_}};
    executeDnnlAt(dstReorder_, reorderArgs, scratch, scratchpadBytes_);
  }
}

namespace {

std::string layoutName(const memory::desc& md) {
  const dnnl_memory_desc_t& desc = md.data;
  if (desc.format_kind != dnnl_blocked)
    return "an opaque layout";
  const auto& blocking = desc.format_desc.blocking;
  if (blocking.inner_nblks == 1 && blocking.inner_idxs[0] == 1)
    return fmt::format("{}-channel blocks", blocking.inner_blks[0]);
  if (blocking.inner_nblks == 0 && desc.ndims > 2 && blocking.strides[1] == 1)
    return "channels-last";
  if (blocking.inner_nblks == 0)
    return "plain";
  return "a blocked layout";
}

}  // namespace

std::string reorderNote(const memory::desc& src, const memory::desc& dst) {
  const std::string from = layoutName(src);
  const std::string to = layoutName(dst);
  return from == to ? fmt::format(" on {}, reordered in and out", from)
                    : fmt::format(" from {} to {}, reordered in and out", from, to);
}

std::string detourNote(const LayoutDetour& detour) {
  return detour.reorders() ? reorderNote(detour.sourceDesc(), detour.destinationDesc()) : "";
}

std::size_t LayoutCopy::init(const memory::desc& plainDesc, const memory::desc& target, bool toTarget) {
  plain = memory(plainDesc, dnnlEngine(), nullptr);
  needed = plainDesc != target;
  if (!needed)
    return 0;
  converted = memory(target, dnnlEngine(), nullptr);
  bytes = target.get_size();
  dnnl::reorder::primitive_desc pd =
      toTarget ? dnnl::reorder::primitive_desc(dnnlEngine(), plainDesc, dnnlEngine(), target, userScratchpadAttr())
               : dnnl::reorder::primitive_desc(dnnlEngine(), target, dnnlEngine(), plainDesc, userScratchpadAttr());
  reorder = dnnl::reorder(pd);
  return pd.scratchpad_desc().get_size();
}

memory& LayoutCopy::bind(const Tensor& tensor, char* scratch, std::size_t scratchBytes, bool copyIn) {
  return bind(static_cast<const float*>(tensor.rawData()), scratch, scratchBytes, copyIn);
}

memory& LayoutCopy::bind(const float* data, char* scratch, std::size_t scratchBytes, bool copyIn) {
  plain.set_data_handle(const_cast<float*>(data));  // oneDNN only reads inputs
  if (!needed)
    return plain;
  converted.set_data_handle(scratch + offset);
  if (copyIn) {
    std::unordered_map<int, memory> args{{DNNL_ARG_FROM, plain}, {DNNL_ARG_TO, converted}};
    executeDnnlAt(reorder, args, scratch, scratchBytes);
  }
  return converted;
}

void LayoutCopy::copyOut(char* scratch, std::size_t scratchBytes) {
  if (!needed)
    return;
  std::unordered_map<int, memory> args{{DNNL_ARG_FROM, converted}, {DNNL_ARG_TO, plain}};
  executeDnnlAt(reorder, args, scratch, scratchBytes);
}

}  // namespace strata::cpu
