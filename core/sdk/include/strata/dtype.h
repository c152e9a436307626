#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>

namespace strata {

enum class DType : std::uint8_t { Float32, Float16, BFloat16, Float64, Int64, Int32, Int8, UInt8, Bool };

std::size_t dtypeSize(DType dtype);
std::string_view dtypeName(DType dtype);
bool isFloatingPoint(DType dtype);

// ONNX TensorProto.DataType codes; nullopt for types Strata does not support.
std::optional<DType> dtypeFromOnnx(int onnxType);
int dtypeToOnnx(DType dtype);
std::string_view onnxTypeName(int onnxType);

// Calls fn with a value of the C++ type for dtype, e.g. visitDType(d, [](auto tag) { using T = decltype(tag); }).
// Float16 and BFloat16 have no arithmetic C++ type here; they dispatch to the storage types below.
struct Half {
  std::uint16_t bits;
};
struct BFloat16Bits {
  std::uint16_t bits;
};

float halfToFloat(std::uint16_t bits);
std::uint16_t floatToHalf(float value);
float bfloat16ToFloat(std::uint16_t bits);
std::uint16_t floatToBFloat16(float value);

template <typename Fn>
decltype(auto) visitDType(DType dtype, Fn&& fn) {
  switch (dtype) {
    case DType::Float32:
      return fn(float{});
    case DType::Float16:
      return fn(Half{});
    case DType::BFloat16:
      return fn(BFloat16Bits{});
    case DType::Float64:
      return fn(double{});
    case DType::Int64:
      return fn(std::int64_t{});
    case DType::Int32:
      return fn(std::int32_t{});
    case DType::Int8:
      return fn(std::int8_t{});
    case DType::UInt8:
      return fn(std::uint8_t{});
    case DType::Bool:
      return fn(bool{});
  }
  return fn(float{});
}

template <typename T>
constexpr DType dtypeOf();
template <>
constexpr DType dtypeOf<float>() {
  return DType::Float32;
}
template <>
constexpr DType dtypeOf<double>() {
  return DType::Float64;
}
template <>
constexpr DType dtypeOf<std::int64_t>() {
  return DType::Int64;
}
template <>
constexpr DType dtypeOf<std::int32_t>() {
  return DType::Int32;
}
template <>
constexpr DType dtypeOf<std::int8_t>() {
  return DType::Int8;
}
template <>
constexpr DType dtypeOf<std::uint8_t>() {
  return DType::UInt8;
}
template <>
constexpr DType dtypeOf<bool>() {
  return DType::Bool;
}
template <>
constexpr DType dtypeOf<Half>() {
  return DType::Float16;
}
template <>
constexpr DType dtypeOf<BFloat16Bits>() {
  return DType::BFloat16;
}

}  // namespace strata
