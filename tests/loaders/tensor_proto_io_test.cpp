#include "strata/loaders/tensor_proto_io.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <onnx/onnx_pb.h>

#include <cstring>
#include <fstream>
#include <numeric>
#include <sstream>

#include "test_models.h"

namespace strata {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;
using testing::TempDir;

std::string fileBytes(const std::filesystem::path& file) {
  std::ifstream in(file, std::ios::binary);
  std::stringstream buffer;
  buffer << in.rdbuf();
  return buffer.str();
}

// A tensor whose bytes count up, so a misplaced or missing byte shows.
Tensor countingTensor(DType dtype, Shape shape) {
  Tensor tensor = Tensor::empty(dtype, std::move(shape));
  auto* bytes = static_cast<unsigned char*>(tensor.rawData());
  for (std::size_t i = 0; i < tensor.bytes(); ++i) {
    bytes[i] = static_cast<unsigned char>(i * 7 + 1);
  }
  return tensor;
}

// The written file against protobuf's own serialization of the same TensorProto: the data is streamed after the
// header fields, so the file must still be the message protobuf would write, byte for byte.
TEST(TensorProtoIoTest, WritesTheMessageProtobufWould) {
  TempDir dir;
  for (const auto& [dtype, shape] : std::vector<std::pair<DType, Shape>>{{DType::Float32, {3, 5, 7}},
                                                                         {DType::Float64, {2, 300}},
                                                                         {DType::Int64, {4}},
                                                                         {DType::Bool, {9}},
                                                                         {DType::Float32, {}},
                                                                         {DType::Float32, {0, 4}}}) {
    const Tensor tensor = countingTensor(dtype, shape);
    const auto file = dir / "t.pb";
    writeTensorProto(file, tensor, "layer.weight");

    onnx::TensorProto expected;
    expected.set_name("layer.weight");
    expected.set_data_type(static_cast<int>(tensor.dtype() == DType::Float32   ? onnx::TensorProto::FLOAT
                                            : tensor.dtype() == DType::Float64 ? onnx::TensorProto::DOUBLE
                                            : tensor.dtype() == DType::Int64   ? onnx::TensorProto::INT64
                                                                               : onnx::TensorProto::BOOL));
    for (std::int64_t d : shape) {
      expected.add_dims(d);
    }
    expected.set_raw_data(std::string(static_cast<const char*>(tensor.rawData()), tensor.bytes()));
    EXPECT_EQ(fileBytes(file), expected.SerializeAsString()) << tensor.meta().toString();

    const NamedTensor back = readTensorProto(file);
    EXPECT_EQ(back.name, "layer.weight");
    ASSERT_EQ(back.tensor.meta(), tensor.meta());
    EXPECT_EQ(std::memcmp(back.tensor.rawData(), tensor.rawData(), tensor.bytes()), 0);

    const std::string bytes = fileBytes(file);
    const NamedTensor parsed = parseTensorProto(bytes, file);
    ASSERT_EQ(parsed.tensor.meta(), tensor.meta());
    EXPECT_EQ(std::memcmp(parsed.tensor.rawData(), tensor.rawData(), tensor.bytes()), 0);
  }
}

// Larger than any stream or coded-output buffer, so the data crosses their block boundaries.
TEST(TensorProtoIoTest, RoundTripsATensorOfSeveralMegabytes) {
  TempDir dir;
  Tensor tensor = Tensor::empty(DType::Float32, {3, 1000, 1001});
  std::iota(tensor.data<float>(), tensor.data<float>() + tensor.numel(), 0.5F);
  writeTensorProto(dir / "big.pb", tensor, "big");
  const NamedTensor back = readTensorProto(dir / "big.pb");
  ASSERT_EQ(back.tensor.meta(), tensor.meta());
  EXPECT_EQ(std::memcmp(back.tensor.rawData(), tensor.rawData(), tensor.bytes()), 0);
}

TEST(TensorProtoIoTest, ErrorsNameTheFile) {
  TempDir dir;
  const auto missing = dir / "missing.pb";
  try {
    readTensorProto(missing);
    FAIL() << "read a missing file";
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), AllOf(HasSubstr(missing.string()), HasSubstr("no such file")));
  }
  std::ofstream(dir / "junk.pb") << "\xff\xff\xff\xff not a tensor";
  for (const bool fromBytes : {false, true}) {
    try {
      if (fromBytes) {
        parseTensorProto(fileBytes(dir / "junk.pb"), dir / "junk.pb");
      } else {
        readTensorProto(dir / "junk.pb");
      }
      FAIL() << "parsed junk";
    } catch (const Error& e) {
      EXPECT_THAT(e.what(), AllOf(HasSubstr("junk.pb"), HasSubstr("not a serialized ONNX TensorProto")));
    }
  }
  try {
    writeTensorProto(dir / "no-such-dir" / "t.pb", countingTensor(DType::Float32, {2}), "w");
    FAIL() << "wrote into a missing directory";
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), AllOf(HasSubstr("no-such-dir/t.pb"), HasSubstr("cannot write tensor 'w'")));
  }
}

// A file protobuf could not parse back is refused before anything is written (the tensor's pages are never
// touched: only its size is read).
TEST(TensorProtoIoTest, RefusesATensorOverProtobufsLimit) {
  TempDir dir;
  const Tensor huge = Tensor::empty(DType::Float32, {(std::int64_t{1} << 29) + 1});  // 2 GiB + 4 bytes
  try {
    writeTensorProto(dir / "huge.pb", huge, "embedding.weight");
    FAIL() << "wrote a tensor over 2 GiB";
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), AllOf(HasSubstr("huge.pb"), HasSubstr("'embedding.weight'"), HasSubstr("2147483652 bytes"),
                                HasSubstr("at most 2 GiB")));
  }
  EXPECT_FALSE(std::filesystem::exists(dir / "huge.pb"));
}

}  // namespace
}  // namespace strata
