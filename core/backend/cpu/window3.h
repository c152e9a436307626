#pragma once

// Convolution and pooling windows promoted to exactly 3 spatial dims, for the direct (non-oneDNN) loops: the
// float64 convolution and the pooling and convolution gradients.
#include <algorithm>
#include <cstdint>

#include "dnnl_context.h"

namespace strata::cpu {

// Window geometry with the spatial dims promoted to exactly 3 (leading dims of size 1), for the direct loops.
struct Window3 {
  std::int64_t in[3], out[3], kernel[3], stride[3], dilation[3], pad[3];
  std::int64_t inVolume() const { return in[0] * in[1] * in[2]; }
  std::int64_t outVolume() const { return out[0] * out[1] * out[2]; }
  std::int64_t kernelVolume() const { return kernel[0] * kernel[1] * kernel[2]; }
};

inline Window3 promoteWindow(const WindowGeometry& g, const Shape& xShape) {
  const std::size_t n = g.kernel.size();
  if (n < 1 || n > 3)
    fail("1 to 3 spatial dims are supported, got {}", n);
  Window3 r{};
  const std::size_t lead = 3 - n;
  for (std::size_t i = 0; i < 3; ++i) {
    if (i < lead) {
      r.in[i] = r.out[i] = r.kernel[i] = r.stride[i] = r.dilation[i] = 1;
      r.pad[i] = 0;
      continue;
    }
    const std::size_t j = i - lead;
    r.in[i] = xShape[2 + j];
    r.out[i] = g.output[j];
    r.kernel[i] = g.kernel[j];
    r.stride[i] = g.strides[j];
    r.dilation[i] = g.dilations[j];
    r.pad[i] = g.padBegin[j];
  }
  return r;
}

// ceil(a / b) for b > 0 and any a.
inline std::int64_t ceilDiv(std::int64_t a, std::int64_t b) {
  return a >= 0 ? (a + b - 1) / b : -((-a) / b);
}

// The output range [begin, end) along one dim whose input position o * stride - pad + offset lies in [0, in).
inline void validOutputRange(std::int64_t in, std::int64_t out, std::int64_t stride, std::int64_t pad,
                             std::int64_t offset, std::int64_t& begin, std::int64_t& end) {
  begin = std::clamp<std::int64_t>(ceilDiv(pad - offset, stride), 0, out);
  end = std::clamp<std::int64_t>(ceilDiv(in + pad - offset, stride), begin, out);
}

// The kernel range [begin, end) along one dim whose input position start + k * dilation lies in [0, in).
inline void validKernelRange(std::int64_t in, std::int64_t kernel, std::int64_t dilation, std::int64_t start,
                             std::int64_t& begin, std::int64_t& end) {
  begin = std::clamp<std::int64_t>(ceilDiv(-start, dilation), 0, kernel);
  end = std::clamp<std::int64_t>(ceilDiv(in - start, dilation), begin, kernel);
}

}  // namespace strata::cpu
