#include "onnx_tensor.h"

#include <algorithm>
#include <charconv>
#include <cstring>
#include <fstream>

#include "strata/error.h"

namespace strata::detail {
namespace {

// A non-negative integer of an external_data entry; an Error names the entry otherwise.
std::int64_t externalDataNumber(const std::string& value, const std::string& key, const std::string& context) {
  std::int64_t number = -1;
  const auto [end, ec] = std::from_chars(value.data(), value.data() + value.size(), number);
  if (ec != std::errc() || end != value.data() + value.size() || number < 0) {
    fail("{}: external data {} '{}' is not a non-negative integer", context, key, value);
  }
  return number;
}

// Note [External data paths]: ONNX resolves `location` against the model's directory, and so does Strata; an
// absolute location or one that climbs out with ".." would let a model file make Strata read any file the user
// can (and a device such as /dev/stdin blocks the import for good), so both are refused, as ONNX's checker does,
// and the location must be a regular file.
std::string readExternalData(const onnx::TensorProto& proto, const std::string& context,
                             const std::filesystem::path& baseDir, std::uint64_t expectedBytes) {
  std::string location;
  std::int64_t offset = 0;
  std::int64_t length = -1;
  for (const auto& entry : proto.external_data()) {
    if (entry.key() == "location") {
      location = entry.value();
    } else if (entry.key() == "offset") {
      offset = externalDataNumber(entry.value(), "offset", context);
    } else if (entry.key() == "length") {
      length = externalDataNumber(entry.value(), "length", context);
    }
  }
  if (location.empty()) {
    fail("{}: external data has no location", context);
  }
  const std::filesystem::path relative(location);
  const bool climbs = std::any_of(relative.begin(), relative.end(), [](const auto& part) { return part == ".."; });
  if (relative.is_absolute() || climbs) {
    fail("{}: external data location '{}' is outside the model's directory (it must be a relative path without '..')",
         context, location);
  }
  const std::filesystem::path file = baseDir / relative;
  std::error_code ec;
  if (!std::filesystem::is_regular_file(file, ec)) {
    fail("{}: external data file {} {}", context, file.string(),
         std::filesystem::exists(file, ec) ? "is not a regular file" : "does not exist");
  }
  std::ifstream in(file, std::ios::binary);
  if (!in) {
    fail("{}: external data file {} cannot be opened", context, file.string());
  }
  in.seekg(0, std::ios::end);
  const std::int64_t fileSize = in.tellg();
  if (length < 0) {
    length = offset <= fileSize ? fileSize - offset : 0;
  }
  if (offset > fileSize || length > fileSize - offset) {
    fail("{}: external data at offset {} of length {} lies outside {} ({} bytes)", context, offset, length,
         file.string(), fileSize);
  }
  if (static_cast<std::uint64_t>(length) != expectedBytes) {
    fail("{}: external data has {} bytes but the tensor's shape and dtype need {}", context, length, expectedBytes);
  }
  std::string bytes(static_cast<std::size_t>(length), '\0');
  in.seekg(offset);
  in.read(bytes.data(), length);
  return bytes;
}

// How many values a TensorProto's typed field holds for `dtype` (float_data, int32_data, ...).
std::int64_t typedValueCount(const onnx::TensorProto& proto, DType dtype) {
  switch (dtype) {
    case DType::Float32:
      return proto.float_data_size();
    case DType::Float64:
      return proto.double_data_size();
    case DType::Int64:
      return proto.int64_data_size();
    default:
      return proto.int32_data_size();  // int32, int8, uint8, bool, float16, bfloat16
  }
}

template <typename Dst, typename Src>
void copyConverted(const Src& src, Tensor& tensor, const std::string& context) {
  if (static_cast<std::int64_t>(src.size()) != tensor.numel()) {
    fail("{}: holds {} values but its shape {} needs {}", context, src.size(), shapeToString(tensor.shape()),
         tensor.numel());
  }
  Dst* out = tensor.data<Dst>();
  for (int i = 0; i < src.size(); ++i) {
    out[i] = static_cast<Dst>(src[i]);
  }
}

}  // namespace

Tensor tensorFromProto(const onnx::TensorProto& proto, const std::string& context,
                       const std::filesystem::path& baseDir) {
  const auto dtype = dtypeFromOnnx(proto.data_type());
  if (!dtype) {
    fail(
        "{}: dtype {} is not supported (Strata supports float32, float16, bfloat16, float64, int64, int32, int8, "
        "uint8, bool)",
        context, onnxTypeName(proto.data_type()));
  }
  Shape shape(proto.dims().begin(), proto.dims().end());
  // Note [Tensor sizes from files]: the dims come from the file; the element count and byte size are computed
  // with overflow checks and compared with the data the file holds before anything is allocated, so a few bytes
  // of protobuf cannot ask for terabytes (found by tests/fuzz/tensor_proto_fuzzer).
  std::int64_t numel = 1;
  for (std::int64_t d : shape) {
    if (d < 0) {
      fail("{}: negative dimension in {}", context, shapeToString(shape));
    }
    if (__builtin_mul_overflow(numel, d, &numel)) {
      fail("{}: shape {} has more elements than a 64-bit count holds", context, shapeToString(shape));
    }
  }
  std::int64_t byteCount = 0;
  if (__builtin_mul_overflow(numel, static_cast<std::int64_t>(dtypeSize(*dtype)), &byteCount)) {
    fail("{}: shape {} of {} has more bytes than a 64-bit size holds", context, shapeToString(shape),
         dtypeName(*dtype));
  }
  const auto bytes = static_cast<std::size_t>(byteCount);

  if (proto.data_location() == onnx::TensorProto::EXTERNAL) {
    const std::string data = readExternalData(proto, context, baseDir, bytes);
    Tensor tensor = Tensor::empty(*dtype, shape, MemoryCategory::Parameters);
    std::memcpy(tensor.rawData(), data.data(), bytes);
    return tensor;
  }
  if (proto.has_raw_data()) {
    if (proto.raw_data().size() != bytes) {
      fail("{}: raw data has {} bytes but shape {} of {} needs {}", context, proto.raw_data().size(),
           shapeToString(shape), dtypeName(*dtype), bytes);
    }
    Tensor tensor = Tensor::empty(*dtype, shape, MemoryCategory::Parameters);
    if (bytes > 0) {
      std::memcpy(tensor.rawData(), proto.raw_data().data(), bytes);
    }
    return tensor;
  }
  if (typedValueCount(proto, *dtype) != numel) {
    fail("{}: holds {} values but its shape {} needs {}", context, typedValueCount(proto, *dtype), shapeToString(shape),
         numel);
  }
  Tensor tensor = Tensor::empty(*dtype, shape, MemoryCategory::Parameters);
  switch (*dtype) {
    case DType::Float32:
      copyConverted<float>(proto.float_data(), tensor, context);
      break;
    case DType::Float64:
      copyConverted<double>(proto.double_data(), tensor, context);
      break;
    case DType::Int64:
      copyConverted<std::int64_t>(proto.int64_data(), tensor, context);
      break;
    case DType::Int32:
      copyConverted<std::int32_t>(proto.int32_data(), tensor, context);
      break;
    case DType::Int8:
      copyConverted<std::int8_t>(proto.int32_data(), tensor, context);
      break;
    case DType::UInt8:
      copyConverted<std::uint8_t>(proto.int32_data(), tensor, context);
      break;
    case DType::Bool:
      copyConverted<bool>(proto.int32_data(), tensor, context);
      break;
    case DType::Float16:
    case DType::BFloat16:
      copyConverted<std::uint16_t>(proto.int32_data(), tensor, context);
      break;
  }
  return tensor;
}

onnx::TensorProto tensorProtoHeader(const Tensor& host, const std::string& name) {
  onnx::TensorProto proto;
  proto.set_name(name);
  proto.set_data_type(dtypeToOnnx(host.dtype()));
  for (std::int64_t d : host.shape()) {
    proto.add_dims(d);
  }
  return proto;
}

onnx::TensorProto tensorToProto(const Tensor& tensor, const std::string& name) {
  const Tensor host = tensor.to(Device::cpu());  // device tensors (a GPU run's parameters) are written from a copy
  onnx::TensorProto proto = tensorProtoHeader(host, name);
  proto.set_raw_data(std::string(static_cast<const char*>(host.rawData()), host.bytes()));
  return proto;
}

}  // namespace strata::detail
