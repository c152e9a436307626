#include "strata/dtype.h"

#include <bit>
#include <cstring>

namespace strata {

std::size_t dtypeSize(DType dtype) {
  switch (dtype) {
    case DType::Float32:
      return 4;
    case DType::Float16:
      return 2;
    case DType::BFloat16:
      return 2;
    case DType::Float64:
      return 8;
    case DType::Int64:
      return 8;
    case DType::Int32:
      return 4;
    case DType::Int8:
      return 1;
    case DType::UInt8:
      return 1;
    case DType::Bool:
      return 1;
  }
  return 0;
}

std::string_view dtypeName(DType dtype) {
  switch (dtype) {
    case DType::Float32:
      return "float32";
    case DType::Float16:
      return "float16";
    case DType::BFloat16:
      return "bfloat16";
    case DType::Float64:
      return "float64";
    case DType::Int64:
      return "int64";
    case DType::Int32:
      return "int32";
    case DType::Int8:
      return "int8";
    case DType::UInt8:
      return "uint8";
    case DType::Bool:
      return "bool";
  }
  return "unknown";
}

bool isFloatingPoint(DType dtype) {
  return dtype == DType::Float32 || dtype == DType::Float16 || dtype == DType::BFloat16 || dtype == DType::Float64;
}

// Codes from onnx.proto's TensorProto.DataType.
std::optional<DType> dtypeFromOnnx(int onnxType) {
  switch (onnxType) {
    case 1:
      return DType::Float32;
    case 2:
      return DType::UInt8;
    case 3:
      return DType::Int8;
    case 6:
      return DType::Int32;
    case 7:
      return DType::Int64;
    case 9:
      return DType::Bool;
    case 10:
      return DType::Float16;
    case 11:
      return DType::Float64;
    case 16:
      return DType::BFloat16;
    default:
      return std::nullopt;
  }
}

int dtypeToOnnx(DType dtype) {
  switch (dtype) {
    case DType::Float32:
      return 1;
    case DType::UInt8:
      return 2;
    case DType::Int8:
      return 3;
    case DType::Int32:
      return 6;
    case DType::Int64:
      return 7;
    case DType::Bool:
      return 9;
    case DType::Float16:
      return 10;
    case DType::Float64:
      return 11;
    case DType::BFloat16:
      return 16;
  }
  return 0;
}

std::string_view onnxTypeName(int onnxType) {
  static constexpr std::string_view kNames[] = {
      "undefined", "float", "uint8", "int8", "uint16", "int16", "int32", "int64", "string", "bool", "float16", "double",
      "uint32", "uint64", "complex64", "complex128", "bfloat16",
      // IR 9 and 10 (Note [Newer IR versions])
      "float8e4m3fn", "float8e4m3fnuz", "float8e5m2", "float8e5m2fnuz", "uint4", "int4"};
  if (onnxType >= 0 && onnxType < static_cast<int>(std::size(kNames))) {
    return kNames[onnxType];
  }
  return "unknown";
}

float halfToFloat(std::uint16_t bits) {
  const std::uint32_t sign = (bits & 0x8000u) << 16;
  std::uint32_t exponent = (bits >> 10) & 0x1fu;
  std::uint32_t mantissa = bits & 0x3ffu;
  std::uint32_t out = 0;
  if (exponent == 0) {
    if (mantissa == 0) {
      out = sign;
    } else {  // subnormal: renormalise
      exponent = 127 - 15 + 1;
      while ((mantissa & 0x400u) == 0) {
        mantissa <<= 1;
        --exponent;
      }
      mantissa &= 0x3ffu;
      out = sign | (exponent << 23) | (mantissa << 13);
    }
  } else if (exponent == 0x1f) {
    out = sign | 0x7f800000u | (mantissa << 13);
  } else {
    out = sign | ((exponent + 127 - 15) << 23) | (mantissa << 13);
  }
  return std::bit_cast<float>(out);
}

std::uint16_t floatToHalf(float value) {
  const std::uint32_t x = std::bit_cast<std::uint32_t>(value);
  const std::uint32_t sign = (x >> 16) & 0x8000u;
  const std::int32_t exponent = static_cast<std::int32_t>((x >> 23) & 0xffu) - 127 + 15;
  std::uint32_t mantissa = x & 0x7fffffu;
  if (((x >> 23) & 0xffu) == 0xffu) {  // inf or nan
    return static_cast<std::uint16_t>(sign | 0x7c00u | (mantissa ? 0x200u : 0u));
  }
  if (exponent >= 0x1f) {
    return static_cast<std::uint16_t>(sign | 0x7c00u);
  }
  if (exponent <= 0) {
    if (exponent < -10) {
      return static_cast<std::uint16_t>(sign);
    }
    mantissa |= 0x800000u;
    const int shift = 14 - exponent;
    std::uint32_t half = mantissa >> shift;
    const std::uint32_t remainder = mantissa & ((1u << shift) - 1);
    const std::uint32_t halfway = 1u << (shift - 1);
    if (remainder > halfway || (remainder == halfway && (half & 1u))) {
      ++half;
    }
    return static_cast<std::uint16_t>(sign | half);
  }
  std::uint32_t half = sign | (static_cast<std::uint32_t>(exponent) << 10) | (mantissa >> 13);
  const std::uint32_t remainder = mantissa & 0x1fffu;
  if (remainder > 0x1000u || (remainder == 0x1000u && (half & 1u))) {
    ++half;  // may carry into the exponent, which is the correct rounding
  }
  return static_cast<std::uint16_t>(half);
}

float bfloat16ToFloat(std::uint16_t bits) {
  return std::bit_cast<float>(static_cast<std::uint32_t>(bits) << 16);
}

std::uint16_t floatToBFloat16(float value) {
  std::uint32_t x = std::bit_cast<std::uint32_t>(value);
  if ((x & 0x7fffffffu) > 0x7f800000u) {
    return static_cast<std::uint16_t>((x >> 16) | 0x40u);  // keep NaN a NaN
  }
  x += 0x7fffu + ((x >> 16) & 1u);  // round to nearest even
  return static_cast<std::uint16_t>(x >> 16);
}

}  // namespace strata
