#include "strata/loaders/tensor_proto_io.h"

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>

#include "onnx_tensor.h"
#include "strata/error.h"

namespace strata {

NamedTensor readTensorProto(const std::filesystem::path& file) {
  std::ifstream in(file, std::ios::binary);
  if (!in) {
    fail("{}: cannot open tensor file ({})", file.string(),
         std::filesystem::exists(file) ? "permission denied or not a file" : "no such file");
  }
  std::stringstream buffer;
  buffer << in.rdbuf();
  onnx::TensorProto proto;
  if (!proto.ParseFromString(buffer.str())) {
    fail("{}: not a serialized ONNX TensorProto (protobuf parse failed)", file.string());
  }
  const std::string context = fmt::format("{} (tensor '{}')", file.string(), proto.name());
  return NamedTensor{proto.name(), detail::tensorFromProto(proto, context, file.parent_path())};
}

void writeTensorProto(const std::filesystem::path& file, const Tensor& tensor, const std::string& name) {
  const onnx::TensorProto proto = detail::tensorToProto(tensor, name);
  std::ofstream out(file, std::ios::binary | std::ios::trunc);
  errno = 0;
  bool ok = out && proto.SerializeToOstream(&out);
  // The last buffered bytes reach the file at close: a full disk shows here, and must not pass silently.
  out.close();
  ok = ok && !out.fail();
  if (!ok) {
    fail("{}: cannot write tensor '{}'{}", file.string(), name,
         errno != 0 ? fmt::format(": {}", std::strerror(errno)) : std::string());
  }
}

}  // namespace strata
