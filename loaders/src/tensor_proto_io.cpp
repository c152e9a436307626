#include "strata/loaders/tensor_proto_io.h"

#include <google/protobuf/io/coded_stream.h>
#include <google/protobuf/io/zero_copy_stream_impl.h>
#include <google/protobuf/wire_format_lite.h>

#include <cerrno>
#include <climits>
#include <cstring>
#include <fstream>

#include "onnx_tensor.h"
#include "strata/error.h"

namespace strata {
namespace {

using google::protobuf::internal::WireFormatLite;

NamedTensor namedTensorOf(const onnx::TensorProto& proto, const std::filesystem::path& file) {
  const std::string context = fmt::format("{} (tensor '{}')", file.string(), proto.name());
  return NamedTensor{proto.name(), detail::tensorFromProto(proto, context, file.parent_path())};
}

// Writes `header` and then `host`'s bytes as its raw_data field (field order does not matter to a parser), so the
// data goes from the tensor to the file without a copy in a protobuf string the size of the tensor.
bool serializeTensor(std::ostream& out, const onnx::TensorProto& header, const Tensor& host) {
  google::protobuf::io::OstreamOutputStream stream(&out);
  google::protobuf::io::CodedOutputStream coded(&stream);
  if (!header.SerializeToCodedStream(&coded)) {
    return false;
  }
  coded.WriteTag(
      WireFormatLite::MakeTag(onnx::TensorProto::kRawDataFieldNumber, WireFormatLite::WIRETYPE_LENGTH_DELIMITED));
  coded.WriteVarint64(host.bytes());
  coded.WriteRaw(host.rawData(), static_cast<int>(host.bytes()));  // under INT_MAX: checked by the caller
  coded.Trim();
  return !coded.HadError();
}

}  // namespace

NamedTensor readTensorProto(const std::filesystem::path& file) {
  std::ifstream in(file, std::ios::binary);
  if (!in) {
    fail("{}: cannot open tensor file ({})", file.string(),
         std::filesystem::exists(file) ? "permission denied or not a file" : "no such file");
  }
  onnx::TensorProto proto;
  // Parsed from the stream: the bytes are copied once, into the proto (a string buffer would add two copies).
  if (!proto.ParseFromIstream(&in)) {
    fail("{}: not a serialized ONNX TensorProto (protobuf parse failed)", file.string());
  }
  return namedTensorOf(proto, file);
}

NamedTensor parseTensorProto(std::string_view bytes, const std::filesystem::path& file) {
  onnx::TensorProto proto;
  if (bytes.size() > static_cast<std::size_t>(INT_MAX) ||
      !proto.ParseFromArray(bytes.data(), static_cast<int>(bytes.size()))) {
    fail("{}: not a serialized ONNX TensorProto (protobuf parse failed)", file.string());
  }
  return namedTensorOf(proto, file);
}

void writeTensorProto(const std::filesystem::path& file, const Tensor& tensor, const std::string& name) {
  const Tensor host = tensor.to(Device::cpu());  // device tensors (a GPU run's parameters) are written from a copy
  const onnx::TensorProto header = detail::tensorProtoHeader(host, name);
  // A message over 2 GiB is one protobuf refuses to parse: say so here rather than write a file nothing reads.
  constexpr std::size_t kFieldOverhead = 16;  // raw_data's tag and length
  if (header.ByteSizeLong() + kFieldOverhead + host.bytes() > static_cast<std::size_t>(INT_MAX)) {
    fail("{}: tensor '{}' ({}) is {} bytes; a TensorProto file holds at most 2 GiB (protobuf's message limit)",
         file.string(), name, host.meta().toString(), host.bytes());
  }
  std::ofstream out(file, std::ios::binary | std::ios::trunc);
  errno = 0;
  bool ok = out && serializeTensor(out, header, host);
  // The last buffered bytes reach the file at close: a full disk shows here, and must not pass silently.
  out.close();
  ok = ok && !out.fail();
  if (!ok) {
    fail("{}: cannot write tensor '{}'{}", file.string(), name,
         errno != 0 ? fmt::format(": {}", std::strerror(errno)) : std::string());
  }
}

}  // namespace strata
