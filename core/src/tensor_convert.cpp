// Tensor::convertFrom: casts and adds between floating dtypes where the tensors live (Note [16-bit collectives] in
// plugins/fsdp uses it for the 16-bit copies of shards and gradients on every backend).
#include <cstring>
#include <type_traits>
#include <vector>

#include "strata/device_backend.h"
#include "strata/host_convert.h"
#include "strata/tensor.h"

namespace strata {
namespace {

template <typename Compute, typename T>
Compute widen(T value) {
  if constexpr (std::is_same_v<T, Half>) {
    return static_cast<Compute>(halfToFloat(value.bits));
  } else if constexpr (std::is_same_v<T, BFloat16Bits>) {
    return static_cast<Compute>(bfloat16ToFloat(value.bits));
  } else {
    return static_cast<Compute>(value);
  }
}

template <typename T, typename Compute>
T narrow(Compute value) {
  if constexpr (std::is_same_v<T, Half>) {
    return Half{floatToHalf(static_cast<float>(value))};
  } else if constexpr (std::is_same_v<T, BFloat16Bits>) {
    return BFloat16Bits{floatToBFloat16(static_cast<float>(value))};
  } else {
    return static_cast<T>(value);
  }
}

template <typename Out, typename In>
void convertLoop(Out* out, const In* in, std::int64_t count, bool accumulate) {
  using Compute = std::conditional_t<std::is_same_v<Out, double> || std::is_same_v<In, double>, double, float>;
  if (accumulate) {
    for (std::int64_t i = 0; i < count; ++i) {
      out[i] = narrow<Out>(widen<Compute>(out[i]) + widen<Compute>(in[i]));
    }
  } else {
    for (std::int64_t i = 0; i < count; ++i) {
      out[i] = narrow<Out>(widen<Compute>(in[i]));
    }
  }
}

template <typename T>
constexpr bool kFloating =
    std::is_same_v<T, float> || std::is_same_v<T, double> || std::is_same_v<T, Half> || std::is_same_v<T, BFloat16Bits>;

}  // namespace

void convertOnHost(void* dst, DType dstType, const void* src, DType srcType, std::int64_t count, bool accumulate) {
  STRATA_CHECK(isFloatingPoint(dstType) && isFloatingPoint(srcType), "cannot convert {} into {}: floating dtypes only",
               dtypeName(srcType), dtypeName(dstType));
  visitDType(dstType, [&](auto outTag) {
    visitDType(srcType, [&](auto inTag) {
      using Out = decltype(outTag);
      using In = decltype(inTag);
      if constexpr (kFloating<Out> && kFloating<In>) {
        convertLoop(static_cast<Out*>(dst), static_cast<const In*>(src), count, accumulate);
      }
    });
  });
}

void DeviceBackend::convert(void* dst, DType dstType, const void* src, DType srcType, std::int64_t count,
                            bool accumulate, Device device) {
  const Device host = Device::cpu();
  std::vector<char> in(static_cast<std::size_t>(count) * dtypeSize(srcType));
  std::vector<char> out(static_cast<std::size_t>(count) * dtypeSize(dstType));
  copy(in.data(), host, src, device, in.size());
  if (accumulate) {
    copy(out.data(), host, dst, device, out.size());
  }
  convertOnHost(out.data(), dstType, in.data(), srcType, count, accumulate);
  copy(dst, device, out.data(), host, out.size());
}

void Tensor::convertFrom(const Tensor& src, bool accumulate) {
  STRATA_CHECK(src.numel() == numel(), "cannot convert {} into {}: element counts differ", src.meta().toString(),
               meta_.toString());
  if (!accumulate && src.dtype() == dtype()) {
    copyFrom(src);
    return;
  }
  STRATA_CHECK(src.device() == device(), "cannot convert {} on {} into {} on {}: convert on one device, then copy",
               src.meta().toString(), src.device().toString(), meta_.toString(), device().toString());
  if (numel() == 0) {
    return;
  }
  if (device().type == DeviceType::CPU) {
    convertOnHost(rawData(), dtype(), src.rawData(), src.dtype(), numel(), accumulate);
    return;
  }
  DeviceBackend* backend = deviceBackend(device().type);
  STRATA_CHECK(backend != nullptr, "no backend is initialised for device {}", device().toString());
  backend->convert(rawData(), dtype(), src.rawData(), src.dtype(), numel(), accumulate, device());
}

}  // namespace strata
