#include "onnx_tensor.h"

#include <cstring>
#include <fstream>

#include "strata/error.h"

namespace strata::detail {
namespace {

std::string readExternalData(const onnx::TensorProto& proto, const std::string& context,
                             const std::filesystem::path& baseDir) {
  std::string location;
  std::int64_t offset = 0;
  std::int64_t length = -1;
  for (const auto& entry : proto.external_data()) {
    if (entry.key() == "location") {
      location = entry.value();
    } else if (entry.key() == "offset") {
      offset = std::stoll(entry.value());
    } else if (entry.key() == "length") {
      length = std::stoll(entry.value());
    }
  }
  if (location.empty()) {
    fail("{}: external data has no location", context);
  }
  const std::filesystem::path file = baseDir / location;
  std::ifstream in(file, std::ios::binary);
  if (!in) {
    fail("{}: external data file {} cannot be opened", context, file.string());
  }
  in.seekg(0, std::ios::end);
  const std::int64_t fileSize = in.tellg();
  if (length < 0) {
    length = fileSize - offset;
  }
  if (offset < 0 || offset + length > fileSize) {
    fail("{}: external data [{}, {}) lies outside {} ({} bytes)", context, offset, offset + length, file.string(),
         fileSize);
  }
  std::string bytes(static_cast<std::size_t>(length), '\0');
  in.seekg(offset);
  in.read(bytes.data(), length);
  return bytes;
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
  for (std::int64_t d : shape) {
    if (d < 0) {
      fail("{}: negative dimension in {}", context, shapeToString(shape));
    }
  }
  Tensor tensor = Tensor::empty(*dtype, shape, MemoryCategory::Parameters);
  const std::size_t bytes = tensor.bytes();

  if (proto.data_location() == onnx::TensorProto::EXTERNAL) {
    const std::string data = readExternalData(proto, context, baseDir);
    if (data.size() != bytes) {
      fail("{}: external data has {} bytes but shape {} of {} needs {}", context, data.size(), shapeToString(shape),
           dtypeName(*dtype), bytes);
    }
    std::memcpy(tensor.rawData(), data.data(), bytes);
    return tensor;
  }
  if (proto.has_raw_data()) {
    if (proto.raw_data().size() != bytes) {
      fail("{}: raw data has {} bytes but shape {} of {} needs {}", context, proto.raw_data().size(),
           shapeToString(shape), dtypeName(*dtype), bytes);
    }
    if (bytes > 0) {
      std::memcpy(tensor.rawData(), proto.raw_data().data(), bytes);
    }
    return tensor;
  }
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

onnx::TensorProto tensorToProto(const Tensor& tensor, const std::string& name) {
  onnx::TensorProto proto;
  proto.set_name(name);
  proto.set_data_type(dtypeToOnnx(tensor.dtype()));
  for (std::int64_t d : tensor.shape()) {
    proto.add_dims(d);
  }
  const Tensor host = tensor.to(Device::cpu());  // device tensors (a GPU run's parameters) are written from a copy
  proto.set_raw_data(std::string(static_cast<const char*>(host.rawData()), host.bytes()));
  return proto;
}

}  // namespace strata::detail
